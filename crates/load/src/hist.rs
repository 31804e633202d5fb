//! The latency histogram's buckets, as `bpf/wl_hist.h` `hist_bucket`
//! computes them (for the load sink's latency and the eSwitch's search
//! time): values below 2^BITS nanoseconds are exact; above, each
//! octave has 2^BITS buckets (HdrHistogram's log-linear layout with two
//! significant decimal digits: every bucket under 1.6% of its value wide),
//! up to 2^40 ns. The program counts; this reads the counts.

/// Bits of sub-bucket precision (`WL_HIST_BITS`).
pub const BITS: u32 = 6;
/// The histogram's buckets (`WL_HIST_BUCKETS`).
pub const BUCKETS: usize = (1 << BITS) + (40 - BITS as usize) * (1 << BITS);

/// The bucket of `v` ns.
pub fn bucket(v: u64) -> usize {
    let sub = 1u64 << BITS;
    if v < sub {
        return v as usize;
    }
    let p = 63 - v.leading_zeros();
    if p >= 40 {
        return BUCKETS - 1;
    }
    (sub + u64::from(p - BITS) * sub + ((v >> (p - BITS)) - sub)) as usize
}

/// The lowest and highest values of bucket `b`.
pub fn range(b: usize) -> (u64, u64) {
    let sub = 1usize << BITS;
    if b < sub {
        return (b as u64, b as u64);
    }
    let octave = (b - sub) / sub;
    let m = ((b - sub) % sub + sub) as u64;
    let lo = m << octave;
    (lo, lo + (1u64 << octave) - 1)
}

/// The value at quantile `q` (0..=1) of the counts: the highest value of
/// the bucket holding the ⌈q·n⌉-th smallest (HdrHistogram's "highest
/// equivalent value"), so a percentile is never under-reported.
pub fn quantile(counts: &[u64], q: f64) -> Option<u64> {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(range(b).1);
        }
    }
    None
}

/// The value at quantile `q` (0..=1), interpolated within its bucket as
/// if the bucket's counts were spread evenly over it (Prometheus's
/// `histogram_quantile`). Unbiased where `quantile` rounds up by up to a
/// bucket's width (1.6%): for a figure a model is fitted to (the eSwitch's
/// median search time), where that rounding would be error.
pub fn interpolated(counts: &[u64], q: f64) -> Option<f64> {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * n as f64;
    let mut seen = 0u64;
    for (b, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (seen + c) as f64 >= rank {
            let (lo, hi) = range(b);
            let within = ((rank - seen as f64) / c as f64).clamp(0.0, 1.0);
            return Some(lo as f64 + within * (hi + 1 - lo) as f64);
        }
        seen += c;
    }
    None
}

/// The mean of the counts, each at its bucket's middle.
pub fn mean(counts: &[u64]) -> Option<f64> {
    let n: u64 = counts.iter().sum();
    (n > 0).then(|| {
        counts
            .iter()
            .enumerate()
            .map(|(b, &c)| {
                let (lo, hi) = range(b);
                c as f64 * (lo as f64 + hi as f64) / 2.0
            })
            .sum::<f64>()
            / n as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_once_and_are_narrow() {
        let mut prev_hi = None;
        for b in 0..BUCKETS {
            let (lo, hi) = range(b);
            assert!(lo <= hi);
            if let Some(p) = prev_hi {
                assert_eq!(lo, p + 1, "bucket {b} does not follow on");
            }
            assert_eq!(bucket(lo), b);
            assert_eq!(bucket(hi), b);
            if lo >= 64 {
                assert!(((hi - lo + 1) as f64) / (lo as f64) < 0.016, "bucket {b}");
            }
            prev_hi = Some(hi);
        }
        assert_eq!(range(BUCKETS - 1).1, (1u64 << 40) - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_known_counts() {
        let mut h = vec![0u64; BUCKETS];
        for v in 1..=1000u64 {
            h[bucket(v * 1000)] += 1;
        }
        // p50 is 500 µs, reported as its bucket's top (within 1.6%).
        let p50 = quantile(&h, 0.5).unwrap();
        assert!((500_000..=508_000).contains(&p50), "{p50}");
        let p999 = quantile(&h, 0.999).unwrap();
        assert!((999_000..=1_015_000).contains(&p999), "{p999}");
        assert_eq!(quantile(&h, 1.0), Some(range(bucket(1_000_000)).1));
        assert_eq!(quantile(&vec![0; BUCKETS], 0.5), None);
        // Interpolated: within a bucket's width of the true values, and
        // with evenly spread values much closer than `quantile`'s top.
        let i50 = interpolated(&h, 0.5).unwrap();
        assert!((i50 - 500_000.0).abs() < 4_000.0, "{i50}");
        let mut even = vec![0u64; BUCKETS];
        for v in 10_000..=11_000u64 {
            even[bucket(v)] += 1;
        }
        let i = interpolated(&even, 0.5).unwrap();
        assert!((i - 10_500.0).abs() < 10.0, "{i}");
        assert!(quantile(&even, 0.5).unwrap() as f64 - 10_500.0 > 10.0);
        let mut one = vec![0u64; BUCKETS];
        one[bucket(40)] = 3;
        assert_eq!(interpolated(&one, 0.5), Some(40.5));
        assert_eq!(interpolated(&vec![0; BUCKETS], 0.5), None);
        let m = mean(&h).unwrap();
        assert!((m - 500_500.0).abs() / 500_500.0 < 0.01, "{m}");
    }
}
