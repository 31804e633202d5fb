//! Flow metrics: message completion times (from the workload, when the
//! trace comes from a run), goodput, RTT samples and flight size per
//! connection.

use wirelab_spec::{AnalyzerName, Unit};

use crate::{fmt_duration, fmt_value, Analyzer, Dist, Finding, Input};

pub struct Flow;

const A: &str = "flow";

impl Analyzer for Flow {
    fn name(&self) -> AnalyzerName {
        AnalyzerName::Flow
    }

    fn about(&self) -> &'static str {
        "message completion times, goodput, RTT samples (vantage → receiver → vantage) and bytes in flight"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let mut out = Vec::new();
        for c in &input.analysis.connections {
            if let Some(mct) = input.facts.and_then(|f| f.mct_ns.get(&c.id)) {
                let s = mct.iter().map(|v| *v as f64).collect();
                out.extend(distribution(c.id, "mct", Unit::Nanos, s, |d| {
                    format!(
                        "{} messages: MCT median {}, p99 {}, max {}",
                        d.count,
                        fmt_duration(d.p50 as u64),
                        fmt_duration(d.p99 as u64),
                        fmt_duration(d.max as u64)
                    )
                }));
            }
            if let (Some(t0), Some(t1)) = (c.first_data_ts_ns, c.last_ack_ts_ns) {
                if t1 > t0 && c.bytes_acked > 0 {
                    let g = c.bytes_acked as f64 * 8e9 / (t1 - t0) as f64;
                    out.push(
                        Finding::measurement(
                            A,
                            "goodput",
                            g,
                            Unit::BitsPerSec,
                            format!(
                                "{} bytes acknowledged in {}: {}",
                                c.bytes_acked,
                                fmt_duration(t1 - t0),
                                fmt_value(g, Unit::BitsPerSec)
                            ),
                        )
                        .conn(c.id),
                    );
                }
            }
            let s = c.rtt_samples.iter().map(|x| x.1 as f64).collect();
            out.extend(distribution(c.id, "rtt", Unit::Nanos, s, |d| {
                format!(
                    "{} RTT samples (data → ACK at the vantage point, Karn's rule): min {}, median {}, p99 {}",
                    d.count,
                    fmt_duration(d.min as u64),
                    fmt_duration(d.p50 as u64),
                    fmt_duration(d.p99 as u64)
                )
            }));
            let s = c.flight.iter().map(|x| f64::from(x.1)).collect();
            out.extend(distribution(c.id, "flight", Unit::Bytes, s, |d| {
                format!(
                    "bytes in flight at each data packet (the congestion window where the sender is window-limited): median {:.0}, max {:.0}",
                    d.p50, d.max
                )
            }));
            out.push(
                Finding::measurement(
                    A,
                    "retransmissions",
                    c.retransmissions.len() as f64,
                    Unit::Count,
                    format!(
                        "{} retransmissions of {} data packets",
                        c.retransmissions.len(),
                        c.data_packets
                    ),
                )
                .conn(c.id),
            );
        }
        (0, out)
    }
}

/// A measurement over samples (none when there are none), its message made
/// from their summary.
fn distribution(
    conn: u32,
    name: &'static str,
    unit: Unit,
    samples: Vec<f64>,
    message: impl Fn(&Dist) -> String,
) -> Option<Finding> {
    Finding::summarized(A, name, unit, samples, message).map(|f| f.conn(conn))
}
