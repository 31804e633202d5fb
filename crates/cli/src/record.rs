//! `wirelab record`: DETER's recording (issue 21) of hosts the user made
//! (`--netns`): one record per connection, written when it has been idle
//! for `--idle` or when the recording stops (Ctrl-C, `--duration`).
//! `--read FILE...` prints what records hold.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use wirelab_deter::{ipid, record};

use crate::code;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Namespaces to record (`ip netns list`), each a host: every
    /// interface in it but lo, both ways.
    #[arg(long, num_args = 1.., required_unless_present = "read")]
    netns: Vec<String>,
    /// The records' folder: one subfolder per namespace, one file per
    /// connection (`<local>-<remote>.deter`).
    #[arg(long, default_value = "rec")]
    out: PathBuf,
    /// Stop after this long (default: at Ctrl-C).
    #[arg(long)]
    duration: Option<wirelab_spec::Nanos>,
    /// Algorithm 1's bound on an inferred send time (DETER's default).
    #[arg(long, default_value = "5us")]
    th: wirelab_spec::Nanos,
    /// A connection with no packet for this long is written.
    #[arg(long, default_value = "2s")]
    idle: wirelab_spec::Nanos,
    /// Print what these record files hold instead (exit 2 if one is
    /// damaged, naming it and the byte offset).
    #[arg(long, num_args = 1.., conflicts_with = "netns")]
    read: Vec<PathBuf>,
    /// With --read: JSON lines, one per file.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args, abort: &AtomicBool) -> Result<u8> {
    if !args.read.is_empty() {
        return read(&args.read, args.json);
    }
    crate::run::require_root()?;
    for ns in &args.netns {
        if !Path::new("/run/netns").join(ns).exists() {
            eprintln!("wirelab: --netns {ns}: no such namespace (`ip netns list`)");
            return Ok(code::ERROR);
        }
    }
    let opts = wirelab_lab::record::RecordOptions {
        out: args.out.clone(),
        th_ns: args.th.0,
        idle_ns: args.idle.0,
    };
    let mut rec = match wirelab_lab::record::HostRecorder::start(&args.netns, opts) {
        Ok(r) => r,
        Err(wirelab_lab::Error::BadInput(e)) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
        Err(e) => return Err(anyhow::Error::from(e).context("starting the recorders")),
    };
    let until = args
        .duration
        .map(|d| Instant::now() + Duration::from_nanos(d.0));
    eprintln!(
        "wirelab: recording {} into {} ({})",
        args.netns.join(", "),
        args.out.display(),
        match args.duration {
            Some(d) => format!("for {d}, Ctrl-C stops sooner"),
            None => "Ctrl-C stops it".into(),
        }
    );
    let bar = indicatif::ProgressBar::new_spinner();
    while !abort.load(Ordering::SeqCst) && until.is_none_or(|u| Instant::now() < u) {
        std::thread::sleep(Duration::from_millis(100));
        rec.poll(wirelab_lab::record::monotonic_ns())?;
        bar.set_message(format!(
            "{} connections open, {} records written ({} bytes)",
            rec.open(),
            rec.files,
            rec.bytes
        ));
        bar.tick();
    }
    bar.finish_and_clear();
    let (files, bytes, lost) = rec.stop().context("writing the last records")?;
    println!(
        "wirelab record: {files} records ({bytes} bytes) in {}{}",
        args.out.display(),
        if lost > 0 {
            format!("; {lost} events or connections did not fit the recorder, or events its programs missed: those records are incomplete or missing")
        } else {
            String::new()
        }
    );
    // After Ctrl-C every record is written too; the exit code still says
    // it was interrupted (130), as every command's does.
    Ok(if abort.load(Ordering::SeqCst) {
        code::INTERRUPTED
    } else {
        code::OK
    })
}

/// What one record holds, as `--read` prints it.
#[derive(Debug, Serialize)]
struct Shown {
    file: String,
    host: String,
    local: Option<String>,
    remote: Option<String>,
    duration_ns: u64,
    /// Arrivals: packets, IDs lost on the way, late (reordered) ones.
    arrived: usize,
    lost: usize,
    /// The lost packets by their place in the sender's series (1-based:
    /// an event's `sent_by` + `packet` addresses the same packet again).
    /// The first arrival is place 1, so a loss of the very first packet
    /// after the handshake cannot be seen.
    lost_packets: Vec<u64>,
    late: usize,
    ce_marked: usize,
    sent: u64,
    send_time_samples: usize,
    /// Socket calls, and the bytes they sent and received.
    calls: usize,
    /// Of the calls, reads that kept up with the network (each took all
    /// the data that had just arrived), recorded as runs: their count.
    reads_kept_up: u64,
    bytes_sent: u64,
    bytes_received: u64,
    /// Kernel events: retransmissions, entries into Loss (a retransmission
    /// timeout), and whether the socket closed.
    retransmits: usize,
    /// The segments those retransmissions carried (a retransmitted skb
    /// can hold several MSS; the kernel's TcpRetransSegs counts these).
    retransmitted_segments: u64,
    /// Segments the kernel counted as retransmitted (tcp_sock.total_retrans)
    /// beyond those: a send that failed, or a tracepoint run that did not
    /// happen.
    unseen_retransmissions: u64,
    /// The largest duplicate-ACK threshold (tcp_reordering) a
    /// retransmission was sent with.
    reordering_max: Option<u32>,
    timeouts: usize,
    closed: bool,
    /// The socket's settings (DETER Table 1), such as `TCP_CONGESTION`.
    settings: std::collections::BTreeMap<String, String>,
    /// The record file's size.
    bytes: u64,
}

