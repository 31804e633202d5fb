//! Benchmarks that print ratios against a baseline measured in the same run
//! (never timed tests).
//!
//! `switch-overhead`: mean message completion time of back-to-back messages
//! through (a) the full pipeline with mirroring and armed, non-matching event
//! tables, (b) a forward-only eBPF program, (c) a plain Linux bridge.
//! Lumina measured 1.04-1.07 for (a)/(b) on a Tofino.
//!
//! `capture`: at rising TCP rates, whether wirelab's capture keeps 100% of
//! the packets entering the switch, next to tcpdump on the same port at the
//! same load.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wirelab_capture::Dumper;
use wirelab_lab::capability::{self, Cx};
use wirelab_lab::switch::{self, Mode};
use wirelab_netns::{run as sh, Lab};
use wirelab_plan::Plan;
use wirelab_workload::{Finished, Stop};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Datapath {
    Pipeline,
    /// The pipeline cut after this many stages (`Mode::Cut`).
    Cut(u8),
    ForwardOnly,
    Bridge,
}

impl Datapath {
    fn name(self) -> &'static str {
        match self {
            Datapath::Pipeline => "full pipeline",
            Datapath::Cut(_) => "cut pipeline",
            Datapath::ForwardOnly => "forward-only",
            Datapath::Bridge => "linux bridge",
        }
    }

    /// Runs the pipeline, whole or cut: flows and events armed, the capture
    /// drained.
    fn armed(self) -> bool {
        matches!(self, Datapath::Pipeline | Datapath::Cut(_))
    }
}

pub(crate) fn bench_plan(yaml: &str) -> Result<Plan> {
    let mut spec =
        wirelab_spec::parse(yaml, wirelab_analyze::catalog()).context("benchmark spec")?;
    spec.name = Some("bench".into());
    Ok(wirelab_plan::plan(
        &spec,
        &wirelab_lab::new_run_id(),
        rand::random(),
    )?)
}

pub(crate) fn stop(abort: &Arc<AtomicBool>, timeout: Duration) -> Stop {
    Stop {
        abort: abort.clone(),
        deadline: Instant::now() + timeout,
        limit: timeout,
    }
}

/// A workload through the hand-off on `switch` (its capabilities armed),
/// or straight through a datapath that has nothing to arm.
pub(crate) fn drive(
    plan: &Plan,
    lab: &Lab,
    switch: Option<&wirelab_dataplane::Switch>,
    stop: &Stop,
) -> Result<Finished> {
    match switch {
        Some(switch) => {
            let cx = Cx {
                plan,
                lab,
                switch,
                clock_offset: 0,
                results: None,
            };
            let mut caps = capability::for_plan(plan, false);
            let (_, f) = wirelab_lab::handoff(
                &cx,
                &mut caps,
                stop,
                &mut String::new(),
                &wirelab_lab::Quiet,
            )?;
            Ok(f)
        }
        None => {
            let mut wl = wirelab_workload::for_plan(plan);
            wl.prepare(plan)?;
            wl.connect(plan)?;
            Ok(wl.run(plan, stop)?)
        }
    }
}

/// The switch of a benchmark lab, with the plan's capabilities.
pub(crate) fn arm(plan: &Plan, lab: &Lab, mode: Mode) -> Result<wirelab_dataplane::Switch> {
    let mut caps = match mode {
        Mode::Pipeline | Mode::Cut(_) | Mode::Alternating(_) => capability::for_plan(plan, false),
        Mode::ForwardOnly => Vec::new(),
    };
    Ok(switch::arm(plan, lab, mode, &mut caps, None)?)
}

fn bridge(plan: &Plan) -> Result<()> {
    let sw = plan.switch_ns.as_str();
    sh("ip", &["-n", sw, "link", "add", "br0", "type", "bridge"])?;
    for h in &plan.hosts {
        sh(
            "ip",
            &["-n", sw, "link", "set", &h.switch_ifname, "master", "br0"],
        )?;
    }
    sh("ip", &["-n", sw, "link", "set", "br0", "up"])?;
    Ok(())
}

pub(crate) struct Measured {
    mct_ns: Vec<u64>,
    /// Kernel-measured (runs, ns) of the switch program, if there is one.
    pub prog: (u64, u64),
    goodput_bps: u64,
    lost: u64,
    received: u64,
}

