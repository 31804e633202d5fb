//! The RoCE analyzers (Lumina §4): go-back-N conformance, retransmission
//! latency, CNP generation and device counters. Each reads the RoCE view of
//! the trace (crate::roce), built from the same packets as the TCP model.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use wirelab_roce::packet::{op, Kind};
use wirelab_spec::{AnalyzerName, Unit};

use crate::roce::RPkt;
use crate::{Analyzer, Finding, Input};

pub struct GoBackN;

impl Analyzer for GoBackN {
    fn name(&self) -> AnalyzerName {
        AnalyzerName::RoceGoBackN
    }
    fn about(&self) -> &'static str {
        "RoCE go-back-N (Lumina's FSM): NAK the first missing PSN once, resend from it in order; reads re-issued from the missing response; MigReq = 1"
    }
    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let v = input.roce;
        let mut out = Vec::new();
        let mut checks = 0;
        for c in &v.conns {
            checks += c.checks;
            for b in &c.broken {
                out.push(
                    Finding::violation("roce-go-back-n", b.name, b.rule, b.message.clone())
                        .conn(c.id)
                        .evidence(b.evidence.clone()),
                );
            }
        }
        (checks, out)
    }
}

pub struct RetransmissionLatency;

impl Analyzer for RetransmissionLatency {
    fn name(&self) -> AnalyzerName {
        AnalyzerName::RoceRetransmissionLatency
    }
    fn about(&self) -> &'static str {
        "RoCE per loss (Lumina Figs. 5, 8, 9): NACK generation (responder; requester for read), NACK reaction, timeouts"
    }
    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let v = input.roce;
        let mut out = Vec::new();
        for c in &v.conns {
            for l in &c.nack_generation {
                let name = if l.read {
                    "read-nack-generation"
                } else {
                    "nack-generation"
                };
                let who = if l.read {
                    "requester re-issued the read"
                } else {
                    "responder NAKed"
                };
                out.push(
                    Finding::measurement(
                        "roce-retransmission-latency",
                        name,
                        l.ns as f64,
                        Unit::Nanos,
                        format!(
                            "relative PSN {}: {who} {:.1}us after the first packet past the gap",
                            l.psn_rel,
                            l.ns as f64 / 1e3
                        ),
                    )
                    .conn(c.id)
                    .packet(l.psn_rel)
                    .evidence(l.evidence.clone()),
                );
            }
            for l in &c.nack_reaction {
                out.push(
                    Finding::measurement(
                        "roce-retransmission-latency",
                        "nack-reaction",
                        l.ns as f64,
                        Unit::Nanos,
                        format!(
                            "relative PSN {}: resent {:.1}us after the NAK",
                            l.psn_rel,
                            l.ns as f64 / 1e3
                        ),
                    )
                    .conn(c.id)
                    .packet(l.psn_rel)
                    .evidence(l.evidence.clone()),
                );
            }
            for l in &c.timeouts {
                out.push(
                    Finding::measurement(
                        "roce-retransmission-latency",
                        "timeout",
                        l.ns as f64,
                        Unit::Nanos,
                        format!(
                            "relative PSN {}: resent by timeout {:.3}ms after the last request",
                            l.psn_rel,
                            l.ns as f64 / 1e6
                        ),
                    )
                    .conn(c.id)
                    .packet(l.psn_rel)
                    .evidence(l.evidence.clone()),
                );
            }
        }
        (0, out)
    }
}

/// Timing slack of the CNP limiter check: the NP times packets when it
/// reads them, the trace when they cross the switch. wirelab's own NP is a
/// user-space process whose socket queue adds tens of µs, so the slack is
/// 10 µs or a quarter of the interval, whichever is larger.
fn cnp_slack(interval: u64) -> u64 {
    (interval / 4).max(10_000)
}

pub struct Cnp;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Scope {
    Qp,
    Ip,
    Port,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Qp => "per QP",
            Scope::Ip => "per destination IP",
            Scope::Port => "per NIC port",
        }
    }
    /// The limiter key of a marked data packet (its sender's QP is the conn).
    fn key(self, conn: u32, sender: Ipv4Addr) -> (u32, Ipv4Addr) {
        match self {
            Scope::Qp => (conn, Ipv4Addr::UNSPECIFIED),
            Scope::Ip => (0, sender),
            Scope::Port => (0, Ipv4Addr::UNSPECIFIED),
        }
    }
}

