//! Reducing an anomaly's spec to the smallest one that still shows it:
//! delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating
//! Failure-Inducing Input", TSE 2002) over the events, then the smallest
//! connection groups, counts, messages, sizes and depths, then settings
//! back to their defaults; repeated until nothing more goes. Every step is
//! one run of the oracle; a reduction that does not validate is skipped
//! without one.

use wirelab_spec::{Bytes, Catalog, Index, Spec};

use crate::mutate;

/// The oracle: does this spec still show the anomaly?
pub trait Oracle {
    fn holds(&mut self, spec: &Spec) -> bool;
}

impl<F: FnMut(&Spec) -> bool> Oracle for F {
    fn holds(&mut self, spec: &Spec) -> bool {
        self(spec)
    }
}

/// What shrinking did.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub spec: Spec,
    /// Oracle runs spent.
    pub runs: u32,
    /// The reductions that held, in order (`events 6 -> 1`, ...).
    pub steps: Vec<String>,
}

struct Shrinker<'a, O: Oracle> {
    catalog: &'a Catalog,
    oracle: O,
    budget: u32,
    runs: u32,
    steps: Vec<String>,
}

/// Shrinks `spec` (which shows the anomaly) within `budget` oracle runs.
pub fn shrink(spec: &Spec, catalog: &Catalog, budget: u32, oracle: impl Oracle) -> Shrunk {
    let mut s = Shrinker {
        catalog,
        oracle,
        budget,
        runs: 0,
        steps: Vec::new(),
    };
    let mut cur = spec.clone();
    loop {
        let before = cur.clone();
        cur = s.events(cur);
        cur = s.groups(cur);
        for g in 0..cur.traffic.connections.len() {
            cur = s.int(cur, g, "count", |s, g| {
                &mut s.traffic.connections[g].count.0
            });
            cur = s.int(cur, g, "messages", |s, g| {
                &mut s.traffic.connections[g].messages.0
            });
            cur = s.int(cur, g, "tx_depth", |s, g| {
                &mut s.traffic.connections[g].tx_depth.0
            });
            cur = s.size(cur, g);
        }
        cur = s.settings(cur);
        if cur == before || s.runs >= s.budget {
            break;
        }
    }
    Shrunk {
        spec: cur,
        runs: s.runs,
        steps: s.steps,
    }
}

