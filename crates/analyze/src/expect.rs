//! `expect:` claims of a spec checked against the analysis, the workload's
//! completions and the kernel counters.

use serde::Serialize;
use wirelab_spec::{Claim, Expect, IndexOrAll, Recovery, Stat};

pub use crate::RunFacts;
use crate::{fmt_value, Analysis, AnalyzerReport, Kind};

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Verdict {
    /// The claim, as a sentence.
    pub claim: String,
    pub pass: bool,
    /// What was observed, with evidence.
    pub observed: String,
}

fn conns(sel: Option<IndexOrAll>, a: &Analysis, facts: &RunFacts) -> Vec<u32> {
    match sel {
        Some(IndexOrAll::One(i)) => vec![i.0],
        _ => {
            let mut v: Vec<u32> = facts.completed.keys().copied().collect();
            if v.is_empty() {
                v = a.connections.iter().map(|c| c.id).collect();
            }
            v
        }
    }
}

pub fn evaluate(
    expect: &[Expect],
    a: &Analysis,
    facts: &RunFacts,
    reports: &[AnalyzerReport],
) -> Vec<Verdict> {
    expect
        .iter()
        .map(|x| evaluate_one(x, a, facts, reports))
        .collect()
}

fn bounds_text(x: &Expect) -> String {
    let u = x.unit(crate::catalog());
    let (lo, hi) = x.bounds(crate::catalog());
    match (&x.equals, lo, hi) {
        (Some(e), _, _) => match &x.tolerance {
            Some(t) => format!(" = {e} ± {t}"),
            None => format!(" = {e}"),
        },
        (None, Some(l), Some(h)) => format!(" in [{}, {}]", fmt_value(l, u), fmt_value(h, u)),
        (None, Some(l), None) => format!(" >= {}", fmt_value(l, u)),
        (None, None, Some(h)) => format!(" <= {}", fmt_value(h, u)),
        _ => String::new(),
    }
}

