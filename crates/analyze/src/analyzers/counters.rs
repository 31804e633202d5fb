//! Kernel counters against what the trace proves (Lumina §6.2.4 did this for
//! NIC counters and found them wrong). Only for traces taken at the switch of
//! a run: then every packet of every host crossed the capture point, so the
//! counts are exact, not bounds.

use std::net::IpAddr;

use wirelab_spec::Unit;

use crate::{Analyzer, Finding, Input, Reason};

pub struct Counters;

const A: &str = "counters";

/// What the trace shows for one host.
#[derive(Default)]
struct Seen {
    out_segs: i64,
    in_segs: i64,
    in_csum_errors: i64,
    in_ce: i64,
    retrans: i64,
    timeouts: i64,
    probes: i64,
    fast: i64,
}

impl Analyzer for Counters {
    fn name(&self) -> &'static str {
        "counters"
    }

    fn findings(&self) -> &'static [(&'static str, Unit)] {
        &[
            ("violations", Unit::Count),
            ("counter-disagrees", Unit::Count),
            ("counter-agrees", Unit::Count),
        ]
    }

    fn about(&self) -> &'static str {
        "each host's kernel counter deltas (nstat) equal what the switch trace proves"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let Some(facts) = input.facts else {
            return (0, Vec::new());
        };
        if !input.analysis.switch_metadata || facts.counters.is_empty() {
            return (0, Vec::new());
        }
        let mut out = Vec::new();
        let mut checks = 0;
        for (host, deltas) in &facts.counters {
            let Some(&addr) = facts.addresses.get(host) else {
                continue;
            };
            let s = seen(input, addr, facts.ports.get(host).copied());
            // (counter, what the trace shows, how)
            let rows: [(&str, i64, &str); 8] = [
                ("TcpOutSegs", s.out_segs, "TCP packets the host sent, retransmissions excluded (RFC 1213 tcpOutSegs)"),
                ("TcpInSegs", s.in_segs, "TCP packets delivered to the host (the switch's drops excluded; corrupted ones count, RFC 1213 tcpInSegs includes errors)"),
                ("TcpInCsumErrors", s.in_csum_errors, "packets the switch corrupted on the way to the host"),
                ("IpExtInCEPkts", s.in_ce, "CE-marked packets delivered to the host"),
                ("TcpRetransSegs", s.retrans, "retransmissions the host sent"),
                ("TcpExtTCPTimeouts", s.timeouts, "timeout retransmissions the host sent"),
                (PROBES, s.probes, "tail loss probes the host sent"),
                ("TcpExtTCPFastRetrans", s.fast, "retransmissions on duplicate ACKs, SACK or RACK"),
            ];
            // A bottleneck between the switch and the host drops some of
            // what the trace shows reaching it (after the capture point):
            // what the host received is then only bounded, from below by
            // the trace less those drops.
            let lost = facts.bottleneck_drops.get(host).map_or(0, |&d| d as i64);
            for (name, want, how) in rows {
                let got = deltas.get(name).copied().unwrap_or(0);
                checks += 1;
                let arriving = IN.contains(&name) && lost > 0;
                let ok = if arriving {
                    (want - lost..=want).contains(&got)
                } else {
                    agrees(name, got, want)
                };
                if !ok {
                    let shows = if name == PROBES {
                        format!("at least {want}")
                    } else if arriving {
                        format!(
                            "{want}, of which its bottleneck dropped up to {lost} after the capture, so {} to {want}",
                            (want - lost).max(0)
                        )
                    } else {
                        want.to_string()
                    };
                    out.push(Finding::violation(
                        A,
                        "counter-disagrees",
                        "Lumina §6.2.4",
                        format!("{host} {name} changed by {got}, the trace shows {shows} ({how})"),
                    ));
                } else {
                    out.push(Finding::note(
                        A,
                        "counter-agrees",
                        if arriving {
                            format!("{host} {name} = {got}: the trace shows {want}, of which its bottleneck dropped {lost} after the capture")
                        } else {
                            format!("{host} {name} = {got}, as the trace shows")
                        },
                    ));
                }
            }
        }
        (checks, out)
    }
}

const PROBES: &str = "TcpExtTCPLossProbes";

/// Counters of what reaches the host.
const IN: [&str; 3] = ["TcpInSegs", "TcpInCsumErrors", "IpExtInCEPkts"];

/// A counter agrees with the trace when equal, except tail loss probes: a
/// probe sends new data when there is some (RFC 8985 §7.3), which on the
/// wire is any new segment, so the trace only proves the probes that
/// retransmitted.
fn agrees(name: &str, got: i64, want: i64) -> bool {
    if name == PROBES {
        got >= want
    } else {
        got == want
    }
}

/// What the trace shows for the host at `addr`, on switch port `port`.
/// A connection's end is the host by the port its packets came in on when
/// both are known (a NAT in the flow tables rewrites addresses, not ports),
/// else by its address.
fn seen(input: &Input, addr: IpAddr, port: Option<u32>) -> Seen {
    let mut s = Seen::default();
    for c in &input.analysis.connections {
        let is = |end: usize| match (c.ports[end], port) {
            (Some(a), Some(b)) => a == b,
            _ => [c.data_src.0, c.data_dst.0][end] == addr,
        };
        for (end, t) in c.tally.iter().enumerate() {
            if is(end) {
                s.out_segs += t.out_segs;
                s.in_segs += t.in_segs;
                s.in_csum_errors += t.in_csum_errors;
                s.in_ce += t.in_ce;
            }
        }
        if is(0) {
            for r in &c.retransmissions {
                s.retrans += 1;
                match r.reason {
                    Reason::Timeout => s.timeouts += 1,
                    Reason::Tlp => s.probes += 1,
                    Reason::DupAcks | Reason::Sack | Reason::Rack => s.fast += 1,
                    _ => {}
                }
            }
        }
    }
    // IpExtInCEPkts counts every CE-marked IP packet, RoCEv2 over UDP too.
    if let IpAddr::V4(v4) = addr {
        s.in_ce += input.roce.tally.get(&v4).map_or(0, |t| t.ce_delivered_to);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_the_trace_cannot_see_are_allowed_others_must_match() {
        assert!(agrees(PROBES, 1, 0), "a probe of new data");
        assert!(
            !agrees(PROBES, 0, 1),
            "a retransmitted probe the host did not count"
        );
        assert!(agrees("TcpRetransSegs", 2, 2));
        assert!(!agrees("TcpRetransSegs", 1, 0));
    }
}