impl<O: Oracle> Shrinker<'_, O> {
    /// Runs the oracle on a valid candidate while the budget lasts.
    fn test(&mut self, s: &Spec) -> bool {
        if self.runs >= self.budget || wirelab_spec::parse(&mutate::yaml(s), self.catalog).is_err()
        {
            return false;
        }
        self.runs += 1;
        self.oracle.holds(s)
    }

    /// ddmin over the events: a subset or a complement that still shows
    /// the anomaly replaces the list, at ever finer granularity.
    fn events(&mut self, mut cur: Spec) -> Spec {
        let before = cur.events.len();
        let mut n = 2usize;
        while cur.events.len() >= 2 {
            let ev = cur.events.clone();
            let chunk = ev.len().div_ceil(n);
            let parts: Vec<Vec<_>> = ev.chunks(chunk).map(<[_]>::to_vec).collect();
            let mut reduced = false;
            for (i, part) in parts.iter().enumerate() {
                let mut t = cur.clone();
                t.events = part.clone();
                if self.test(&t) {
                    (cur, n, reduced) = (t, 2, true);
                    break;
                }
                if parts.len() > 2 {
                    let mut t = cur.clone();
                    t.events = parts
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .flat_map(|(_, p)| p.clone())
                        .collect();
                    if self.test(&t) {
                        (cur, n, reduced) = (t, (n - 1).max(2), true);
                        break;
                    }
                }
            }
            if !reduced {
                if n >= ev.len() {
                    break;
                }
                n = (2 * n).min(ev.len());
            }
        }
        if cur.events.len() == 1 {
            let mut t = cur.clone();
            t.events.clear();
            if self.test(&t) {
                cur = t;
            }
        }
        if cur.events.len() < before {
            self.steps
                .push(format!("events {before} -> {}", cur.events.len()));
        }
        cur
    }

    /// Whole connection groups, when there are several.
    fn groups(&mut self, mut cur: Spec) -> Spec {
        let mut g = 0;
        while cur.traffic.connections.len() > 1 && g < cur.traffic.connections.len() {
            let mut t = cur.clone();
            resize(&mut t, g, 0);
            if self.test(&t) {
                self.steps
                    .push(format!("connection group {} removed", g + 1));
                cur = t;
            } else {
                g += 1;
            }
        }
        cur
    }

    /// The smallest value of a group's integer field that still shows the
    /// anomaly (exactly: counts are small).
    fn int(
        &mut self,
        cur: Spec,
        g: usize,
        name: &str,
        field: fn(&mut Spec, usize) -> &mut u32,
    ) -> Spec {
        let now = *field(&mut cur.clone(), g);
        let with = |v: u64| {
            let mut t = cur.clone();
            if name == "count" {
                resize(&mut t, g, v as u32);
            } else {
                *field(&mut t, g) = v as u32;
            }
            t
        };
        let good = self.lowest(now.into(), |_| 1, &with);
        self.step(g, name, now.into(), good);
        with(good)
    }

    /// The smallest message size, to within 1/16 of it (sizes span
    /// decades; the last bytes are not worth a run each).
    fn size(&mut self, cur: Spec, g: usize) -> Spec {
        let now = cur.traffic.connections[g].message_size.0;
        let with = |v: u64| {
            let mut t = cur.clone();
            t.traffic.connections[g].message_size = Bytes(v);
            t
        };
        let good = self.lowest(now, |good| (good / 16).max(1), &with);
        self.step(g, "message_size", now, good);
        with(good)
    }

    /// The lowest value from 1 to `now` at which `with(value)` still shows
    /// the anomaly: 1 first, then a binary search until the gap is within
    /// `precision(best so far)`. `now` shows it.
    fn lowest(&mut self, now: u64, precision: fn(u64) -> u64, with: &dyn Fn(u64) -> Spec) -> u64 {
        if now <= 1 {
            return now;
        }
        if self.test(&with(1)) {
            return 1;
        }
        let (mut bad, mut good) = (1, now);
        while good - bad > precision(good) && self.runs < self.budget {
            let mid = bad + (good - bad) / 2;
            if self.test(&with(mid)) {
                good = mid;
            } else {
                bad = mid;
            }
        }
        good
    }

    fn step(&mut self, g: usize, name: &str, now: u64, good: u64) {
        if good < now {
            self.steps
                .push(format!("group {} {name} {now} -> {good}", g + 1));
        }
    }

    /// Settings back to their defaults, one at a time: a barrier, stack
    /// and device settings.
    fn settings(&mut self, mut cur: Spec) -> Spec {
        type Reset = (&'static str, fn(&mut Spec) -> bool);
        let resets: [Reset; 8] = [
            ("barrier", |s| std::mem::take(&mut s.traffic.barrier)),
            ("congestion_control", |s| {
                s.stack.congestion_control.take().is_some()
            }),
            ("rto_min", |s| s.stack.rto_min.take().is_some()),
            ("sack", |s| s.stack.sack.take().is_some()),
            ("min_time_between_cnps", |s| {
                s.stack
                    .roce
                    .as_mut()
                    .and_then(|r| r.min_time_between_cnps.take())
                    .is_some()
            }),
            ("dcqcn_rp", |s| {
                s.stack
                    .roce
                    .as_mut()
                    .and_then(|r| r.dcqcn_rp.take())
                    .is_some()
            }),
            ("adaptive_retransmission", |s| {
                s.stack
                    .roce
                    .as_mut()
                    .and_then(|r| r.adaptive_retransmission.take())
                    .is_some()
            }),
            ("min_retransmit_timeout", |s| {
                let mut any = false;
                for g in &mut s.traffic.connections {
                    any |= g.min_retransmit_timeout.take().is_some();
                }
                any
            }),
        ];
        for (name, reset) in resets {
            let mut t = cur.clone();
            if reset(&mut t) && self.test(&t) {
                self.steps.push(format!("{name} back to its default"));
                cur = t;
            }
        }
        cur
    }
}

/// Sets group `g`'s connection count to `count` (0 removes the group),
/// keeping the events on the connections that remain: they are numbered
/// across groups, so later groups' events move down.
pub fn resize(s: &mut Spec, g: usize, count: u32) {
    let first: u32 = s.traffic.connections[..g].iter().map(|c| c.count.0).sum();
    let old = s.traffic.connections[g].count.0;
    let removed = old.saturating_sub(count);
    s.events.retain_mut(|e| {
        let c = e.connection.0;
        if c <= first + count {
            true
        } else if c <= first + old {
            false
        } else {
            e.connection = Index(c - removed);
            true
        }
    });
    if count == 0 {
        s.traffic.connections.remove(g);
    } else {
        s.traffic.connections[g].count = Index(count);
    }
}
