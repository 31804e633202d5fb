//! How a flow table's masks are ordered while traffic runs: ScalaCN's
//! optimiser (seed 001 §4.3) and the two orders it is measured against.
//! No I/O: a controller reads the table's counters, calls
//! [`Optimiser::tick`] with the time, and applies the [`Changes`].
//!
//! - **Insertion order**, an RNIC's default: a new mask goes after every
//!   older one and stays there.
//! - **Hit-count ranking**, Open vSwitch's dpcls: every interval (1 s in
//!   OVS) the subtables are sorted by the hits they had since the last
//!   sort, and the counts start again (`dpcls_sort_subtable_vector` in
//!   lib/dpif-netdev.c).
//! - **ScalaCN**: one *hyper* mask, exact-match, at the head of the table,
//!   into which the flows seen hitting the other (*cascading*) masks are
//!   activated, the least recently used evicted when it is full; the
//!   cascading masks ordered by the locality score LS = PM·LM (PM: packets
//!   matched over the last window, 60 s in the paper; LM: the mask's
//!   length); a mask with no packet for the idle time (10 min in the
//!   paper) removed from the search. ScalaCN acts when a change of 5% is
//!   anticipated: a new order is applied only when it lowers Σ position ×
//!   LS, what sorting by LS minimises, by 5% or more (so two masks of
//!   nearly equal score do not swap at every tick). A removed mask comes
//!   back, at the tail, when the table misses:
//!   the slow path offloads its flows again, as OVS would re-install them
//!   on an RNIC.

pub mod offload;

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use serde::Serialize;

/// ScalaCN's threshold: act on an anticipated change of 5% (§2, §4.3).
pub const THRESHOLD: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum Policy {
    Insertion,
    HitCount {
        interval_ns: u64,
    },
    Scalacn {
        interval_ns: u64,
        window_ns: u64,
        idle_ns: u64,
        /// Flows the hyper mask holds (at least 1).
        hyper_entries: usize,
    },
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Insertion => "insertion",
            Policy::HitCount { .. } => "hit-count",
            Policy::Scalacn { .. } => "scalacn",
        }
    }
    /// Whether the table needs a hyper mask.
    pub fn hyper(&self) -> bool {
        matches!(self, Policy::Scalacn { .. })
    }
    /// How often the policy looks at the table; None: it never does.
    pub fn interval_ns(&self) -> Option<u64> {
        match *self {
            Policy::Insertion => None,
            Policy::HitCount { interval_ns } | Policy::Scalacn { interval_ns, .. } => {
                Some(interval_ns)
            }
        }
    }
}

/// One mask of the table (not the hyper mask): its id, its length (bits
/// compared) and its hits since the table was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskView {
    pub id: u16,
    pub len: u32,
    pub hits: u64,
}

/// What the controller read of one table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView<K> {
    /// Every mask but the hyper mask, in any order.
    pub masks: Vec<MaskView>,
    /// Flows the data plane reported hitting a cascading mask.
    pub learned: Vec<K>,
    /// The hyper mask's flows and their hits since activation.
    pub hyper_hits: Vec<(K, u64)>,
    /// Packets the table missed, since it was made.
    pub misses: u64,
}

/// What to apply to the table, in this order: evict, activate, forget,
/// then the order.
#[derive(Debug, Clone, PartialEq)]
pub struct Changes<K> {
    /// The new search order (the hyper mask first, when there is one).
    pub order: Option<Vec<u16>>,
    /// Flows to put in the hyper mask (with the action they were learned with).
    pub activate: Vec<K>,
    /// Flows to take out of it (least recently used).
    pub evict: Vec<K>,
    /// Reports to drop (every learned flow is handled once).
    pub forget: Vec<K>,
}

impl<K> Default for Changes<K> {
    fn default() -> Self {
        Changes {
            order: None,
            activate: Vec::new(),
            evict: Vec::new(),
            forget: Vec::new(),
        }
    }
}

/// What an optimiser did over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub ticks: u64,
    pub reorders: u64,
    pub activations: u64,
    pub evictions: u64,
    pub masks_removed: u64,
    pub masks_restored: u64,
}

impl Tally {
    /// Two tables' tallies as one.
    pub fn add(self, o: Tally) -> Tally {
        Tally {
            ticks: self.ticks + o.ticks,
            reorders: self.reorders + o.reorders,
            activations: self.activations + o.activations,
            evictions: self.evictions + o.evictions,
            masks_removed: self.masks_removed + o.masks_removed,
            masks_restored: self.masks_restored + o.masks_restored,
        }
    }
}

