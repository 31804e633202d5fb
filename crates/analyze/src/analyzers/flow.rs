//! Flow metrics: message completion times (from the workload, when the
//! trace comes from a run), goodput, RTT samples and flight size per
//! connection.

use wirelab_spec::Unit;

use crate::{fmt_duration, fmt_value, Analyzer, Dist, Finding, Input};

pub struct Flow;

const A: &str = "flow";

impl Analyzer for Flow {
    fn name(&self) -> &'static str {
        "flow"
    }

    fn findings(&self) -> &'static [(&'static str, Unit)] {
        &[
            ("mct", Unit::Nanos),
            ("goodput", Unit::BitsPerSec),
            ("fairness", Unit::Count),
            ("rtt", Unit::Nanos),
            ("flight", Unit::Bytes),
            ("retransmissions", Unit::Count),
        ]
    }

    fn about(&self) -> &'static str {
        "message completion times, goodput, RTT samples (vantage → receiver → vantage) and bytes in flight"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let mut out = Vec::new();
        let timeline = Timeline::of(input);
        for c in &input.analysis.connections {
            if let Some(mct) = input.facts.and_then(|f| f.mct_ns.get(&c.id)) {
                out.extend(mct_finding(c.id, mct));
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
                        .conn(c.id)
                        .series(format!("conn {}", c.id), timeline.goodput(c.id)),
                    );
                }
            }
            out.extend(sampled(c.id, "rtt", Unit::Nanos, &c.rtt, |d| {
                format!(
                    "{} RTT samples (data → ACK at the vantage point, Karn's rule): min {}, median {}, p99 {}",
                    d.count,
                    fmt_duration(d.min as u64),
                    fmt_duration(d.p50 as u64),
                    fmt_duration(d.p99 as u64)
                )
            }));
            out.extend(sampled(c.id, "flight", Unit::Bytes, &c.flight, |d| {
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
        // Connections the TCP model does not see (RoCE QPs) have their
        // completion times too, so `expect: flow.mct` works on them.
        if let Some(f) = input.facts {
            for (id, mct) in &f.mct_ns {
                if !input.analysis.connections.iter().any(|c| c.id == *id) {
                    out.extend(mct_finding(*id, mct));
                }
            }
        }
        out.extend(timeline.fairness());
        (0, out)
    }
}

/// Data that reached the receiver, per connection, in time bins at the
/// vantage point: goodput over time, and the fairness between the
/// connections sending at the same time (DCTCP's convergence test,
/// Alizadeh et al. §4.1; NetBump Fig. 15).
struct Timeline {
    /// The trace's first packet: the plots' zero.
    t0: u64,
    start: u64,
    bin: u64,
    /// (connection, first and last data packet, bytes per bin).
    conns: Vec<(u32, u64, u64, Vec<u64>)>,
}

/// Bins over the data-carrying span of the trace.
const BINS: u64 = 100;

impl Timeline {
    fn of(input: &Input) -> Timeline {
        let t0 = input.analysis.first_ts_ns.unwrap_or(0);
        // Captures are not always in time order (merged files, a clock
        // step, several CPUs writing one file), so the span is the least
        // and greatest time, not the first and last packet's.
        let per: Vec<(u32, &crate::model::Bins, (u64, u64))> = input
            .analysis
            .connections
            .iter()
            .filter_map(|c| Some((c.id, &c.delivered, c.delivered.span()?)))
            .collect();
        let start = per.iter().map(|p| p.2 .0).min().unwrap_or(0);
        let end = per.iter().map(|p| p.2 .1).max().unwrap_or(0);
        // At least 1 ms: finer bins show packet trains, not rates.
        let bin = ((end - start) / BINS).max(1_000_000);
        let n = ((end - start) / bin + 1) as usize;
        let conns = per
            .into_iter()
            .map(|(id, d, (first, last))| {
                let mut bytes = vec![0u64; n];
                // A connection's own bins (when it is long) start at its
                // first delivery, which is at or after `start`.
                for (ts, len) in d.points() {
                    bytes[(ts.saturating_sub(start) / bin) as usize] += len;
                }
                (id, first, last, bytes)
            })
            .collect();
        Timeline {
            t0,
            start,
            bin,
            conns,
        }
    }

    fn mid(&self, b: usize) -> f64 {
        (self.start + b as u64 * self.bin + self.bin / 2).saturating_sub(self.t0) as f64 / 1e9
    }

    /// Goodput of `conn` in each bin of its data span, bits per second.
    fn goodput(&self, conn: u32) -> Vec<(f64, f64)> {
        let Some((_, first, last, bytes)) = self.conns.iter().find(|c| c.0 == conn) else {
            return Vec::new();
        };
        let (b0, b1) = (
            ((first - self.start) / self.bin) as usize,
            ((last - self.start) / self.bin) as usize,
        );
        (b0..=b1)
            .map(|b| (self.mid(b), bytes[b] as f64 * 8e9 / self.bin as f64))
            .collect()
    }

    /// Jain's index (Σx)² / (n Σx²) over the connections that sent for the
    /// whole of a bin, in every bin where two or more did.
    fn fairness(&self) -> Option<Finding> {
        let mut points = Vec::new();
        let n = self.conns.first().map_or(0, |c| c.3.len());
        for b in 0..n {
            let (lo, hi) = (
                self.start + b as u64 * self.bin,
                self.start + (b as u64 + 1) * self.bin,
            );
            let x: Vec<f64> = self
                .conns
                .iter()
                .filter(|c| c.1 <= lo && c.2 >= hi)
                .map(|c| c.3[b] as f64)
                .collect();
            let sum: f64 = x.iter().sum();
            let sq: f64 = x.iter().map(|v| v * v).sum();
            if x.len() >= 2 && sq > 0.0 {
                points.push((self.mid(b), sum * sum / (x.len() as f64 * sq)));
            }
        }
        let bin = self.bin;
        Finding::summarized(
            A,
            "fairness",
            Unit::Count,
            points.iter().map(|p| p.1).collect(),
            |d| {
                format!(
                    "Jain's fairness index of the goodput of the connections sending together, \
                     over {} bins of {}: median {:.3}, min {:.3} (1 = equal shares)",
                    d.count,
                    fmt_duration(bin),
                    d.p50,
                    d.min
                )
            },
        )
        .map(|f| f.series("Jain's index", points))
    }
}

/// A measurement over a model's sample of a quantity (`Sample`): count,
/// extremes and mean exact, percentiles from the sample.
fn sampled(
    conn: u32,
    name: &'static str,
    unit: Unit,
    s: &crate::model::Sample,
    message: impl Fn(&Dist) -> String,
) -> Option<Finding> {
    let d = s.dist()?;
    let mut f = distribution(conn, name, unit, s.values(), |_| String::new())?;
    f.message = message(&d);
    f.value = Some(d.p50);
    f.distribution = Some(d);
    Some(f)
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

/// Connection `conn`'s message completion times, as one finding.
fn mct_finding(conn: u32, mct: &[u64]) -> Option<Finding> {
    let s = mct.iter().map(|v| *v as f64).collect();
    distribution(conn, "mct", Unit::Nanos, s, |d| {
        format!(
            "{} messages: MCT median {}, p99 {}, max {}",
            d.count,
            fmt_duration(d.p50 as u64),
            fmt_duration(d.p99 as u64),
            fmt_duration(d.max as u64)
        )
    })
}
