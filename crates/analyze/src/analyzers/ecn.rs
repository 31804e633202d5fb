//! ECN (RFC 3168 §6.1): every CE mark that reached the receiver is echoed
//! with ECE, and the sender answers the echo with CWR on its next new data.

use wirelab_spec::Unit;

use crate::{fmt_duration, Analyzer, Finding, Input};

pub struct Ecn;

const A: &str = "ecn";

impl Analyzer for Ecn {
    fn name(&self) -> &'static str {
        "ecn"
    }

    fn findings(&self) -> &'static [(&'static str, Unit)] {
        &[
            ("violations", Unit::Count),
            ("ce-not-echoed", Unit::Count),
            ("ece-without-cwr", Unit::Count),
            ("echo-latency", Unit::Nanos),
            ("cwr-latency", Unit::Nanos),
        ]
    }

    fn about(&self) -> &'static str {
        "every CE mark is echoed (ECE) and the echo answered by CWR; their latencies"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let mut out = Vec::new();
        let mut checks = 0;
        for c in &input.analysis.connections {
            for m in &c.ce_marks {
                if m.lost {
                    continue; // never reached the receiver
                }
                match (m.echo, m.echo_latency_ns) {
                    (Some(e), Some(lat)) => {
                        checks += 1;
                        out.push(
                            Finding::measurement(
                                A,
                                "echo-latency",
                                lat as f64,
                                Unit::Nanos,
                                format!(
                                    "CE mark {} (packet {}) echoed by {} after {}",
                                    m.at,
                                    m.packet,
                                    e,
                                    fmt_duration(lat)
                                ),
                            )
                            .conn(c.id)
                            .packet(m.packet)
                            .evidence([m.at, e]),
                        );
                        match (m.cwr, m.cwr_latency_ns) {
                            (Some(w), Some(cl)) => {
                                checks += 1;
                                out.push(
                                    Finding::measurement(
                                        A,
                                        "cwr-latency",
                                        cl as f64,
                                        Unit::Nanos,
                                        format!(
                                            "echo {} answered by CWR on {} after {}",
                                            e,
                                            w,
                                            fmt_duration(cl)
                                        ),
                                    )
                                    .conn(c.id)
                                    .packet(m.packet)
                                    .evidence([e, w]),
                                );
                            }
                            // Echoed inside a window already reduced: the
                            // sender answered that window once.
                            _ if m.in_reduction_of.is_some() => checks += 1,
                            _ if m.data_after_echo => {
                                checks += 1;
                                out.push(
                                    Finding::violation(
                                        A,
                                        "ece-without-cwr",
                                        "RFC 3168 §6.1.2",
                                        format!("the sender got ECE {} for CE mark {} and sent new data, but never set CWR", e, m.at),
                                    )
                                    .conn(c.id)
                                    .packet(m.packet)
                                    .evidence([m.at, e]),
                                );
                            }
                            _ => {}
                        }
                    }
                    // Judged once the receiver acknowledged the marked packet:
                    // that ACK should have carried ECE.
                    _ if m.acked_by.is_some() => {
                        checks += 1;
                        out.push(
                            Finding::violation(
                                A,
                                "ce-not-echoed",
                                "RFC 3168 §6.1.3",
                                format!(
                                    "CE mark {} (packet {}) was never echoed with ECE (acknowledged without ECE by {})",
                                    m.at,
                                    m.packet,
                                    m.acked_by.expect("matched")
                                ),
                            )
                            .conn(c.id)
                            .packet(m.packet)
                            .evidence([m.at].into_iter().chain(m.acked_by)),
                        );
                    }
                    _ => {}
                }
            }
        }
        (checks, out)
    }
}