/// CNPs a limiter of `scope` and `interval` would send for these marks.
fn expected(marks: &[(u64, u32, Ipv4Addr)], scope: Scope, interval: u64) -> u64 {
    let mut last: BTreeMap<(u32, Ipv4Addr), u64> = BTreeMap::new();
    let mut n = 0;
    for &(t, conn, src) in marks {
        let k = scope.key(conn, src);
        if last
            .get(&k)
            .is_none_or(|&l| t.saturating_sub(l) >= interval)
        {
            last.insert(k, t);
            n += 1;
        }
    }
    n
}

impl Analyzer for Cnp {
    fn name(&self) -> AnalyzerName {
        AnalyzerName::RoceCnp
    }
    fn about(&self) -> &'static str {
        "RoCE CNPs (DCQCN NP, Lumina §6.3): which limiter scope and interval the device follows, and whether it sends what min_time_between_cnps allows"
    }
    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let v = input.roce;
        let mut out = Vec::new();
        let mut checks = 0;
        // Conn of a data packet's sender, by (sender, receiver's QPN).
        let mut nps: BTreeMap<Ipv4Addr, (Vec<(u64, u32, Ipv4Addr)>, Vec<&RPkt>)> = BTreeMap::new();
        for c in &v.conns {
            for p in c.pkts.iter().filter(|p| {
                p.accepted() && p.ecn == 3 && matches!(p.kind(), Kind::Data | Kind::ReadResponse)
            }) {
                nps.entry(p.dst).or_default().0.push((p.ts, c.id, p.src));
            }
        }
        // A CNP names the data sender's QP; map it back to the connection.
        let mut qp_conn: BTreeMap<(Ipv4Addr, u32), u32> = BTreeMap::new();
        for c in &v.conns {
            for p in &c.pkts {
                if p.kind() == Kind::Ack
                    || p.kind() == Kind::ReadResponse
                    || (c.requester == Some(p.dst) && p.kind() != Kind::Cnp)
                {
                    qp_conn.insert((p.dst, p.dqpn), c.id);
                }
            }
        }
        for p in v.all.iter().filter(|p| p.opcode == op::CNP) {
            nps.entry(p.src).or_default().1.push(p);
        }
        let host_of = |ip: Ipv4Addr| {
            input.facts.and_then(|f| {
                f.addresses
                    .iter()
                    .find(|(_, a)| **a == IpAddr::V4(ip))
                    .map(|(n, _)| n.clone())
            })
        };
        for (marks, _) in nps.values_mut() {
            marks.sort();
        }
        for (np, (marks, cnps)) in &nps {
            if marks.is_empty() {
                continue;
            }
            checks += 1;
            let actual = cnps.len() as u64;
            let name = host_of(*np).unwrap_or_else(|| np.to_string());
            out.push(
                Finding::measurement(
                    "roce-cnp",
                    "cnps",
                    actual as f64,
                    Unit::Count,
                    format!(
                        "{name} sent {actual} CNPs for {} CE-marked packets",
                        marks.len()
                    ),
                )
                .evidence(cnps.iter().take(3).map(|p| p.evidence())),
            );
            // Infer the scope: the smallest gap between CNPs under each scope's
            // keys, and which scope's limiter at that gap predicts the count.
            let mut best: Option<(u64, Scope, u64)> = None;
            for scope in [Scope::Qp, Scope::Ip, Scope::Port] {
                let mut last: BTreeMap<(u32, Ipv4Addr), u64> = BTreeMap::new();
                let mut gap = u64::MAX;
                for p in cnps {
                    let conn = qp_conn.get(&(p.dst, p.dqpn)).copied().unwrap_or(0);
                    let k = scope.key(conn, p.dst);
                    if let Some(l) = last.insert(k, p.ts) {
                        gap = gap.min(p.ts.saturating_sub(l));
                    }
                }
                let g = if gap == u64::MAX { 0 } else { gap };
                let err = expected(marks, scope, g).abs_diff(actual);
                if best.is_none_or(|b| err < b.0) {
                    best = Some((err, scope, g));
                }
            }
            let (_, scope, gap) = best.expect("three scopes");
            out.push(
                Finding::measurement(
                    "roce-cnp",
                    "interval",
                    gap as f64,
                    Unit::Nanos,
                    format!(
                        "{name} limits CNPs {} with at least {:.1}us between them",
                        scope.name(),
                        gap as f64 / 1e3
                    ),
                )
                .evidence(cnps.iter().take(2).map(|p| p.evidence())),
            );
            let Some(cfg) = host_of(*np)
                .and_then(|h| input.facts.and_then(|f| f.cnp_interval_ns.get(&h).copied()))
            else {
                continue;
            };
            checks += 1;
            let at_least = expected(marks, scope, cfg + cnp_slack(cfg));
            if actual < at_least {
                out.push(Finding::violation(
                    "roce-cnp",
                    "cnp-missing",
                    "DCQCN NP (§3.1): a CNP for a CE-marked packet whenever min_time_between_cnps has passed on the limiter",
                    format!("{name} sent {actual} CNPs; a {} limiter of {:.1}us allows at least {at_least} for these marks (a hidden interval of ~{:.0}us?)", scope.name(), cfg as f64 / 1e3, gap as f64 / 1e3),
                ).evidence(cnps.iter().take(2).map(|p| p.evidence())));
            }
            if gap + cnp_slack(cfg) < cfg {
                out.push(Finding::violation(
                    "roce-cnp",
                    "cnp-excess",
                    "min_time_between_cnps: no two CNPs of one limiter closer than the interval",
                    format!(
                        "{name} sent CNPs {:.1}us apart under a {:.1}us interval",
                        gap as f64 / 1e3,
                        cfg as f64 / 1e3
                    ),
                ));
            }
        }
        (checks, out)
    }
}

