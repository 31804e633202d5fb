//! The burst pattern as it arrived (Norma Fig. 11; issue 20's "burst
//! shape"): from every frame's sequence number and receive time, the gaps
//! inside bursts and the period from one burst to the next, against what
//! was asked. A burst is `n` consecutive sequence numbers (the burst unit
//! passes exactly n, §5.2), so frame k belongs to burst k / n whatever
//! arrived or not.

use serde::Serialize;

/// Distribution of a set of gaps (ns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gaps {
    pub count: usize,
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Gaps {
    fn of(mut v: Vec<u64>) -> Option<Gaps> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Some(Gaps {
            count: v.len(),
            mean: v.iter().sum::<u64>() as f64 / v.len() as f64,
            p50: q(0.5),
            p99: q(0.99),
            max: v[v.len() - 1],
        })
    }
}

/// The shape of a run's bursts at the receiver.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstShape {
    pub frames_per_burst: u32,
    /// Asked: one frame per `gap_ns` inside a burst (the peak rate), one
    /// burst per `period_ns`.
    pub requested_gap_ns: f64,
    pub requested_period_ns: f64,
    /// Between consecutive frames of one burst, both received.
    pub gaps: Option<Gaps>,
    /// From a burst's first frame to the next burst's first, both
    /// received.
    pub periods: Option<Gaps>,
    pub bursts: usize,
}

/// `frames`: (sequence number, receive time ns) of the frames that
/// arrived, in any order; bursts of `n` at `peak_pps`, averaging `pps`.
pub fn burst_shape(frames: &[(u64, u64)], n: u32, peak_pps: f64, pps: f64) -> BurstShape {
    let mut f = frames.to_vec();
    f.sort_unstable();
    f.dedup_by_key(|x| x.0);
    let n64 = u64::from(n.max(1));
    let mut gaps = Vec::new();
    let mut firsts: Vec<(u64, u64)> = Vec::new();
    for w in f.windows(2) {
        let ((s0, t0), (s1, t1)) = (w[0], w[1]);
        if s1 == s0 + 1 && s0 / n64 == s1 / n64 {
            gaps.push(t1.saturating_sub(t0));
        }
    }
    for &(s, t) in &f {
        if s % n64 == 0 {
            firsts.push((s / n64, t));
        }
    }
    let periods = firsts
        .windows(2)
        .filter(|w| w[1].0 == w[0].0 + 1)
        .map(|w| w[1].1.saturating_sub(w[0].1))
        .collect();
    BurstShape {
        frames_per_burst: n,
        requested_gap_ns: 1e9 / peak_pps,
        requested_period_ns: 1e9 * f64::from(n) / pps,
        gaps: Gaps::of(gaps),
        periods: Gaps::of(periods),
        bursts: f.last().map_or(0, |l| (l.0 / n64 + 1) as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_taken_inside_bursts_and_periods_between_their_starts() {
        // Bursts of 4 at one frame per 5 µs, one burst per 100 µs; frame
        // 6 lost.
        let mut f: Vec<(u64, u64)> = (0..12u64)
            .map(|s| (s, (s / 4) * 100_000 + (s % 4) * 5_000))
            .filter(|x| x.0 != 6)
            .collect();
        f.reverse();
        let s = burst_shape(&f, 4, 200_000.0, 40_000.0);
        let g = s.gaps.unwrap();
        // 3 gaps in bursts 0 and 2, 1 in burst 1 (5-6 and 6-7 lost).
        assert_eq!((g.count, g.p50, g.max), (7, 5_000, 5_000));
        let p = s.periods.unwrap();
        assert_eq!((p.count, p.p50), (2, 100_000));
        assert_eq!(s.requested_gap_ns, 5_000.0);
        assert_eq!(s.requested_period_ns, 100_000.0);
        assert_eq!(s.bursts, 3);
    }
}
