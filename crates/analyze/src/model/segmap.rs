//! A sender's first transmissions by relative sequence number: the
//! ordered map the loss classifier searches, kept as one sorted ring.
//!
//! First transmissions arrive in sequence order, and history is dropped
//! from the front, so a `VecDeque` takes both at O(1) where a `BTreeMap`
//! allocated a node every few inserts (its inserts were 19% of
//! `wirelab analyze`'s time, perf). Lookups search from the newest end
//! (`search_back`). The
//! rare insert in the middle (a retransmission split off part of a
//! segment, `Sender::split`) shifts the shorter side.
//!
//! Keys are relative sequence numbers, which wrap after 4 GB of a
//! connection: they compare in sequence space (RFC 9293 §3.4), as
//! distances from a point 2^31 before the oldest key, so the map stays in
//! order across a wrap. The sender keeps its history under 2^30 bytes
//! (`Sender::forget`), well inside that.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use super::SegState;

#[derive(Debug, Default)]
pub(crate) struct SegMap {
    v: VecDeque<(u32, SegState)>,
}

impl SegMap {
    pub(crate) fn len(&self) -> usize {
        self.v.len()
    }

    /// Where `k` falls in sequence order: its distance from 2^31 before
    /// the oldest key.
    fn ord(&self, k: u32) -> u32 {
        let base = self.v.front().map_or(0, |(f, _)| f.wrapping_sub(1 << 31));
        k.wrapping_sub(base)
    }

    /// The first index whose key fails `before` (the keys that pass come
    /// first). Searched from the back, in steps that double, then by
    /// bisection: almost every question (an ACK, a SACK, a send) is about
    /// data near the newest, while the history behind it is long, so this
    /// touches a few recent entries instead of a path through all of them
    /// (a plain binary search here was a fifth of the analysis).
    fn search_back(&self, before: impl Fn(u32) -> bool) -> usize {
        let mut hi = self.v.len();
        let mut step = 1;
        while hi > 0 {
            let i = hi.saturating_sub(step);
            if before(self.v[i].0) {
                let mut lo = i + 1;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if before(self.v[mid].0) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                return lo;
            }
            hi = i;
            step *= 2;
        }
        0
    }

    /// The index of the first key not below `k`.
    fn lower(&self, k: u32) -> usize {
        let k = self.ord(k);
        self.search_back(|x| self.ord(x) < k)
    }

    /// The index of the first key above `k`.
    fn upper(&self, k: u32) -> usize {
        let k = self.ord(k);
        self.search_back(|x| self.ord(x) <= k)
    }

    /// The index range of the keys in `r`.
    fn span(&self, r: &impl RangeBounds<u32>) -> (usize, usize) {
        let from = match r.start_bound() {
            Bound::Included(&k) => self.lower(k),
            Bound::Excluded(&k) => self.upper(k),
            Bound::Unbounded => 0,
        };
        let to = match r.end_bound() {
            Bound::Included(&k) => self.upper(k),
            Bound::Excluded(&k) => self.lower(k),
            Bound::Unbounded => self.v.len(),
        };
        (from, to.max(from))
    }

    /// Inserts or replaces the entry at `k`.
    pub(crate) fn insert(&mut self, k: u32, s: SegState) {
        if self
            .v
            .back()
            .is_none_or(|(last, _)| self.ord(*last) < self.ord(k))
        {
            self.v.push_back((k, s));
            return;
        }
        let i = self.lower(k);
        match self.v.get_mut(i) {
            Some(e) if e.0 == k => e.1 = s,
            _ => self.v.insert(i, (k, s)),
        }
    }

    pub(crate) fn get_mut(&mut self, k: u32) -> Option<&mut SegState> {
        let i = self.lower(k);
        self.v.get_mut(i).filter(|e| e.0 == k).map(|e| &mut e.1)
    }

    pub(crate) fn range(
        &self,
        r: impl RangeBounds<u32>,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SegState)> {
        let (from, to) = self.span(&r);
        self.v.range(from..to).map(|(k, s)| (k, s))
    }

    pub(crate) fn range_mut(
        &mut self,
        r: impl RangeBounds<u32>,
    ) -> impl DoubleEndedIterator<Item = (&u32, &mut SegState)> {
        let (from, to) = self.span(&r);
        self.v.range_mut(from..to).map(|(k, s)| (&*k, s))
    }

    pub(crate) fn first_key_value(&self) -> Option<(&u32, &SegState)> {
        self.v.front().map(|(k, s)| (k, s))
    }

    pub(crate) fn pop_first(&mut self) -> Option<(u32, SegState)> {
        self.v.pop_front()
    }

    /// How many entries, from the oldest, end at or before `una` (entries
    /// do not overlap, so those are a prefix).
    pub(crate) fn ended_by(&self, una: u32) -> usize {
        self.v
            .partition_point(|(_, s)| (una.wrapping_sub(s.end) as i32) >= 0)
    }

    /// Drops the `n` oldest entries at once, without reading them but
    /// the last: the end of that one, if any.
    pub(crate) fn pop_n(&mut self, n: usize) -> Option<u32> {
        let end = self.v.get(n.checked_sub(1)?)?.1.end;
        self.v.drain(..n);
        Some(end)
    }

