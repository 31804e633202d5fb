//! ScalaCN's combinatorial causal testing (seed 001 §4.1), without I/O:
//! which runs to make, and what their results say.
//!
//! A test has dimensions (masks in a table, entries per mask, message
//! size, ...), each with values from the lightest to the heaviest. Points
//! are one value index per dimension; the base is every dimension at its
//! lightest.
//!
//! - **Symptom search**: the base against every dimension at its
//!   heaviest. No degradation of 5% or more (ScalaCN's empirical
//!   threshold, §2): no symptom, and nothing further says anything.
//! - **Local sensitivity analysis**: from the base, one dimension at a
//!   time through its values; its effect is the degradation at its
//!   heaviest value.
//! - **Permutation removal**: for each dimension d, the other dimensions
//!   take random values (seeded), and d at its lightest is run against d
//!   at its heaviest, the two runs of a pair one after the other. A pair
//!   degrades when, in the median round, its heavy run is worse than its
//!   light run of the same round by 5% or more. d is kept when that holds
//!   in more than 95% of the permutations (the paper's hypothesis H0),
//!   and removed otherwise. With fewer than 20 permutations, "more than
//!   95%" means every one.
//! - **Critical path**: the kept dimensions, largest effect first, each
//!   with the points that prove it.

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use serde::Serialize;

/// ScalaCN's threshold: a change of 5% is a degradation (§2, §4.3).
pub const THRESHOLD: f64 = 0.05;
/// ScalaCN's permutation removal keeps a dimension past this probability.
pub const KEEP: f64 = 0.95;

/// What is measured, and which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Higher is better.
    Bandwidth,
    /// Lower is better.
    Latency,
}

impl Measure {
    /// How much worse `other` is than `base`, as a fraction of `base`
    /// (negative: better).
    pub fn degradation(self, base: f64, other: f64) -> f64 {
        if base <= 0.0 {
            return 0.0;
        }
        match self {
            Measure::Bandwidth => (base - other) / base,
            Measure::Latency => (other - base) / base,
        }
    }
}

/// A point: one value index per dimension.
pub type Point = Vec<usize>;

/// The runs a test needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Design {
    /// Values per dimension (each at least 2).
    pub values: Vec<usize>,
    pub base: Point,
    pub heaviest: Point,
    /// Per dimension, its values from the base (the others at the base).
    pub sensitivity: Vec<Vec<Point>>,
    /// Per dimension, (light, heavy) pairs with the others permuted.
    pub permutations: Vec<Vec<(Point, Point)>>,
}

impl Design {
    /// `values[d]`: how many values dimension d has; `permutations`: pairs
    /// per dimension; `seed`: the same seed, the same design.
    pub fn new(values: &[usize], permutations: usize, seed: u64) -> Design {
        let n = values.len();
        let base = vec![0; n];
        let heaviest: Point = values.iter().map(|v| v - 1).collect();
        let sensitivity = (0..n)
            .map(|d| {
                (0..values[d])
                    .map(|i| {
                        let mut p = base.clone();
                        p[d] = i;
                        p
                    })
                    .collect()
            })
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let permutations = (0..n)
            .map(|d| {
                // Distinct values of the other dimensions: all of them when
                // there are no more than asked for, else a sample without
                // repeats.
                let others: usize = (0..n).filter(|&o| o != d).map(|o| values[o]).product();
                let mut seen = BTreeSet::new();
                let mut pairs = Vec::new();
                while pairs.len() < permutations.min(others) {
                    let mut light: Point = if others <= permutations {
                        // The k-th combination, as an odometer.
                        let mut k = pairs.len();
                        values
                            .iter()
                            .enumerate()
                            .map(|(o, &v)| {
                                if o == d {
                                    0
                                } else {
                                    let i = k % v;
                                    k /= v;
                                    i
                                }
                            })
                            .collect()
                    } else {
                        values.iter().map(|&v| rng.gen_range(0..v)).collect()
                    };
                    light[d] = 0;
                    if !seen.insert(light.clone()) {
                        continue;
                    }
                    let mut heavy = light.clone();
                    heavy[d] = values[d] - 1;
                    pairs.push((light, heavy));
                }
                pairs
            })
            .collect();
        Design {
            values: values.to_vec(),
            base,
            heaviest,
            sensitivity,
            permutations,
        }
    }

    /// The distinct points of the symptom and the sensitivity steps, in a
    /// fixed order: the symptom's two first, back to back, then the
    /// other steps. Run in this order, the base and the heaviest are close
    /// in time, as each permutation pair is (`pairs`). Measured as the
    /// first and the last of a round, they were apart by the machine's
    /// drift: one target's base measured 68, 70 and 45 µs in its three
    /// rounds here, and a +50% symptom came out as −2%.
    pub fn points(&self) -> Vec<Point> {
        let mut rest = BTreeSet::new();
        for s in &self.sensitivity {
            rest.extend(
                s.iter()
                    .filter(|p| **p != self.base && **p != self.heaviest)
                    .cloned(),
            );
        }
        let mut points = vec![self.base.clone()];
        if self.heaviest != self.base {
            points.push(self.heaviest.clone());
        }
        points.extend(rest);
        points
    }

