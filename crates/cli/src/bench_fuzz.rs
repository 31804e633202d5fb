//! `wirelab bench fuzz`: for each planted quirk, the runs Lumina's genetic
//! search needs to find it (a find that reproduces 3 of 3 times) against
//! uniform random search over the same space and budget, several seeds
//! each; then campaign throughput with 1, 2 and N labs at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use wirelab_fuzz::campaign::{self, Settings};
use wirelab_fuzz::lab::LabRunner;
use wirelab_fuzz::ray::RayRunner;
use wirelab_fuzz::{Mode, Runner};

use crate::bench::median;

/// The shipped RoCE targets and the quirks each is meant to find.
const ANOMALIES: &str = "specs/fuzz/roce-find-counter-or-latency-anomalies.yaml";
const NEIGHBOUR: &str = "specs/fuzz/roce-find-a-noisy-neighbour.yaml";
const QUIRKS: [(&str, &str); 9] = [
    ("slow-nack-reaction", ANOMALIES),
    ("slow-read-nack", ANOMALIES),
    ("cnp-sent-not-counted", ANOMALIES),
    ("implied-nak-not-counted", ANOMALIES),
    ("adaptive-retransmission", ANOMALIES),
    ("cnp-hidden-interval", ANOMALIES),
    ("cnp-per-port", ANOMALIES),
    ("clears-migreq", ANOMALIES),
    ("noisy-neighbour", NEIGHBOUR),
];

struct Case<'a> {
    target: &'a Path,
    device: &'a str,
    mode: Mode,
    seed: u64,
    runs: u32,
    jobs: u32,
    /// Stop at the first confirmed anomaly.
    find: bool,
    /// Runs on this Ray cluster instead of local labs.
    ray: Option<&'a RayRunner>,
}

/// One campaign: (runs to the first confirmed find, if any; runs made; minutes).
fn campaign(c: &Case, out: &Path, abort: &Arc<AtomicBool>) -> Result<(Option<u64>, u64, f64)> {
    let catalog = wirelab_lab::catalog();
    let loaded = wirelab_fuzz::load(c.target, Some(c.device), catalog)?;
    let mut stop = loaded.target.stop.clone();
    stop.runs = c.runs;
    stop.anomaly = c.find;
    let dir = out.join(format!(
        "{}-{:?}-{}-{}{}",
        c.device,
        c.mode,
        c.seed,
        c.jobs,
        if c.ray.is_some() { "-ray" } else { "" }
    ));
    let settings = Settings {
        dir: dir.clone(),
        seed: c.seed,
        jobs: c.jobs,
        mode: c.mode,
        stop,
        keep_runs: false,
        save: false,
    };
    let local = LabRunner {
        out: dir.join("runs"),
        timeout: Duration::from_secs(30),
        abort: abort.clone(),
    };
    let runner: &dyn Runner = match c.ray {
        Some(r) => r,
        None => &local,
    };
    let o = campaign::run(
        &loaded,
        catalog,
        &settings,
        runner,
        &campaign::Silent,
        abort,
    )?;
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let found = o.anomalies.iter().map(|a| a.run + 1).min();
    Ok((found, o.runs, o.elapsed_ms as f64 / 60_000.0))
}

