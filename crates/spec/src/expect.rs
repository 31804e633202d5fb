//! `expect:`: the claims a run must satisfy. Each entry makes exactly one
//! [`Claim`]; the validator here and the evaluator
//! (`wirelab_analyze::expect`) both dispatch on [`Expect::claim`], so a new
//! kind of claim is one variant, matched in both places by the compiler.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Amount, Catalog, Index, IndexOrAll, Invalid, Spec, Stat, Unit};

/// What one `expect:` entry claims.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Claim<'a> {
    /// `retransmitted` and/or `recovery`: how often, and how, one packet of
    /// one connection was retransmitted.
    Retransmission {
        connection: Index,
        packet: Index,
        times: Option<u32>,
        recovery: Option<&'a [Recovery]>,
    },
    /// `ce_echoed`: every CE mark was echoed (true) or none was (false).
    CeEchoed(bool),
    /// `messages_completed`.
    MessagesCompleted(bool),
    /// `counter` on `host`: a kernel counter's delta within the bounds.
    Counter { host: &'a str, name: &'a str },
    /// `finding`: an analyzer's finding, `analyzer.name`, within the bounds.
    Finding {
        path: &'a str,
        analyzer: &'a str,
        name: &'a str,
    },
}

/// The claim keys, as a user writes them (for messages).
const CLAIM_KEYS: &str =
    "retransmitted/recovery, ce_echoed, messages_completed, counter or finding";

/// Every amount of a claim reads in the claim's unit.
fn validate_amounts(x: &Expect, at: &str, catalog: &Catalog) -> Result<(), Invalid> {
    let unit = x.unit(catalog);
    for (name, a) in [
        ("at_least", &x.at_least),
        ("at_most", &x.at_most),
        ("equals", &x.equals),
    ] {
        if let Some(a) = a {
            if let Err(e) = a.value_in(unit) {
                return err(format!("{at}.{name}"), e);
            }
        }
    }
    if let Some(t) = &x.tolerance {
        if x.equals.is_none() {
            return err(format!("{at}.tolerance"), "`tolerance` goes with `equals`");
        }
        if let Err(e) = t.tolerance(unit, 1.0) {
            return err(format!("{at}.tolerance"), e);
        }
    }
    if x.equals.is_some() && (x.at_least.is_some() || x.at_most.is_some()) {
        return err(at, "`equals` or `at_least`/`at_most`, not both");
    }
    let v = |a: &Option<Amount>| a.as_ref().and_then(|a| a.value_in(unit).ok());
    if let (Some(lo), Some(hi)) = (v(&x.at_least), v(&x.at_most)) {
        if lo > hi {
            return err(
                format!("{at}.at_least"),
                "is above `at_most`: no value can satisfy both",
            );
        }
    }
    if let Some(t) = &x.tolerance {
        if t.tolerance(unit, 1.0).is_ok_and(|t| t < 0.0) {
            return err(format!("{at}.tolerance"), "must not be negative");
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// Triggered by the receiver's loss signal: duplicate ACKs (RFC 5681),
    /// SACK (RFC 6675) or RACK (RFC 8985).
    Fast,
    /// A tail loss probe (RFC 8985 §7).
    Probe,
    /// The retransmission timer (RFC 6298), or the recovery after it.
    Timeout,
    /// Nothing on the wire justified it (a conformance violation).
    Unjustified,
}

impl Recovery {
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Fast => "fast",
            Recovery::Probe => "probe",
            Recovery::Timeout => "timeout",
            Recovery::Unjustified => "unjustified",
        }
    }
}

/// A claim the run must satisfy. Exactly one claim per entry:
/// `retransmitted` (with `packet`), `ce_echoed`, `messages_completed`,
/// `counter` or `finding` (any analyzer finding, with bounds or a tolerance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default)]
    pub connection: Option<IndexOrAll>,
    #[serde(default)]
    pub packet: Option<Index>,
    /// With `finding`: only the findings about this virtual queue (vAQM,
    /// numbered from 1 in `vaqm.queues` order).
    #[serde(default)]
    pub queue: Option<Index>,
    /// With `finding`: only the variants whose label has these
    /// comma-separated parts, e.g. `25us, batch 4` for a distributed
    /// bump's findings labelled `bump 2, 25us, batch 4` (labels are in the
    /// JSON report).
    #[serde(default)]
    pub label: Option<String>,
    /// How many times the packet was retransmitted.
    #[serde(default)]
    pub retransmitted: Option<u32>,
    /// How each retransmission was triggered, in order.
    #[serde(default)]
    pub recovery: Option<Vec<Recovery>>,
    /// Every CE mark on the connection was echoed (ECE) by the receiver.
    #[serde(default)]
    pub ce_echoed: Option<bool>,
    /// Every message of the connection completed.
    #[serde(default)]
    pub messages_completed: Option<bool>,
    /// A kernel counter (nstat name) delta on `host`.
    #[serde(default)]
    pub counter: Option<String>,
    #[serde(default)]
    pub host: Option<String>,
    /// An analyzer finding, `analyzer.name` (see `wirelab analyze --findings`).
    #[serde(default)]
    pub finding: Option<String>,
    /// How the finding's values are combined (default: every value).
    #[serde(default)]
    pub stat: Option<Stat>,
    #[serde(default)]
    pub at_least: Option<Amount>,
    #[serde(default)]
    pub at_most: Option<Amount>,
    /// With `tolerance`: the value must be within it of this.
    #[serde(default)]
    pub equals: Option<Amount>,
    /// Absolute (`5us`) or relative (`10%`).
    #[serde(default)]
    pub tolerance: Option<Amount>,
}

