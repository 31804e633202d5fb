//! `wirelab load SPEC`: Norma's load test (seed 002) through a device
//! under test. One line per interval as iperf3 `-i` prints them, then the
//! run's figures and its claims; `--json`: one JSON object per interval,
//! then the summary, one per line (JSON lines, for jq and pandas).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use wirelab_lab::load::{LoadSummary, Setup, Tick};
use wirelab_lab::RunOptions;
use wirelab_workload::load::{Latency, Report};

use crate::code;
use crate::run::{exit_code, require_root};

#[derive(clap::Args)]
pub struct Args {
    /// The load test (YAML: `dut:`, `stream:`, ...).
    pub spec: PathBuf,
    /// Where the results folder goes.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// JSON lines on stdout: each interval, then the summary.
    #[arg(long)]
    pub json: bool,
    /// Allow the spec's settings that are the host's, not the lab's
    /// (`dut.neighbour_limit`: Linux has one ARP table for every
    /// namespace), for the run; they are put back after it.
    #[arg(long)]
    pub host_wide: bool,
}

pub fn run(args: Args, abort: &Arc<AtomicBool>) -> Result<u8> {
    let spec = match wirelab_spec::load::load(&args.spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    if spec.dut.neighbour_limit.is_some() && !args.host_wide {
        let at = "dut.neighbour_limit";
        let e = wirelab_spec::SpecError {
            path: at.into(),
            message: wirelab_lab::load::HOST_WIDE_NEEDED.into(),
            line: std::fs::read_to_string(&args.spec)
                .ok()
                .and_then(|t| wirelab_spec::line_of(&t, at)),
        };
        eprintln!("wirelab: {}: {e}", args.spec.display());
        return Ok(code::ERROR);
    }
    if spec.stateful.is_some() {
        return stateful(&args, &spec, abort);
    }
    // What the control plane chose is shown before anything exists, and
    // a stream it cannot make is bad input.
    let views = spec.stream_views();
    let mut setups = Vec::new();
    for (k, v) in views.iter().enumerate() {
        match wirelab_lab::load::setup(v) {
            Ok((s, ..)) => setups.push(s),
            Err(e) if views.len() > 1 => {
                eprintln!("wirelab: {}: streams[{k}]: {e}", args.spec.display());
                return Ok(code::ERROR);
            }
            Err(e) => {
                eprintln!("wirelab: {}: {e}", args.spec.display());
                return Ok(code::ERROR);
            }
        }
    }
    let setup = setups[0].clone();
    require_root()?;
    if !args.json {
        if views.len() == 1 {
            header(&spec, &setup);
        } else {
            header_streams(&spec, &views, &setups);
        }
    }
    let opts = RunOptions {
        abort: abort.clone(),
        host_wide: args.host_wide,
        ..RunOptions::new(&args.out)
    };
    let json = args.json;
    let frame = setup.frame_bytes;
    let out = match wirelab_lab::load::run(&spec, &opts, |t| match t {
        Tick::Interval { trial, report, .. } if json => {
            let mut v = serde_json::to_value(report).unwrap_or_default();
            if let (Some(k), Some(o)) = (trial, v.as_object_mut()) {
                o.insert("trial".into(), (*k).into());
            }
            println!("{v}");
        }
        Tick::Interval { report, .. } => {
            // Several streams: the mean frame of what arrived (with its FCS).
            let c = &report.counts.received;
            let frame = if report.streams.is_empty() || c.packets == 0 {
                frame
            } else {
                c.bytes as f64 / c.packets as f64 + 4.0
            };
            println!("{}", line(frame, report.requested_pps, report))
        }
        Tick::Trial { trial, pps, rate } if !json => println!(
            "  trial {trial}: {} pps ({})",
            group(pps.round() as u64),
            rate.describe()
        ),
        Tick::TrialDone(t) if !json => println!(
            "  trial {}{}: {} sent, {} lost ({:.2e}): {}",
            t.trial,
            t.burst
                .map_or(String::new(), |b| format!(" (a burst of {b})")),
            group(t.sent),
            t.lost,
            t.loss_ratio,
            if t.pass {
                "passed".to_string()
            } else if t.tester_short {
                format!(
                    "failed: the tester offered only {} pps",
                    group(t.sent_pps.unwrap_or(0.0).round() as u64)
                )
            } else {
                "failed".to_string()
            }
        ),
        _ => {}
    }) {
        Ok(o) => o,
        Err(e @ wirelab_lab::Error::BadInput(_)) => {
            eprintln!("wirelab: {:#}", anyhow::Error::from(e));
            return Ok(code::ERROR);
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        // The same object as summary.json, on one line.
        println!("{}", out.summary.to_json()?);
    } else {
        footer(&out.summary);
    }
    Ok(exit_code(out.verdict))
}

fn header(spec: &wirelab_spec::load::LoadSpec, s: &Setup) {
    println!(
        "{}: {} through a Linux {}{}, lines every {}",
        spec.name.as_deref().unwrap_or("load"),
        frames(spec.stream(), s.frame_bytes),
        s.dut,
        if spec.search.is_some() {
            String::new()
        } else {
            format!(
                " at {} pps for {}",
                group(s.requested_pps.round() as u64),
                spec.duration
            )
        },
        spec.interval,
    );
    match spec.search.as_ref().map(|x| (&x.throughput, &x.back_to_back)) {
        Some((Some(t), _)) => println!(
            "  RFC 2544 throughput search from {} pps down: trials of {}, loss tolerated {}, resolution {}%",
            group(s.requested_pps.round() as u64),
            t.trial,
            t.loss,
            t.resolution * 100.0
        ),
        Some((_, Some(b))) => println!(
            "  RFC 2544 back-to-back search (§26.4): bursts at {} pps of up to {} frames, resolution {}, {} repeat(s), {} to drain",
            group(s.requested_pps.round() as u64),
            group(u64::from(b.max_frames)),
            b.resolution,
            b.repeat,
            b.drain
        ),
        _ => println!("  rate plan (Norma §5.2): {}", s.rate.describe()),
    }
    println!(
        "  {:>13}  {:>10} {:>10} {:>7} {:>9} {:>9} {:>10}  latency µs min/p50/p99/p99.9/p99.99/max",
        "interval", "sent", "received", "lost", "(naive)", "Mbit/s", "rate err"
    );
}

/// The header of a test of several streams: one line each.
fn header_streams(
    spec: &wirelab_spec::load::LoadSpec,
    views: &[wirelab_spec::load::LoadSpec],
    setups: &[Setup],
) {
    println!(
        "{}: {} streams through a Linux {} for {}, each on a generator thread (and CPU) of its own, lines every {}",
        spec.name.as_deref().unwrap_or("load"),
        views.len(),
        setups[0].dut,
        spec.duration,
        spec.interval,
    );
    for (k, (v, s)) in views.iter().zip(setups).enumerate() {
        let st = v.stream();
        let what = match st.arp {
            Some(a) => format!(
                "ARP replies from the {} port announcing {} to {} (not measured)",
                match st.port {
                    wirelab_spec::load::SendPort::Tx => "sending",
                    wirelab_spec::load::SendPort::Rx => "receiving",
                },
                a.from,
                a.last()
            ),
            None => format!("{} to port {}", frames(st, s.frame_bytes), st.dport),
        };
        println!(
            "  stream {k}: {what} at {} pps; rate plan (Norma §5.2): {}",
            group(s.requested_pps.round() as u64),
            s.rate.describe()
        );
    }
    println!(
        "  {:>13}  {:>10} {:>10} {:>7} {:>9} {:>9} {:>10}  latency µs min/p50/p99/p99.9/p99.99/max (all streams)",
        "interval", "sent", "received", "lost", "(naive)", "Mbit/s", "rate err"
    );
}

/// "64 B frames", or a mix: "frames of 64/594/1518 B in 7:4:1 (mean 353.8 B)".
fn frames(st: &wirelab_spec::load::Stream, mean: f64) -> String {
    let stack = st
        .stack_name()
        .map_or(String::new(), |s| format!(" of {s}"));
    if st.sizes.is_none() {
        return format!("{mean} B frames{stack}");
    }
    let m = st.mix();
    let join = |f: fn(&(u32, u32)) -> u32, sep: &str| {
        m.iter()
            .map(|x| f(x).to_string())
            .collect::<Vec<_>>()
            .join(sep)
    };
    format!(
        "frames{stack} of {} B in {} (mean {mean:.1} B)",
        join(|x| x.0, "/"),
        join(|x| x.1, ":")
    )
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

fn lat(l: &Option<Latency>) -> String {
    match l {
        Some(l) => format!(
            "{}/{}/{}/{}/{}/{}",
            us(l.min),
            us(l.p50),
            us(l.p99),
            us(l.p999),
            us(l.p9999),
            us(l.max)
        ),
        None => "-".into(),
    }
}

fn line(frame_bytes: f64, requested_pps: f64, r: &Report) -> String {
    let c = &r.counts;
    // Bits on the wire at the receiver: frames with FCS, preamble and gap.
    let wire = (frame_bytes + wirelab_spec::load::WIRE_OVERHEAD as f64) * 8.0;
    let mbit = r
        .received_pps
        .map_or("-".into(), |p| format!("{:.1}", p * wire / 1e6));
    let err = r.sent_pps.map_or("-".into(), |p| {
        format!("{:+.1e}", (p - requested_pps) / requested_pps)
    });
    format!(
        "  {:5.2}-{:5.2} s  {:>10} {:>10} {:>7} {:>9} {:>9} {:>10}  {}",
        r.start_s,
        r.end_s,
        group(c.sent.packets),
        group(c.received.packets),
        c.lost,
        format!("({:+})", c.naive_lost),
        mbit,
        err,
        lat(&r.latency),
    )
}

fn footer(s: &LoadSummary) {
    let o = &s.outcome.outcome;
    let f = |p: Option<f64>| p.map_or("-".into(), |p| format!("{p:.3}"));
    println!(
        "  sent {} at {} pps, received {} at {} pps, lost {} ({}), rate error {}",
        group(o.sent),
        f(o.sent_pps),
        group(o.received),
        f(o.received_pps),
        o.sent as i64 - o.received as i64,
        if o.sent > 0 {
            format!(
                "{:.2e}",
                (o.sent as f64 - o.received as f64) / o.sent as f64
            )
        } else {
            "-".into()
        },
        o.rate_error.map_or("-".into(), |e| format!("{e:+.2e}")),
    );
    println!(
        "  latency µs min/p50/p99/p99.9/p99.99/max {}, reordered or duplicated {}",
        lat(&o.latency),
        o.late
    );
    println!(
        "  generator: {} slots given up late, {} frames sent behind their time (caught up), CPU {:.2} s",
        o.generator.missed,
        o.generator.behind,
        o.generator_cpu_ns as f64 / 1e9
    );
    if let Some(l) = &s.learned {
        println!(
            "  the router learned {} of the {} addresses announced{}",
            l.learned,
            l.announced,
            l.all_by_s
                .map_or(String::new(), |t| format!(", all of them by {t:.2} s"))
        );
        if let Some(m) = &l.limit {
            println!(
                "  its table: {} entries above the host's {} (gc_thresh3 {} for the run, put back after); {} attempts to add one refused for want of room",
                m.limit, m.host_entries_before, m.gc_thresh3, m.refused
            );
        }
    }
    for (k, x) in o.streams.iter().enumerate() {
        println!(
            "  stream {k} (generator on CPU {}): sent {}, received {} at {} pps, lost {}, rate error {}, latency µs {}, late {}, {} slots given up",
            x.cpu,
            group(x.sent),
            group(x.received),
            f(x.received_pps),
            x.sent as i64 - x.received as i64,
            x.rate_error.map_or("-".into(), |e| format!("{e:+.2e}")),
            lat(&x.latency),
            x.late,
            x.generator.missed
        );
    }
    if let Some(r) = &s.search {
        let wire = (s.setup.frame_bytes + wirelab_spec::load::WIRE_OVERHEAD as f64) * 8.0;
        match r.throughput_pps {
            Some(p) => println!(
                "  throughput (RFC 2544): {} pps, {:.1} Mbit/s on the wire, after {} trials (failed at {} pps){}",
                group(p.round() as u64),
                p * wire / 1e6,
                r.trials.len(),
                group(r.hi_pps.round() as u64),
                if r.tester_limited {
                    "; the tester could not offer some trial's rate: it may be the limit"
                } else {
                    ""
                }
            ),
            None => println!(
                "  throughput (RFC 2544): no trial passed ({} trials, down to {} pps)",
                r.trials.len(),
                group(r.hi_pps.round() as u64)
            ),
        }
    }
    if let Some(shapes) = &s.burst_shape {
        let g = |x: &Option<wirelab_load::shape::Gaps>| {
            x.map_or("-".into(), |g| {
                format!(
                    "mean {:.1} p50 {:.1} p99 {:.1}",
                    g.mean / 1e3,
                    g.p50 as f64 / 1e3,
                    g.p99 as f64 / 1e3
                )
            })
        };
        for (side, b) in [("sent", &shapes.sent), ("received", &shapes.received)] {
            println!(
                "  burst shape µs, {side}: inside bursts {} (asked {:.1}); burst to burst {} (asked {:.1})",
                g(&b.gaps),
                b.requested_gap_ns / 1e3,
                g(&b.periods),
                b.requested_period_ns / 1e3
            );
        }
    }
    if let Some(w) = &s.switch {
        let i = &w.integrity;
        println!(
            "  the switch's capture: {} frames of {} it received, {} lost ({}): {}",
            group(i.in_trace),
            group(i.switch_rx),
            i.mirror_lost,
            if i.valid { "complete" } else { "INCOMPLETE" },
            w.trace
        );
    }
    if let Some(r) = &s.back_to_back {
        println!(
            "  back-to-back (RFC 2544 §26.4): {:.1} frames at {} pps (repeats: {:?}), after {} trials{}{}",
            r.mean,
            group(r.pps.round() as u64),
            r.frames,
            r.trials.len(),
            if r.at_bound {
                "; every burst up to the bound passed: the DUT may take more"
            } else {
                ""
            },
            if r.tester_limited {
                "; the tester sent less than some burst"
            } else {
                ""
            }
        );
    }
    verdict_lines(&s.expect, s.verdict, &s.name, &s.results);
}

/// A stateful test: a line per interval with connections and
/// transactions per second, goodput, resets and the flows held.
fn stateful(
    args: &Args,
    spec: &wirelab_spec::load::LoadSpec,
    abort: &Arc<AtomicBool>,
) -> Result<u8> {
    require_root()?;
    let st = spec.stateful.as_ref().expect("checked by the caller");
    let json = args.json;
    if !json {
        let (c, v) = (st.clients.as_ref(), st.servers.as_ref());
        println!(
            "{}: {} connections kept open through {} to {} emulated server(s), {} B responses, lines every {} for {}",
            spec.name.as_deref().unwrap_or("load"),
            c.map_or(0, |c| c.connections),
            spec.dut.kind.name(),
            v.map_or(0, |v| v.count),
            v.map_or(0, |v| v.response.0),
            spec.interval,
            spec.duration,
        );
        println!(
            "  {:>13}  {:>9} {:>9} {:>10} {:>6} {:>13}",
            "interval", "conn/s", "trans/s", "Mbit/s", "resets", "active c/s"
        );
    }
    let opts = RunOptions {
        abort: abort.clone(),
        ..RunOptions::new(&args.out)
    };
    let out = match wirelab_lab::stateful::run(spec, &opts, |i| {
        if json {
            println!("{}", serde_json::to_value(i).unwrap_or_default());
        } else {
            println!(
                "  {:5.2}-{:5.2} s  {:>9} {:>9} {:>10.1} {:>6} {:>13}",
                i.start_s,
                i.end_s,
                group(i.connections_per_s.round() as u64),
                group(i.transactions_per_s.round() as u64),
                i.goodput_bps / 1e6,
                i.resets,
                format!("{}/{}", i.active_clients, i.active_servers),
            );
        }
    }) {
        Ok(o) => o,
        Err(e @ wirelab_lab::Error::BadInput(_)) => {
            eprintln!("wirelab: {:#}", anyhow::Error::from(e));
            return Ok(code::ERROR);
        }
        Err(e) => return Err(e.into()),
    };
    let s = &out.summary;
    if json {
        // The same object as summary.json, on one line.
        println!("{}", s.to_json()?);
        return Ok(exit_code(out.verdict));
    }
    let o = &s.outcome;
    println!(
        "  {} connections ({:.0}/s), {} transactions, goodput {:.1} Mbit/s, {} resets{}",
        group(o.connections),
        o.connections_per_second,
        group(o.transactions),
        o.goodput_bps / 1e6,
        o.resets,
        if o.drained {
            ""
        } else {
            "; the drain did not end every flow"
        }
    );
    if let Some(h) = &o.haproxy {
        println!(
            "  haproxy: frontend {} sessions, {} requests; backend {} sessions, {} 2xx (EFSMs: {} requests sent, {} responses received whole)",
            h.frontend_sessions, h.frontend_requests, h.backend_sessions, h.backend_2xx,
            h.efsm_requests_sent, h.efsm_transactions
        );
    }
    verdict_lines(&s.expect, s.verdict, &s.name, &s.results);
    Ok(exit_code(out.verdict))
}

/// Each claim, then the verdict with the test's name and results folder.
fn verdict_lines(expect: &[wirelab_lab::load::Claim], verdict: &str, name: &str, results: &str) {
    for c in expect {
        println!(
            "  {} {}: {}",
            if c.pass { "ok  " } else { "FAIL" },
            c.claim,
            c.observed
        );
    }
    println!("{verdict} {name}  {results}");
}