pub fn run(
    abort: &Arc<AtomicBool>,
    seeds: u64,
    runs: u32,
    devices: &[String],
    throughput_only: bool,
    ray: Option<&str>,
) -> Result<()> {
    crate::run::require_root()?;
    for t in [ANOMALIES, NEIGHBOUR] {
        if !Path::new(t).exists() {
            bail!("{t} not found: run the bench from the repository's root");
        }
    }
    let out = tempfile::tempdir()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut quirks: Vec<(&str, &str)> = QUIRKS.to_vec();
    if !devices.is_empty() {
        for d in devices {
            if !QUIRKS.iter().any(|q| q.0 == d) {
                let known: Vec<&str> = QUIRKS.iter().map(|q| q.0).collect();
                bail!(
                    "--devices: no shipped target finds `{d}` (known: {})",
                    known.join(", ")
                );
            }
        }
        quirks.retain(|q| devices.iter().any(|d| d == q.0));
    }
    if throughput_only {
        quirks.clear();
    }
    println!(
        "wirelab bench fuzz: {seeds} seeds per search, at most {runs} runs each, {cores} labs at once"
    );
    if !quirks.is_empty() {
        println!("runs to the first find that reproduces 3/3 (a search that found nothing counts as {runs} + 1)");
        println!(
            "{:<26} {:>16} {:>16} {:>14}  target",
            "device", "genetic median", "random median", "random/genetic"
        );
    }
    for (device, target) in &quirks {
        let target = PathBuf::from(target);
        let mut med = Vec::new();
        let mut shown = Vec::new();
        let mut seeds_found = Vec::new();
        for mode in [Mode::Genetic, Mode::Random] {
            let mut found = Vec::new();
            for seed in 1..=seeds {
                let c = Case {
                    target: &target,
                    device,
                    mode,
                    seed,
                    runs,
                    jobs: cores,
                    find: true,
                    ray: None,
                };
                let (f, _, _) = campaign(&c, out.path(), abort)?;
                found.push(f.map_or(f64::from(runs) + 1.0, |n| n as f64));
            }
            let m = median(found.clone());
            let misses = found.iter().filter(|&&f| f > f64::from(runs)).count();
            shown.push(format!("{m:.0} ({misses} missed)"));
            med.push(m);
            seeds_found.push(found);
        }
        println!(
            "{device:<26} {:>16} {:>16} {:>14.2}  {}",
            shown[0],
            shown[1],
            med[1] / med[0],
            target.display()
        );
        // Each seed's figure: a median of a few seeds hides how far they
        // spread, which is what says whether two medians differ.
        let list = |f: &[f64]| {
            f.iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:<26} seeds 1-{seeds}: genetic {}; random {}",
            "",
            list(&seeds_found[0]),
            list(&seeds_found[1])
        );
    }
    // Throughput: the same 30-run campaign with 1, 2 and N labs.
    let target = PathBuf::from(ANOMALIES);
    println!("campaign throughput, 30 runs on the default profile (nothing to find):");
    let mut labs = vec![1, 2];
    if cores > 2 {
        labs.push(cores);
    }
    let mut base = None;
    for jobs in labs {
        let c = Case {
            target: &target,
            device: "default",
            mode: Mode::Genetic,
            seed: 1,
            runs: 30,
            jobs,
            find: false,
            ray: None,
        };
        let (_, made, min) = campaign(&c, out.path(), abort)?;
        let per_min = made as f64 / min.max(1e-9);
        let b = *base.get_or_insert(per_min);
        println!(
            "  {jobs} lab(s): {per_min:.0} runs/min ({:.2}x one lab)",
            per_min / b
        );
    }
    // The same campaign as Ray tasks, as many at once as the cluster has
    // CPUs: what the bridge costs against local labs.
    if let Some(address) = ray {
        let wirelab = std::env::current_exe()?;
        let runs_dir = std::path::absolute(out.path().join("ray-runs"))?;
        let python = wirelab_fuzz::ray::default_python();
        let r = RayRunner::connect(&wirelab_fuzz::ray::RayOptions {
            address,
            python: &python,
            wirelab: &wirelab,
            out: &runs_dir,
            timeout: Duration::from_secs(30),
            abort: abort.clone(),
            connect_timeout: Duration::from_secs(30),
        })
        .with_context(|| format!("--ray {address}"))?;
        let c = Case {
            target: &target,
            device: "default",
            mode: Mode::Genetic,
            seed: 1,
            runs: 30,
            jobs: r.cpus,
            find: false,
            ray: Some(&r),
        };
        let (_, made, min) = campaign(&c, out.path(), abort)?;
        let per_min = made as f64 / min.max(1e-9);
        println!(
            "  Ray at {address} ({} node(s), {} CPUs): {per_min:.0} runs/min ({:.2}x one local lab)",
            r.nodes,
            r.cpus,
            per_min / base.unwrap_or(per_min)
        );
    }
    Ok(())
}
