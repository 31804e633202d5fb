//! A virtual switch offloading flows into an eSwitch, and aging them out
//! (ScalaCN seed 001 §2 and §3: S1 "repetitive flow re-offloading", S4
//! "slow flow state maintenance", S5 "flow counters are not updated
//! timely"). No I/O: the controller resolves the slow path's reports to
//! rules, reads the installed rules' hit counters, and applies what
//! [`Offloader::upcalls`] and [`Offloader::age`] return; time comes in as
//! an argument (ns on any monotonic clock).
//!
//! Aging is the virtual switch's own rule, as OVS's revalidators apply it:
//! a rule whose hit counter has not moved for `idle` is deleted. It trusts
//! the counters it reads. A device whose counters are refreshed late
//! ([`LateCounters`], S5) shows an active rule as idle, the rule is deleted
//! though its flow still runs, the flow falls back to software and is
//! offloaded again: S1, the symptom §3 traces to S5 ("the software stack
//! determine[s] that the corresponding flow is inactive ... it may delete
//! the offloaded flow from both the software and hardware by mistake").

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// What the offloader did, for the run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OffloadTally {
    /// Rules installed because the slow path saw their flow.
    pub offloads: u64,
    /// Of those, rules installed again after being aged out: S1.
    pub reoffloads: u64,
    /// Rules deleted because their counter had not moved for `idle`.
    pub aged: u64,
    /// Reports of flows no rule matches (they stay in software).
    pub unmatched: u64,
}

struct Aging {
    /// The counter as last read, and when it last moved (or the rule was
    /// installed).
    pkts: u64,
    moved_ns: u64,
}

/// The virtual switch's offload state over rules named by `R`.
pub struct Offloader<R> {
    idle_ns: u64,
    installed: BTreeMap<R, Aging>,
    /// Rules installed at some time (a later install is a re-offload).
    ever: BTreeSet<R>,
    tally: OffloadTally,
}

impl<R: Ord + Copy> Offloader<R> {
    pub fn new(idle_ns: u64) -> Offloader<R> {
        Offloader {
            idle_ns,
            installed: BTreeMap::new(),
            ever: BTreeSet::new(),
            tally: OffloadTally::default(),
        }
    }

    /// The slow path's reports since the last look, each resolved to the
    /// rule its flow matches (None: no rule). The rules to install, each
    /// once; a rule installed already is not installed again (its flow's
    /// first packets missed before it landed).
    pub fn upcalls(&mut self, now_ns: u64, rules: impl IntoIterator<Item = Option<R>>) -> Vec<R> {
        let mut install = Vec::new();
        for r in rules {
            let Some(r) = r else {
                self.tally.unmatched += 1;
                continue;
            };
            if self.installed.contains_key(&r) {
                continue;
            }
            self.installed.insert(
                r,
                Aging {
                    pkts: 0,
                    moved_ns: now_ns,
                },
            );
            self.tally.offloads += 1;
            if !self.ever.insert(r) {
                self.tally.reoffloads += 1;
            }
            install.push(r);
        }
        install
    }

    /// The installed rules' hit counters as the device shows them (a rule
    /// missing from `counters` shows 0). The rules to delete: those whose
    /// counter has not moved for `idle`.
    pub fn age(&mut self, now_ns: u64, counters: &BTreeMap<R, u64>) -> Vec<R> {
        let mut delete = Vec::new();
        for (r, a) in &mut self.installed {
            let pkts = counters.get(r).copied().unwrap_or(0);
            if pkts != a.pkts {
                a.pkts = pkts;
                a.moved_ns = now_ns;
            } else if now_ns.saturating_sub(a.moved_ns) >= self.idle_ns {
                delete.push(*r);
            }
        }
        for r in &delete {
            self.installed.remove(r);
        }
        self.tally.aged += delete.len() as u64;
        delete
    }

    /// The rules installed now.
    pub fn installed(&self) -> Vec<R> {
        self.installed.keys().copied().collect()
    }

    pub fn tally(&self) -> OffloadTally {
        self.tally
    }
}