pub struct Optimiser<K> {
    policy: Policy,
    hyper: Option<u16>,
    /// The cascading masks as searched now (without the hyper mask).
    order: Vec<u16>,
    removed: Vec<u16>,
    next_tick: u64,
    /// Hits per mask at past ticks (ScalaCN's window), oldest first.
    history: VecDeque<(u64, HashMap<u16, u64>)>,
    /// Hits per mask at the last sort (OVS).
    at_last_sort: HashMap<u16, u64>,
    last_hits: HashMap<u16, u64>,
    last_hit_at: HashMap<u16, u64>,
    last_misses: u64,
    /// The hyper mask's flows: hits seen and when they last grew.
    active: HashMap<K, (u64, u64)>,
    tally: Tally,
}

impl<K: Clone + Eq + Hash + Ord> Optimiser<K> {
    /// A table whose masks are searched in `order` (insertion order) and,
    /// for ScalaCN, whose hyper mask is `hyper`, made at `now`, when every
    /// counter was zero.
    pub fn new(policy: Policy, order: Vec<u16>, hyper: Option<u16>, now: u64) -> Self {
        let hyper = hyper.filter(|_| policy.hyper());
        Optimiser {
            policy,
            hyper,
            last_hit_at: order.iter().map(|&m| (m, now)).collect(),
            history: VecDeque::from([(now, HashMap::new())]),
            order,
            removed: Vec::new(),
            next_tick: now + policy.interval_ns().unwrap_or(0),
            at_last_sort: HashMap::new(),
            last_hits: HashMap::new(),
            last_misses: 0,
            active: HashMap::new(),
            tally: Tally::default(),
        }
    }

    /// The search order as it should be now, hyper mask first.
    pub fn order(&self) -> Vec<u16> {
        self.hyper.iter().chain(&self.order).copied().collect()
    }

