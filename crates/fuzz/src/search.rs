//! Lumina's Algorithm 1 (seed 000 §4) as a state machine that does no I/O:
//! `propose` hands out the candidate to run, `report` takes its score. Every
//! random choice comes from one ChaCha stream seeded by the campaign, in an
//! order fixed by the candidates' numbers, so the same seed and the same
//! scores give the same sequence of specs however many labs run at once
//! (the campaign applies scores in candidate order; `campaign` says how).
//!
//! ```text
//! Γ ← initialize a pool of configs                 candidates 0..size: the seed, then random points
//! repeat
//!   γ ← randomly pick a config from Γ              propose()
//!   γ* ← mutate(γ)                                 (a fresh point if γ scored 0 and showed nothing new)
//!   run, collect, Δ ← score(γ*, φ)                 (the campaign)
//!   if Δ ≥ median_score(Γ) then Γ.add(γ*)          report()
//!   else Γ.add(γ*) with a probability p            (or when it showed a behaviour no run had)
//! until anomaly found or timeout                   (the campaign)
//! ```

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wirelab_spec::Spec;

use crate::mutate::{self, Mutator};

/// How candidates after the initial pool are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Algorithm 1.
    Genetic,
    /// Uniform random points of the same space (the benchmark's baseline).
    Random,
}

/// A config to run.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its number in the campaign, from 0.
    pub n: u64,
    pub spec: Spec,
    pub hash: String,
    /// The pool member it was mutated from.
    pub parent: Option<String>,
}

#[derive(Debug, Clone)]
struct Member {
    spec: Spec,
    hash: String,
    score: f64,
    /// It showed a behaviour no earlier run had (`report_behaviours`).
    novel: bool,
}

impl Member {
    /// Worth mutating: it scored, or it did something new.
    fn promising(&self) -> bool {
        self.score > 0.0 || self.novel
    }
}

pub struct Search<'a> {
    mutator: Mutator<'a>,
    seed: Spec,
    rng: ChaCha8Rng,
    pool: Vec<Member>,
    /// Candidates that make up the initial pool.
    init: u64,
    /// p of Algorithm 1 line 12.
    p: f64,
    /// Members the pool holds at most.
    capacity: usize,
    mode: Mode,
    issued: u64,
    /// Every behaviour some run has shown (`report_behaviours`).
    seen: BTreeSet<String>,
}

impl<'a> Search<'a> {
    pub fn new(
        mutator: Mutator<'a>,
        seed: Spec,
        rng_seed: u64,
        init: u32,
        capacity: u32,
        p: f64,
        mode: Mode,
    ) -> Search<'a> {
        Search {
            mutator,
            seed,
            rng: ChaCha8Rng::seed_from_u64(rng_seed),
            pool: Vec::new(),
            init: init.max(1).into(),
            p,
            capacity: capacity.max(init).max(1) as usize,
            mode,
            issued: 0,
            seen: BTreeSet::new(),
        }
    }

    /// The next candidate: the seed itself, then random points until the
    /// initial pool is issued, then mutants of a random pool member (a
    /// random point when that member scored 0; in random mode, always).
    pub fn propose(&mut self) -> Candidate {
        let n = self.issued;
        self.issued += 1;
        let (spec, parent) = if n == 0 {
            (self.seed.clone(), None)
        } else if n < self.init || self.mode == Mode::Random {
            (self.mutator.random(&self.seed, &mut self.rng), None)
        } else {
            // Algorithm 1 line 4. A member that scored 0 showed nothing:
            // a mutant of it is a random guess kept near a point known to
            // be dull, so a fresh point of the space takes its place (as
            // it does while the pool is still empty, with more labs than
            // it has members). Where no run has scored yet the search is
            // random search; it turns local as members that scored fill
            // the pool. (Mutating dull members, the search needed 53-61
            // runs where random search needed 7-15, on a space wider than
            // the shipped target's: `wirelab bench fuzz`.)
            let parent = (self.pool.choose(&mut self.rng))
                .filter(|m| m.promising())
                .map(|m| (m.spec.clone(), m.hash.clone()));
            match parent {
                Some((p, ph)) => (self.mutator.mutate(&p, &mut self.rng), Some(ph)),
                None => (self.mutator.random(&self.seed, &mut self.rng), None),
            }
        };
        Candidate {
            n,
            hash: mutate::hash(&spec),
            spec,
            parent,
        }
    }

    /// Algorithm 1 lines 9–12 for candidate `c` with score `score`; the
    /// initial pool's members join unconditionally. Whether it joined.
    pub fn report(&mut self, c: &Candidate, score: f64) -> bool {
        self.report_behaviours(c, score, &BTreeSet::new())
    }

    /// `report`, with what the run did (`Observation::behaviours`: which
    /// analyzers measured something, which found violations). A fourth
    /// departure from Algorithm 1, coverage as AFL keeps it: a run that
    /// shows a behaviour no earlier run showed joins the pool even when
    /// it scored 0, and is mutated like a member that scored. The quirks
    /// are steps that often need two things at once (CNPs from two QPs of
    /// one port; reads with ECN on every packet):
    /// the first run to show one of them is a step on the way, which a
    /// score of 0 would throw away. The seed's behaviours are the
    /// baseline: they make nothing novel.
    pub fn report_behaviours(
        &mut self,
        c: &Candidate,
        score: f64,
        behaviours: &BTreeSet<String>,
    ) -> bool {
        let novel = self.mode == Mode::Genetic
            && c.n > 0
            && behaviours.iter().any(|b| !self.seen.contains(b));
        self.seen.extend(behaviours.iter().cloned());
        let join = if c.n < self.init {
            true
        } else if self.mode == Mode::Random {
            false
        } else if novel {
            true
        } else {
            // Line 9's Δ ≥ median, except that a run scoring 0 showed
            // nothing: while most of the pool scores 0 (early on, it does)
            // the literal rule would let every such run in, the median
            // would stay 0 and the pool would never select. It takes the
            // coin of line 12 instead.
            let m = self.median();
            (score >= m && score > 0.0) || self.rng.gen_bool(self.p)
        };
        if join && self.pool.len() >= self.capacity {
            // Steady-state replacement: a full pool drops its lowest
            // scorer (the oldest of equals), so parents drawn uniformly
            // (line 4) are drawn from the better part of what was run.
            let worst = (0..self.pool.len())
                .min_by(|&a, &b| self.pool[a].score.total_cmp(&self.pool[b].score))
                .expect("a full pool has members");
            self.pool.remove(worst);
        }
        if join {
            self.pool.push(Member {
                spec: c.spec.clone(),
                hash: c.hash.clone(),
                score,
                novel,
            });
        }
        join
    }

    /// The pool's median score; 0 for an empty pool.
    pub fn median(&self) -> f64 {
        let mut s: Vec<f64> = self.pool.iter().map(|m| m.score).collect();
        if s.is_empty() {
            return 0.0;
        }
        s.sort_by(f64::total_cmp);
        let h = s.len() / 2;
        if s.len() % 2 == 1 {
            s[h]
        } else {
            (s[h - 1] + s[h]) / 2.0
        }
    }

    pub fn pool_len(&self) -> usize {
        self.pool.len()
    }

    /// Distinct specs in the pool (its diversity).
    pub fn distinct(&self) -> usize {
        let mut h: Vec<&str> = self.pool.iter().map(|m| m.hash.as_str()).collect();
        h.sort_unstable();
        h.dedup();
        h.len()
    }

    pub fn issued(&self) -> u64 {
        self.issued
    }
}
