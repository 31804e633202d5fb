//! `wirelab bench vaqm`: what the vAQM stage (NetBump) adds to the switch's
//! own forwarding cost, as a ratio against the same pipeline without the
//! stage, measured in the same run.
//!
//! Two views. (1) `BPF_PROG_TEST_RUN`'s repeat loop on one 1500-byte TCP
//! frame: in-kernel ns per packet and the single-core forwarding rate it
//! implies, for the pipeline without the stage and with it in each regime
//! (queue empty and passing, DCTCP marking every packet, RED averaging
//! between its thresholds). The ring is drained between chunks so the mirror
//! stage always takes its real path. (2) A real TCP transfer through a lab,
//! with and without a `vaqm:` queue on the receiver's port: the kernel's own
//! run-time statistics of the switch program per packet under load.
//!
//! NetBump (seed 003 §6.2) reported tens of µs of added latency for its
//! userspace bump; the goal here is under 5% added to the pipeline.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use etherparse::{IpEcn, PacketBuilder};
use wirelab_dataplane::{Config, Discipline, Switch, VqConfig};

use crate::bench::{bench_plan, measure, median, Datapath};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
/// Records one chunk leaves in the ring: well under the 16 MiB ring at a
/// 128-byte snap, so no chunk ever finds it full.
const CHUNK: u32 = 20_000;

#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    vq: Option<VqConfig>,
    /// Config::vaqm_lock: what a bump whose ports span CPUs would pay.
    lock: bool,
}

const PASSING: VqConfig = VqConfig {
    rate_bps: 1 << 50,
    buffer_bytes: 0,
    discipline: Discipline::Dctcp { k_bytes: 1 << 20 },
};

const CASES: [Case; 5] = [
    Case {
        name: "without vAQM",
        vq: None,
        lock: false,
    },
    // Drains far faster than the loop sends: the estimate stays at one
    // packet and DCTCP passes everything.
    Case {
        name: "DCTCP, passing",
        vq: Some(PASSING),
        lock: false,
    },
    // Drains far slower: above K from the second packet, every packet gets
    // CE and its checksum rewritten.
    Case {
        name: "DCTCP, marking",
        vq: Some(VqConfig {
            rate_bps: 1_000_000,
            buffer_bytes: 0,
            discipline: Discipline::Dctcp { k_bytes: 3000 },
        }),
        lock: false,
    },
    // The loop outruns the drain rate, so the queue only grows; the upper
    // threshold is out of reach, the average stays between the thresholds
    // and every packet draws a random number.
    Case {
        name: "RED, probabilistic",
        vq: Some(VqConfig {
            rate_bps: 1_000_000,
            buffer_bytes: 0,
            discipline: Discipline::Red {
                min_bytes: 1500,
                max_bytes: u32::MAX as u64,
                w_q: 0.002,
                max_p: 0.01,
                drop: false,
            },
        }),
        lock: false,
    },
    Case {
        name: "DCTCP, pass, locked",
        vq: Some(PASSING),
        lock: true,
    },
];

fn frame() -> Result<Vec<u8>> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40000, 5001, 1, 65535)
        .ack(1);
    let payload = vec![0x5a; 1500 - 14 - 20 - 20];
    let mut out = Vec::with_capacity(1500);
    b.write(&mut out, &payload)?;
    // ECT(0), so DCTCP and RED mark rather than drop (RFC 3168 §5).
    out[15] |= IpEcn::Ect0.value();
    let csum = etherparse::Ipv4HeaderSlice::from_slice(&out[14..])?
        .to_header()
        .calc_header_checksum();
    out[24..26].copy_from_slice(&csum.to_be_bytes());
    Ok(out)
}

fn load(case: &Case) -> Result<Switch> {
    let sw = Switch::load(Config {
        vaqm: case.vq.is_some(),
        vaqm_lock: case.lock,
        ..Config::default()
    })
    .context("loading the switch")?;
    // Test runs arrive on loopback (ifindex 1); the frame goes to B's port.
    sw.add_port(1, 1)?;
    sw.add_fwd(MAC_B, 4242, 2)?;
    if let Some(q) = &case.vq {
        sw.set_vq(1, q)?;
        sw.vq_for_port(2, 1)?;
    }
    Ok(sw)
}