/// One lab, one datapath, one workload; the lab is gone when this returns.
pub(crate) fn measure(
    plan: &Plan,
    dp: Datapath,
    abort: &Arc<AtomicBool>,
    timeout: Duration,
) -> Result<Measured> {
    let lab = Lab::up(plan)?;
    let mut switch = None;
    let mut dumper = None;
    match dp {
        Datapath::Bridge => bridge(plan)?,
        Datapath::ForwardOnly => switch = Some(arm(plan, &lab, Mode::ForwardOnly)?),
        Datapath::Pipeline | Datapath::Cut(_) => {
            let mode = match dp {
                Datapath::Cut(n) => Mode::Cut(n),
                _ => Mode::Pipeline,
            };
            let s = arm(plan, &lab, mode)?;
            // Drained as in a run, so a full ring never makes the mirror
            // stage take its cheaper "lost" path.
            dumper = Some(Dumper::start(&s, Duration::ZERO)?);
            switch = Some(s);
        }
    }
    let stop = stop(abort, timeout);
    // Flows and events are armed on the pipeline only: the baselines
    // classify nothing.
    let armed = switch.as_ref().filter(|_| dp.armed());
    let reports = drive(plan, &lab, armed, &stop)?.reports;
    let prog = switch
        .as_ref()
        .map_or((0, 0), |s| s.prog_stats(dp == Datapath::ForwardOnly));
    let mut lost = 0;
    let mut received = 0;
    if let (Some(d), Some(s)) = (dumper, &switch) {
        std::thread::sleep(Duration::from_millis(20));
        let records = d.finish()?;
        for h in &plan.hosts {
            let c = s.counters(h.port)?;
            lost += c.mirror_lost;
            received += c.rx_pkts;
        }
        // A cut before the mirror stage records nothing.
        if dp == Datapath::Pipeline && records.len() as u64 + lost != received {
            bail!(
                "capture accounting is off: {} records + {lost} lost != {received} received",
                records.len()
            );
        }
    }
    drop(lab);
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let r = &reports[0];
    if let Some(e) = &r.error {
        bail!("{} workload failed: {e}", dp.name());
    }
    Ok(Measured {
        mct_ns: r.messages.iter().map(|m| m.mct_ns).collect(),
        prog,
        goodput_bps: r.goodput_bps,
        lost,
        received,
    })
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// The median; of an even count, the mean of the middle two (NaN of
/// nothing).
pub(crate) fn median(v: Vec<f64>) -> f64 {
    wirelab_model::median(v).unwrap_or(f64::NAN)
}

/// Median and range (lowest, highest) of a case's rounds.
pub(crate) fn spread(v: &[f64]) -> (f64, f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v.to_vec()), lo, hi)
}

fn fmt_us(ns: f64) -> String {
    format!("{:.1}us", ns / 1e3)
}

