//! Lumina §4 step 3: Score = Σ w_i · s(i), where s(i) models how anomalous
//! objective i is. Each s is graded (a count, or a ratio to a bound) so the
//! pool's selection has a slope to climb, and s ≥ 1 is an anomaly.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use wirelab_analyze::Kind as FindingKind;
use wirelab_spec::{Amount, Expect, Index, IndexOrAll, Nanos, Spec, Stat};

use crate::target::{Kind, LatencyStat, Objective};

/// A single objective's s is capped here, so one runaway count cannot
/// drown the others in the sum.
pub const CAP: f64 = 10.0;

/// What scoring needs of a run: kept in the campaign's record of every run,
/// so a campaign is scored again (and resumed) without its lab runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Observation {
    /// PASS, FAIL, INVALID, INTERRUPTED, or ERROR when the run could not be made.
    pub verdict: String,
    /// Why the run could not be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Violations per analyzer.
    pub violations: BTreeMap<String, u64>,
    /// The largest value of each measured finding, `analyzer.name`.
    pub max: BTreeMap<String, f64>,
    /// The median of each measured finding's values.
    pub p50: BTreeMap<String, f64>,
    /// Connection -> its message completion times (ns).
    pub mct_ns: BTreeMap<u32, Vec<u64>>,
    /// Connection -> (messages completed, messages expected).
    pub completed: BTreeMap<u32, (u32, u32)>,
    /// Connection -> bytes it had to move.
    pub bytes: BTreeMap<u32, u64>,
    /// Connections some event addresses.
    pub touched: BTreeSet<u32>,
    /// What the switch did: per event action, per connection, the packets
    /// its events hit (an event placed past a message's last packet hits
    /// none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hits: BTreeMap<String, BTreeMap<u32, u64>>,
    /// The results folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The Ray node whose disk holds `dir`, for runs made on a cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Observation {
    pub fn failed(error: String) -> Observation {
        Observation {
            verdict: "ERROR".into(),
            error: Some(error),
            ..Default::default()
        }
    }

    /// What a run showed. `spec` is the spec it ran (for the connections'
    /// sizes and which ones events touch).
    pub fn of_run(out: &wirelab_lab::RunOutput, spec: &Spec) -> Observation {
        let mut o = Observation {
            verdict: out.verdict.name().to_string(),
            dir: Some(out.dir.display().to_string()),
            mct_ns: out.facts.mct_ns.clone(),
            completed: out.facts.completed.clone(),
            ..Default::default()
        };
        let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for a in &out.summary.analysis.analyzers {
            o.violations.insert(a.name.to_string(), a.violations);
            for f in a
                .findings
                .iter()
                .filter(|f| f.kind == FindingKind::Measurement)
            {
                values
                    .entry(f.path())
                    .or_default()
                    .extend(f.values().into_iter().filter(|v| v.is_finite()));
            }
        }
        // The same nearest-rank median `expect: stat: p50` evaluates.
        for (path, v) in values {
            if let Some(d) = wirelab_analyze::Dist::of(&v) {
                o.max.insert(path.clone(), d.max);
                o.p50.insert(path, d.p50);
            }
        }
        for e in &out.summary.events {
            *o.hits
                .entry(e.action.clone())
                .or_default()
                .entry(e.conn)
                .or_default() += e.hits;
        }
        o.bytes = bytes_per_connection(spec);
        o.touched = touched(spec);
        o
    }

    /// What the run did, as coverage for the search
    /// (`Search::report_behaviours`): each finding an analyzer measured
    /// (a NAK reaction is measured only when a NAK was sent, a CNP
    /// interval only when CNPs were), each analyzer that found violations,
    /// a connection that did not finish, and an event action the switch
    /// applied on two connections, or three or more (a CNP limiter shared
    /// by QPs shows only when two QPs are marked). Presence only: the
    /// values vary from run to run, and bucketing them would make noise
    /// novel. The switch's hit counts in AFL's buckets were tried and made
    /// the search slower (`wirelab bench fuzz`: implied-nak 37 runs
    /// against 17, cnp-hidden-interval 61 against 32-61): their many
    /// score-0 novelties were mutated where fresh random points did
    /// better. Nothing for a run that is not to be believed (INVALID: its
    /// trace is incomplete) or was not made.
    pub fn behaviours(&self) -> BTreeSet<String> {
        if self.verdict != "PASS" && self.verdict != "FAIL" {
            return BTreeSet::new();
        }
        let mut b: BTreeSet<String> = self.max.keys().cloned().collect();
        b.extend(
            self.violations
                .iter()
                .filter(|(_, &n)| n > 0)
                .map(|(a, _)| format!("{a} violations")),
        );
        if self.completed.values().any(|&(done, of)| done < of) {
            b.insert("unfinished connection".into());
        }
        for (action, per_conn) in &self.hits {
            match per_conn.values().filter(|&&n| n > 0).count() {
                0 | 1 => {}
                2 => {
                    b.insert(format!("switch {action}: 2 connections"));
                }
                _ => {
                    b.insert(format!("switch {action}: 3+ connections"));
                }
            }
        }
        b
    }
}