    /// Every permutation pair, as (dimension, k, light, heavy). A pair is
    /// measured on its own, its two runs one after the other: on a shared
    /// machine whose speed drifts, two runs close in time differ by the
    /// dimension more than by the drift.
    pub fn pairs(&self) -> Vec<(usize, usize, &Point, &Point)> {
        self.permutations
            .iter()
            .enumerate()
            .flat_map(|(d, ps)| ps.iter().enumerate().map(move |(k, (l, h))| (d, k, l, h)))
            .collect()
    }
}

/// One dimension's evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DimensionResult {
    pub dimension: usize,
    /// The measure at each of its values, the others at the base.
    pub sensitivity: Vec<Option<f64>>,
    /// Degradation at its heaviest value against the base.
    pub effect: Option<f64>,
    /// Permutations measured, and those where heavy was worse by 5% or more.
    pub pairs: usize,
    pub degraded: usize,
    pub probability: f64,
    pub kept: bool,
    /// Each permutation pair measured.
    pub evidence: Vec<PairResult>,
}

/// A pair of points run back to back in each round, and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairResult {
    pub light: Point,
    pub heavy: Point,
    /// Each round's (light, heavy) measure, when both measured.
    pub rounds: Vec<(f64, f64)>,
    /// The median round's degradation of heavy against light.
    pub degradation: f64,
}

/// Which pair of back-to-back runs `analyse` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pair {
    /// The base and the heaviest point, at the head of each round.
    Symptom,
    /// Dimension d's k-th permutation pair.
    Permutation(usize, usize),
}

/// The median over rounds of the heavy run's degradation against the
/// light run of the same round; None without a round.
///
/// Why per round: the two runs of a pair are back to back, but rounds are
/// minutes apart, and this VM's speed drifts between them. A 64 B write's
/// latency at one point measured 68, 70 and 45 µs in three rounds; the
/// medians over rounds of a pair's two points then compare runs made in
/// different rounds, and a +50% effect measured under 5% in one pair.
pub fn judge(measure: Measure, rounds: &[(f64, f64)]) -> Option<f64> {
    crate::median(
        rounds
            .iter()
            .map(|&(l, h)| measure.degradation(l, h))
            .collect(),
    )
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub measure: Measure,
    pub base: Option<f64>,
    pub heaviest: Option<f64>,
    /// Degradation of the heaviest point against the base.
    pub symptom: Option<f64>,
    pub dimensions: Vec<DimensionResult>,
    /// Kept dimensions, largest effect first.
    pub critical_path: Vec<usize>,
}

impl Analysis {
    pub fn has_symptom(&self) -> bool {
        self.symptom.is_some_and(|s| s >= THRESHOLD)
    }
}