/// Mean ns per packet over `chunks` repeat loops of CHUNK packets.
fn ns_per_packet(sw: &Switch, frame: &[u8], chunks: u32) -> Result<f64> {
    let mut total = 0u64;
    for _ in 0..chunks {
        total += sw.time_per_run(frame, CHUNK, false)?;
        sw.discard_ring()?;
    }
    Ok(total as f64 / chunks as f64)
}

pub fn run(abort: &Arc<AtomicBool>, rounds: usize, chunks: u32) -> Result<()> {
    let frame = frame()?;
    println!(
        "wirelab bench vaqm: BPF_PROG_TEST_RUN, one 1500-byte TCP frame, {chunks} x {CHUNK} repeats per round,"
    );
    println!(
        "median of {rounds} rounds, cases interleaved; Mpps = one core running only the pipeline"
    );
    let switches: Vec<Switch> = CASES.iter().map(load).collect::<Result<_>>()?;
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
    for _ in 0..rounds {
        for (i, sw) in switches.iter().enumerate() {
            per[i].push(ns_per_packet(sw, &frame, chunks)?);
        }
    }
    // The CE-marking case really marked, the RED case really averaged
    // between its thresholds: otherwise the rows measure the wrong path.
    let marked = switches[2].vq_state(1)?;
    let red = switches[3].vq_state(1)?;
    println!(
        "{:>20}  {:>9}  {:>7}  {:>9}  {:>8}",
        "pipeline", "ns/pkt", "Mpps", "added ns", "ratio"
    );
    let base = median(per[0].clone());
    for (i, c) in CASES.iter().enumerate() {
        let ns = median(per[i].clone());
        println!(
            "{:>20}  {:>9.1}  {:>7.2}  {:>9.1}  {:>8.3}",
            c.name,
            ns,
            1e3 / ns,
            ns - base,
            ns / base
        );
    }
    println!(
        "(DCTCP marking: {} of {} packets marked; RED: {} marked, {} passed)",
        marked.marks,
        marked.pkts,
        red.marks,
        red.pkts - red.marks
    );

    println!();
    println!(
        "in a lab: one 64 MiB TCP transfer, switch program run time per packet (kernel stats),"
    );
    println!(
        "without vaqm: and with a DCTCP queue on the receiver's port; median of {rounds} rounds"
    );
    let _stats = wirelab_dataplane::RunTimeStats::enable()?;
    let base_yaml = "topology:\n  hosts: [{name: a}, {name: b}]\nstack: {congestion_control: cubic, ecn: true}\n\
         traffic:\n  connections:\n    - {from: a, to: b, messages: 1, message_size: 64MiB}\n";
    let with_yaml = format!(
        "{base_yaml}vaqm:\n  queues:\n    - {{port: b, rate: 100gbit, dctcp: {{k: 1MB}}}}\n"
    );
    let mut lab: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, yaml) in [base_yaml, with_yaml.as_str()].iter().enumerate() {
            let plan = bench_plan(yaml)?;
            let m = measure(&plan, Datapath::Pipeline, abort, Duration::from_secs(120))?;
            lab[i].push(m.prog.1 as f64 / m.prog.0.max(1) as f64);
        }
    }
    let (a, b) = (median(lab[0].clone()), median(lab[1].clone()));
    println!(
        "{:>20}  {:>9.1}\n{:>20}  {:>9.1}  added {:.1} ns, ratio {:.3}",
        "without vAQM",
        a,
        "with vAQM",
        b,
        b - a,
        b / a
    );
    println!("(locked: Config::vaqm_lock, for ports spread over CPUs; the lab runs the switch on one CPU)");
    println!("goal: ratio <= 1.05 (NetBump, seed 003 §6.2: tens of µs per packet in userspace)");
    Ok(())
}