/// Connection id -> messages × size.
pub fn bytes_per_connection(spec: &Spec) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    let mut id = 0;
    for g in &spec.traffic.connections {
        for _ in 0..g.count.0 {
            id += 1;
            m.insert(id, u64::from(g.messages.0) * g.message_size.0);
        }
    }
    m
}

/// Connections some event addresses.
pub fn touched(spec: &Spec) -> BTreeSet<u32> {
    spec.events.iter().map(|e| e.connection.0).collect()
}

/// One run's score.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// s(i) per objective, in the target's order.
    pub s: Vec<f64>,
    /// Σ w_i · s(i).
    pub total: f64,
}

impl Score {
    /// Objectives at or past their anomaly threshold.
    pub fn anomalies(&self) -> Vec<usize> {
        (0..self.s.len()).filter(|&i| self.s[i] >= 1.0).collect()
    }
}

/// The runs a score compares a run with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Against<'a> {
    /// The same spec without its events (the MCT objectives).
    pub base: Option<&'a Observation>,
    /// The same spec on the reference device (objectives with `reference`).
    pub reference: Option<&'a Observation>,
}

/// Scores `o` against the runs it is compared with. A run that could not
/// be made scores 0.
pub fn score(objectives: &[Objective], o: &Observation, against: Against) -> Score {
    let s: Vec<f64> = objectives
        .iter()
        .map(|ob| {
            if o.error.is_some() {
                return 0.0;
            }
            let v = match (ob.reference, against.reference) {
                (true, Some(r)) if ob.kind == Kind::Differs => {
                    (latency(ob, o) - latency(ob, r)).abs() / by(ob)
                }
                // Differential: only what the device under test shows
                // beyond the reference device on the same spec, so the
                // lab's own delays and limits cancel out.
                (true, Some(r)) => one(ob, o, against.base) - one(ob, r, against.base),
                (true, None) => 0.0,
                (false, _) => one(ob, o, against.base),
            };
            if v.is_nan() {
                0.0
            } else {
                v.clamp(0.0, CAP)
            }
        })
        .collect();
    let total = objectives.iter().zip(&s).map(|(ob, s)| ob.weight * s).sum();
    Score { s, total }
}

/// The analyzers whose violations are counters disagreeing with the trace.
pub const COUNTER_ANALYZERS: [&str; 2] = ["counters", "roce-counters"];

