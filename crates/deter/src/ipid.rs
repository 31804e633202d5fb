//! What the network did to a connection's packets, seen where they arrive
//! (seed 004 §3.1 and §4): drops and reordering from the gaps in their
//! IP-IDs, CE marks from their ECN bits.
//!
//! Linux numbers the packets of a connected socket consecutively
//! (`ip_select_ident_segs`: the socket's `inet_id`, plus the segments of a
//! GSO packet), from a random start; the handshake's SYN-ACK carries 0, so
//! a connection is followed from its first packet after the handshake.
//! The offset of an ID from the first one seen is then the sender's own
//! packet count, which is how a replay finds "the same logical packet"
//! again. DETER's public code writes u16 codes (a run, a forward gap, a
//! backward gap); these are the same three, as an enum the record file
//! stores with varints.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdCode {
    /// `n` IDs arrived, each the next after the highest so far.
    Run(u32),
    /// `n` IDs skipped: the next packet came that far ahead. They were
    /// dropped, unless a `Late` fills them in.
    Skip(u16),
    /// A packet of `ids` IDs came `back` IDs below the highest so far
    /// (`back` = 0 is the highest again: a duplicate).
    Late { back: u16, ids: u16 },
}

/// The codes of one direction of one connection, as packets arrive.
#[derive(Debug, Clone, Default)]
pub struct IdCoder {
    first: Option<u16>,
    /// The highest ID so far.
    high: u16,
    run: u32,
    codes: Vec<IdCode>,
}

impl IdCoder {
    /// A packet with IP-ID `id` holding `segs` segments (1, or a GRO
    /// packet's count: its IDs are `id..id + segs`).
    pub fn arrive(&mut self, id: u16, segs: u16) {
        let segs = segs.max(1);
        let Some(_) = self.first else {
            self.first = Some(id);
            self.high = id.wrapping_add(segs - 1);
            self.run = u32::from(segs);
            return;
        };
        // The distance from the next expected ID, within half the ID space
        // either way (RFC 1982 serial number arithmetic).
        let ahead = id.wrapping_sub(self.high.wrapping_add(1)) as i16;
        if ahead >= 0 {
            if ahead > 0 {
                self.flush();
                self.codes.push(IdCode::Skip(ahead as u16));
            }
            self.run += u32::from(segs);
            self.high = id.wrapping_add(segs - 1);
        } else {
            self.flush();
            let back = self.high.wrapping_sub(id);
            self.codes.push(IdCode::Late { back, ids: segs });
            let end = id.wrapping_add(segs - 1);
            if (end.wrapping_sub(self.high) as i16) > 0 {
                self.high = end;
            }
        }
    }

    /// `n` IDs arrived in sequence (the tc recorder counts them and
    /// reports only the arrivals out of sequence).
    pub fn advance(&mut self, n: u32) {
        if n == 0 || self.first.is_none() {
            return;
        }
        self.run += n;
        self.high = self.high.wrapping_add(n as u16);
    }

    fn flush(&mut self) {
        if self.run > 0 {
            self.codes.push(IdCode::Run(self.run));
            self.run = 0;
        }
    }

    /// The first ID and the codes (None: nothing arrived).
    pub fn finish(mut self) -> Option<(u16, Vec<IdCode>)> {
        self.flush();
        self.first.map(|f| (f, self.codes))
    }
}

/// The arrivals the codes describe, by the sender's packet offset (0: the
/// first packet that arrived).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arrivals {
    /// Every ID that arrived, in arrival order.
    pub order: Vec<u64>,
    /// IDs skipped and never filled in: dropped on the way.
    pub lost: Vec<u64>,
    /// IDs that came after a higher one: reordered (or duplicated).
    pub late: Vec<u64>,
}

/// Expands the codes (see [`IdCoder`]).
pub fn arrivals(codes: &[IdCode]) -> Arrivals {
    let mut a = Arrivals::default();
    let mut next = 0u64;
    let mut skipped = std::collections::BTreeSet::new();
    for c in codes {
        match *c {
            IdCode::Run(n) => {
                a.order.extend(next..next + u64::from(n));
                next += u64::from(n);
            }
            IdCode::Skip(n) => {
                skipped.extend(next..next + u64::from(n));
                next += u64::from(n);
            }
            IdCode::Late { back, ids } => {
                let at = next.saturating_sub(1 + u64::from(back));
                for o in at..at + u64::from(ids) {
                    a.order.push(o);
                    a.late.push(o);
                    skipped.remove(&o);
                }
                next = next.max(at + u64::from(ids));
            }
        }
    }
    a.lost = skipped.into_iter().collect();
    a
}

/// Which arrivals were CE-marked (RFC 3168: ECN bits 11), as alternating
/// run lengths starting with unmarked ones: one varint per change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    pub runs: Vec<u32>,
}