/// A claim about an analyzer finding: its values (or their statistic, or
/// how many there are) within the bounds.
fn finding_claim(
    x: &Expect,
    path: &str,
    analyzer: &str,
    name: &str,
    reports: &[AnalyzerReport],
) -> Verdict {
    let unit = x.unit(crate::catalog());
    let stat = x.stat.unwrap_or(Stat::Every);
    let conn = match x.connection {
        Some(IndexOrAll::One(i)) => Some(i.0),
        _ => None,
    };
    let mut claim = path.to_string();
    if let Some(c) = conn {
        claim.push_str(&format!(" of conn {c}"));
    }
    if let Some(p) = x.packet {
        claim.push_str(&format!(" packet {}", p.0));
    }
    if let Some(q) = x.queue {
        claim.push_str(&format!(" of queue {}", q.0));
    }
    if let Some(l) = &x.label {
        claim.push_str(&format!(" [{l}]"));
    }
    if stat != Stat::Every {
        claim = format!("{stat:?}({claim})").to_lowercase();
    }
    claim.push_str(&bounds_text(x));
    let Some(rep) = reports.iter().find(|r| r.name == analyzer) else {
        return Verdict {
            claim,
            pass: false,
            observed: format!("analyzer `{analyzer}` did not run"),
        };
    };
    let matching: Vec<_> = rep
        .findings
        .iter()
        .filter(|f| conn.is_none_or(|c| f.connection == Some(c)))
        .filter(|f| x.packet.is_none_or(|p| f.packet == Some(p.0)))
        .filter(|f| x.queue.is_none_or(|q| f.queue == Some(q.0)))
        .filter(|f| {
            x.label
                .as_deref()
                .is_none_or(|l| label_matches(l, f.label.as_deref()))
        })
        .collect();
    let (lo, hi) = x.bounds(crate::catalog());
    let ok = |v: f64| lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
    // Violations are counted: by name, or all of them.
    let counted = name == "violations"
        || unit == wirelab_spec::Unit::Count
            && matching
                .iter()
                .filter(|f| f.name == name)
                .all(|f| f.value.is_none());
    if counted {
        let hits: Vec<_> = matching
            .iter()
            .filter(|f| {
                if name == "violations" {
                    f.kind == Kind::Violation
                } else {
                    f.name == name
                }
            })
            .collect();
        let n = hits.len() as f64;
        let mut observed = format!("{} {name}", hits.len());
        if let Some(f) = hits.first() {
            observed.push_str(&format!(" (first: {})", f.message));
        }
        if rep.checks == 0 && name == "violations" {
            return Verdict {
                claim,
                pass: false,
                observed: format!("{analyzer} had nothing to check"),
            };
        }
        return Verdict {
            claim,
            pass: ok(n),
            observed,
        };
    }
    let values: Vec<f64> = matching
        .iter()
        .filter(|f| f.name == name)
        .flat_map(|f| f.values())
        .collect();
    if values.is_empty() && stat != Stat::Count {
        return Verdict {
            claim,
            pass: false,
            observed: "no such finding in the trace".into(),
        };
    }
    let d = crate::Dist::of(&values);
    let one = |v: f64| fmt_value(v, unit);
    let (pass, observed) = match (stat, d) {
        (Stat::Count, _) => (ok(values.len() as f64), format!("{} values", values.len())),
        (Stat::Every, Some(d)) => {
            let bad: Vec<String> = values
                .iter()
                .filter(|v| !ok(**v))
                .map(|v| one(*v))
                .take(5)
                .collect();
            (
                bad.is_empty(),
                if bad.is_empty() {
                    format!("{} values, from {} to {}", d.count, one(d.min), one(d.max))
                } else {
                    format!(
                        "{} of {} values outside: {}",
                        values.iter().filter(|v| !ok(**v)).count(),
                        d.count,
                        bad.join(", ")
                    )
                },
            )
        }
        (s, Some(d)) => {
            let v = match s {
                Stat::Min => d.min,
                Stat::Max => d.max,
                Stat::Mean => d.mean,
                Stat::P50 => d.p50,
                _ => d.p99,
            };
            (ok(v), format!("{} over {} values", one(v), d.count))
        }
        (_, None) => (false, "no values".into()),
    };
    Verdict {
        claim,
        pass,
        observed,
    }
}

fn evaluate_one(x: &Expect, a: &Analysis, facts: &RunFacts, reports: &[AnalyzerReport]) -> Verdict {
    let Some(claim) = x.claim() else {
        return Verdict {
            claim: "unknown claim".into(),
            pass: false,
            observed: "the spec validator should have rejected this".into(),
        };
    };
    match claim {
        Claim::Finding {
            path,
            analyzer,
            name,
        } => finding_claim(x, path, analyzer, name, reports),
        Claim::Retransmission {
            connection,
            packet,
            times,
            recovery,
        } => retransmission_claim(connection.0, packet.0, times, recovery, a),
        Claim::CeEchoed(want) => ce_claim(x.connection, want, a, facts),
        Claim::MessagesCompleted(want) => completion_claim(x.connection, want, a, facts),
        Claim::Counter { host, name } => counter_claim(x, host, name, facts),
    }
}

fn conn_name(sel: Option<IndexOrAll>) -> String {
    match sel {
        Some(IndexOrAll::One(i)) => format!("conn {}", i.0),
        _ => "every connection".to_string(),
    }
}

fn retransmission_claim(
    c: u32,
    p: u32,
    times: Option<u32>,
    recovery: Option<&[Recovery]>,
    a: &Analysis,
) -> Verdict {
    let mut claim = format!("conn {c} packet {p}");
    if let Some(n) = times {
        claim.push_str(&format!(" retransmitted {n} times"));
    }
    if let Some(r) = recovery {
        let names: Vec<&str> = r.iter().map(|r| r.name()).collect();
        claim.push_str(&format!(" by {}", names.join(", then ")));
    }
    let Some(ca) = a.connections.iter().find(|k| k.id == c) else {
        return Verdict {
            claim,
            pass: false,
            observed: format!("conn {c} is not in the trace"),
        };
    };
    let rs = ca.retransmissions_of(p);
    let got: Vec<_> = rs.iter().map(|r| r.recovery).collect();
    let pass = times.is_none_or(|n| n as usize == rs.len()) && recovery.is_none_or(|r| *r == got);
    let observed = if rs.is_empty() {
        "never retransmitted".to_string()
    } else {
        let parts: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
        format!("{} retransmissions: {}", rs.len(), parts.join("; "))
    };
    Verdict {
        claim,
        pass,
        observed,
    }
}

