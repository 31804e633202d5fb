//! `wirelab bench roce`: goodput and message rate of wirelab's RoCEv2
//! transport, one QP and 16 QPs, through the full switch pipeline (events
//! armed, every packet mirrored), next to iperf3's UDP goodput on the same
//! path with the same number of streams and the same payload per datagram.
//! The goal: at least 0.8 of iperf3's UDP goodput.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use wirelab_capture::Dumper;
use wirelab_netns::Lab;
use wirelab_plan::Plan;

use crate::bench::{median, spread};
use wirelab_lab::switch::Mode;

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
    /// Go-back-N recoveries the devices counted: the responder's
    /// out-of-sequence arrivals and the requester's ACK timeouts.
    recoveries: i64,
}

/// Bytes in flight however many QPs: 512 packets, half the lab's per-CPU
/// backlog (net.core.netdev_max_backlog, 1000 packets), which drops what a
/// larger burst puts in it, and go-back-N pays for every drop with a
/// window. The recoveries line of the output shows none happened.
const IN_FLIGHT: u64 = 512 << 10;

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
    let switch = crate::bench::arm(&plan, &lab, Mode::Pipeline)?;
    let dumper = Dumper::start(&switch, Duration::ZERO)?;
    let stop = crate::bench::stop(abort, Duration::from_secs(120));
    let wirelab_workload::Finished {
        reports,
        device_counters: counters,
    } = crate::bench::drive(&plan, &lab, Some(&switch), &stop)?;
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
        recoveries: wirelab_workload::roce::deltas(&counters)
            .values()
            .flat_map(|c| ["out_of_sequence", "local_ack_timeout_err"].map(|k| c.get(k)))
            .flatten()
            .sum(),
    })
}

/// iperf3's UDP goodput from a to b through the same pipeline: `streams`
/// parallel streams, unlimited rate, MTU-byte datagrams, 2 seconds.
fn iperf3(streams: u32) -> Result<f64> {
    let plan = plan(streams, "write")?;
    let lab = Lab::up(&plan)?;
    let switch = crate::bench::arm(&plan, &lab, Mode::Pipeline)?;
    let dumper = Dumper::start(&switch, Duration::ZERO)?;
    let v = crate::bench::iperf3_udp(&plan, MTU, streams);
    dumper.finish()?;
    drop(lab);
    let v = v?;
    // UDP: the receiver's count of datagrams that arrived (iperf3's
    // sum_received, or sum less the lost ones in older versions).
    let end = &v["end"];
    if let Some(bps) = end["sum_received"]["bits_per_second"].as_f64() {
        return Ok(bps);
    }
    let s = &end["sum"];
    match (s["bits_per_second"].as_f64(), s["lost_percent"].as_f64()) {
        (Some(bps), Some(lost)) => Ok(bps * (1.0 - lost / 100.0)),
        _ => bail!("iperf3 reported no UDP totals: {v}"),
    }
}

pub fn run(abort: &Arc<AtomicBool>, rounds: usize) -> Result<()> {
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    println!(
        "wirelab bench roce: {} MiB of {} KiB RDMA writes ({} KiB in flight, path MTU {MTU}) through the full pipeline",
        TOTAL >> 20,
        MESSAGE >> 10,
        IN_FLIGHT >> 10
    );
    println!("baseline: iperf3 -u -b 0 -l {MTU}, same lab, same pipeline, as many streams as QPs");
    // Both figures move by tens of percent from run to run on a shared VM
    // (where the scheduler puts the threads against the lab's RPS CPUs), so
    // each round runs RoCE and iperf3 back to back and the ratio is taken
    // per round; the medians are reported with their ranges.
    println!("median of {rounds} rounds, RoCE and iperf3 interleaved; [min-max] over the rounds");
    println!(
        "{:>4}  {:>24}  {:>12}  {:>24}  {:>18}",
        "QPs", "RoCE goodput, Mb/s", "messages/s", "iperf3 UDP, Mb/s", "ratio"
    );
    let mut worst: f64 = f64::INFINITY;
    let mut recoveries = 0;
    // On stderr, drawn only on a terminal (indicatif).
    let pb = indicatif::ProgressBar::new(2 * rounds as u64).with_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:20} round {pos}/{len}")
            .expect("a valid template"),
    );
    for qps in [1u32, 16] {
        let (mut good, mut rate, mut base, mut ratio) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            pb.set_message(format!("{qps} QPs"));
            let r = roce(qps, "write", abort)?;
            let b = iperf3(qps)?;
            good.push(r.goodput_bps / 1e6);
            rate.push(r.messages_per_s);
            recoveries += r.recoveries;
            base.push(b / 1e6);
            ratio.push(r.goodput_bps / b);
            pb.inc(1);
        }
        let (g, glo, ghi) = spread(&good);
        let (b, blo, bhi) = spread(&base);
        let (q, qlo, qhi) = spread(&ratio);
        worst = worst.min(q);
        pb.suspend(|| {
            println!(
                "{:>4}  {:>7.1} [{:>6.1}-{:>6.1}]  {:>12.0}  {:>7.1} [{:>6.1}-{:>6.1}]  {:>5.2} [{:.2}-{:.2}]",
                qps,
                g,
                glo,
                ghi,
                median(rate),
                b,
                blo,
                bhi,
                q,
                qlo,
                qhi
            );
        });
    }
    pb.finish_and_clear();
    println!("go-back-N recoveries in the RoCE runs (out_of_sequence + local_ack_timeout_err): {recoveries}");
    println!(
        "goal: median RoCE/iperf3 >= 0.80; {}",
        if worst >= 0.8 { "met" } else { "not met" }
    );
    Ok(())
}
