//! DETER Algorithm 1 (seed 004 §3.3): rate-based sampling of a flow's send
//! times, so that every unsampled packet's time, inferred from the sample
//! before it and a recorded rate, is within `th` of when it was sent.
//!
//! The paper keeps a range of packet rates; this keeps the same range as
//! its inverse, a gap (time per packet) in fixed point, `1/GAP_ONE` ns,
//! with integer arithmetic only, so that the tc recorder can run the very
//! same rule in eBPF (no floating point there) and this module decodes
//! what it wrote. Rounding is done so that the bound holds exactly in
//! integers: a gap g is in packet p's range iff
//! `s.time + floor(k·g / GAP_ONE)` is within `th` of `p.time`, k packets
//! after the sample s.

use serde::{Deserialize, Serialize};

/// Fixed point of a gap: 1/1024 ns per packet. A gap then errs by under
/// 1 ns over a million packets.
pub const GAP_ONE: u64 = 1024;

/// DETER's default bound on an inferred send time's error (§3.3).
pub const DEFAULT_TH_NS: u64 = 5_000;

/// One recorded sample: a packet's index and send time, and the gap that
/// infers the packets after it, up to the next sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub index: u64,
    pub time_ns: u64,
    /// ns per packet × `GAP_ONE`.
    pub gap: u64,
}

impl Sample {
    /// The send time this sample puts packet `index` at: its time plus its
    /// gap per packet since. Wrapping, so that any fields (a record being
    /// decoded, `record::sample_deltas`) give a time, and the same one
    /// both ways.
    pub fn at(&self, index: u64) -> u64 {
        let k = u128::from(index.wrapping_sub(self.index));
        self.time_ns
            .wrapping_add((k * u128::from(self.gap) / u128::from(GAP_ONE)) as u64)
    }
}

/// The grid a sample's time is recorded on: 2^shift ns, the largest
/// power of two up to `th` and at most 1024 ns (0 for th = 0: exact).
/// A sample's own time is then off by at most half the grid, under th,
/// and Algorithm 1 runs from the time as recorded, so every packet after
/// it is within th of the recorded line exactly as before; but the time
/// costs 10 bits less in the record (its delta from the prediction was
/// most of a sample's bytes with the gap, on veth). The tc recorder
/// rounds the same way (`sample_shift` in its rodata).
pub fn grid_shift(th_ns: u64) -> u32 {
    th_ns.checked_ilog2().unwrap_or(0).min(10)
}

/// `t` rounded to the nearest point of the grid 2^shift.
pub fn on_grid(t: u64, shift: u32) -> u64 {
    let half = (1u64 << shift) >> 1;
    (t.saturating_add(half) >> shift) << shift
}

/// Algorithm 1's state for one flow.
#[derive(Debug, Clone)]
pub struct Sampler {
    th: u64,
    shift: u32,
    /// The last sampled packet s: (index, time).
    s: Option<(u64, u64)>,
    /// `rec_range`, as gaps: [lo, hi]; hi = u64::MAX is +infinity.
    lo: u64,
    hi: u64,
    /// The last packet seen (the range covers up to it).
    last: u64,
    /// The gap of the last sample recorded.
    prev: Option<u64>,
}

impl Sampler {
    pub fn new(th_ns: u64) -> Sampler {
        Sampler {
            th: th_ns,
            shift: grid_shift(th_ns),
            s: None,
            lo: 0,
            hi: u64::MAX,
            last: 0,
            prev: None,
        }
    }

    /// Packet `index` (its position in the flow, increasing) sent at
    /// `time_ns`: Some(sample) when the packet cannot be inferred from the
    /// current one, which is then recorded and `p` becomes the sample
    /// (Algorithm 1 lines 5-7).
    pub fn sample(&mut self, index: u64, time_ns: u64) -> Option<Sample> {
        let Some((si, st)) = self.s else {
            self.start(index, time_ns);
            return None;
        };
        let k = u128::from(index.saturating_sub(si).max(1));
        // Line 2: p_range, as gaps g >= 0 with
        // p.time - th <= s.time + k·g/GAP_ONE <= p.time + th. A packet
        // stamped more than th before s (clocks of two CPUs) has none.
        let fits = (time_ns + self.th).checked_sub(st).map(|hi_ns| {
            let lo_ns = time_ns.saturating_sub(st + self.th);
            let p_lo = clamp((u128::from(lo_ns) * u128::from(GAP_ONE)).div_ceil(k));
            let p_hi = clamp(u128::from(hi_ns) * u128::from(GAP_ONE) / k);
            (self.lo.max(p_lo), self.hi.min(p_hi))
        });
        if let Some((lo, hi)) = fits.filter(|(lo, hi)| lo <= hi) {
            // Line 4: narrow rec_range.
            self.lo = lo;
            self.hi = hi;
            self.last = index;
            return None;
        }
        let out = self.current();
        self.prev = Some(out.gap);
        self.start(index, time_ns);
        Some(out)
    }

