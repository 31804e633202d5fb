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
    /// Resent in the recovery after a timeout (`Reason::AfterTimeout`).
    after_timeout: i64,
    /// Tail loss probes that came as late as a timeout could have.
    late_probes: i64,
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
            let s = seen(
                input,
                addr,
                facts.ports.get(host).copied(),
                input.opts.min_rto_ns,
            );
            let delta = |name: &str| deltas.get(name).copied().unwrap_or(0);
            // A bottleneck between the switch and the host drops some of
            // what the trace shows reaching it (after the capture point):
            // what the host received is then only bounded, from below by
            // the trace less those drops.
            let lost = facts.bottleneck_drops.get(host).map_or(0, |&d| d as i64);
            let arriving = |want: i64| {
                if lost > 0 {
                    Want::Arriving { want, lost }
                } else {
                    Want::Exactly(want)
                }
            };
            // A probe that came a minimum RTO or more after what it
            // repeats may have been the timer's retransmission: the wire
            // cannot tell them apart (the model calls it a probe, as a
            // sender with TLP sends one), the kernel counts either.
            let (timeouts, probes) = if s.late_probes > 0 {
                (
                    Want::Range(s.timeouts, s.timeouts + s.late_probes, format!(", and up to {} of its tail loss probes, which came as late as a timeout could", s.late_probes)),
                    Want::AtLeast(s.probes - s.late_probes),
                )
            } else {
                (Want::Exactly(s.timeouts), Want::AtLeast(s.probes))
            };
            // Linux counts a retransmission from its retransmit queue as
            // fast unless the socket is in Loss, the state a timeout
            // enters, and as slow-start otherwise (tcp_xmit_retransmit_queue).
            // Loss can end before the wire shows the timeout's recovery
            // done: F-RTO finds the timeout spurious and undoes it (RFC
            // 5682; tcp_try_undo_loss), and what the recovery resends after
            // that counts as fast. So after a timeout only the two together
            // are the trace's (in a congested run: 390 fast and 91
            // slow-start against 375 and 106 on the wire, 481 both ways).
            let fast = if s.timeouts + s.late_probes == 0 {
                (
                    "TcpExtTCPFastRetrans",
                    delta("TcpExtTCPFastRetrans"),
                    Want::Exactly(s.fast),
                    "retransmissions on duplicate ACKs, SACK or RACK",
                )
            } else {
                (
                    "TcpExtTCPFastRetrans + TcpExtTCPSlowStartRetrans",
                    delta("TcpExtTCPFastRetrans") + delta("TcpExtTCPSlowStartRetrans"),
                    Want::Exactly(s.fast + s.after_timeout),
                    "retransmissions in a recovery, on duplicate ACKs, SACK or RACK or after a timeout: the kernel splits them by its Loss state, which F-RTO may end early (RFC 5682)",
                )
            };
            // (counter, its change, what the trace shows, how)
            let rows: [(&str, i64, Want, &str); 8] = [
                ("TcpOutSegs", delta("TcpOutSegs"), Want::Exactly(s.out_segs), "TCP packets the host sent, retransmissions excluded (RFC 1213 tcpOutSegs)"),
                ("TcpInSegs", delta("TcpInSegs"), arriving(s.in_segs), "TCP packets delivered to the host (the switch's drops excluded; corrupted ones count, RFC 1213 tcpInSegs includes errors)"),
                ("TcpInCsumErrors", delta("TcpInCsumErrors"), arriving(s.in_csum_errors), "packets the switch corrupted on the way to the host"),
                ("IpExtInCEPkts", delta("IpExtInCEPkts"), arriving(s.in_ce), "CE-marked packets delivered to the host"),
                ("TcpRetransSegs", delta("TcpRetransSegs"), Want::Exactly(s.retrans), "retransmissions the host sent"),
                ("TcpExtTCPTimeouts", delta("TcpExtTCPTimeouts"), timeouts, "timeout retransmissions the host sent"),
                // A probe sends new data when there is some (RFC 8985
                // §7.3), which on the wire is any new segment, so the
                // trace only proves the probes that retransmitted.
                (PROBES, delta(PROBES), probes, "tail loss probes the host sent"),
                fast,
            ];
            for (name, got, want, how) in rows {
                checks += 1;
                if want.holds(got) {
                    out.push(Finding::note(
                        A,
                        "counter-agrees",
                        match want {
                            Want::Exactly(_) | Want::AtLeast(_) => {
                                format!("{host} {name} = {got}, as the trace shows")
                            }
                            Want::Arriving { want, lost } => format!(
                                "{host} {name} = {got}: the trace shows {want}, of which its bottleneck dropped {lost} after the capture"
                            ),
                            Want::Range(..) => {
                                format!("{host} {name} = {got}: the trace shows {want}")
                            }
                        },
                    ));
                } else {
                    out.push(Finding::violation(
                        A,
                        "counter-disagrees",
                        "Lumina §6.2.4",
                        format!("{host} {name} changed by {got}, the trace shows {want} ({how})"),
                    ));
                }
            }
        }
        (checks, out)
    }
}

const PROBES: &str = "TcpExtTCPLossProbes";

/// What the trace proves of a counter's change.
enum Want {
    Exactly(i64),
    AtLeast(i64),
    /// What reached the host: `want` less up to the `lost` its bottleneck
    /// dropped after the capture point.
    Arriving {
        want: i64,
        lost: i64,
    },
    /// From, to, and why a range.
    Range(i64, i64, String),
}

impl Want {
    fn holds(&self, got: i64) -> bool {
        match self {
            Want::Exactly(w) => got == *w,
            Want::AtLeast(w) => got >= *w,
            Want::Arriving { want, lost } => (want - lost..=*want).contains(&got),
            Want::Range(lo, hi, _) => (*lo..=*hi).contains(&got),
        }
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Exactly(w) => write!(f, "{w}"),
            Want::AtLeast(w) => write!(f, "at least {w}"),
            Want::Arriving { want, lost } => write!(
                f,
                "{want}, of which its bottleneck dropped up to {lost} after the capture, so {} to {want}",
                (want - lost).max(0)
            ),
            Want::Range(lo, hi, why) => write!(f, "{} to {hi}{why}", (*lo).max(0)),
        }
    }
}

/// What the trace shows for the host at `addr`, on switch port `port`.
/// A connection's end is the host by the port its packets came in on when
/// both are known (a NAT in the flow tables rewrites addresses, not ports),
/// else by its address.
fn seen(input: &Input, addr: IpAddr, port: Option<u32>, min_rto_ns: u64) -> Seen {
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
                    Reason::Tlp => {
                        s.probes += 1;
                        // The model's own timeout rule (1% for clock skew).
                        if r.since_loss_ns >= min_rto_ns - min_rto_ns / 100 {
                            s.late_probes += 1;
                        }
                    }
                    Reason::DupAcks | Reason::Sack | Reason::Rack => s.fast += 1,
                    Reason::AfterTimeout => s.after_timeout += 1,
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
        assert!(Want::AtLeast(0).holds(1), "a probe of new data");
        assert!(
            !Want::AtLeast(1).holds(0),
            "a retransmitted probe the host did not count"
        );
        assert!(Want::Exactly(2).holds(2));
        assert!(!Want::Exactly(0).holds(1));
        let r = Want::Range(26, 27, ", and up to 1 late probe".into());
        assert!(r.holds(26) && r.holds(27) && !r.holds(25) && !r.holds(28));
        assert_eq!(r.to_string(), "26 to 27, and up to 1 late probe");
        assert_eq!(Want::Range(-3, 2, String::new()).to_string(), "0 to 2");
    }
}
