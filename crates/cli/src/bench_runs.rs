//! `wirelab bench runs`: many runs in one process through the run engine,
//! as a fuzzing campaign makes them, with the process's resident memory
//! after each tenth run: it must stay flat (nothing kept per run).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wirelab_lab::{RunOptions, Verdict};

/// VmRSS of this process, in KiB (proc(5)).
fn rss_kib() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}

pub fn run(abort: &Arc<AtomicBool>, runs: u32) -> Result<()> {
    // A small TCP run with an event (and so a drop and a recovery in
    // every run), its results written and analyzed like any other.
    let spec = wirelab_spec::parse(
        "name: bench-runs\ntopology:\n  hosts: [{name: a}, {name: b}]\nstack: {congestion_control: cubic}\n\
         traffic:\n  connections:\n    - {from: a, to: b, messages: 20, message_size: 10KB}\n\
         events:\n  - {connection: 1, packet: 5, action: drop}\n", wirelab_analyze::catalog(),
    )?;
    let out = tempfile::tempdir().context("creating a results folder")?;
    println!("wirelab bench runs: {runs} runs of one small TCP spec in one process (results in a temporary folder)");
    println!("{:>6}  {:>10}  {:>12}", "runs", "RSS", "vs run 10");
    let started = Instant::now();
    let mut at10 = None;
    let mut last = 0;
    for i in 1..=runs {
        if abort.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        let opts = RunOptions {
            timeout: Duration::from_secs(60),
            abort: abort.clone(),
            ..RunOptions::new(out.path())
        };
        let o = wirelab_lab::run(&spec, None, &opts, &wirelab_lab::Quiet)?;
        if o.verdict != Verdict::Pass {
            bail!("run {i} ended {}: {}", o.verdict.name(), o.dir.display());
        }
        // Only the memory of the process counts, not the disk.
        std::fs::remove_dir_all(&o.dir).ok();
        last = rss_kib()?;
        if i == 10.min(runs) {
            at10 = Some(last);
        }
        if i == 1 || i % 10 == 0 || i == runs {
            let vs = at10.map_or("-".into(), |b| format!("{:.3}", last as f64 / b as f64));
            println!("{i:>6}  {:>7} KiB  {vs:>12}", last);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{:.1} runs/min; RSS after run {runs} / after run 10: {:.3} (flat: 1.000; the first runs warm caches)",
        f64::from(runs) * 60.0 / secs,
        last as f64 / at10.unwrap_or(last).max(1) as f64
    );
    Ok(())
}