/// What the runs say. `result(point)`: the measure at a point of the
/// symptom and sensitivity steps (over rounds: their median); `pair(p)`:
/// each round's (light, heavy) measures of a pair run back to back. A run
/// that failed or measured nothing is None, or its round is left out.
pub fn analyse(
    design: &Design,
    measure: Measure,
    result: &dyn Fn(&Point) -> Option<f64>,
    pair: &dyn Fn(Pair) -> Vec<(f64, f64)>,
) -> Analysis {
    let base = result(&design.base);
    let heaviest = result(&design.heaviest);
    let symptom = judge(measure, &pair(Pair::Symptom));
    let dimensions: Vec<DimensionResult> = (0..design.values.len())
        .map(|d| {
            let sensitivity: Vec<Option<f64>> =
                design.sensitivity[d].iter().map(|p| result(p)).collect();
            let effect = base
                .zip(*sensitivity.last().expect("two values at least"))
                .map(|(b, h)| measure.degradation(b, h));
            let evidence: Vec<PairResult> = design.permutations[d]
                .iter()
                .enumerate()
                .filter_map(|(k, (l, h))| {
                    let rounds = pair(Pair::Permutation(d, k));
                    Some(PairResult {
                        light: l.clone(),
                        heavy: h.clone(),
                        degradation: judge(measure, &rounds)?,
                        rounds,
                    })
                })
                .collect();
            let degraded = evidence
                .iter()
                .filter(|e| e.degradation >= THRESHOLD)
                .count();
            let pairs = evidence.len();
            let probability = if pairs == 0 {
                0.0
            } else {
                degraded as f64 / pairs as f64
            };
            DimensionResult {
                dimension: d,
                sensitivity,
                effect,
                pairs,
                degraded,
                probability,
                kept: pairs > 0 && probability > KEEP,
                evidence,
            }
        })
        .collect();
    // ScalaCN §4.1 searches from a symptom: without one (the heaviest
    // point within 5% of the base) there is no path to explain, whatever
    // a dimension's pairs say on their own (on a noisy machine a null
    // dimension's pairs can all land on the slow side).
    let has_symptom = symptom.is_some_and(|s| s >= THRESHOLD);
    let mut critical_path: Vec<usize> = dimensions
        .iter()
        .filter(|d| d.kept && has_symptom)
        .map(|d| d.dimension)
        .collect();
    critical_path.sort_by(|a, b| {
        let e = |d: &usize| dimensions[*d].effect.unwrap_or(0.0);
        e(b).total_cmp(&e(a)).then(a.cmp(b))
    });
    Analysis {
        measure,
        base,
        heaviest,
        symptom,
        dimensions,
        critical_path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs measured as their points are.
    fn paired<'a>(
        d: &'a Design,
        f: &'a dyn Fn(&Point) -> Option<f64>,
    ) -> impl Fn(Pair) -> Vec<(f64, f64)> + 'a {
        move |p| {
            let (l, h) = match p {
                Pair::Symptom => (&d.base, &d.heaviest),
                Pair::Permutation(dim, k) => {
                    let (l, h) = &d.permutations[dim][k];
                    (l, h)
                }
            };
            f(l).zip(f(h)).into_iter().collect()
        }
    }

    #[test]
    fn the_design_is_seeded_and_each_pair_differs_only_in_its_dimension() {
        let a = Design::new(&[3, 2, 4], 5, 7);
        assert_eq!(a, Design::new(&[3, 2, 4], 5, 7));
        assert_ne!(a.permutations, Design::new(&[3, 2, 4], 5, 8).permutations);
        assert_eq!(a.base, vec![0, 0, 0]);
        assert_eq!(a.heaviest, vec![2, 1, 3]);
        assert_eq!(
            a.sensitivity[2],
            vec![vec![0, 0, 0], vec![0, 0, 1], vec![0, 0, 2], vec![0, 0, 3]]
        );
        for (d, pairs) in a.permutations.iter().enumerate() {
            // 8, 12 and 6 combinations of the others: 5 of each, distinct.
            assert_eq!(pairs.len(), 5);
            let distinct: BTreeSet<&Point> = pairs.iter().map(|p| &p.0).collect();
            assert_eq!(distinct.len(), 5);
            for (l, h) in pairs {
                assert_eq!((l[d], h[d]), (0, a.values[d] - 1));
                for o in (0..3).filter(|&o| o != d) {
                    assert_eq!(l[o], h[o]);
                    assert!(l[o] < a.values[o]);
                }
            }
        }
        // Fewer combinations than asked: each once.
        let small = Design::new(&[2, 3], 10, 7);
        assert_eq!(small.permutations[0].len(), 3);
        assert_eq!(small.permutations[1].len(), 2);
        let pts = a.points();
        assert_eq!(
            pts[..2],
            [a.base.clone(), a.heaviest.clone()],
            "the symptom's two first"
        );
        assert_eq!(
            pts.len(),
            1 + 2 + 1 + 3 + 1,
            "base, each dimension's other values, heaviest"
        );
        assert_eq!(a.pairs().len(), 15);
        assert_eq!(a.pairs()[5].0, 1, "dimension 0's five pairs first");
    }

    /// Bandwidth = 100 / (1 + masks), where only dimension 0 (masks) and 2
    /// (a second table's masks) cost; dimension 1 (entries) costs nothing.
    fn bandwidth(p: &Point) -> Option<f64> {
        let masks = [0.0, 50.0, 200.0];
        let remote = [0.0, 100.0];
        Some(100.0 / (1.0 + 0.01 * (masks[p[0]] + remote[p[2]])))
    }

    #[test]
    fn the_dimensions_that_cost_are_kept_and_the_one_that_does_not_is_removed() {
        let d = Design::new(&[3, 3, 2], 8, 1);
        let a = analyse(&d, Measure::Bandwidth, &bandwidth, &paired(&d, &bandwidth));
        assert!(a.has_symptom());
        assert!((a.symptom.unwrap() - (1.0 - 1.0 / 4.0)).abs() < 1e-9);
        assert_eq!(
            a.critical_path,
            vec![0, 2],
            "masks first: the larger effect"
        );
        let entries = &a.dimensions[1];
        assert!(!entries.kept);
        assert_eq!(entries.degraded, 0);
        assert_eq!(entries.effect, Some(0.0));
        // The others have 3 × 2 combinations: each once.
        assert_eq!(a.dimensions[0].degraded, 6);
        assert_eq!(a.dimensions[0].evidence.len(), 6);
    }

    #[test]
    fn a_dimension_that_degrades_only_sometimes_is_removed() {
        // Dimension 0 hurts only when dimension 1 is at its heaviest: not
        // more likely than 95% over the permutations.
        let d = Design::new(&[2, 4], 12, 3);
        let f = |p: &Point| Some(if p[0] == 1 && p[1] == 3 { 50.0 } else { 100.0 });
        let a = analyse(&d, Measure::Bandwidth, &f, &paired(&d, &f));
        let d0 = &a.dimensions[0];
        assert!(d0.degraded > 0 && d0.degraded < d0.pairs, "{d0:?}");
        assert!(!d0.kept);
    }

    #[test]
    fn latency_is_worse_upward_and_failed_runs_are_left_out() {
        assert!((Measure::Latency.degradation(10.0, 12.0) - 0.2).abs() < 1e-12);
        assert!((Measure::Bandwidth.degradation(10.0, 12.0) + 0.2).abs() < 1e-12);
        let d = Design::new(&[2, 4], 6, 5);
        // One heavy run of dimension 0 failed.
        let failed = d.permutations[0][0].1.clone();
        let f = |p: &Point| (p != &failed).then(|| 10.0 + 10.0 * p[0] as f64);
        let a = analyse(&d, Measure::Latency, &f, &paired(&d, &f));
        let all = d.permutations[0].len();
        let left = all - d.permutations[0].iter().filter(|x| x.1 == failed).count();
        assert_eq!((all, left), (4, 3));
        assert_eq!(a.dimensions[0].pairs, left);
        assert!(a.dimensions[0].kept);
        assert_eq!(a.critical_path, vec![0]);
    }

    #[test]
    fn pairs_that_all_degrade_make_no_path_without_a_symptom() {
        // Every pair of every dimension 10% slower on its heavy side (runs
        // drifting), but the heaviest point no slower than the base.
        let d = Design::new(&[2, 2], 4, 5);
        let f = |_: &Point| Some(100.0);
        let drifting = |p: Pair| match p {
            Pair::Symptom => vec![(100.0, 100.0)],
            Pair::Permutation(..) => vec![(100.0, 110.0)],
        };
        let a = analyse(&d, Measure::Latency, &f, &drifting);
        assert!(!a.has_symptom());
        assert!(
            a.dimensions.iter().all(|r| r.kept),
            "the pairs alone keep them"
        );
        assert!(a.critical_path.is_empty());
        // The same pairs with a symptom: both on the path.
        let a = analyse(&d, Measure::Latency, &f, &|p| match p {
            Pair::Symptom => vec![(100.0, 120.0)],
            Pair::Permutation(..) => vec![(100.0, 110.0)],
        });
        assert!(a.has_symptom());
        assert_eq!(a.critical_path.len(), 2);
    }

    #[test]
    fn a_pair_is_judged_round_by_round() {
        // A +50% effect in three rounds at different speeds, one heavy run
        // an outlier (fast). Medians over rounds compare 60 µs with 60 µs:
        // no degradation. Round by round: +50%, -35%, +33%, median +33%.
        let rounds = [(60.0, 90.0), (62.0, 40.0), (45.0, 60.0)];
        let j = judge(Measure::Latency, &rounds).unwrap();
        assert!((j - 1.0 / 3.0).abs() < 1e-9, "{j}");
        let d = Design::new(&[2, 2], 4, 5);
        let a = analyse(&d, Measure::Latency, &|_| Some(60.0), &|_| rounds.to_vec());
        assert_eq!(a.symptom, Some(j), "the symptom too, round by round");
        assert!(a.dimensions.iter().all(|r| r.kept && r.degraded == r.pairs));
        assert_eq!(a.dimensions[0].evidence[0].rounds, rounds.to_vec());
        // Even rounds: the middle two's mean. None measured: left out.
        let even = judge(Measure::Bandwidth, &[(10.0, 9.0), (10.0, 8.0)]).unwrap();
        assert!((even - 0.15).abs() < 1e-9, "{even}");
        let a = analyse(&d, Measure::Latency, &|_| Some(60.0), &|_| Vec::new());
        assert_eq!(a.symptom, None);
        assert!(a.dimensions.iter().all(|r| r.pairs == 0 && !r.kept));
    }

    #[test]
    fn without_a_symptom_there_is_nothing_to_explain() {
        let d = Design::new(&[2, 2], 4, 5);
        let f = |_: &Point| Some(100.0);
        let a = analyse(&d, Measure::Bandwidth, &f, &paired(&d, &f));
        assert!(!a.has_symptom());
        assert!(a.critical_path.is_empty());
    }
}
