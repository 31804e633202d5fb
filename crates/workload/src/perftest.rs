//! A connection's messages reported as perftest's `ib_*_bw` and `ib_*_lat`
//! do (linux-rdma/perftest, `print_report_bw` and `print_report_lat`), so
//! figures compare with the tools RDMA users run. Bandwidth: the average
//! is every message's bytes over the time from the first post to the last
//! completion; the peak is perftest's, the best over every run of
//! consecutive messages i..=j of (completion of j − post of i) / (j − i + 1).
//! Latency: the statistics of the messages' completion times (perftest's
//! latency tests time a ping-pong; here each message is timed from its
//! post to its completion, Lumina's MCT).

use serde::Serialize;

use crate::MessageReport;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Perftest {
    /// `#bytes`: the message size.
    pub bytes: u64,
    /// `#iterations`: messages completed.
    pub iterations: usize,
    /// `BW peak[Gb/sec]`.
    pub bw_peak_gbps: f64,
    /// `BW average[Gb/sec]`.
    pub bw_average_gbps: f64,
    /// `MsgRate[Mpps]`.
    pub msg_rate_mpps: f64,
    /// `t_min`, `t_max`, `t_typical` (the median), `t_avg`, `t_stdev`,
    /// `99% percentile`, `99.9% percentile`, in µs.
    pub t_min_us: f64,
    pub t_max_us: f64,
    pub t_typical_us: f64,
    pub t_avg_us: f64,
    pub t_stdev_us: f64,
    pub t_p99_us: f64,
    pub t_p999_us: f64,
}

/// The longest run of messages the peak search looks at: perftest's
/// search is quadratic in the iterations; past this many, runs longer
/// than this are not tried (their mean cannot beat the best shorter one
/// by much, and a connection of 100,000 messages stays fast).
const PEAK_WINDOW: usize = 4096;

/// perftest's report of `messages` (sorted by number) of `size` bytes;
/// None without a completed message.
pub fn report(size: u64, messages: &[MessageReport]) -> Option<Perftest> {
    let n = messages.len();
    let first = messages.iter().map(|m| m.posted_ns).min()?;
    let last = messages.iter().map(|m| m.completed_ns).max()?;
    let span = last.saturating_sub(first).max(1) as f64;
    let mut best = f64::INFINITY;
    for i in 0..n {
        for j in i..n.min(i + PEAK_WINDOW) {
            let t = messages[j]
                .completed_ns
                .saturating_sub(messages[i].posted_ns) as f64
                / (j - i + 1) as f64;
            if t > 0.0 && t < best {
                best = t;
            }
        }
    }
    let gbps = |ns_per_msg: f64| size as f64 * 8.0 / ns_per_msg;
    let mut t: Vec<f64> = messages.iter().map(|m| m.mct_ns as f64 / 1e3).collect();
    t.sort_by(f64::total_cmp);
    let avg = t.iter().sum::<f64>() / n as f64;
    let var = t.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n as f64;
    // Percentiles by nearest rank: the ⌈q·n⌉-th smallest sample.
    let rank = |q: f64| t[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    Some(Perftest {
        bytes: size,
        iterations: n,
        bw_peak_gbps: if best.is_finite() { gbps(best) } else { 0.0 },
        bw_average_gbps: gbps(span / n as f64),
        msg_rate_mpps: n as f64 / span * 1e3,
        t_min_us: t[0],
        t_max_us: t[n - 1],
        t_typical_us: t[n / 2],
        t_avg_us: avg,
        t_stdev_us: var.sqrt(),
        t_p99_us: rank(0.99),
        t_p999_us: rank(0.999),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirelab_spec::Verb;

    fn msg(i: u32, posted: u64, completed: u64) -> MessageReport {
        MessageReport {
            message: i,
            verb: Verb::Write,
            posted_ns: posted,
            completed_ns: completed,
            mct_ns: completed - posted,
        }
    }

    #[test]
    fn bandwidth_and_latency_as_perftest_computes_them() {
        // Four 1,000-byte messages posted together at 0; completed at 10,
        // 12, 14 and 40 µs.
        let m: Vec<_> = [10_000, 12_000, 14_000, 40_000]
            .iter()
            .enumerate()
            .map(|(i, &c)| msg(i as u32 + 1, 0, c))
            .collect();
        let p = report(1000, &m).unwrap();
        // Average: 4,000 B over 40 µs = 0.8 Gb/s; 0.1 Mpps.
        assert!((p.bw_average_gbps - 0.8).abs() < 1e-9, "{p:?}");
        assert!((p.msg_rate_mpps - 0.1).abs() < 1e-9, "{p:?}");
        // Peak: messages 1..=3 in 14 µs, 4.667 µs each: 1.714 Gb/s.
        assert!(
            (p.bw_peak_gbps - 8000.0 / (14_000.0 / 3.0)).abs() < 1e-9,
            "{p:?}"
        );
        assert_eq!((p.t_min_us, p.t_max_us, p.t_typical_us), (10.0, 40.0, 14.0));
        assert!((p.t_avg_us - 19.0).abs() < 1e-9);
        assert!((p.t_stdev_us - (((81.0 + 49.0 + 25.0 + 441.0) / 4.0) as f64).sqrt()).abs() < 1e-9);
        assert_eq!((p.t_p99_us, p.t_p999_us), (40.0, 40.0));
        assert_eq!(report(1000, &[]), None);
    }
}