    /// The last sample, once the flow ended (None if it sent nothing).
    pub fn finish(self) -> Option<Sample> {
        self.s.map(|_| self.current())
    }

    /// `p` becomes s, at its time on the grid (`grid_shift`).
    fn start(&mut self, index: u64, time_ns: u64) {
        self.s = Some((index, on_grid(time_ns, self.shift)));
        self.lo = 0;
        self.hi = u64::MAX;
        self.last = index;
    }

    fn current(&self) -> Sample {
        let (index, time_ns) = self.s.expect("a sample");
        recorded(index, time_ns, self.lo, self.hi, self.prev)
    }
}

/// Line 6: record (s.index, s.time, a gap of rec_range), rec_range = [lo,
/// hi] as gaps (hi = u64::MAX: unbounded, nothing followed s). Every gap
/// in the range infers each packet after s within th (the range is exact
/// in integers), so the one recorded is the one that costs the fewest
/// bits as a change from the previous sample's gap `prev` (0 for the
/// first): `prev` itself when it still fits, else the value whose
/// difference from it has the most trailing zeros (`record::sample_deltas`
/// stores the difference without them). The paper takes any rate in the
/// range; on veth, where a flow is sampled about every fifth packet and
/// each range is wide, the gap in full precision was a third of a
/// sample's bytes. The tc recorder's last state per connection is
/// finished with this too.
pub fn recorded(index: u64, time_ns: u64, lo: u64, hi: u64, prev: Option<u64>) -> Sample {
    let base = prev.unwrap_or(0);
    // Unbounded: any gap from lo up infers nothing wrong (no packet
    // followed); a bounded stand-in keeps the choice near lo.
    let hi = if hi == u64::MAX {
        lo.max(base).max(lo.saturating_mul(2))
    } else {
        hi.max(lo)
    };
    Sample {
        index,
        time_ns,
        gap: simplest(lo, hi, base),
    }
}