fn one(ob: &Objective, o: &Observation, base: Option<&Observation>) -> f64 {
    match ob.kind {
        Kind::Violations => o
            .violations
            .iter()
            .filter(|(a, _)| ob.analyzers.is_empty() || ob.analyzers.contains(a))
            .map(|(_, &n)| n as f64)
            .sum(),
        Kind::Counters => COUNTER_ANALYZERS
            .iter()
            .filter_map(|a| o.violations.get(*a))
            .map(|&n| n as f64)
            .sum(),
        Kind::Latency => latency(ob, o) / ob.above.map_or(f64::NAN, |b| b.0 as f64),
        // Only against a reference (`score`).
        Kind::Differs => 0.0,
        Kind::MctInflation => {
            let Some(b) = base else { return 0.0 };
            let k = ob.above_baseline.unwrap_or(f64::NAN);
            if incomplete(o, o.completed.keys()) {
                return CAP;
            }
            let worst = |x: &Observation| x.mct_ns.values().flatten().copied().max();
            match (worst(o), worst(b)) {
                (Some(m), Some(bm)) if bm > 0 => m as f64 / (k * bm as f64),
                _ => 0.0,
            }
        }
        Kind::NoisyNeighbour => {
            let Some(b) = base else { return 0.0 };
            let k = ob.above_baseline.unwrap_or(f64::NAN);
            if o.touched.is_empty() {
                return 0.0;
            }
            let innocent: Vec<u32> = o
                .completed
                .keys()
                .copied()
                .filter(|c| !o.touched.contains(c))
                .collect();
            if incomplete(o, innocent.iter()) {
                return CAP;
            }
            innocent
                .iter()
                .filter_map(|c| {
                    let m = o.mct_ns.get(c)?.iter().copied().max()?;
                    let bm = b.mct_ns.get(c)?.iter().copied().max()?;
                    (bm > 0).then(|| m as f64 / (k * bm as f64))
                })
                .fold(0.0, f64::max)
        }
        Kind::Unfairness => {
            let below = ob.below.unwrap_or(f64::NAN);
            let goodput: Vec<f64> = o
                .mct_ns
                .iter()
                .filter_map(|(c, m)| {
                    let t: u64 = m.iter().sum();
                    let b = *o.bytes.get(c)?;
                    (t > 0).then(|| b as f64 / t as f64)
                })
                .collect();
            if goodput.len() < 2 {
                return 0.0;
            }
            (1.0 - jain(&goodput)) / (1.0 - below)
        }
    }
}

/// `differs`: the margin, in the finding's unit.
fn by(ob: &Objective) -> f64 {
    let unit = ob
        .finding
        .as_deref()
        .and_then(|f| wirelab_analyze::catalog().unit_of(f))
        .unwrap_or(wirelab_spec::Unit::Count);
    ob.by
        .as_ref()
        .and_then(|b| b.value_in(unit).ok())
        .unwrap_or(f64::NAN)
}

/// A latency (or `differs`) objective's value on a run (0 when it measured none).
fn latency(ob: &Objective, o: &Observation) -> f64 {
    let f = ob.finding.as_deref().unwrap_or_default();
    let values = match ob.stat.unwrap_or_default() {
        LatencyStat::P50 => &o.p50,
        LatencyStat::Max => &o.max,
    };
    values.get(f).copied().unwrap_or(0.0)
}

/// Some of `conns` did not complete every message (a message that never
/// completes is as slow as it gets).
fn incomplete<'a>(o: &Observation, mut conns: impl Iterator<Item = &'a u32>) -> bool {
    conns.any(|c| o.completed.get(c).is_some_and(|(done, want)| done < want))
}

/// Jain's fairness index, (Σx)² / (n·Σx²): 1 when all are equal, 1/n when
/// one takes everything.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * q)
}