pub fn switch_overhead(
    abort: &Arc<AtomicBool>,
    messages: u32,
    rounds: usize,
    breakdown: bool,
) -> Result<()> {
    println!(
        "wirelab bench switch-overhead: {messages} back-to-back messages (write, tx_depth 1) on one connection;"
    );
    println!("mean message completion time, median of {rounds} rounds, datapaths interleaved");
    let _stats = wirelab_dataplane::RunTimeStats::enable()?;
    println!(
        "{:>7}  {:>14}  {:>14}  {:>14}  {:>9}  {:>13}  {:>11}  {:>16}  {:>9}",
        "size",
        "full pipeline",
        "forward-only",
        "linux bridge",
        "full/fwd",
        "rounds range",
        "full/bridge",
        "ns/pkt full/fwd",
        "added ns"
    );
    for size in ["1KB", "10KB", "100KB"] {
        let yaml = overhead_spec(messages, size);
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); 3];
        let mut prog = [(0u64, 0u64); 2];
        let dps = [Datapath::Pipeline, Datapath::ForwardOnly, Datapath::Bridge];
        for _ in 0..rounds {
            for (i, dp) in dps.iter().enumerate() {
                let plan = bench_plan(&yaml)?;
                let m = measure(&plan, *dp, abort, Duration::from_secs(120))?;
                per[i].push(mean(&m.mct_ns));
                if i < 2 {
                    prog[i].0 += m.prog.0;
                    prog[i].1 += m.prog.1;
                }
            }
        }
        let [a, b, c] = [
            median(per[0].clone()),
            median(per[1].clone()),
            median(per[2].clone()),
        ];
        // Each round's ratio, interleaved runs: the spread says whether
        // the rounds are enough for the effect measured.
        let ratios: Vec<f64> = per[0].iter().zip(&per[1]).map(|(x, y)| x / y).collect();
        let (_, lo, hi) = spread(&ratios);
        println!(
            "{:>7}  {:>14}  {:>14}  {:>14}  {:>9.3}  {:>13}  {:>11.3}  {:>7.0}/{:<8.0}  {:>9.0}",
            size,
            fmt_us(a),
            fmt_us(b),
            fmt_us(c),
            a / b,
            format!("{lo:.3}-{hi:.3}"),
            a / c,
            per_pkt(prog[0]),
            per_pkt(prog[1]),
            per_pkt(prog[0]) - per_pkt(prog[1])
        );
    }
    println!("goal: full/fwd <= 1.03 (Lumina on Tofino: 1.04-1.07); kernel ns/pkt full <= 2x fwd");
    // The switch runs inline on the forwarding path (tc ingress, before
    // the redirect), so what it adds to a packet's one-way latency is its
    // run time beyond forwarding's.
    println!("added ns: one-way latency the pipeline adds per packet (Lumina's injector on a Tofino: < 400 ns)");
    paired(abort, rounds)?;
    if breakdown {
        stage_breakdown(abort, messages, rounds)?;
    }
    Ok(())
}

/// How long each datapath's turn lasts in `paired`.
const TURN: Duration = Duration::from_millis(20);

/// One lab of `paired`: per pair of turns (the pipeline's, then the
/// baseline's), the ratio of their mean MCTs; and the kernel's
/// (runs, ns) of the switch program in each datapath's turns.
struct PairedRound {
    ratios: Vec<f64>,
    prog: [(u64, u64); 2],
}

fn paired_round(
    abort: &Arc<AtomicBool>,
    size: &str,
    messages: u32,
    cut: u8,
) -> Result<PairedRound> {
    let plan = bench_plan(&overhead_spec(messages, size))?;
    let lab = Lab::up(&plan)?;
    let s = arm(&plan, &lab, Mode::Alternating(cut))?;
    let dumper = Dumper::start(&s, Duration::ZERO)?;
    let stop = stop(abort, Duration::from_secs(120));
    let done = AtomicBool::new(false);
    // (when the turn began, the baseline's turn?, the program's (runs, ns)
    // then); the last entry closes the last turn.
    let turns = std::sync::Mutex::new(vec![(
        wirelab_workload::now_ns(),
        false,
        s.prog_stats(false),
    )]);
    let finished = std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut forward = false;
            loop {
                std::thread::sleep(TURN);
                let at = s.prog_stats(false);
                let finish = done.load(Ordering::SeqCst);
                forward = !forward;
                s.set_bench_forward(forward && !finish);
                turns
                    .lock()
                    .expect("not poisoned")
                    .push((wirelab_workload::now_ns(), forward, at));
                if finish {
                    return;
                }
            }
        });
        let r = drive(&plan, &lab, Some(&s), &stop);
        done.store(true, Ordering::SeqCst);
        r
    })?;
    dumper.finish()?;
    drop(lab);
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let r = &finished.reports[0];
    if let Some(e) = &r.error {
        bail!("paired workload failed: {e}");
    }
    let turns = turns.into_inner().expect("not poisoned");
    let mut prog = [(0u64, 0u64); 2];
    // Per turn: the MCTs of the messages posted and completed within it.
    let mut per_turn: Vec<Vec<u64>> = vec![Vec::new(); turns.len().saturating_sub(1)];
    for (i, w) in turns.windows(2).enumerate() {
        let (from, forward, a) = w[0];
        let (to, _, b) = w[1];
        let k = usize::from(forward);
        prog[k].0 += b.0 - a.0;
        prog[k].1 += b.1 - a.1;
        per_turn[i] = r
            .messages
            .iter()
            .filter(|m| m.posted_ns >= from && m.completed_ns < to)
            .map(|m| m.mct_ns)
            .collect();
    }
    // Turns go pipeline, baseline, pipeline, ...: pair 2k with 2k + 1. The
    // first pair warms the connection up (slow start) and is left out, as
    // is a pair where either turn completed fewer than 5 messages (the
    // workload's last moments).
    let ratios = per_turn
        .chunks_exact(2)
        .skip(1)
        .filter(|p| p[0].len() >= 5 && p[1].len() >= 5)
        .map(|p| mean(&p[0]) / mean(&p[1]))
        .collect();
    Ok(PairedRound { ratios, prog })
}

