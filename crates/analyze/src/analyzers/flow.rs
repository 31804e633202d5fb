//! Flow metrics: message completion times (from the workload, when the
//! trace comes from a run), goodput, RTT samples and flight size per
//! connection.

use wirelab_spec::{AnalyzerName, Unit};

use crate::{fmt_duration, fmt_value, Analyzer, Finding, Input};

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
                if !mct.is_empty() {
                    let s: Vec<f64> = mct.iter().map(|v| *v as f64).collect();
                    let f = Finding::measurement(A, "mct", 0.0, Unit::Nanos, String::new())
                        .conn(c.id)
                        .samples(s);
                    let d = f.distribution.expect("samples");
                    out.push(Finding {
                        message: format!(
                            "{} messages: MCT median {}, p99 {}, max {}",
                            d.count,
                            fmt_duration(d.p50 as u64),
                            fmt_duration(d.p99 as u64),
                            fmt_duration(d.max as u64)
                        ),
                        ..f
                    });
                }
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
            if !c.rtt_samples.is_empty() {
                let s: Vec<f64> = c.rtt_samples.iter().map(|x| x.1 as f64).collect();
                let f = Finding::measurement(A, "rtt", 0.0, Unit::Nanos, String::new())
                    .conn(c.id)
                    .samples(s);
                let d = f.distribution.expect("samples");
                out.push(Finding {
                    message: format!(
                        "{} RTT samples (data → ACK at the vantage point, Karn's rule): min {}, median {}, p99 {}",
                        d.count,
                        fmt_duration(d.min as u64),
                        fmt_duration(d.p50 as u64),
                        fmt_duration(d.p99 as u64)
                    ),
                    ..f
                });
            }
            if !c.flight.is_empty() {
                let s: Vec<f64> = c.flight.iter().map(|x| f64::from(x.1)).collect();
                let f = Finding::measurement(A, "flight", 0.0, Unit::Bytes, String::new())
                    .conn(c.id)
                    .samples(s);
                let d = f.distribution.expect("samples");
                out.push(Finding {
                    message: format!(
                        "bytes in flight at each data packet (the congestion window where the sender is window-limited): median {:.0}, max {:.0}",
                        d.p50, d.max
                    ),
                    ..f
                });
            }
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
