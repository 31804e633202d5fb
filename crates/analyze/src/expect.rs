//! `expect:` claims of a spec checked against the analysis, the workload's
//! completions and the kernel counters.

use std::collections::BTreeMap;

use serde::Serialize;
use wirelab_spec::{Expect, IndexOrAll};

use crate::Analysis;

/// What the workload and the hosts reported, beside the trace.
#[derive(Debug, Default)]
pub struct RunFacts {
    /// Connection id -> (messages completed, messages expected).
    pub completed: BTreeMap<u32, (u32, u32)>,
    /// Host name -> counter deltas (nstat names).
    pub counters: BTreeMap<String, BTreeMap<String, i64>>,
}

#[derive(Debug, Clone, Serialize)]
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

pub fn evaluate(expect: &[Expect], a: &Analysis, facts: &RunFacts) -> Vec<Verdict> {
    expect.iter().map(|x| evaluate_one(x, a, facts)).collect()
}

fn evaluate_one(x: &Expect, a: &Analysis, facts: &RunFacts) -> Verdict {
    let conn_name = |sel: Option<IndexOrAll>| match sel {
        Some(IndexOrAll::One(i)) => format!("conn {}", i.0),
        _ => "every connection".to_string(),
    };
    if x.retransmitted.is_some() || x.recovery.is_some() {
        let c = match x.connection {
            Some(IndexOrAll::One(i)) => i.0,
            _ => unreachable!("validated: needs one connection"),
        };
        let p = x.packet.expect("validated: needs a packet").0;
        let mut claim = format!("conn {c} packet {p}");
        if let Some(n) = x.retransmitted {
            claim.push_str(&format!(" retransmitted {n} times"));
        }
        if let Some(r) = &x.recovery {
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
        let pass = x.retransmitted.is_none_or(|n| n as usize == rs.len())
            && x.recovery.as_ref().is_none_or(|r| *r == got);
        let observed = if rs.is_empty() {
            "never retransmitted".to_string()
        } else {
            let parts: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
            format!("{} retransmissions: {}", rs.len(), parts.join("; "))
        };
        return Verdict {
            claim,
            pass,
            observed,
        };
    }
    if let Some(want) = x.ce_echoed {
        let ids = conns(x.connection, a, facts);
        let claim = format!(
            "{}: CE marks {}echoed by the receiver",
            conn_name(x.connection),
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
        return Verdict {
            claim,
            pass,
            observed,
        };
    }
    if let Some(want) = x.messages_completed {
        let ids = conns(x.connection, a, facts);
        let claim = format!(
            "{}: messages {}completed",
            conn_name(x.connection),
            if want { "" } else { "not all " }
        );
        let mut all = !ids.is_empty();
        let mut parts = Vec::new();
        for id in ids {
            let (d, e) = facts.completed.get(&id).copied().unwrap_or((0, 0));
            all &= d == e && e > 0;
            parts.push(format!("conn {id}: {d}/{e}"));
        }
        return Verdict {
            claim,
            pass: all == want,
            observed: parts.join(", "),
        };
    }
    if let Some(name) = &x.counter {
        let host = x.host.as_deref().unwrap_or("?");
        let mut claim = format!("{host} {name}");
        if let Some(l) = x.at_least {
            claim.push_str(&format!(" >= {l}"));
        }
        if let Some(m) = x.at_most {
            claim.push_str(&format!(" <= {m}"));
        }
        let v = facts
            .counters
            .get(host)
            .and_then(|c| c.get(name))
            .copied()
            .unwrap_or(0);
        let pass =
            x.at_least.is_none_or(|l| v >= l as i64) && x.at_most.is_none_or(|m| v <= m as i64);
        return Verdict {
            claim,
            pass,
            observed: format!("{name} changed by {v}"),
        };
    }
    Verdict {
        claim: "unknown claim".into(),
        pass: false,
        observed: "the spec validator should have rejected this".into(),
    }
}