/// The MCT ratio with the two datapaths taking turns on one connection in
/// one lab (`TURN` each), so that the machine's drift between labs, which
/// makes the separate labs' ratio swing by ±20%, falls on both: the median
/// of the pairs' ratios per round, over `rounds` labs of about 3 s each.
///
/// The capture floor (`BENCH_FLOOR`: the clock, one ring record,
/// forwarding; switch.bpf.c) takes turns with the baseline the same way,
/// in labs of its own interleaved with the pipeline's: what any switch
/// that captures every packet adds to the MCT on this kernel, and so how
/// much of the pipeline's ratio its stages could still take off.
fn paired(abort: &Arc<AtomicBool>, rounds: usize) -> Result<()> {
    println!(
        "paired in one lab: the pipeline (or the capture floor) and the forward-only baseline take turns of {} ms on one connection",
        TURN.as_millis()
    );
    println!(
        "{:>7}  {:>9}  {:>9}  {:>11}  {:>11}  {:>9}  {:>16}",
        "size", "messages", "datapath", "x/fwd MCT", "rounds", "pairs", "ns/pkt x/fwd"
    );
    let datapaths = [("full", 0), ("floor", wirelab_dataplane::BENCH_FLOOR)];
    // About 3 s of messages a round at this machine's MCTs.
    for (size, messages) in [("1KB", 30_000), ("10KB", 15_000), ("100KB", 3_000)] {
        let mut medians = vec![Vec::new(); datapaths.len()];
        let mut pairs = vec![0; datapaths.len()];
        let mut prog = vec![[(0u64, 0u64); 2]; datapaths.len()];
        for _ in 0..rounds {
            for (d, (_, cut)) in datapaths.iter().enumerate() {
                let r = paired_round(abort, size, messages, *cut)?;
                pairs[d] += r.ratios.len();
                medians[d].push(median(r.ratios));
                for k in 0..2 {
                    prog[d][k].0 += r.prog[k].0;
                    prog[d][k].1 += r.prog[k].1;
                }
            }
        }
        for (d, (name, _)) in datapaths.iter().enumerate() {
            let (mid, lo, hi) = spread(&medians[d]);
            println!(
                "{:>7}  {:>9}  {:>9}  {:>11.4}  {:>11}  {:>9}  {:>7.0}/{:<8.0}",
                size,
                messages,
                name,
                mid,
                format!("{lo:.3}-{hi:.3}"),
                pairs[d],
                per_pkt(prog[d][0]),
                per_pkt(prog[d][1]),
            );
        }
    }
    println!(
        "x/fwd MCT: the median over rounds of each round's median pair ratio; rounds: its range"
    );
    println!(
        "floor: the ingress stage (port, counters, bpf_ktime_get_ns), one capture record and forwarding, \
         no other stage: what capturing every packet costs on this kernel"
    );
    Ok(())
}

fn per_pkt((n, t): (u64, u64)) -> f64 {
    t as f64 / n.max(1) as f64
}

