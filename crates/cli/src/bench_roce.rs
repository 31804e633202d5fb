//! `wirelab bench roce`: goodput and message rate of wirelab's RoCEv2
//! transport, one QP and 16 QPs, through the full switch pipeline (events
//! armed, every packet mirrored), next to iperf3's UDP goodput on the same
//! path with the same number of streams and the same payload per datagram.
//! The goal: at least 0.8 of iperf3's UDP goodput.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wirelab_capture::Dumper;
use wirelab_netns::{run as sh, Lab};
use wirelab_plan::Plan;

use crate::run::{arm_roce_flows, arm_switch};

/// Payload bytes per packet: the RoCE path MTU that fits a 1500-byte link
/// (60 bytes of IP, UDP, BTH and ICRC).
const MTU: u32 = 1024;
/// Bytes each run moves: long enough for the rate to settle, short enough
/// for a 2-core CI machine.
const TOTAL: u64 = 64 << 20;
const MESSAGE: u64 = 16 << 10;

struct Result1 {
    goodput_bps: f64,
    messages_per_s: f64,
}

/// Bytes in flight however many QPs: the lab's veth backlog
/// (net.core.netdev_max_backlog, 1000 packets) drops what a larger burst
/// puts in it, and go-back-N pays for every drop with a window.
const IN_FLIGHT: u64 = 256 << 10;

fn plan(qps: u32, verb: &str) -> Result<Plan> {
    let messages = (TOTAL / MESSAGE) as u32 / qps;
    let depth = (IN_FLIGHT / MESSAGE / qps as u64).max(1);
    let yaml = format!(
        "topology:\n  hosts: [{{name: a}}, {{name: b}}]\n\
         stack: {{roce: {{line_rate: 100gbit}}}}\n\
         traffic:\n  transport: roce\n  connections:\n    - {{from: a, to: b, count: {qps}, verb: {verb}, messages: {messages}, message_size: {MESSAGE}, tx_depth: {depth}, mtu: {MTU}}}\n\
         events:\n  - {{connection: 1, packet: 1, iteration: 99, action: drop}}\n"
    );
    crate::bench::bench_plan(&yaml)
}

fn roce(qps: u32, verb: &str, abort: &Arc<AtomicBool>) -> Result<Result1> {
    let plan = plan(qps, verb)?;
    let lab = Lab::up(&plan)?;
    let switch = arm_switch(&plan, &lab, false, None)?;
    let dumper = Dumper::start(&switch, Duration::ZERO)?;
    let prepared = wirelab_workload::roce::prepare(&plan)?;
    arm_roce_flows(&plan, &switch, &prepared.meta)?;
    let stop = wirelab_workload::Stop {
        abort: abort.clone(),
        deadline: Instant::now() + Duration::from_secs(120),
        limit: Duration::from_secs(120),
    };
    let (reports, _) = wirelab_workload::roce::run(&plan, prepared, &stop);
    dumper.finish()?;
    drop(lab);
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    if let Some(e) = reports.iter().find_map(|r| r.error.clone()) {
        bail!("RoCE workload failed: {e}");
    }
    let msgs: Vec<_> = reports.iter().flat_map(|r| r.messages.iter()).collect();
    let start = msgs.iter().map(|m| m.posted_ns).min().unwrap_or(0);
    let end = msgs.iter().map(|m| m.completed_ns).max().unwrap_or(0);
    let secs = (end.saturating_sub(start)) as f64 / 1e9;
    if secs <= 0.0 {
        bail!("no messages completed");
    }
    Ok(Result1 {
        goodput_bps: msgs.len() as f64 * MESSAGE as f64 * 8.0 / secs,
        messages_per_s: msgs.len() as f64 / secs,
    })
}

/// iperf3's UDP goodput from a to b through the same pipeline: `streams`
/// parallel streams, unlimited rate, MTU-byte datagrams, 2 seconds.
fn iperf3(streams: u32) -> Result<f64> {
    let plan = plan(streams, "write")?;
    let lab = Lab::up(&plan)?;
    let switch = arm_switch(&plan, &lab, false, None)?;
    let dumper = Dumper::start(&switch, Duration::ZERO)?;
    let (a, b) = (&plan.hosts[0], &plan.hosts[1]);
    let mut server = std::process::Command::new("ip")
        .args(["netns", "exec", &b.ns, "iperf3", "-s", "-1", "-B"])
        .arg(b.ip.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting iperf3 (make deps installs it)")?;
    std::thread::sleep(Duration::from_millis(300));
    let out = sh(
        "ip",
        &[
            "netns",
            "exec",
            &a.ns,
            "iperf3",
            "-c",
            &b.ip.to_string(),
            "-u",
            "-b",
            "0",
            "-l",
            &MTU.to_string(),
            "-t",
            "2",
            "-P",
            &streams.to_string(),
            "--json",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    dumper.finish()?;
    drop(lab);
    let out = out?;
    let v: serde_json::Value = serde_json::from_str(&out).context("iperf3 --json output")?;
    // UDP: the receiver's count of datagrams that arrived (iperf3's
    // sum_received, or sum less the lost ones in older versions).
    let end = &v["end"];
    if let Some(bps) = end["sum_received"]["bits_per_second"].as_f64() {
        return Ok(bps);
    }
    let s = &end["sum"];
    match (s["bits_per_second"].as_f64(), s["lost_percent"].as_f64()) {
        (Some(bps), Some(lost)) => Ok(bps * (1.0 - lost / 100.0)),
        _ => bail!("iperf3 reported no UDP totals: {out}"),
    }
}

pub fn run(abort: &Arc<AtomicBool>) -> Result<()> {
    println!(
        "wirelab bench roce: {} MiB of {} KiB RDMA writes ({} KiB in flight, path MTU {MTU}) through the full pipeline",
        TOTAL >> 20,
        MESSAGE >> 10,
        IN_FLIGHT >> 10
    );
    println!("baseline: iperf3 -u -b 0 -l {MTU}, same lab, same pipeline, as many streams as QPs");
    println!(
        "{:>4}  {:>14}  {:>12}  {:>16}  {:>8}",
        "QPs", "RoCE goodput", "messages/s", "iperf3 UDP", "ratio"
    );
    let mut worst: f64 = f64::INFINITY;
    for qps in [1u32, 16] {
        let r = roce(qps, "write", abort)?;
        let base = iperf3(qps)?;
        let ratio = r.goodput_bps / base;
        worst = worst.min(ratio);
        println!(
            "{:>4}  {:>9.1} Mb/s  {:>12.0}  {:>11.1} Mb/s  {:>8.2}",
            qps,
            r.goodput_bps / 1e6,
            r.messages_per_s,
            base / 1e6,
            ratio
        );
    }
    println!(
        "goal: RoCE/iperf3 >= 0.80; {}",
        if worst >= 0.8 { "met" } else { "not met" }
    );
    Ok(())
}