/// The value in [lo, hi] whose difference from `base` has the most
/// trailing zeros (the nearest to `base` of those): `base` itself when it
/// is in the range.
fn simplest(lo: u64, hi: u64, base: u64) -> u64 {
    if (lo..=hi).contains(&base) {
        return base;
    }
    // The range as distances from base on one side of it, 0 < a <= b.
    let (a, b) = if lo > base {
        (lo - base, hi - base)
    } else {
        (base - hi, base - lo)
    };
    // All of (a - 1, b] shares the bits above the highest one where a - 1
    // and b differ; at that bit, k, b has a 1. So b with the bits below k
    // cleared is in the range, and is the only value there with k or more
    // trailing zeros.
    let k = 63 - ((a - 1) ^ b).leading_zeros();
    let d = (b >> k) << k;
    if lo > base {
        base + d
    } else {
        base - d
    }
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The send time of packet `index`, inferred from `samples` (in index
/// order, as a `Sampler` recorded them); None before the first sample.
pub fn infer(samples: &[Sample], index: u64) -> Option<u64> {
    let at = samples.partition_point(|s| s.index <= index);
    Some(samples.get(at.checked_sub(1)?)?.at(index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn run(th: u64, times: &[u64]) -> Vec<Sample> {
        let mut s = Sampler::new(th);
        let mut out: Vec<Sample> = times
            .iter()
            .enumerate()
            .filter_map(|(i, &t)| s.sample(i as u64, t))
            .collect();
        out.extend(s.finish());
        out
    }

    /// A constant rate is one sample, whatever its length.
    #[test]
    fn a_constant_rate_is_one_sample() {
        let times: Vec<u64> = (0..10_000).map(|i| 1_000 + i * 1_200).collect();
        let s = run(5_000, &times);
        assert_eq!(s.len(), 1, "{s:?}");
        // 1,000 ns on the 1,024 ns grid.
        assert_eq!((s[0].index, s[0].time_ns), (0, 1_024));
        // 1200 ns per packet within th over 9,999 packets: 1200 ± 0.5.
        assert!(s[0].gap.abs_diff(1_200 * GAP_ONE) <= GAP_ONE / 2, "{s:?}");
    }

    #[test]
    fn a_sample_time_is_on_the_grid_its_th_allows() {
        assert_eq!(grid_shift(0), 0);
        assert_eq!(grid_shift(1), 0);
        assert_eq!(grid_shift(100), 6);
        assert_eq!(grid_shift(5_000), 10);
        assert_eq!(on_grid(511, 10), 0);
        assert_eq!(on_grid(512, 10), 1_024);
        assert_eq!(on_grid(50_000, 10), 50_176);
        assert_eq!(on_grid(7, 0), 7);
    }

    /// Hand-computed: with th = 5 µs, packets at 0, 10, 20 µs give packet
    /// 2's range of gaps [7.5, 12.5] µs (k = 2, dt = 20 ± 5), inside packet
    /// 1's [5, 15]; the 4th at 50 µs asks for [15, 18.33] µs (k = 3), which
    /// does not meet it: sample. The gap recorded for the first is the
    /// range's value with the most trailing zeros in 1/1024 ns, 2^23, i.e.
    /// 8,192 ns. The second sample's time, 50 µs, is recorded on the
    /// 1,024 ns grid: 50,176 ns. From it 60 and 70 µs need [4.824, 14.824]
    /// and [7.412, 12.412] µs, which hold 8,192 ns: the same gap again.
    #[test]
    fn a_rate_change_is_sampled_where_hand_computation_says() {
        let us = 1_000;
        let s = run(5 * us, &[0, 10 * us, 20 * us, 50 * us, 60 * us, 70 * us]);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!((s[0].index, s[0].time_ns), (0, 0));
        assert_eq!(s[0].gap, 1 << 23);
        assert_eq!((s[1].index, s[1].time_ns), (3, 50_176));
        assert_eq!(s[1].gap, 1 << 23);
        assert_eq!(infer(&s, 1), Some(8_192));
        assert_eq!(infer(&s, 2), Some(16_384));
        assert_eq!(infer(&s, 5), Some(50_176 + 2 * 8_192));
    }

    /// A sample whose range still holds the gap before it records that gap
    /// again (a zero delta in the record); one whose range does not, the
    /// value whose difference from it has the most trailing zeros; the
    /// first, from 0.
    #[test]
    fn each_sample_records_the_gap_its_range_allows_in_the_fewest_bits() {
        assert_eq!(recorded(0, 0, 100, 300, None).gap, 256);
        assert_eq!(recorded(0, 0, 100, u64::MAX, None).gap, 128);
        assert_eq!(recorded(0, 0, 100, 300, Some(250)).gap, 250);
        // 50 + 128: the range is 50..=250 above it.
        assert_eq!(recorded(0, 0, 100, 300, Some(50)).gap, 178);
        // 900 - 768: the range is -800..=-600 from it.
        assert_eq!(recorded(0, 0, 100, 300, Some(900)).gap, 132);
        assert_eq!(recorded(0, 0, 100, u64::MAX, Some(900)).gap, 900);
        assert_eq!(recorded(0, 0, 7, 7, Some(900)).gap, 7);
        assert_eq!(recorded(0, 0, 0, 0, None).gap, 0);
        // 1 µs per packet, then a 50 µs stall, then 1 µs per packet again
        // (th 5 µs): two samples, the second with the first's gap.
        let us = 1_000;
        let times: Vec<u64> = (0..100)
            .map(|i| i * us + if i >= 50 { 50 * us } else { 0 })
            .collect();
        let s = run(5 * us, &times);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[1].index, 50);
        assert_eq!(s[1].gap, s[0].gap);
        for (i, &t) in times.iter().enumerate() {
            assert!(infer(&s, i as u64).unwrap().abs_diff(t) <= 5 * us);
        }
    }

    /// The bound (§3.3): every inferred time within th of the true one, on
    /// random send-time series (bursts, idle gaps, rate changes, equal
    /// times), for several th; and sampling is sparse on smooth series.
    #[test]
    fn every_inferred_time_is_within_th_on_random_series() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for round in 0..200 {
            let th = [0, 1, 100, 1_000, 5_000, 50_000][round % 6];
            let n = rng.gen_range(1..3_000);
            let mut t = rng.gen_range(0..1_000_000_000u64);
            let mut gap = rng.gen_range(0..20_000u64);
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                if rng.gen_bool(0.01) {
                    gap = rng.gen_range(0..20_000);
                }
                let jitter = rng.gen_range(0..=gap / 4 + 1);
                t += gap + jitter + if rng.gen_bool(0.002) { 5_000_000 } else { 0 };
                times.push(t);
            }
            let s = run(th, &times);
            assert_eq!(s[0].index, 0);
            for (i, &real) in times.iter().enumerate() {
                let got = infer(&s, i as u64).unwrap();
                assert!(
                    got.abs_diff(real) <= th,
                    "round {round} th {th}: packet {i} inferred {got}, sent {real}"
                );
            }
            for w in s.windows(2) {
                assert!(w[0].index < w[1].index);
            }
        }
    }

    /// `simplest` against a search of every value, on random ranges.
    #[test]
    fn the_gap_chosen_is_the_one_with_the_most_trailing_zeros() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..20_000 {
            let base = rng.gen_range(0..2_000u64);
            let lo = rng.gen_range(0..2_000u64);
            let hi = lo + rng.gen_range(0..300u64);
            let got = simplest(lo, hi, base);
            assert!((lo..=hi).contains(&got) || got == base);
            let zeros = |v: u64| v.abs_diff(base).trailing_zeros();
            let best = (lo..=hi).map(zeros).max().unwrap();
            assert_eq!(zeros(got), best, "[{lo}, {hi}] from {base}: {got}");
        }
        assert_eq!(simplest(1, u64::MAX, 0), 1 << 63);
        // MAX - 3 = ...11100 below it.
        assert_eq!(simplest(0, 5, u64::MAX), 3);
    }

    #[test]
    fn nothing_sent_is_no_sample() {
        assert_eq!(Sampler::new(5_000).finish(), None);
        assert_eq!(infer(&[], 3), None);
    }
}
