//! `wirelab bench replay`: DETER's replay fidelity on a mixed workload
//! (issue 21's benchmark; seed 004 §5 replays every connection of its
//! runs): incast plus long flows through a real bottleneck whose tbf
//! drops what its buffer cannot hold, every host recorded; then every
//! connection replayed in a lab of its own and compared with the run's
//! capture. Goal: at least 95% replay exactly (the same TCP headers both
//! ways, the same network actions and retransmissions), and each
//! divergence shown with its first differing packet.
//!
//! Runs `wirelab run` and `wirelab replay` as a user does, so what is
//! measured is the shipped path.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The workload: `long` long flows and `short` incast connections (in
/// groups of 6 senders, one message each) into one receiver behind a
/// 200 Mbit/s bottleneck with a 64 KB buffer.
fn spec(long: u32, short: u32) -> String {
    let senders = 6u32;
    let per = short.div_ceil(senders).max(1);
    let mut s = String::from(
        "# Written by `wirelab bench replay`.\n\
         name: bench-replay\n\
         description: incast plus long flows through a real bottleneck, every host recorded\n\
         topology:\n  hosts:\n",
    );
    for i in 1..=senders {
        s.push_str(&format!("    - name: s{i}\n"));
    }
    s.push_str("    - {name: r, bottleneck: 200mbit, bottleneck_buffer: 64KB}\n");
    s.push_str("stack: {congestion_control: cubic}\ntraffic:\n  connections:\n");
    for i in 0..long {
        s.push_str(&format!(
            "    - {{from: s{}, to: r, verb: write, messages: 1, message_size: 2MiB}}\n",
            i % senders + 1
        ));
    }
    let mut left = short;
    for i in 1..=senders {
        let n = per.min(left);
        if n == 0 {
            break;
        }
        left -= n;
        s.push_str(&format!(
            "    - {{from: s{i}, to: r, count: {n}, verb: write, messages: 1, message_size: 64KiB}}\n"
        ));
    }
    s.push_str("record: {}\n");
    s
}

fn wirelab(args: &[&str], abort: &Arc<AtomicBool>) -> Result<(i32, String, String)> {
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let exe = std::env::current_exe().context("finding the wirelab binary")?;
    let o = Command::new(exe)
        .args(args)
        .output()
        .with_context(|| format!("running wirelab {}", args[0]))?;
    Ok((
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

pub fn run(abort: &Arc<AtomicBool>, connections: u32, jobs: usize) -> Result<()> {
    let long = (connections / 10).max(1);
    let short = connections.saturating_sub(long);
    let dir = tempfile::tempdir().context("creating a folder for the bench")?;
    let spec_path = dir.path().join("bench-replay.yaml");
    std::fs::write(&spec_path, spec(long, short))?;
    println!(
        "wirelab bench replay: {long} long flows (2 MiB) and {short} incast connections (64 KiB) into one receiver behind 200 Mbit/s with a 64 KB buffer, recorded, then each connection replayed ({jobs} at once)"
    );
    let started = Instant::now();
    let (code, out, err) = wirelab(
        &[
            "run",
            spec_path.to_str().unwrap(),
            "--out",
            dir.path().to_str().unwrap(),
            "--json",
        ],
        abort,
    )?;
    let run: Value = serde_json::from_str(out.trim())
        .with_context(|| format!("wirelab run (exit {code}): {err}"))?;
    let results = run["results"].as_str().context("no results folder")?;
    let records = Path::new(results).join("record");
    let retrans: usize = run["analysis"]["connections"].as_array().map_or(0, |c| {
        c.iter()
            .map(|c| c["retransmissions"].as_array().map_or(0, Vec::len))
            .sum()
    });
    println!(
        "recorded run: verdict {}, {} records, {retrans} retransmissions, {:.1}s",
        run["verdict"],
        run["record"]["records"],
        started.elapsed().as_secs_f64()
    );
    // A congested run may break the analyzers' claims (its losses are the
    // point); what matters here is that it ran and was recorded.
    for e in run["expect"].as_array().into_iter().flatten() {
        if e["pass"] == false {
            println!("  (its claim failed: {} | {})", e["claim"], e["observed"]);
        }
    }
    for a in run["analysis"]["analyzers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if a["violations"].as_u64().unwrap_or(0) > 0 {
            println!("  (analyzer {}: {} violations)", a["name"], a["violations"]);
        }
    }
    let started = Instant::now();
    let replays = dir.path().join("replays");
    let (code, out, err) = wirelab(
        &[
            "replay",
            records.to_str().unwrap(),
            "--out",
            replays.to_str().unwrap(),
            "--json",
            "--jobs",
            &jobs.to_string(),
        ],
        abort,
    )?;
    if !matches!(code, 0 | 1) {
        bail!("wirelab replay exited {code}: {err}");
    }
    let mut total = 0;
    let mut same = 0;
    let mut actions = 0;
    let mut divergences = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).context("a replay's JSON line")?;
        let f = &v["fidelity"];
        total += 1;
        actions += f["recorded_actions"].as_array().map_or(0, Vec::len);
        if f["same"] == true {
            same += 1;
            continue;
        }
        let why = if f["recorded_actions"] != f["replayed_actions"] {
            format!(
                "network actions {} recorded, {} replayed",
                f["recorded_actions"], f["replayed_actions"]
            )
        } else if f["recorded_retransmissions"] != f["replayed_retransmissions"] {
            format!(
                "retransmissions {} recorded, {} replayed",
                f["recorded_retransmissions"], f["replayed_retransmissions"]
            )
        } else {
            f["headers"]["client_differs"]
                .as_str()
                .or(f["headers"]["server_differs"].as_str())
                .unwrap_or("headers differ")
                .to_string()
        };
        divergences.push(format!(
            "connection {} ({} -> {}): {why}",
            v["connection"], v["client"], v["server"]
        ));
    }
    if total == 0 {
        bail!("no replay reported: {err}");
    }
    let share = same as f64 / total as f64;
    println!(
        "replayed: {total} connections ({actions} network actions re-applied), {same} exactly ({:.1}%; goal: at least 95%), {:.1}s",
        100.0 * share,
        started.elapsed().as_secs_f64()
    );
    for d in &divergences {
        println!("  differs: {d}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_workload_has_the_connections_asked_for_and_validates() {
        let s = super::spec(10, 90);
        let spec = wirelab_spec::parse(&s, wirelab_analyze::catalog()).expect("a valid spec");
        let n: u32 = spec.traffic.connections.iter().map(|g| g.count.0).sum();
        assert_eq!(n, 100);
        assert!(spec.record.is_some());
    }
}