/// The claims a spec that reproduces objective `ob`'s anomaly carries:
/// they hold where the anomaly is absent and fail on `o` (`base` is the
/// run without events, for the MCT bounds). Campaigns confirm that the
/// saved spec fails them before keeping it.
pub fn expectations(ob: &Objective, o: &Observation, against: Against) -> Vec<Expect> {
    let base = against.base;
    let reference = against.reference.filter(|_| ob.reference);
    let finding = |f: &str| Expect {
        finding: Some(f.to_string()),
        ..blank()
    };
    let nanos = |ns: f64| Some(Amount::Text(Nanos(ns as u64).to_string()));
    let mut claims = Vec::new();
    match ob.kind {
        Kind::Violations | Kind::Counters => {
            for (a, _) in o.violations.iter().filter(|(a, &n)| {
                n > 0
                    && match ob.kind {
                        Kind::Counters => COUNTER_ANALYZERS.contains(&a.as_str()),
                        _ => ob.analyzers.is_empty() || ob.analyzers.contains(a),
                    }
            }) {
                // What the reference device showed is not the anomaly.
                let allowed = reference
                    .and_then(|r| r.violations.get(a))
                    .copied()
                    .unwrap_or(0);
                claims.push(match allowed {
                    0 => Expect {
                        equals: Some(Amount::Number(0.0)),
                        ..finding(&format!("{a}.violations"))
                    },
                    n => Expect {
                        at_most: Some(Amount::Number(n as f64)),
                        ..finding(&format!("{a}.violations"))
                    },
                });
            }
        }
        Kind::Latency => claims.push(Expect {
            stat: Some(stat(ob)),
            at_most: ob.above.map(|b| {
                let on_reference = reference.map_or(0.0, |r| latency(ob, r));
                Amount::Text(Nanos(b.0 + on_reference as u64).to_string())
            }),
            ..finding(ob.finding.as_deref().unwrap_or_default())
        }),
        Kind::MctInflation => {
            let k = ob.above_baseline.unwrap_or(1.0);
            if let Some(bm) = base.and_then(|b| b.mct_ns.values().flatten().copied().max()) {
                claims.push(Expect {
                    stat: Some(Stat::Max),
                    at_most: nanos(k * bm as f64),
                    ..finding("flow.mct")
                });
            }
        }
        Kind::NoisyNeighbour => {
            let k = ob.above_baseline.unwrap_or(1.0);
            for (c, m) in o.mct_ns.iter().filter(|(c, _)| !o.touched.contains(c)) {
                let bm = base.and_then(|b| b.mct_ns.get(c)?.iter().copied().max());
                if let (Some(m), Some(bm)) = (m.iter().copied().max(), bm) {
                    if m as f64 >= k * bm as f64 {
                        claims.push(Expect {
                            connection: Some(IndexOrAll::One(Index(*c))),
                            stat: Some(Stat::Max),
                            at_most: nanos(k * bm as f64),
                            ..finding("flow.mct")
                        });
                    }
                }
            }
        }
        Kind::Differs => {
            let x = reference.map_or(0.0, |r| latency(ob, r));
            let m = by(ob);
            let unit = wirelab_analyze::catalog()
                .unit_of(ob.finding.as_deref().unwrap_or_default())
                .unwrap_or(wirelab_spec::Unit::Count);
            let amount = |v: f64| match unit {
                wirelab_spec::Unit::Nanos => Amount::Text(Nanos(v.max(0.0) as u64).to_string()),
                _ => Amount::Number(v.max(0.0)),
            };
            claims.push(Expect {
                stat: Some(stat(ob)),
                at_least: (x - m > 0.0).then(|| amount(x - m)),
                at_most: Some(amount(x + m)),
                ..finding(ob.finding.as_deref().unwrap_or_default())
            });
        }
        Kind::Unfairness => claims.push(Expect {
            at_least: ob.below.map(Amount::Number),
            ..finding("flow.fairness")
        }),
    }
    // A message that never completes is the plainest claim of all.
    if o.completed.values().any(|(d, w)| d < w) {
        claims.push(Expect {
            connection: Some(IndexOrAll::All),
            messages_completed: Some(true),
            ..blank()
        });
    }
    claims
}

fn stat(ob: &Objective) -> Stat {
    match ob.stat.unwrap_or_default() {
        LatencyStat::P50 => Stat::P50,
        LatencyStat::Max => Stat::Max,
    }
}

fn blank() -> Expect {
    serde_yaml::from_str("{}").expect("every claim field is optional")
}