impl Expect {
    /// The unit `at_least`/`at_most`/`equals` are read in.
    pub fn unit(&self, catalog: &Catalog) -> Unit {
        if self.counter.is_some() || self.stat == Some(Stat::Count) {
            return Unit::Count;
        }
        self.finding
            .as_deref()
            .and_then(|f| catalog.unit_of(f))
            .unwrap_or(Unit::Count)
    }

    /// (at least, at most) in the claim's unit; validated, so never fails
    /// on a parsed spec.
    pub fn bounds(&self, catalog: &Catalog) -> (Option<f64>, Option<f64>) {
        let u = self.unit(catalog);
        let v = |a: &Option<Amount>| a.as_ref().and_then(|a| a.value_in(u).ok());
        if let Some(e) = v(&self.equals) {
            let tol = self
                .tolerance
                .as_ref()
                .and_then(|t| t.tolerance(u, e).ok())
                .unwrap_or(0.0);
            return (Some(e - tol), Some(e + tol));
        }
        (v(&self.at_least), v(&self.at_most))
    }
}

impl Expect {
    /// The claim keys that are set, each as the claim it makes. Selectors a
    /// claim needs but the entry lacks read as 0 / "" here; validation
    /// rejects them before anything evaluates the claim.
    fn claims(&self) -> Vec<Claim<'_>> {
        let mut v = Vec::new();
        if self.retransmitted.is_some() || self.recovery.is_some() {
            v.push(Claim::Retransmission {
                connection: match self.connection {
                    Some(IndexOrAll::One(c)) => c,
                    _ => Index(0),
                },
                packet: self.packet.unwrap_or(Index(0)),
                times: self.retransmitted,
                recovery: self.recovery.as_deref(),
            });
        }
        if let Some(b) = self.ce_echoed {
            v.push(Claim::CeEchoed(b));
        }
        if let Some(b) = self.messages_completed {
            v.push(Claim::MessagesCompleted(b));
        }
        if let Some(name) = &self.counter {
            v.push(Claim::Counter {
                host: self.host.as_deref().unwrap_or_default(),
                name,
            });
        }
        if let Some(path) = &self.finding {
            let (analyzer, name) = path.split_once('.').unwrap_or((path, ""));
            v.push(Claim::Finding {
                path,
                analyzer,
                name,
            });
        }
        v
    }

    /// The entry's one claim; `None` when it sets none or several of the
    /// claim keys (never, in a validated spec).
    pub fn claim(&self) -> Option<Claim<'_>> {
        match self.claims()[..] {
            [c] => Some(c),
            _ => None,
        }
    }
}