/// Where a packet's nanoseconds go: the kernel-measured cost per packet
/// of the pipeline cut after each stage (`Mode::Cut`), in the same lab
/// and workload, minus the cut before it. The forward-only program is the
/// baseline of the first stage; a cut forwards as it does, so the last
/// row is the pipeline's own verdict stage against plain forwarding.
fn stage_breakdown(abort: &Arc<AtomicBool>, messages: u32, rounds: usize) -> Result<()> {
    let size = "10KB";
    let yaml = overhead_spec(messages, size);
    let stages = wirelab_dataplane::STAGES;
    // Datapaths in order: forward-only, then cut after 1, 2, ... stages;
    // the whole pipeline last (cut 0 = none).
    let mut dps = vec![Datapath::ForwardOnly];
    dps.extend((1..stages.len() as u8).map(Datapath::Cut));
    dps.push(Datapath::Pipeline);
    // Levers that change the lab rather than the program, measured in the
    // same rounds against the whole pipeline.
    let levers: [Lever; 2] = [
        (
            "capture ring 1 MiB instead of 16 MiB (stays in cache)",
            |p| p.ring_bytes = 1 << 20,
        ),
        ("capture ring 256 KiB", |p| p.ring_bytes = 256 << 10),
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); dps.len()];
    let mut lev: Vec<Vec<f64>> = vec![Vec::new(); levers.len()];
    let bar = progress(rounds * (dps.len() + levers.len()), "stage breakdown");
    for _ in 0..rounds {
        for (i, dp) in dps.iter().enumerate() {
            let plan = bench_plan(&yaml)?;
            let m = measure(&plan, *dp, abort, Duration::from_secs(120))?;
            ns[i].push(per_pkt(m.prog));
            bar.inc(1);
        }
        for (i, (_, change)) in levers.iter().enumerate() {
            let mut plan = bench_plan(&yaml)?;
            change(&mut plan);
            let m = measure(&plan, Datapath::Pipeline, abort, Duration::from_secs(120))?;
            if m.lost > 0 {
                bail!("the lever `{}` lost {} records", levers[i].0, m.lost);
            }
            lev[i].push(per_pkt(m.prog));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let med: Vec<f64> = ns.into_iter().map(median).collect();
    println!();
    println!(
        "per-stage cost, {size} messages, kernel ns per packet (median of {rounds}; a stage's \
         cost = the pipeline cut after it minus cut before it):"
    );
    println!("{:>10}  {:>8}  {:>10}", "stage", "ns/pkt", "cumulative");
    println!("{:>10}  {:>8}  {:>10.0}", "(forward)", "", med[0]);
    for (i, name) in stages.iter().enumerate() {
        let d = med[i + 1] - med[i];
        let note = if *name == "vaqm" {
            "  (not in this spec: compiled out)"
        } else {
            ""
        };
        println!("{:>10}  {:>8.0}  {:>10.0}{note}", name, d, med[i + 1]);
    }
    println!(
        "{:>10}  {:>8}  {:>10.0}  = {:.2}x forward-only",
        "total",
        "",
        med[stages.len()],
        med[stages.len()] / med[0].max(1.0)
    );
    for (i, (name, _)) in levers.iter().enumerate() {
        let m = median(lev[i].clone());
        println!(
            "lever: {name}: {m:.0} ns/pkt ({:+.0})",
            m - med[stages.len()]
        );
    }
    Ok(())
}

/// A change to a benchmark's lab, by name.
type Lever = (&'static str, fn(&mut Plan));

fn progress(n: usize, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs, {eta} left")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// The switch-overhead workload: back-to-back messages on one connection,
/// with armed events that never match (iteration 99 is never reached).
fn overhead_spec(messages: u32, size: &str) -> String {
    format!(
        "topology:\n  hosts: [{{name: a}}, {{name: b}}]\nstack: {{congestion_control: cubic}}\n\
         traffic:\n  connections:\n    - {{from: a, to: b, messages: {messages}, message_size: {size}}}\n\
         events:\n  - {{connection: 1, packet: 1, iteration: 99, action: drop}}\n  - {{connection: 1, packet: all, iteration: 99, action: ecn}}\n"
    )
}

fn tcpdump_start(ns: &str, dev: &str, file: &std::path::Path) -> Result<Child> {
    let child = Command::new("ip")
        .args([
            "netns", "exec", ns, "tcpdump", "-i", dev, "-Q", "in", "-s", "128", "-n", "-w",
        ])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting tcpdump (make deps installs it)")?;
    Ok(child)
}

/// Stops tcpdump and reads its own account: (captured, dropped by kernel).
fn tcpdump_stop(child: Child) -> Result<(u64, u64)> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    let out = child.wait_with_output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let num = |what: &str| {
        err.lines()
            .find(|l| l.contains(what))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    match (num("packets captured"), num("dropped by kernel")) {
        (Some(c), Some(d)) => Ok((c, d)),
        _ => bail!("could not read tcpdump's statistics: {err}"),
    }
}

pub fn capture(abort: &Arc<AtomicBool>) -> Result<()> {
    println!("wirelab bench capture: one bulk TCP transfer per rate (bottleneck on the receiver's port);");
    println!("wirelab: every packet entering the switch, 128-byte snap, 16 MiB ring;");
    println!("tcpdump: the data port's ingress, 128-byte snap, same load, forward-only switch");
    println!(
        "{:>10}  {:>12}  {:>10}  {:>10}  {:>12}  {:>12}  {:>12}",
        "rate", "goodput", "wl pkts", "wl lost", "tcpdump pkts", "tcpdump drop", "wl complete"
    );
    let dir = tempfile_dir()?;
    let mut best: Option<String> = None;
    for rate in ["200mbit", "500mbit", "1gbit", "2gbit", "5gbit", "none"] {
        let (bottleneck, size) = match rate {
            "none" => (String::new(), "256MiB".to_string()),
            r => {
                let bps: wirelab_spec::BitsPerSec = r.parse().map_err(anyhow::Error::msg)?;
                // About half a second of transfer at that rate.
                let bytes = (bps.0 / 16).clamp(4 << 20, 256 << 20);
                (
                    format!("\n      bottleneck: {r}\n      bottleneck_buffer: 1MiB"),
                    format!("{bytes}"),
                )
            }
        };
        let yaml = format!(
            "topology:\n  hosts:\n    - name: a\n    - name: b{bottleneck}\nstack: {{congestion_control: cubic}}\n\
             traffic:\n  connections:\n    - {{from: a, to: b, messages: 1, message_size: {size}}}\n"
        );
        let plan = bench_plan(&yaml)?;
        let wl = measure(&plan, Datapath::Pipeline, abort, Duration::from_secs(120))?;

        let plan = bench_plan(&yaml)?;
        let pcap = dir.join(format!("tcpdump-{rate}.pcap"));
        let lab = Lab::up(&plan)?;
        let _switch = arm(&plan, &lab, Mode::ForwardOnly)?;
        let td = tcpdump_start(&plan.switch_ns, &plan.hosts[0].switch_ifname, &pcap)?;
        std::thread::sleep(Duration::from_millis(300)); // tcpdump attaches
        let stop = stop(abort, Duration::from_secs(120));
        let reports = drive(&plan, &lab, None, &stop)?.reports;
        std::thread::sleep(Duration::from_millis(100));
        let (td_pkts, td_drop) = tcpdump_stop(td)?;
        drop(lab);
        let _ = std::fs::remove_file(&pcap);
        if let Some(e) = &reports[0].error {
            bail!("tcpdump baseline workload failed: {e}");
        }
        let complete = wl.lost == 0;
        if complete {
            best = Some(format!(
                "{} ({:.2} Gbit/s goodput)",
                rate,
                wl.goodput_bps as f64 / 1e9
            ));
        }
        println!(
            "{:>10}  {:>9.3} Gb  {:>10}  {:>10}  {:>12}  {:>12}  {:>12}",
            rate,
            wl.goodput_bps as f64 / 1e9,
            wl.received,
            wl.lost,
            td_pkts,
            td_drop,
            if complete { "100%" } else { "no" }
        );
    }
    match best {
        Some(b) => println!("highest rate with 100% capture: {b}"),
        None => println!("no rate was captured completely"),
    }
    println!();
    println!("small packets: iperf3 UDP at its highest rate (-b 0), 2 s, one stream; same load for tcpdump");
    println!(
        "{:>7}  {:>10}  {:>10}  {:>10}  {:>12}  {:>12}  {:>12}",
        "frame", "sent pps", "wl pkts", "wl lost", "tcpdump pkts", "tcpdump drop", "wl complete"
    );
    for frame in [64u32, 128] {
        if abort.load(Ordering::SeqCst) {
            break;
        }
        let r = small_packets(frame, &dir);
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        println!(
            "{:>6}B  {:>10.0}  {:>10}  {:>10}  {:>12}  {:>12}  {:>12}",
            frame,
            r.sent_pps,
            r.wl_pkts,
            r.wl_lost,
            r.td_pkts,
            r.td_drop,
            if r.wl_lost == 0 { "100%" } else { "no" }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// iperf3 from the plan's host a to host b: UDP at the highest rate
/// (`-b 0`), `payload`-byte datagrams, `streams` streams, 2 s; its JSON
/// report. The server serves that one test and exits.
pub(crate) fn iperf3_udp(plan: &Plan, payload: u32, streams: u32) -> Result<serde_json::Value> {
    let (a, b) = (&plan.hosts[0], &plan.hosts[1]);
    let mut server = Command::new("ip")
        .args(["netns", "exec", &b.ns, "iperf3", "-s", "-1", "-B"])
        .arg(b.ip.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 (make deps installs it)")?;
    std::thread::sleep(Duration::from_millis(300));
    let (b_ip, payload, streams) = (b.ip.to_string(), payload.to_string(), streams.to_string());
    let out = sh(
        "ip",
        &[
            "netns", "exec", &a.ns, "iperf3", "-c", &b_ip, "-u", "-b", "0", "-l", &payload, "-t",
            "2", "-P", &streams, "--json",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    serde_json::from_str(&out?).context("iperf3 --json output")
}

struct Small {
    sent_pps: f64,
    wl_pkts: u64,
    wl_lost: u64,
    td_pkts: u64,
    td_drop: u64,
}

/// 2 s of iperf3 UDP datagrams making `frame`-byte Ethernet frames, from a
/// to b at the highest rate iperf3 reaches in a host namespace: once
/// through the full pipeline (every packet mirrored, the records counted
/// against the packets the ports received), once through the forward-only
/// switch with tcpdump on a's port.
fn small_packets(frame: u32, dir: &std::path::Path) -> Result<Small> {
    let payload = frame - 14 - 20 - 8;
    let yaml = "topology:\n  hosts: [{name: a}, {name: b}]\n\
                traffic:\n  connections:\n    - {from: a, to: b, messages: 1, message_size: 1KB}\n";
    let iperf = |plan: &Plan| -> Result<f64> {
        let v = iperf3_udp(plan, payload, 1)?;
        let s = &v["end"]["sum"];
        match (s["packets"].as_f64(), s["seconds"].as_f64()) {
            (Some(p), Some(t)) if t > 0.0 => Ok(p / t),
            _ => bail!("iperf3 reported no UDP packet count: {v}"),
        }
    };

    let plan = bench_plan(yaml)?;
    let lab = Lab::up(&plan)?;
    let switch = arm(&plan, &lab, Mode::Pipeline)?;
    let dumper = Dumper::start(&switch, Duration::ZERO)?;
    let sent_pps = iperf(&plan)?;
    std::thread::sleep(Duration::from_millis(20));
    let records = dumper.finish()?;
    let (mut lost, mut received) = (0, 0);
    for h in &plan.hosts {
        let c = switch.counters(h.port)?;
        lost += c.mirror_lost;
        received += c.rx_pkts;
    }
    if records.len() as u64 + lost != received {
        bail!(
            "capture accounting is off: {} records + {lost} lost != {received} received",
            records.len()
        );
    }
    drop(switch);
    drop(lab);

    let plan = bench_plan(yaml)?;
    let lab = Lab::up(&plan)?;
    let _switch = arm(&plan, &lab, Mode::ForwardOnly)?;
    let pcap = dir.join(format!("tcpdump-udp-{frame}.pcap"));
    let td = tcpdump_start(&plan.switch_ns, &plan.hosts[0].switch_ifname, &pcap)?;
    std::thread::sleep(Duration::from_millis(300)); // tcpdump attaches
    let r = iperf(&plan);
    std::thread::sleep(Duration::from_millis(100));
    let (td_pkts, td_drop) = tcpdump_stop(td)?;
    drop(lab);
    let _ = std::fs::remove_file(&pcap);
    r?;
    Ok(Small {
        sent_pps,
        wl_pkts: received,
        wl_lost: lost,
        td_pkts,
        td_drop,
    })
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("wirelab-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