impl Marks {
    pub fn push(&mut self, ce: bool) {
        // Run i holds unmarked arrivals when i is even, marked ones when odd.
        if self.runs.is_empty() && ce {
            self.runs.push(0);
        }
        let last_marked = self.runs.len() % 2 == 0;
        match self.runs.last_mut() {
            Some(n) if last_marked == ce => *n += 1,
            _ => self.runs.push(1),
        }
    }

    /// `n` arrivals at once, marked or not.
    pub fn extend(&mut self, ce: bool, n: u32) {
        if n == 0 {
            return;
        }
        self.push(ce);
        *self.runs.last_mut().expect("a run") += n - 1;
    }

    /// The arrival indices (0-based) that were marked.
    pub fn marked(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut at = 0u64;
        for (i, &n) in self.runs.iter().enumerate() {
            if i % 2 == 1 {
                out.extend(at..at + u64::from(n));
            }
            at += u64::from(n);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(ids: &[u16]) -> (u16, Vec<IdCode>) {
        let mut c = IdCoder::default();
        for &i in ids {
            c.arrive(i, 1);
        }
        c.finish().unwrap()
    }

    #[test]
    fn in_order_arrivals_are_one_run() {
        let (first, codes) = code(&[100, 101, 102, 103]);
        assert_eq!((first, codes.as_slice()), (100, &[IdCode::Run(4)][..]));
        let a = arrivals(&codes);
        assert_eq!(a.order, [0, 1, 2, 3]);
        assert!(a.lost.is_empty() && a.late.is_empty());
    }

    #[test]
    fn a_gap_is_a_drop() {
        let (_, codes) = code(&[7, 8, 10, 11, 14]);
        assert_eq!(
            codes,
            [
                IdCode::Run(2),
                IdCode::Skip(1),
                IdCode::Run(2),
                IdCode::Skip(2),
                IdCode::Run(1)
            ]
        );
        let a = arrivals(&codes);
        assert_eq!(a.lost, [2, 5, 6]);
        assert_eq!(a.order, [0, 1, 3, 4, 7]);
    }

    #[test]
    fn a_late_packet_is_reordering_not_a_drop() {
        let (_, codes) = code(&[1, 3, 4, 2, 5]);
        let a = arrivals(&codes);
        assert_eq!(a.order, [0, 2, 3, 1, 4]);
        assert_eq!(a.late, [1]);
        assert!(a.lost.is_empty(), "{a:?}");
        // A duplicate is late by 0.
        let (_, codes) = code(&[1, 2, 2, 3]);
        assert!(codes.contains(&IdCode::Late { back: 0, ids: 1 }));
        assert_eq!(arrivals(&codes).late, [1]);
    }

    #[test]
    fn ids_wrap_around() {
        let (first, codes) = code(&[65534, 65535, 0, 2, 1]);
        assert_eq!(first, 65534);
        let a = arrivals(&codes);
        assert_eq!(a.order, [0, 1, 2, 4, 3]);
        assert_eq!(a.late, [3]);
        assert!(a.lost.is_empty());
    }

    #[test]
    fn a_gro_packet_covers_its_segments() {
        let mut c = IdCoder::default();
        c.arrive(10, 3);
        c.arrive(13, 2);
        c.arrive(17, 1);
        let (_, codes) = c.finish().unwrap();
        assert_eq!(codes, [IdCode::Run(5), IdCode::Skip(2), IdCode::Run(1)]);
        assert_eq!(arrivals(&codes).lost, [5, 6]);
    }

    /// The tc recorder's form (runs counted, only the others reported)
    /// codes as arrival by arrival does.
    #[test]
    fn advancing_by_runs_codes_as_arrivals_do() {
        let ids = [65530u16, 65531, 65532, 65534, 65535, 0, 65533, 1, 5, 6];
        let (_, want) = code(&ids);
        let mut c = IdCoder::default();
        c.arrive(65530, 1);
        c.advance(2);
        c.arrive(65534, 1);
        c.advance(2);
        c.arrive(65533, 1);
        c.arrive(1, 1);
        c.arrive(5, 1);
        c.advance(1);
        assert_eq!(c.finish().unwrap().1, want);
        let mut m = Marks::default();
        m.extend(false, 3);
        m.extend(true, 2);
        m.extend(true, 1);
        assert_eq!(m.runs, [3, 3]);
    }

    #[test]
    fn ce_marks_are_run_lengths() {
        let mut m = Marks::default();
        for ce in [false, false, true, true, true, false, true] {
            m.push(ce);
        }
        assert_eq!(m.runs, [2, 3, 1, 1]);
        assert_eq!(m.marked(), [2, 3, 4, 6]);
        let mut m = Marks::default();
        m.push(true);
        m.push(false);
        assert_eq!(m.runs, [0, 1, 1]);
        assert_eq!(m.marked(), [0]);
    }
}
