//! `wirelab analyze`: any pcap/pcapng through the analyzers; next to a run's
//! results (facts.json) the run's counters, workload and rto_min are used
//! too.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use wirelab_analyze::report::Report;

use crate::code;

/// Progress over a file read once (twice for RoCE, or for the connections
/// whose direction the first pass guessed wrong), in bytes (hidden for
/// small files and when stderr is not a terminal).
fn bytes_bar(path: &Path) -> indicatif::ProgressBar {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    let pb = indicatif::ProgressBar::new(size);
    if size < 64 << 20 {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "analyzing {bar:40} {bytes}/{total_bytes} ({msg}{bytes_per_sec}, {eta})",
        )
        .expect("a valid template"),
    );
    pb
}

/// The analyzers' report on a capture (with the facts of the results
/// folder it sits in, if it does), progress shown on large files.
pub fn report(
    trace: &Path,
    names: &[&str],
    min_rto_ns: u64,
    threads: Option<usize>,
) -> std::result::Result<Report, String> {
    let dir = trace.parent().unwrap_or(Path::new("."));
    // A results folder's facts (with its ground truth) are read with the
    // trace; a broken file is named here rather than silently left out.
    let facts = wirelab_analyze::results::read(dir).map_err(|e| e.to_string())?;
    let opts = match &facts {
        Some(f) => f.options(min_rto_ns),
        None => wirelab_analyze::Options::for_hosts(std::iter::empty(), Some(min_rto_ns)),
    };
    // The file is read once, never held (a second time for RoCE, or for
    // connections whose direction the first pass guessed wrong): progress
    // is over the pass under way, in the file's bytes.
    let pb = bytes_bar(trace);
    let threads = threads.unwrap_or_else(|| {
        // The reader keeps one core; connections are built on the rest.
        let size = std::fs::metadata(trace).map_or(0, |m| m.len());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if size >= 64 << 20 && cores > 1 {
            cores - 1
        } else {
            0
        }
    });
    let r = wirelab_analyze::report::stream(trace, opts, facts.as_ref(), names, threads, &|p| {
        if p.pass > 1 && pb.position() > p.bytes {
            pb.set_message("a second pass (RoCE, or connections whose direction changed), ");
            pb.reset_eta();
        }
        pb.set_length(p.total);
        pb.set_position(p.bytes);
    });
    pb.finish_and_clear();
    r.map_err(|e| e.to_string())
}

pub fn run(
    trace: &Path,
    json: bool,
    html: Option<&Path>,
    verbose: bool,
    analyzers: &[String],
    min_rto_ns: u64,
    threads: Option<usize>,
    // While set, Ctrl-C exits at once: reading and analyzing leave nothing
    // behind. Cleared before a file is written.
    exit_on_interrupt: &std::sync::atomic::AtomicBool,
) -> Result<u8> {
    let catalog = wirelab_analyze::catalog();
    let mut names = Vec::new();
    for a in analyzers {
        if let Err(e) = catalog.check(a) {
            eprintln!("wirelab: --analyzers: {e}");
            return Ok(code::ERROR);
        }
        names.push(a.as_str());
    }
    if names.is_empty() {
        names = catalog.names();
    }
    let report = match report(trace, &names, min_rto_ns, threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    exit_on_interrupt.store(false, std::sync::atomic::Ordering::SeqCst);
    if let Some(h) = html {
        write_html(h, &report)?;
    }
    if json {
        // Written as it is serialized: the report lists every
        // retransmission, so it grows with the capture (67 MB of text
        // for 12 M packets held whole before).
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        out.flush()?;
    } else {
        print!("{}", wirelab_report::terminal::render(&report, verbose));
        if let Some(h) = html {
            println!("  report     {}", h.display());
        }
    }
    // A capture cut short or damaged part-way is never a pass: like an
    // INVALID run, whatever the part before the damage showed.
    Ok(if report.analysis.truncated.is_some() {
        code::INVALID
    } else if report.violations() > 0 {
        code::EXPECT_FAILED
    } else {
        code::OK
    })
}

/// Writes the HTML report (temporary file and rename: never half a page).
pub fn write_html(path: &Path, report: &Report) -> Result<()> {
    let tmp = path.with_extension("html.tmp");
    std::fs::write(&tmp, wirelab_report::html::render(report))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