pub struct Counters;

impl Analyzer for Counters {
    fn name(&self) -> AnalyzerName {
        AnalyzerName::RoceCounters
    }
    fn about(&self) -> &'static str {
        "RoCE device counters equal what the switch trace proves (Lumina §6.2.4)"
    }
    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let Some(facts) = input.facts else {
            return (0, Vec::new());
        };
        let v = input.roce;
        if !v.switch_metadata || facts.device_counters.is_empty() {
            return (0, Vec::new());
        }
        let mut out = Vec::new();
        let mut checks = 0;
        for (host, deltas) in &facts.device_counters {
            let Some(IpAddr::V4(ip)) = facts.addresses.get(host).copied() else {
                continue;
            };
            let cnps_from = v
                .all
                .iter()
                .filter(|p| p.opcode == op::CNP && p.src == ip)
                .count() as i64;
            let cnps_to = v
                .all
                .iter()
                .filter(|p| p.opcode == op::CNP && p.dst == ip && p.accepted())
                .count() as i64;
            let marked_to = v
                .all
                .iter()
                .filter(|p| p.dst == ip && p.accepted() && p.ecn == 3)
                .count() as i64;
            let corrupted_to = v
                .all
                .iter()
                .filter(|p| p.dst == ip && p.delivered && p.corrupted)
                .count() as i64;
            let resp = v.conns.iter().filter(|c| c.responder == Some(ip));
            let req = v.conns.iter().filter(|c| c.requester == Some(ip));
            let oos: i64 = resp.map(|c| c.out_of_sequence).sum();
            let naks: i64 = req.clone().map(|c| c.naks_delivered).sum();
            let implied: i64 = req.map(|c| c.implied_naks).sum();
            let rp = deltas.get("rp_cnp_handled").copied().unwrap_or(0)
                + deltas.get("rp_cnp_ignored").copied().unwrap_or(0);
            let rows: [(&str, i64, i64, &str); 7] = [
                (
                    "np_cnp_sent",
                    deltas.get("np_cnp_sent").copied().unwrap_or(0),
                    cnps_from,
                    "CNPs the host sent",
                ),
                (
                    "rp_cnp_handled + rp_cnp_ignored",
                    rp,
                    cnps_to,
                    "CNPs delivered to the host",
                ),
                (
                    "np_ecn_marked_roce_packets",
                    deltas
                        .get("np_ecn_marked_roce_packets")
                        .copied()
                        .unwrap_or(0),
                    marked_to,
                    "CE-marked RoCE packets delivered to the host",
                ),
                (
                    "rx_icrc_encapsulated",
                    deltas.get("rx_icrc_encapsulated").copied().unwrap_or(0),
                    corrupted_to,
                    "packets the switch corrupted on the way to the host",
                ),
                (
                    "out_of_sequence",
                    deltas.get("out_of_sequence").copied().unwrap_or(0),
                    oos,
                    "requests past the expected PSN delivered to the host as responder",
                ),
                (
                    "packet_seq_err",
                    deltas.get("packet_seq_err").copied().unwrap_or(0),
                    naks,
                    "NAK sequence errors delivered to the host as requester",
                ),
                (
                    "implied_nak_seq_err",
                    deltas.get("implied_nak_seq_err").copied().unwrap_or(0),
                    implied,
                    "gaps in read responses the host as requester saw",
                ),
            ];
            for (name, counted, seen, how) in rows {
                checks += 1;
                if counted != seen {
                    out.push(Finding::violation(
                        "roce-counters",
                        "counter-disagrees",
                        "a device counter counts what its name says (Lumina §6.2.4)",
                        format!("{host}: {name} = {counted}, but the trace shows {seen} ({how})"),
                    ));
                }
            }
        }
        (checks, out)
    }
}