fn read(files: &[PathBuf], json: bool) -> Result<u8> {
    for f in files {
        // A host folder's TCP settings (a glob over it takes them too).
        if f.file_name()
            .is_some_and(|n| n == wirelab_lab::record::SETTINGS)
        {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                eprintln!("wirelab: {}: not JSON", f.display());
                return Ok(code::ERROR);
            };
            let changed = &v["tcp_settings_changed"];
            let routes = &v["route_options"];
            if json {
                println!(
                    "{}",
                    serde_json::json!({"file": f.display().to_string(), "tcp_settings_changed": changed, "route_options": routes})
                );
            } else {
                let list: Vec<String> = changed
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .collect()
                    })
                    .unwrap_or_default();
                let routes: Vec<String> = routes
                    .as_array()
                    .map(|rs| {
                        rs.iter()
                            .map(|r| {
                                format!(
                                    "{} {}",
                                    r["dst"].as_str().unwrap_or("?"),
                                    r["metrics"]
                                        .as_object()
                                        .map(|m| m
                                            .iter()
                                            .map(|(k, v)| format!("{k} {v}"))
                                            .collect::<Vec<_>>()
                                            .join(" "))
                                        .unwrap_or_default()
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                println!(
                    "{}: TCP settings that differ from the kernel's: {}; routes with options: {}",
                    f.display(),
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    },
                    if routes.is_empty() {
                        "none".to_string()
                    } else {
                        routes.join(", ")
                    }
                );
            }
            continue;
        }
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let r = match record::decode(&bytes) {
            Ok(r) => r,
            Err(d) => {
                eprintln!("wirelab: {}: {d}", f.display());
                return Ok(code::ERROR);
            }
        };
        let a =
            r.rx.as_ref()
                .map(|(_, c)| ipid::arrivals(c))
                .unwrap_or_default();
        let calls: Vec<record::Call> = r.calls.iter(r.start_ns).map(|c| c.1).collect();
        let moved = |k: record::CallKind| -> u64 {
            calls.iter().filter(|c| c.kind == k).map(|c| c.bytes).sum()
        };
        // A run of reads that kept up (`Drain`) stands for `flags` reads.
        let (runs, kept) = calls
            .iter()
            .filter(|c| c.kind == record::CallKind::Drain)
            .fold((0, 0u64), |(n, k), c| (n + 1, k + u64::from(c.flags)));
        let events: Vec<record::Event> = r.events.iter(r.start_ns).map(|e| e.1).collect();
        let count = |f: &dyn Fn(&record::Event) -> bool| events.iter().filter(|e| f(e)).count();
        let s = Shown {
            file: f.display().to_string(),
            host: r.host.clone(),
            local: r.local.map(|a| a.to_string()),
            remote: r.remote.map(|a| a.to_string()),
            duration_ns: r.end_ns.saturating_sub(r.start_ns),
            arrived: a.order.len(),
            lost: a.lost.len(),
            lost_packets: a.lost.iter().map(|o| o + 1).collect(),
            late: a.late.len(),
            ce_marked: r.ce.marked().len(),
            sent: r.tx_packets,
            send_time_samples: r.tx_samples.len(),
            calls: calls.len() - runs + kept as usize,
            reads_kept_up: kept,
            bytes_sent: moved(record::CallKind::Send),
            bytes_received: moved(record::CallKind::Recv) + moved(record::CallKind::Drain),
            retransmits: count(&|e| matches!(e, record::Event::Retransmit { .. })),
            retransmitted_segments: events
                .iter()
                .map(|e| match e {
                    record::Event::Retransmit { segments, .. } => u64::from(*segments),
                    _ => 0,
                })
                .sum(),
            unseen_retransmissions: events
                .iter()
                .map(|e| match e {
                    record::Event::Unseen(n) => u64::from(*n),
                    _ => 0,
                })
                .sum(),
            // DETER §5.2: the duplicate-ACK threshold a reordering widened.
            reordering_max: events
                .iter()
                .filter_map(|e| match e {
                    record::Event::Retransmit { reordering, .. } => Some(*reordering),
                    _ => None,
                })
                .max(),
            timeouts: count(&|e| *e == record::Event::CongState(4)),
            closed: count(&|e| *e == record::Event::State(7)) > 0,
            settings: r.settings.iter().cloned().collect(),
            bytes: bytes.len() as u64,
        };
        if json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            println!(
                "{}: {} {} -> {}: {} arrived ({} lost, {} late, {} CE), {} sent ({} send-time samples); {} calls ({} B sent, {} B received{}), {} retransmissions{}{}, {} timeouts{}{}; {} bytes",
                s.file,
                s.host,
                s.local.as_deref().unwrap_or("?"),
                s.remote.as_deref().unwrap_or("?"),
                s.arrived,
                s.lost,
                s.late,
                s.ce_marked,
                s.sent,
                s.send_time_samples,
                s.calls,
                s.bytes_sent,
                s.bytes_received,
                if s.reads_kept_up > 0 {
                    format!("; {} reads kept up", s.reads_kept_up)
                } else {
                    String::new()
                },
                s.retransmits,
                match (
                    s.retransmitted_segments as usize != s.retransmits,
                    s.unseen_retransmissions,
                ) {
                    (false, 0) => String::new(),
                    (true, 0) => format!(" ({} segments)", s.retransmitted_segments),
                    (_, n) => format!(
                        " ({} segments, and {n} more the kernel counted that no event showed)",
                        s.retransmitted_segments
                    ),
                },
                s.reordering_max
                    .filter(|&r| r > 3)
                    .map(|r| format!(" (tcp_reordering up to {r})"))
                    .unwrap_or_default(),
                s.timeouts,
                if s.closed { ", closed" } else { "" },
                s.settings
                    .iter()
                    .map(|(k, v)| format!(", {k}={v}"))
                    .collect::<String>(),
                s.bytes
            );
        }
    }
    Ok(code::OK)
}