    /// Bytes from the oldest key to the newest entry's end.
    pub(crate) fn bytes(&self) -> u32 {
        match (self.v.front(), self.v.back()) {
            (Some((k, _)), Some((_, last))) => last.end.wrapping_sub(*k),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Evidence;

    fn seg(index: u32) -> SegState {
        SegState::new(
            index,
            0,
            (0, 0),
            (
                Evidence {
                    frame: u64::from(index),
                    mirror_seq: None,
                },
                None,
            ),
        )
    }

    /// The same operations on a BTreeMap and a SegMap give the same
    /// answers: appends, inserts in the middle, replacements, every kind
    /// of range, pops from the front.
    #[test]
    fn answers_as_a_btreemap_does() {
        let mut a: BTreeMap<u32, SegState> = BTreeMap::new();
        let mut b = SegMap::default();
        // A small deterministic mix: mostly ascending, some in between.
        let mut x = 7u32;
        for i in 0..2000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let k = if x % 5 == 0 {
                (x >> 8) % (i * 10 + 1)
            } else {
                i * 10
            };
            a.insert(k, seg(i));
            b.insert(k, seg(i));
            if i % 97 == 0 {
                assert_eq!(a.pop_first().map(|e| e.0), b.pop_first().map(|e| e.0));
            }
        }
        assert_eq!(a.len(), b.len());
        let keys = |it: &mut dyn Iterator<Item = (&u32, &SegState)>| -> Vec<(u32, u32)> {
            it.map(|(k, s)| (*k, s.index)).collect()
        };
        for q in (0..20_100u32).step_by(37) {
            let r = q + 500;
            assert_eq!(keys(&mut a.range(..q)), keys(&mut b.range(..q)));
            assert_eq!(keys(&mut a.range(..=q)), keys(&mut b.range(..=q)));
            assert_eq!(keys(&mut a.range(q..)), keys(&mut b.range(q..)));
            assert_eq!(keys(&mut a.range(q..r)), keys(&mut b.range(q..r)));
            assert_eq!(
                a.range(..=q).next_back().map(|e| *e.0),
                b.range(..=q).next_back().map(|e| *e.0)
            );
            assert_eq!(
                a.get_mut(&q).map(|s| s.index),
                b.get_mut(q).map(|s| s.index)
            );
        }
        for (_, s) in b.range_mut(1000..2000) {
            s.tx_count = 9;
        }
        for (_, s) in a.range_mut(1000..2000) {
            s.tx_count = 9;
        }
        let counts = |it: &mut dyn Iterator<Item = (&u32, &SegState)>| -> Vec<u32> {
            it.map(|(_, s)| s.tx_count).collect()
        };
        assert_eq!(counts(&mut a.range(..)), counts(&mut b.range(..)));
        assert_eq!(
            a.first_key_value().map(|e| *e.0),
            b.first_key_value().map(|e| *e.0)
        );
    }

    /// Dropping the acknowledged oldest in one step leaves the map as
    /// popping them one by one does, and searches and spans still order
    /// from the new oldest key, however the front changed.
    #[test]
    fn dropping_a_prefix_at_once_equals_popping_it() {
        let fill = || {
            let mut m = SegMap::default();
            for i in 0..100u32 {
                let mut s = seg(i);
                s.end = i * 10 + 10;
                m.insert(i * 10, s);
            }
            m
        };
        let (mut one, mut all) = (fill(), fill());
        // Segments 0..=41 end at or before 425; 42 ends at 430.
        assert_eq!(all.ended_by(425), 42);
        assert_eq!(all.ended_by(0), 0);
        assert_eq!(all.ended_by(5000), 100);
        let mut last = None;
        for _ in 0..42 {
            last = one.pop_first().map(|(_, s)| s.end);
        }
        assert_eq!(all.pop_n(42), last);
        assert_eq!(all.pop_n(0), None);
        let keys = |m: &SegMap| m.range(..).map(|(k, _)| *k).collect::<Vec<_>>();
        assert_eq!(keys(&one), keys(&all));
        // Bytes span from the oldest key, and searches order from it.
        assert_eq!(all.bytes(), 1000 - 420);
        assert_eq!(all.range(..425).count(), 1);
        // An insert before the oldest key makes it the oldest.
        all.insert(415, seg(7));
        assert_eq!(all.first_key_value().map(|e| *e.0), Some(415));
        assert_eq!(all.bytes(), 1000 - 415);
        assert_eq!(all.range(..420).count(), 1);
        // Emptied and refilled.
        let n = all.len();
        all.pop_n(n);
        assert_eq!((all.len(), all.bytes()), (0, 0));
        let mut s = seg(1);
        s.end = 90_100;
        all.insert(90_000, s);
        assert_eq!(all.bytes(), 100);
    }

    /// Across the wrap of the 32-bit sequence space (a connection past
    /// 4 GB), keys stay in sequence order and appends stay appends.
    #[test]
    fn keys_stay_in_sequence_order_across_the_wrap() {
        let mut m = SegMap::default();
        let start = u32::MAX - 5 * 1000 + 1;
        for i in 0..10u32 {
            m.insert(start.wrapping_add(i * 1000), seg(i));
        }
        let order: Vec<u32> = m.range(..).map(|(_, s)| s.index).collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        // 3000 is past the wrap: the keys before it are those sent before.
        let before: Vec<u32> = m.range(..3000).map(|(_, s)| s.index).collect();
        assert_eq!(before, (0..8).collect::<Vec<_>>());
        assert_eq!(m.range(..=start).next_back().map(|(_, s)| s.index), Some(0));
        // Below the oldest key: nothing before it.
        assert_eq!(m.range(..start.wrapping_sub(10)).count(), 0);
        m.insert(500, seg(99));
        let order: Vec<u32> = m.range(..).map(|(_, s)| s.index).collect();
        assert_eq!(order, [0, 1, 2, 3, 4, 5, 99, 6, 7, 8, 9]);
    }
}
