//! `wirelab fuzz`: Lumina's genetic test-case generation (seed 000 §4,
//! Algorithm 1) over wirelab's runs. A target names a seed spec, the space
//! its fields may move in and the objectives a run is scored on; the
//! search keeps a pool of configs, mutates a random member, runs it in a
//! lab, and keeps it if it scores at least the pool's median (or, with
//! probability p, anyway). An anomaly (an objective past its threshold) is
//! shrunk by delta debugging, confirmed k times and saved as a spec whose
//! `expect:` fails on it, ready to commit as a regression test.
//!
//! The search, scoring and shrinking do no I/O (`search`, `score`,
//! `shrink`); `campaign` drives them over a `Runner` (`lab::LabRunner`
//! runs real labs) and keeps the campaign's folder.

pub mod campaign;
pub mod lab;
pub mod mutate;
pub mod ray;
pub mod report;
pub mod score;
pub mod search;
pub mod shrink;
pub mod target;

pub use campaign::{Outcome, Record, Runner, Settings, Stats, Watch};
pub use search::Mode;
pub use target::{load, Loaded, Target};