/// A device's counter readout (ScalaCN S5): past `entries_over` entries,
/// a reader sees a copy of the counters refreshed every `refresh_ns`, so
/// a rule installed after the last refresh reads 0 and a busy one reads
/// what it had then. At or below, the live counters.
pub struct LateCounters<R> {
    entries_over: usize,
    refresh_ns: u64,
    copy: BTreeMap<R, u64>,
    copied_ns: Option<u64>,
}

impl<R: Ord + Copy> LateCounters<R> {
    pub fn new(entries_over: usize, refresh_ns: u64) -> LateCounters<R> {
        LateCounters {
            entries_over,
            refresh_ns,
            copy: BTreeMap::new(),
            copied_ns: None,
        }
    }

    /// What a reader sees at `now_ns` when the device holds `entries`
    /// entries and counts `live`.
    pub fn read(
        &mut self,
        now_ns: u64,
        entries: usize,
        live: &BTreeMap<R, u64>,
    ) -> BTreeMap<R, u64> {
        if entries <= self.entries_over {
            self.copied_ns = None;
            return live.clone();
        }
        if self
            .copied_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= self.refresh_ns)
        {
            self.copy = live.clone();
            self.copied_ns = Some(now_ns);
        }
        self.copy.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_flow_is_offloaded_once_and_aged_when_its_counter_stops() {
        let mut o = Offloader::new(20 * MS);
        assert_eq!(o.upcalls(0, [Some(1), Some(1), None]), vec![1]);
        // Its next packets' reports, before the install landed: nothing.
        assert_eq!(o.upcalls(MS, [Some(1)]), Vec::<i32>::new());
        let mut c = BTreeMap::from([(1, 10)]);
        assert!(o.age(5 * MS, &c).is_empty());
        c.insert(1, 30);
        assert!(o.age(20 * MS, &c).is_empty(), "it moved");
        assert!(o.age(39 * MS, &c).is_empty(), "19 ms still");
        assert_eq!(o.age(40 * MS, &c), vec![1]);
        assert!(o.installed().is_empty());
        // Back in software: offloaded again, counted as such.
        assert_eq!(o.upcalls(41 * MS, [Some(1)]), vec![1]);
        let t = o.tally();
        assert_eq!(
            (t.offloads, t.reoffloads, t.aged, t.unmatched),
            (2, 1, 1, 1)
        );
    }

    #[test]
    fn late_counters_make_a_busy_flow_look_idle() {
        let mut o = Offloader::new(20 * MS);
        let mut dev = LateCounters::new(100, 100 * MS);
        o.upcalls(0, [Some(7)]);
        // The flow runs: its live counter grows at every look.
        let mut deleted_at = None;
        for t in 1..60 {
            let live = BTreeMap::from([(7, t * 50)]);
            let seen = dev.read(t * MS, 1000, &live);
            if !o.age(t * MS, &seen).is_empty() {
                deleted_at = Some(t);
                break;
            }
        }
        // Copied at 1 ms (50 packets), unchanged until 101 ms: idle from
        // 1 ms, deleted at 21 ms, though it never stopped.
        assert_eq!(deleted_at, Some(21));

        // With few entries the same flow stays.
        let mut o = Offloader::new(20 * MS);
        let mut dev = LateCounters::new(100, 100 * MS);
        o.upcalls(0, [Some(7)]);
        for t in 1..200 {
            let live = BTreeMap::from([(7, t * 50)]);
            let seen = dev.read(t * MS, 50, &live);
            assert!(o.age(t * MS, &seen).is_empty(), "deleted at {t} ms");
        }
    }

    #[test]
    fn late_counters_refresh_on_their_period() {
        let mut dev = LateCounters::new(0, 10 * MS);
        let live = |n| BTreeMap::from([(1, n)]);
        assert_eq!(dev.read(0, 1, &live(5))[&1], 5);
        assert_eq!(dev.read(9 * MS, 1, &live(9))[&1], 5);
        assert_eq!(dev.read(10 * MS, 1, &live(12))[&1], 12);
        // A rule the copy does not have reads 0 to the offloader.
        assert!(!dev
            .read(11 * MS, 1, &BTreeMap::from([(2, 3)]))
            .contains_key(&2));
    }
}