fn ce_claim(sel: Option<IndexOrAll>, want: bool, a: &Analysis, facts: &RunFacts) -> Verdict {
    let ids = conns(sel, a, facts);
    let claim = format!(
        "{}: CE marks {}echoed by the receiver",
        conn_name(sel),
        if want { "" } else { "not " }
    );
    let mut marks = 0;
    let mut echoed = 0;
    let mut missing = Vec::new();
    for id in ids {
        if let Some(c) = a.connections.iter().find(|k| k.id == id) {
            for m in &c.ce_marks {
                marks += 1;
                match m.echo {
                    Some(_) => echoed += 1,
                    None => missing.push(format!("conn {id} {}", m.at)),
                }
            }
        }
    }
    // A claim about marks needs marks: with none it could not fail.
    let pass = marks > 0 && if want { echoed == marks } else { echoed == 0 };
    let mut observed = format!("{echoed} of {marks} CE marks echoed");
    if !missing.is_empty() {
        observed.push_str(&format!(" (not echoed: {})", missing.join(", ")));
    }
    if marks == 0 {
        observed = "no CE-marked data packet in the trace".into();
    }
    Verdict {
        claim,
        pass,
        observed,
    }
}

fn completion_claim(
    sel: Option<IndexOrAll>,
    want: bool,
    a: &Analysis,
    facts: &RunFacts,
) -> Verdict {
    let ids = conns(sel, a, facts);
    let claim = format!(
        "{}: messages {}completed",
        conn_name(sel),
        if want { "" } else { "not all " }
    );
    let mut all = !ids.is_empty();
    let mut parts = Vec::new();
    for id in ids {
        let (d, e) = facts.completed.get(&id).copied().unwrap_or((0, 0));
        all &= d == e && e > 0;
        parts.push(format!("conn {id}: {d}/{e}"));
    }
    Verdict {
        claim,
        pass: all == want,
        observed: parts.join(", "),
    }
}

fn counter_claim(x: &Expect, host: &str, name: &str, facts: &RunFacts) -> Verdict {
    let claim = format!("{host} {name}{}", bounds_text(x));
    let (lo, hi) = x.bounds(crate::catalog());
    let v = facts
        .counters
        .get(host)
        .and_then(|c| c.get(name))
        .copied()
        .unwrap_or(0);
    let pass = lo.is_none_or(|l| v as f64 >= l) && hi.is_none_or(|h| v as f64 <= h);
    Verdict {
        claim,
        pass,
        observed: format!("{name} changed by {v}"),
    }
}

/// Every comma-separated part of the expectation's `label` is one of the
/// finding label's parts: `25us, batch 1` matches `bump 2, 25us, batch 1`
/// but not `bump 2, 25us, batch 16`.
fn label_matches(want: &str, label: Option<&str>) -> bool {
    let Some(label) = label else { return false };
    let have: Vec<&str> = label.split(',').map(str::trim).collect();
    want.split(',').map(str::trim).all(|w| have.contains(&w))
}

#[cfg(test)]
mod label_tests {
    use super::label_matches;

    #[test]
    fn label_parts_match_whole() {
        let l = Some("bump 2, 25us, batch 1");
        assert!(label_matches("25us, batch 1", l));
        assert!(label_matches("bump 2", l));
        assert!(!label_matches("batch 16", l));
        assert!(!label_matches("batch", l));
        assert!(label_matches("bump 2", Some("bump 2, 25us, batch 16")));
        assert!(!label_matches("batch 1", Some("bump 2, 25us, batch 16")));
        assert!(!label_matches("bump 2", None));
    }
}
