//! `wirelab diagnose`: why the slowest flows were slow (DETER §2.1, §5;
//! issue 21 item 4), from the analyzers' connection model of any capture:
//! a run's, a replay's, or one a user brings.

use std::path::Path;

use anyhow::Result;
use wirelab_analyze::diagnose::{diagnose, KernelResend, Slow};
use wirelab_deter::record::{self, Event};

use crate::code;

pub fn run(path: &Path, percentile: f64, min_rto_ns: u64, json: bool) -> Result<u8> {
    if !(0.0..=100.0).contains(&percentile) {
        eprintln!("wirelab: --percentile: must be 0..=100, got {percentile}");
        return Ok(code::ERROR);
    }
    let trace = if path.is_dir() {
        path.join("trace.pcapng")
    } else {
        path.to_path_buf()
    };
    let catalog = wirelab_analyze::catalog();
    let report = match crate::analyze::report(&trace, &catalog.names(), min_rto_ns, None) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    let conns = &report.analysis.connections;
    let kernel = if path.is_dir() {
        kernel_resends(&path.join("record"))
    } else {
        Vec::new()
    };
    let slow = diagnose(conns, percentile, &kernel);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "source": trace,
                "connections": conns.len(),
                "percentile": percentile,
                "slow": slow,
            }))?
        );
    } else {
        print(&trace, conns.len(), percentile, &slow);
    }
    Ok(if report.analysis.truncated.is_some() {
        code::INVALID
    } else {
        code::OK
    })
}

/// The retransmissions a results folder's records (`record/`, a run's or
/// a replay's) saw their kernels send. The trace stays the evidence: a
/// record that does not read is named and left out.
fn kernel_resends(dir: &Path) -> Vec<KernelResend> {
    let mut files = Vec::new();
    if !dir.is_dir() || crate::replay::collect(dir, &mut files).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for f in files {
        let r = match std::fs::read(&f)
            .map_err(|e| e.to_string())
            .and_then(|b| record::decode(&b).map_err(|d| d.to_string()))
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("wirelab: {}: {e}; diagnosed without it", f.display());
                continue;
            }
        };
        let (Some(l), Some(rm)) = (r.local, r.remote) else {
            continue;
        };
        out.extend(r.events.iter(r.start_ns).filter_map(|(_, e)| match e {
            Event::Retransmit {
                seq,
                reordering,
                sacked,
                ..
            } => Some(KernelResend {
                local: (l.ip(), l.port()),
                remote: (rm.ip(), rm.port()),
                seq,
                reordering,
                sacked,
            }),
            _ => None,
        }));
    }
    out
}

fn print(trace: &Path, n: usize, p: f64, slow: &[Slow]) {
    println!(
        "wirelab diagnose {}: {} connection(s) at or above p{p} of completion time, of {n}",
        trace.display(),
        slow.len()
    );
    for s in slow {
        println!(
            "  conn {:<4} completed in {:.3} ms{}",
            s.conn,
            s.completion_ns as f64 / 1e6,
            if s.causes.is_empty() {
                ": no loss, probe or mark seen (the application, or the capture's vantage)"
            } else {
                ""
            }
        );
        for c in &s.causes {
            println!("    {:<22} {}", c.kind, c.text);
        }
    }
}
