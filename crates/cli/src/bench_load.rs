//! `wirelab bench load`: Norma's tester (issue 20) against the software
//! generators users reach for, on the same lab and CPUs, medians over
//! rounds:
//!
//! - **generation rate**, 64- and 1518-byte frames: wirelab's generator
//!   asked for the port's line rate (10 Gbit/s), and trafgen (netsniff-ng,
//!   one CPU, its packet-mmap ring) sending the same frame, both through
//!   the same Linux bridge to the same receiver; what arrives at the
//!   receiver per second; and the path's limit, the least a source can do
//!   (each live frame sent on as it is) into the least a receiver can do
//!   (count and XDP_DROP), on the same path and CPU;
//! - **rate error** at the receiver over `seconds`, at rates from 10,000
//!   frames/s to 500,000 (about the most this lab forwards without loss
//!   on two cores): wirelab's version-counted stream, as it runs by
//!   default and with `catch_up: 100ms`, against iperf3 `-u -b` (its
//!   server's count over its own interval);
//! - **HTTP transactions per second** through haproxy to nginx (four
//!   workers' worth of backends, one worker), one request per connection
//!   and then kept alive: wirelab's EFSM clients against wrk (`-t1`, with
//!   `Connection: close`, then as it runs by default) with as many
//!   connections, each with the tester's own CPU time: the responders'
//!   BPF run time (kernel.bpf_stats_enabled), wrk's process time.

use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::bench_record::sh;
use wirelab_lab::RunOptions;
use wirelab_netns::tester::{TesterLab, RX_DEV, TX_DEV};
use wirelab_spec::load::DutKind;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// "median [min..max]" of rate errors.
fn spread(v: &mut [f64]) -> String {
    let m = median(v);
    format!("{m:+.2e} [{:+.1e}..{:+.1e}]", v[0], v[v.len() - 1])
}

/// wirelab's receiver count per second for a stream of `size`-byte frames
/// at `pps` through a bridge for `secs`: (received pps, rate error).
fn wirelab(abort: &Arc<AtomicBool>, size: u32, pps: f64, secs: f64) -> Result<(f64, f64)> {
    wirelab_with(abort, size, pps, secs, "")
}

/// As `wirelab`, with more of the stream's keys (`, catch_up: 100ms`).
fn wirelab_with(
    abort: &Arc<AtomicBool>,
    size: u32,
    pps: f64,
    secs: f64,
    more: &str,
) -> Result<(f64, f64)> {
    let text = format!(
        "name: bench-load\ndut: {{kind: bridge}}\nduration: {secs}s\ninterval: {}s\nstream: {{size: {size}, pps: {pps}{more}}}\n",
        (secs / 2.0).max(0.5)
    );
    let spec = wirelab_spec::load::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = tempfile::tempdir()?;
    let opts = RunOptions {
        abort: abort.clone(),
        ..RunOptions::new(dir.path())
    };
    let out = wirelab_lab::load::run(&spec, &opts, |_| {})?;
    let o = &out.summary.outcome.outcome;
    let rx = o.received_pps.context("nothing arrived")?;
    Ok((rx, (rx - pps) / pps))
}

