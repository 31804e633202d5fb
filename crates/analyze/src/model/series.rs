//! What the model keeps of per-packet quantities, in bounded memory: a
//! connection of any length keeps at most a few tens of thousands of
//! values of each, exactly while it has fewer.

/// Values held before thinning starts (per connection and quantity).
pub const CAP: usize = 1 << 15;

/// Every k-th value of a stream, k doubling each time `cap` are held: an
/// evenly spread, deterministic sample of a stream of any length. Exact
/// (every value) while the stream is shorter than `cap`.
#[derive(Debug, Clone)]
pub struct Thin<T> {
    cap: usize,
    stride: u64,
    seen: u64,
    kept: Vec<T>,
}

impl<T> Default for Thin<T> {
    fn default() -> Self {
        Thin::new(CAP)
    }
}

impl<T> Thin<T> {
    pub fn new(cap: usize) -> Self {
        Thin {
            cap: cap.max(2),
            stride: 1,
            seen: 0,
            kept: Vec::new(),
        }
    }

    pub fn push(&mut self, v: T) {
        let n = self.seen;
        self.seen += 1;
        // The stride is a power of two: a mask, not a division, on a path
        // every packet takes.
        if n & (self.stride - 1) != 0 {
            return;
        }
        if self.kept.len() == self.cap {
            // Kept values are the multiples of the stride: keeping every
            // other one leaves the multiples of twice it.
            let mut i = 0;
            self.kept.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
            if n & (self.stride - 1) != 0 {
                return;
            }
        }
        self.kept.push(v);
    }

    /// Values pushed.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The values kept, in push order.
    pub fn kept(&self) -> &[T] {
        &self.kept
    }

    /// Some values were left out.
    pub fn thinned(&self) -> bool {
        self.stride > 1
    }
}

/// Samples of a quantity: an even sample of the values (`Thin`) with the
/// count, extremes and mean exact.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    values: Thin<u64>,
    min: u64,
    max: u64,
    sum: u128,
}

impl Sample {
    pub fn push(&mut self, v: u64) {
        if self.values.seen == 0 {
            (self.min, self.max) = (v, v);
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
        self.values.push(v);
    }

    pub fn count(&self) -> u64 {
        self.values.seen
    }

    pub fn max(&self) -> Option<u64> {
        (self.count() > 0).then_some(self.max)
    }

    /// The values for a distribution: every one while there are fewer than
    /// `CAP`, else the even sample with the true extremes added (so a
    /// bound on every value is judged on the true ones).
    pub fn values(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.values.kept().iter().map(|&x| x as f64).collect();
        if self.values.thinned() {
            v.push(self.min as f64);
            v.push(self.max as f64);
        }
        v
    }

    /// The distribution: percentiles from the sample, count, extremes and
    /// mean exact.
    pub fn dist(&self) -> Option<crate::Dist> {
        let mut d = crate::Dist::of(&self.values())?;
        d.count = self.count();
        d.min = self.min as f64;
        d.max = self.max as f64;
        d.mean = self.sum as f64 / self.count() as f64;
        Some(d)
    }
}

/// A quantity summed over time (bytes delivered): every (time, value)
/// while there are fewer than `CAP`, then sums in bins of a width that
/// doubles as the span grows, at most `CAP` of them. The extremes of time
/// are exact.
#[derive(Debug, Clone, Default)]
pub struct Bins {
    exact: Vec<(u64, u64)>,
    /// Once binned: the first bin's start, the width, the sums.
    start: u64,
    width: u64,
    sums: Vec<u64>,
    first: Option<u64>,
    last: u64,
}

impl Bins {
    pub fn add(&mut self, ts: u64, v: u64) {
        let first = *self.first.get_or_insert(ts);
        self.first = Some(first.min(ts));
        self.last = self.last.max(ts);
        if self.width == 0 {
            self.exact.push((ts, v));
            if self.exact.len() == CAP {
                self.bin();
            }
            return;
        }
        self.put(ts, v);
    }

    fn bin(&mut self) {
        let lo = self.exact.iter().map(|e| e.0).min().unwrap_or(0);
        let hi = self.exact.iter().map(|e| e.0).max().unwrap_or(0);
        self.start = lo;
        self.width = ((hi - lo) / (CAP as u64 / 2) + 1).next_power_of_two();
        for (ts, v) in std::mem::take(&mut self.exact) {
            self.put(ts, v);
        }
    }

    fn put(&mut self, ts: u64, v: u64) {
        // Before the first bin (a clock step back): counted in it.
        // The width is a power of two: a shift, not a division.
        let mut i = (ts.saturating_sub(self.start) >> self.width.trailing_zeros()) as usize;
        while i >= CAP {
            // Twice as wide: pairs of bins merge.
            let merged: Vec<u64> = self.sums.chunks(2).map(|c| c.iter().sum()).collect();
            self.sums = merged;
            self.width *= 2;
            i = (ts.saturating_sub(self.start) >> self.width.trailing_zeros()) as usize;
        }
        if self.sums.len() <= i {
            self.sums.resize(i + 1, 0);
        }
        self.sums[i] += v;
    }

    /// Least and greatest time added.
    pub fn span(&self) -> Option<(u64, u64)> {
        self.first.map(|f| (f, self.last))
    }

    /// (time, value): every one added, or each bin's sum at its start.
    pub fn points(&self) -> Box<dyn Iterator<Item = (u64, u64)> + '_> {
        if self.width == 0 {
            Box::new(self.exact.iter().copied())
        } else {
            Box::new(
                self.sums
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| s > 0)
                    .map(|(i, &s)| (self.start + i as u64 * self.width, s)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thin_keeps_every_value_then_an_even_sample() {
        let mut t = Thin::new(8);
        for v in 0..8u64 {
            t.push(v);
        }
        assert_eq!(t.kept(), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(!t.thinned());
        for v in 8..100u64 {
            t.push(v);
        }
        assert_eq!(t.seen(), 100);
        assert!(t.kept().len() <= 8);
        let stride = t.kept()[1] - t.kept()[0];
        assert!(t
            .kept()
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * stride));
        assert_eq!(stride, 16);
    }

    #[test]
    fn a_sample_has_exact_count_extremes_and_mean() {
        let mut s = Sample::default();
        for v in 0..(3 * CAP as u64) {
            s.push(v + 5);
        }
        let d = s.dist().unwrap();
        assert_eq!(d.count, 3 * CAP as u64);
        assert_eq!((d.min, d.max), (5.0, (3 * CAP as u64 + 4) as f64));
        assert_eq!(d.mean, (3 * CAP as u64 - 1) as f64 / 2.0 + 5.0);
        let mid = d.p50 / (1.5 * CAP as f64);
        assert!((0.99..1.01).contains(&mid), "{}", d.p50);
        assert!(s.values().len() <= CAP + 2);
    }

    #[test]
    fn bins_keep_the_sum_and_the_span() {
        let mut b = Bins::default();
        let n = 5 * CAP as u64;
        for i in 0..n {
            b.add(1_000 + i * 3, 2);
        }
        assert_eq!(b.points().map(|p| p.1).sum::<u64>(), 2 * n);
        assert!(b.points().count() <= CAP);
        assert_eq!(b.span(), Some((1_000, 1_000 + (n - 1) * 3)));
        let mut small = Bins::default();
        small.add(7, 1);
        small.add(3, 2);
        assert_eq!(small.points().collect::<Vec<_>>(), [(7, 1), (3, 2)]);
        assert_eq!(small.span(), Some((3, 7)));
    }
}