    pub fn tally(&self) -> Tally {
        self.tally
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The flows in the hyper mask now, in key order.
    pub fn active(&self) -> Vec<K> {
        let mut v: Vec<K> = self.active.keys().cloned().collect();
        v.sort();
        v
    }

    /// Looks at the table at `now`; what to change, if anything.
    pub fn tick(&mut self, now: u64, view: &TableView<K>) -> Changes<K> {
        let mut ch = Changes::default();
        let Some(interval) = self.policy.interval_ns() else {
            return ch;
        };
        if now < self.next_tick {
            return ch;
        }
        self.next_tick = now + interval.max(1);
        self.tally.ticks += 1;
        let hits: HashMap<u16, u64> = view.masks.iter().map(|m| (m.id, m.hits)).collect();
        let len: HashMap<u16, u32> = view.masks.iter().map(|m| (m.id, m.len)).collect();
        match self.policy {
            Policy::Insertion => {}
            Policy::HitCount { .. } => {
                let since = |m: &u16| {
                    hits.get(m).copied().unwrap_or(0)
                        - self.at_last_sort.get(m).copied().unwrap_or(0)
                };
                let mut order = self.order.clone();
                // Stable: equal counts keep their places.
                order.sort_by_key(|m| std::cmp::Reverse(since(m)));
                self.at_last_sort = hits.clone();
                if order != self.order {
                    self.order = order;
                    self.tally.reorders += 1;
                    ch.order = Some(self.order());
                }
            }
            Policy::Scalacn {
                window_ns,
                idle_ns,
                hyper_entries,
                ..
            } => {
                self.scalacn_masks(now, window_ns, idle_ns, &hits, &len, view.misses, &mut ch);
                self.scalacn_hyper(now, hyper_entries.max(1), view, &mut ch);
            }
        }
        self.last_hits = hits;
        ch
    }

    #[allow(clippy::too_many_arguments)]
    fn scalacn_masks(
        &mut self,
        now: u64,
        window_ns: u64,
        idle_ns: u64,
        hits: &HashMap<u16, u64>,
        len: &HashMap<u16, u32>,
        misses: u64,
        ch: &mut Changes<K>,
    ) {
        let mut changed = false;
        // The slow path re-offloads what a removed mask held: back it
        // comes, at the tail.
        if misses > self.last_misses && !self.removed.is_empty() {
            self.tally.masks_restored += self.removed.len() as u64;
            for m in self.removed.drain(..) {
                self.last_hit_at.insert(m, now);
                self.order.push(m);
            }
            changed = true;
        }
        self.last_misses = misses;
        for (&m, &h) in hits {
            if h > self.last_hits.get(&m).copied().unwrap_or(0) {
                self.last_hit_at.insert(m, now);
            }
        }
        // PM: hits since the window's start (the oldest snapshot kept is
        // the last one at or before now - window).
        self.history.push_back((now, hits.clone()));
        while self.history.len() > 1 && self.history[1].0 <= now.saturating_sub(window_ns) {
            self.history.pop_front();
        }
        let base = &self.history[0].1;
        let pm = |m: u16| {
            hits.get(&m)
                .copied()
                .unwrap_or(0)
                .saturating_sub(base.get(&m).copied().unwrap_or(0))
        };
        // Idle masks leave the search.
        let idle: Vec<u16> = self
            .order
            .iter()
            .copied()
            .filter(|m| {
                now.saturating_sub(self.last_hit_at.get(m).copied().unwrap_or(now)) >= idle_ns
            })
            .collect();
        if !idle.is_empty() {
            self.order.retain(|m| !idle.contains(m));
            self.tally.masks_removed += idle.len() as u64;
            self.removed.extend(idle);
            changed = true;
        }
        // LS = PM · LM, highest first; equal scores keep their places.
        let ls = |m: &u16| pm(*m) as u128 * u128::from(len.get(m).copied().unwrap_or(0));
        let mut order = self.order.clone();
        order.sort_by_key(|m| std::cmp::Reverse(ls(m)));
        // What the LS order minimises: each mask's score by its place.
        let cost = |o: &[u16]| -> f64 {
            o.iter()
                .enumerate()
                .map(|(i, m)| (i + 1) as f64 * ls(m) as f64)
                .sum()
        };
        if order != self.order && cost(&order) <= (1.0 - THRESHOLD) * cost(&self.order) {
            self.order = order;
            changed = true;
        }
        if changed {
            self.tally.reorders += 1;
            ch.order = Some(self.order());
        }
    }

    fn scalacn_hyper(&mut self, now: u64, cap: usize, view: &TableView<K>, ch: &mut Changes<K>) {
        for (k, h) in &view.hyper_hits {
            if let Some(a) = self.active.get_mut(k) {
                if *h > a.0 {
                    *a = (*h, now);
                }
            }
        }
        let mut learned = view.learned.clone();
        learned.sort();
        learned.dedup();
        for k in learned {
            ch.forget.push(k.clone());
            if self.active.contains_key(&k) {
                continue;
            }
            if self.active.len() >= cap {
                // LRU: the flow whose hits stopped growing longest ago;
                // ties by key, so the same run evicts the same flow.
                let lru = self
                    .active
                    .iter()
                    .min_by(|a, b| a.1 .1.cmp(&b.1 .1).then(a.0.cmp(b.0)))
                    .map(|(k, _)| k.clone())
                    .expect("full, so not empty");
                self.active.remove(&lru);
                self.tally.evictions += 1;
                ch.evict.push(lru);
            }
            self.active.insert(k.clone(), (0, now));
            self.tally.activations += 1;
            ch.activate.push(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn view(hits: &[(u16, u32, u64)]) -> TableView<u32> {
        TableView {
            masks: hits
                .iter()
                .map(|&(id, len, hits)| MaskView { id, len, hits })
                .collect(),
            learned: vec![],
            hyper_hits: vec![],
            misses: 0,
        }
    }

    fn scalacn(hyper_entries: usize) -> Policy {
        Policy::Scalacn {
            interval_ns: S,
            window_ns: 60 * S,
            idle_ns: 600 * S,
            hyper_entries,
        }
    }

    #[test]
    fn insertion_order_never_changes() {
        let mut o = Optimiser::<u32>::new(Policy::Insertion, vec![0, 1, 2], None, 0);
        let ch = o.tick(10 * S, &view(&[(0, 8, 0), (1, 8, 5), (2, 8, 900)]));
        assert_eq!(ch, Changes::default());
        assert_eq!(o.order(), vec![0, 1, 2]);
        assert_eq!(o.tally().ticks, 0);
    }

    #[test]
    fn hit_count_sorts_by_hits_since_the_last_sort_every_interval() {
        let mut o =
            Optimiser::<u32>::new(Policy::HitCount { interval_ns: S }, vec![0, 1, 2], None, 0);
        // Not yet a second: nothing.
        assert_eq!(
            o.tick(S / 2, &view(&[(0, 8, 0), (1, 8, 5), (2, 8, 9)]))
                .order,
            None
        );
        let ch = o.tick(S, &view(&[(0, 8, 0), (1, 8, 5), (2, 8, 9)]));
        assert_eq!(ch.order, Some(vec![2, 1, 0]));
        // Counts start again at each sort: mask 0's 20 new hits beat 2's 1.
        let ch = o.tick(2 * S, &view(&[(0, 8, 20), (1, 8, 5), (2, 8, 10)]));
        assert_eq!(
            ch.order,
            Some(vec![0, 2, 1]),
            "equal counts keep their places"
        );
        // The mask length plays no part in OVS's ranking.
        let ch = o.tick(3 * S, &view(&[(0, 8, 20), (1, 99, 5), (2, 8, 10)]));
        assert_eq!(ch.order, None);
        assert_eq!(o.tally().reorders, 2);
    }

    #[test]
    fn scalacn_orders_cascading_masks_by_packets_times_mask_length() {
        let mut o = Optimiser::<u32>::new(scalacn(4), vec![0, 1, 2], Some(9), 0);
        assert_eq!(o.order(), vec![9, 0, 1, 2], "the hyper mask leads");
        // PM 100, 60, 40; LM 8, 16, 32: LS 800, 960, 1280.
        let ch = o.tick(S, &view(&[(0, 8, 100), (1, 16, 60), (2, 32, 40)]));
        assert_eq!(ch.order, Some(vec![9, 2, 1, 0]));
        assert_eq!(o.tally().reorders, 1);
    }

    #[test]
    fn scalacn_reorders_only_for_five_percent_fewer_masks_searched() {
        let mut o = Optimiser::<u32>::new(scalacn(4), vec![0, 1], Some(9), 0);
        // Mask 1 scores a little higher (LS 1010 vs 1000): moving it first
        // lowers Σ place × LS from 3020 to 3010, under 5%: the order stays.
        let ch = o.tick(S, &view(&[(0, 10, 100), (1, 10, 101)]));
        assert_eq!(ch.order, None);
        let ch = o.tick(2 * S, &view(&[(0, 10, 100), (1, 10, 300)]));
        assert_eq!(ch.order, Some(vec![9, 1, 0]));
    }

    #[test]
    fn scalacn_counts_packets_over_the_window_only() {
        let p = Policy::Scalacn {
            interval_ns: S,
            window_ns: 2 * S,
            idle_ns: 600 * S,
            hyper_entries: 4,
        };
        let mut o = Optimiser::<u32>::new(p, vec![0, 1], Some(9), 0);
        // Mask 0 was busy early; mask 1 is busy now.
        o.tick(S, &view(&[(0, 8, 1000), (1, 8, 0)]));
        o.tick(2 * S, &view(&[(0, 8, 1000), (1, 8, 10)]));
        assert_eq!(o.order(), vec![9, 0, 1], "1000 in the window against 10");
        let ch = o.tick(3 * S, &view(&[(0, 8, 1000), (1, 8, 20)]));
        assert_eq!(
            ch.order,
            Some(vec![9, 1, 0]),
            "mask 0's burst left the window"
        );
    }

    #[test]
    fn scalacn_removes_idle_masks_and_restores_them_when_the_table_misses() {
        let p = Policy::Scalacn {
            interval_ns: S,
            window_ns: 60 * S,
            idle_ns: 10 * S,
            hyper_entries: 4,
        };
        let mut o = Optimiser::<u32>::new(p, vec![0, 1, 2], Some(9), 0);
        let ch = o.tick(5 * S, &view(&[(0, 8, 0), (1, 8, 3), (2, 8, 0)]));
        assert_eq!(ch.order, Some(vec![9, 1, 0, 2]), "by LS; none idle yet");
        // Masks 0 and 2 had nothing for 10 s; mask 1 had a hit at 5 s.
        let ch = o.tick(10 * S, &view(&[(0, 8, 0), (1, 8, 3), (2, 8, 0)]));
        assert_eq!(ch.order, Some(vec![9, 1]));
        assert_eq!(o.tally().masks_removed, 2);
        // A miss: the slow path offloads again; they come back at the tail.
        let mut v = view(&[(0, 8, 0), (1, 8, 4), (2, 8, 0)]);
        v.misses = 1;
        let ch = o.tick(11 * S, &v);
        assert_eq!(ch.order, Some(vec![9, 1, 0, 2]));
        assert_eq!(o.tally().masks_restored, 2);
    }

    #[test]
    fn scalacn_activates_learned_flows_and_evicts_the_least_recently_used() {
        let mut o = Optimiser::<u32>::new(scalacn(2), vec![0], Some(9), 0);
        let mut v = view(&[(0, 8, 3)]);
        v.learned = vec![7, 5, 7];
        let ch = o.tick(S, &v);
        assert_eq!(ch.activate, vec![5, 7]);
        assert_eq!(ch.forget, vec![5, 7]);
        assert!(ch.evict.is_empty());
        // Flow 5 keeps hitting the hyper mask; 7 does not: 7 goes for 8.
        v.learned = vec![8];
        v.hyper_hits = vec![(5, 40), (7, 0)];
        let ch = o.tick(2 * S, &v);
        assert_eq!((ch.activate, ch.evict), (vec![8], vec![7]));
        // A flow reported again while active is only forgotten.
        v.learned = vec![5];
        let ch = o.tick(3 * S, &v);
        assert!(ch.activate.is_empty() && ch.evict.is_empty());
        assert_eq!(ch.forget, vec![5]);
        assert_eq!((o.tally().activations, o.tally().evictions), (3, 1));
    }

    #[test]
    fn a_hit_count_table_has_no_hyper_mask() {
        let o = Optimiser::<u32>::new(Policy::HitCount { interval_ns: S }, vec![0, 1], Some(9), 0);
        assert_eq!(o.order(), vec![0, 1]);
    }
}