/// trafgen sending `size`-byte frames as fast as it can on one CPU for
/// `secs`: frames per second the receiver took in.
fn trafgen(size: u32, secs: f64) -> Result<f64> {
    let id = format!("bl{}", std::process::id());
    let lab = TesterLab::up(&id, DutKind::Bridge, 1500, None)?;
    lab.learn()?;
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("0x{b:02x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let payload = size as usize - 4 - 42;
    // trafgen's packet syntax: one frame, the template's headers.
    let octets = |a: std::net::Ipv4Addr| {
        a.octets()
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let conf = format!(
        "{{ {}, {}, 0x08, 0x00, 0x45, 0x00, const16({}), 0x00, 0x00, 0x40, 0x00, 64, 17, csumip(14, 33), \
         {}, {}, const16(40000), const16(7001), const16({}), 0x00, 0x00, fill(0x00, {payload}) }}\n",
        mac(lab.next_hop_mac),
        mac(lab.tx_mac),
        20 + 8 + payload,
        octets(lab.tx_ip),
        octets(lab.rx_ip),
        8 + payload,
    );
    let dir = tempfile::tempdir()?;
    let cfg = dir.path().join("frame.cfg");
    std::fs::write(&cfg, conf)?;
    let rx = |ns: &str| -> Result<u64> {
        let v: serde_json::Value = serde_json::from_str(&sh(
            "ip",
            &["-n", ns, "-s", "-j", "link", "show", "dev", RX_DEV],
        )?)?;
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .context("no rx count")
    };
    let before = rx(&lab.rx_ns)?;
    let t0 = std::time::Instant::now();
    // Bounded by timeout (SIGINT, as a user stops it); exit 124 is the
    // timeout's.
    let o = Command::new("ip")
        .args(["netns", "exec", &lab.tx_ns, "timeout", "-s", "INT"])
        .arg(format!("{secs}"))
        .args(["trafgen", "--dev", TX_DEV, "--conf"])
        .arg(&cfg)
        .args(["--cpus", "1"])
        .output()
        .context("trafgen (make deps installs netsniff-ng)")?;
    let elapsed = t0.elapsed().as_secs_f64();
    ensure!(
        elapsed > secs * 0.9,
        "trafgen stopped after {elapsed:.2} s: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::thread::sleep(Duration::from_millis(100));
    let got = rx(&lab.rx_ns)? - before;
    ensure!(
        got > 0,
        "trafgen sent nothing: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(got as f64 / elapsed.min(secs))
}

/// The path's limit for `size`-byte frames through the same bridge: the
/// least a source can do into the least a sink can do (count and
/// XDP_DROP), on one CPU as the generator runs, for `secs`.
fn path_limit(size: u32, secs: f64) -> Result<f64> {
    let id = format!("bp{}", std::process::id());
    let lab = TesterLab::up(&id, DutKind::Bridge, 1500, None)?;
    lab.learn()?;
    // The frame without its FCS, as the generator's template.
    let frame = wirelab_load::template::udp(
        &wirelab_load::template::Udp {
            src_mac: lab.tx_mac,
            dst_mac: lab.next_hop_mac,
            src: lab.tx_ip,
            dst: lab.rx_ip,
            sport: 40000,
            dport: 7001,
        },
        size as usize - 4,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ports = wirelab_workload::load::Ports {
        tx_ns: lab.tx_ns.clone(),
        tx_dev: TX_DEV.into(),
        rx_ns: lab.rx_ns.clone(),
        rx_dev: RX_DEV.into(),
        tx_peer: Some((lab.dut_ns.clone(), wirelab_netns::tester::DUT_IN.into())),
        rx_peer: None,
    };
    Ok(wirelab_workload::load::path_limit(
        &ports,
        &frame.bytes,
        Duration::from_secs_f64(secs),
    )?)
}

/// iperf3 `-u -b` at `pps` frames of `size` bytes for `secs`: the rate
/// error of what its server received.
fn iperf3(size: u32, pps: f64, secs: u32) -> Result<f64> {
    let id = format!("bi{}", std::process::id());
    let lab = TesterLab::up(&id, DutKind::Bridge, 1500, None)?;
    lab.learn()?;
    let server = Command::new("ip")
        .args([
            "netns", "exec", &lab.rx_ns, "timeout", "60", "iperf3", "-s", "-1", "-p", "5201",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()?;
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Reap(server);
    std::thread::sleep(Duration::from_millis(300));
    let len = size as usize - 4 - 42;
    let bits = (pps * len as f64 * 8.0).round() as u64;
    let out = sh(
        "ip",
        &[
            "netns",
            "exec",
            &lab.tx_ns,
            "timeout",
            "60",
            "iperf3",
            "-c",
            &lab.rx_ip.to_string(),
            "-u",
            "-b",
            &bits.to_string(),
            "-l",
            &len.to_string(),
            "-t",
            &secs.to_string(),
            "--json",
        ],
    )?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let sum = &v["end"]["sum"];
    let sent = sum["packets"].as_f64().context("iperf3's packets")?;
    let lost = sum["lost_packets"].as_f64().unwrap_or(0.0);
    let s = sum["seconds"].as_f64().context("iperf3's seconds")?;
    Ok(((sent - lost) / s - pps) / pps)
}

/// Connections both HTTP clients keep open, and the response's body.
const HTTP_CONNECTIONS: u32 = 100;
const HTTP_BODY: u64 = 1024;

/// Requests a kept-alive connection sends: more than a run's worth, so
/// each stays open throughout, as wrk's do.
const KEPT_ALIVE: u32 = 1_000_000;

/// wirelab's EFSM clients through haproxy to nginx for `secs`, one
/// request per connection or kept alive: (transactions/s, the tester's
/// CPU s per second).
fn http_wirelab(abort: &Arc<AtomicBool>, secs: u32, keep_alive: bool) -> Result<(f64, f64)> {
    let requests = if keep_alive { KEPT_ALIVE } else { 1 };
    let text = format!(
        "name: bench-http\ndut: {{kind: haproxy}}\nduration: {secs}s\ninterval: 1s\n\
         stateful:\n  clients: {{efsm: http-client, connections: {HTTP_CONNECTIONS}, requests: {requests}}}\n  \
         servers: {{real: nginx, count: 4, response: {HTTP_BODY}}}\n"
    );
    let spec = wirelab_spec::load::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = tempfile::tempdir()?;
    let opts = RunOptions {
        abort: abort.clone(),
        ..RunOptions::new(dir.path())
    };
    let out = wirelab_lab::stateful::run(&spec, &opts, |_| {})?;
    let o = &out.summary.outcome;
    ensure!(o.resets == 0, "{} resets", o.resets);
    let cpu = o
        .tester_cpu_ns
        .context("no BPF run time (kernel.bpf_stats_enabled)")?;
    Ok((
        o.transactions as f64 / o.seconds,
        cpu as f64 / 1e9 / o.seconds,
    ))
}

/// wrk with as many connections, one request each or kept alive, through
/// the same DUT and server for `secs`: (requests/s, wrk's CPU s per
/// second).
fn http_wrk(secs: u32, keep_alive: bool) -> Result<(f64, f64)> {
    use wirelab_lab::{haproxy, nginx};
    let id = format!("bh{}", std::process::id());
    let lab = TesterLab::up(&id, DutKind::Haproxy, 1500, None)?;
    let at = wirelab_netns::tester::addresses(DutKind::Haproxy);
    let servers: Vec<_> = (0..4).map(|i| (at.rx, 8080 + i)).collect();
    let dut = wirelab_netns::dut_dir(&id);
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(dut);
    // The CPUs wirelab's run gives the tester and the DUT.
    let (tester_cpu, dut_cpu) = wirelab_lab::stateful::cpus();
    lab.split_cpus(tester_cpu, dut_cpu)?;
    let _h = haproxy::Haproxy::start(
        &lab.dut_ns,
        &id,
        Some(dut_cpu),
        &haproxy::Config {
            listen: (at.dut_tx_side, 80),
            servers: servers.clone(),
            maxconn: 1000,
        },
    )?;
    let _n = nginx::Nginx::start(&lab.rx_ns, &id, Some(tester_cpu), &servers, HTTP_BODY)?;
    use nix::sys::resource::{getrusage, UsageWho};
    let cpu = || -> Result<f64> {
        let u = getrusage(UsageWho::RUSAGE_CHILDREN)?;
        let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
        Ok(t(u.user_time()) + t(u.system_time()))
    };
    let before = cpu()?;
    let (cpu_arg, conns, dur) = (
        tester_cpu.to_string(),
        format!("-c{HTTP_CONNECTIONS}"),
        format!("-d{secs}s"),
    );
    let url = format!("http://{}/", at.dut_tx_side);
    let mut args = vec![
        "netns", "exec", &lab.tx_ns, "taskset", "-c", &cpu_arg, "wrk", "-t1", &conns, &dur,
    ];
    if !keep_alive {
        args.extend(["-H", "Connection: close"]);
    }
    args.push(&url);
    let out = sh("ip", &args)?;
    let used = cpu()? - before;
    let rps = out
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("wrk's Requests/sec in: {out}"))?;
    ensure!(!out.contains("Non-2xx"), "wrk saw non-2xx responses: {out}");
    Ok((rps, used / f64::from(secs)))
}

/// kernel.bpf_stats_enabled on while it lives (the BPF programs' run
/// time is counted only then), back to what it was after.
struct BpfStats(String);

impl BpfStats {
    const PATH: &'static str = "/proc/sys/kernel/bpf_stats_enabled";
    fn on() -> Result<BpfStats> {
        let was = std::fs::read_to_string(Self::PATH)?;
        std::fs::write(Self::PATH, "1")?;
        Ok(BpfStats(was.trim().to_string()))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    Rate,
    Error,
    Burst,
    Http,
}

pub fn run(abort: &Arc<AtomicBool>, rounds: usize, seconds: u32, only: &[Part]) -> Result<()> {
    let part = |p: Part| only.is_empty() || only.contains(&p);
    if part(Part::Rate) {
        generation(abort, rounds)?;
    }
    if part(Part::Error) {
        rate_error(abort, rounds, seconds)?;
    }
    if part(Part::Burst) {
        burst(abort, rounds)?;
    }
    if part(Part::Http) {
        http(abort, rounds, seconds)?;
    }
    Ok(())
}

/// Bursts of 100 frames at a peak of 200,000 frames/s, 5,000 on average,
/// through a bridge for 2 s, every frame's arrival kept: the gaps inside
/// bursts and the periods between them against the request.
fn burst(abort: &Arc<AtomicBool>, rounds: usize) -> Result<()> {
    println!("burst shape at the receiver: bursts of 100 at 200,000 frames/s, one per 20 ms (medians of {rounds} rounds of 2 s)");
    println!(
        "  {:>24}  {:>10}  {:>10}  {:>10}  {:>10}",
        "", "asked µs", "mean", "p50", "p99"
    );
    let text =
        "name: bench-burst\ndut: {kind: bridge}\nduration: 2s\ninterval: 1s\nsample_every: 1\n\
                stream: {size: 64, pps: 5000, burst: {packets: 100, peak_pps: 200000}}\n";
    let spec = wirelab_spec::load::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rows: Vec<(&str, Vec<wirelab_load::shape::Gaps>, f64)> = vec![
        ("sent: inside a burst", Vec::new(), 0.0),
        ("sent: burst to burst", Vec::new(), 0.0),
        ("received: inside", Vec::new(), 0.0),
        ("received: burst to burst", Vec::new(), 0.0),
    ];
    for _ in 0..rounds {
        let dir = tempfile::tempdir()?;
        let opts = RunOptions {
            abort: abort.clone(),
            ..RunOptions::new(dir.path())
        };
        let out = wirelab_lab::load::run(&spec, &opts, |_| {})?;
        let shapes = out.summary.burst_shape.context("no burst shape")?;
        for (k, b) in [shapes.sent, shapes.received].iter().enumerate() {
            rows[2 * k].1.push(b.gaps.context("no gap inside a burst")?);
            rows[2 * k].2 = b.requested_gap_ns;
            rows[2 * k + 1].1.push(b.periods.context("no period")?);
            rows[2 * k + 1].2 = b.requested_period_ns;
        }
    }
    for (what, v, a) in rows {
        let pick = |f: fn(&wirelab_load::shape::Gaps) -> f64| {
            let mut x: Vec<f64> = v.iter().map(f).collect();
            median(&mut x) / 1e3
        };
        println!(
            "  {what:>24}  {:>10.1}  {:>10.1}  {:>10.1}  {:>10.1}",
            a / 1e3,
            pick(|g| g.mean),
            pick(|g| g.p50 as f64),
            pick(|g| g.p99 as f64)
        );
    }
    Ok(())
}

fn generation(abort: &Arc<AtomicBool>, rounds: usize) -> Result<()> {
    println!("generation rate (frames/s at the receiver, through a Linux bridge; medians of {rounds} rounds of 3 s)");
    // The path's limit: what the receiving side sinks with XDP_DROP from
    // a source that does nothing per frame (issue 20's goal: the
    // generator within 80% of it).
    println!(
        "  {:>6}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}",
        "frame", "wirelab", "trafgen -P1", "ratio", "path limit", "of the limit"
    );
    for size in [64u32, 1518] {
        let line = 10e9 / ((f64::from(size) + 20.0) * 8.0);
        let (mut w, mut t, mut l) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            w.push(wirelab(abort, size, line, 3.0)?.0);
            t.push(trafgen(size, 3.0)?);
            l.push(path_limit(size, 3.0)?);
        }
        let (w, t, l) = (median(&mut w), median(&mut t), median(&mut l));
        println!(
            "  {size:>5}B  {w:>12.0}  {t:>12.0}  {:>7.2}x  {l:>12.0}  {:>11.1}%",
            w / t,
            100.0 * w / l
        );
    }
    Ok(())
}

fn rate_error(abort: &Arc<AtomicBool>, rounds: usize, seconds: u32) -> Result<()> {
    println!(
        "rate error at the receiver over {seconds} s, 64-byte frames (medians [ranges] of {rounds} rounds)"
    );
    // The default gives up slots a stall made it miss (no burst the DUT
    // would be blamed for); `catch_up` sends them late instead, as
    // iperf3 does, so the average holds.
    println!(
        "  {:>10}  {:>28}  {:>28}  {:>28}",
        "rate", "wirelab", "wirelab, catch_up: 100ms", "iperf3 -u -b"
    );
    for pps in [10_000.0, 100_000.0, 300_000.0, 500_000.0] {
        let (mut w, mut c, mut i) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            w.push(wirelab(abort, 64, pps, f64::from(seconds))?.1);
            c.push(wirelab_with(abort, 64, pps, f64::from(seconds), ", catch_up: 100ms")?.1);
            i.push(iperf3(64, pps, seconds)?);
        }
        println!(
            "  {:>10.0}  {:>28}  {:>28}  {:>28}",
            pps,
            spread(&mut w),
            spread(&mut c),
            spread(&mut i)
        );
    }
    Ok(())
}

fn http(abort: &Arc<AtomicBool>, rounds: usize, seconds: u32) -> Result<()> {
    println!(
        "HTTP transactions/s through haproxy to nginx, {HTTP_CONNECTIONS} connections, {HTTP_BODY}-byte GETs (medians of {rounds} rounds of {seconds} s)"
    );
    println!(
        "  {:<22}  {:>12}  {:>12}  {:>7}   tester CPU s/s: {:>8}  {:>8}",
        "connections", "wirelab", "wrk -t1", "ratio", "wirelab", "wrk"
    );
    let _stats = BpfStats::on()?;
    for (what, keep_alive) in [("one request each", false), ("kept alive", true)] {
        let (mut w, mut k, mut wc, mut kc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (t, c) = http_wirelab(abort, seconds, keep_alive)?;
            w.push(t);
            wc.push(c);
            let (t, c) = http_wrk(seconds, keep_alive)?;
            k.push(t);
            kc.push(c);
        }
        let (w, k) = (median(&mut w), median(&mut k));
        println!(
            "  {what:<22}  {w:>12.0}  {k:>12.0}  {:>6.2}x   {:>23.3}  {:>8.3}",
            w / k,
            median(&mut wc),
            median(&mut kc)
        );
    }
    Ok(())
}