/// Checks `expect:`; `hosts` are the host names, `total` the connections.
pub(crate) fn validate(
    s: &Spec,
    hosts: &BTreeSet<&str>,
    total: u32,
    catalog: &Catalog,
) -> Result<(), Invalid> {
    for (i, x) in s.expect.iter().enumerate() {
        let at = format!("expect[{i}]");
        let Some(claim) = x.claim() else {
            return err(at, format!("needs exactly one claim: {CLAIM_KEYS}"));
        };
        validate_amounts(x, &at, catalog)?;
        let bounded = x.at_least.is_some() || x.at_most.is_some() || x.equals.is_some();
        match claim {
            Claim::Finding { path, analyzer, .. } => {
                if catalog.unit_of(path).is_none() {
                    // The named analyzer's findings, or the analyzers: a
                    // list to choose from, not all 70 findings.
                    let known = match catalog.get(analyzer) {
                        Some(a) => {
                            let names: Vec<&str> = a.findings.iter().map(|(n, _)| *n).collect();
                            format!("{analyzer} has: {}", names.join(", "))
                        }
                        None => format!("analyzers: {}", catalog.names().join(", ")),
                    };
                    return err(
                        format!("{at}.finding"),
                        format!("unknown finding `{path}` ({known})"),
                    );
                }
                if !s.analyzers(catalog).contains(&analyzer) {
                    return err(
                        format!("{at}.finding"),
                        format!("analyzer `{analyzer}` is not in `analyzers:`"),
                    );
                }
                if !bounded {
                    return err(at, "`finding` needs `at_least`, `at_most` or `equals`");
                }
                let queues = s.vaqm.as_ref().map_or(0, |v| v.queues.len());
                if let Some(q) = x.queue.filter(|q| q.0 as usize > queues) {
                    return err(
                        format!("{at}.queue"),
                        format!(
                            "virtual queue {} does not exist (the spec has {queues})",
                            q.0
                        ),
                    );
                }
            }
            _ if x.queue.is_some() => {
                return err(format!("{at}.queue"), "`queue` goes with `finding`")
            }
            _ if x.label.is_some() => {
                return err(format!("{at}.label"), "`label` goes with `finding`")
            }
            _ if x.stat.is_some() => {
                return err(format!("{at}.stat"), "`stat` goes with `finding`")
            }
            Claim::Counter { .. } => {}
            _ if x.equals.is_some() || x.tolerance.is_some() => {
                return err(
                    at,
                    "`equals` and `tolerance` go with `counter` or `finding`",
                )
            }
            _ => {}
        }
        if let Some(IndexOrAll::One(c)) = x.connection {
            if c.0 > total {
                return err(
                    format!("{at}.connection"),
                    format!("connection {} does not exist (the spec has {total})", c.0),
                );
            }
        }
        match claim {
            Claim::Retransmission {
                connection,
                packet,
                times,
                recovery,
            } => {
                if packet.0 == 0 || connection.0 == 0 {
                    return err(
                        at,
                        "`retransmitted`/`recovery` need `connection: N` and `packet: N`",
                    );
                }
                if let (Some(n), Some(r)) = (times, recovery) {
                    if r.len() != n as usize {
                        return err(
                            format!("{at}.recovery"),
                            format!("lists {} recoveries but `retransmitted` is {n}", r.len()),
                        );
                    }
                }
            }
            Claim::Finding { .. } => {}
            _ if x.packet.is_some() => {
                return err(
                    format!("{at}.packet"),
                    "only `retransmitted`/`recovery` and `finding` take a packet",
                )
            }
            _ => {}
        }
        match claim {
            Claim::CeEchoed(_) | Claim::MessagesCompleted(_) if x.connection.is_none() => {
                return err(at, "needs `connection` (a number or `all`)");
            }
            Claim::Counter { host, name } => {
                if x.host.is_none() {
                    return err(at, "`counter` needs `host`");
                }
                // A name the kernel does not have would read as a delta of
                // 0 and pass `at_most` silently.
                if let Some(known) = catalog.counters.as_ref().filter(|k| !k.contains(name)) {
                    let close: Vec<&str> = known
                        .iter()
                        .filter(|k| {
                            let (k, n) = (k.to_lowercase(), name.to_lowercase());
                            k == n || k.ends_with(&n) || n.ends_with(&k)
                        })
                        .map(String::as_str)
                        .take(5)
                        .collect();
                    let hint = if close.is_empty() {
                        "names are nstat's, as `nstat -az` prints them (TcpRetransSegs, \
                         TcpExtTCPTimeouts, IpExtInCEPkts, ...), or a RoCE device's \
                         (rx_icrc_encapsulated, np_cnp_sent, ...)"
                            .to_string()
                    } else {
                        format!("did you mean {}?", close.join(", "))
                    };
                    return err(
                        format!("{at}.counter"),
                        format!("this kernel has no counter `{name}`; {hint}"),
                    );
                }
                if !hosts.contains(host) {
                    return err(format!("{at}.host"), format!("unknown host `{host}`"));
                }
                if !bounded {
                    return err(at, "`counter` needs `at_least`, `at_most` or `equals`");
                }
            }
            Claim::Finding { .. } if x.host.is_some() => {
                return err(format!("{at}.host"), "`host` goes with `counter`");
            }
            Claim::Finding { .. } => {}
            _ if x.host.is_some() || x.at_least.is_some() || x.at_most.is_some() => {
                return err(
                    at,
                    "`host`, `at_least` and `at_most` go with `counter` or `finding`",
                );
            }
            _ => {}
        }
    }
    Ok(())
}
