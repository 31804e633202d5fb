//! The pipeline's per-stage cost measured in the kernel alone, through
//! `BPF_PROG_TEST_RUN`'s repeat loop: precise (no lab, no scheduler
//! between packets), for comparing levers; `switch-overhead --breakdown`
//! gives the same split on real traffic.

use anyhow::{Context, Result};
use etherparse::PacketBuilder;
use wirelab_dataplane::{Action, Config, FlowKey, Switch, BENCH_FLOOR, STAGES};

use crate::bench::median;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const A: [u8; 4] = [198, 18, 0, 1];
const B: [u8; 4] = [198, 18, 0, 2];
/// Repeats per test run; the ring (16 MiB) takes them all, and is emptied
/// between runs so the mirror stage never takes its "ring full" path.
const CHUNK: u32 = 20_000;

fn tcp(from_a: bool, seq: u32, syn: bool, payload: usize) -> Result<Vec<u8>> {
    let (s, d, sm, dm, sp, dp) = if from_a {
        (A, B, MAC_A, MAC_B, 40001, 5201)
    } else {
        (B, A, MAC_B, MAC_A, 5201, 40001)
    };
    let b = PacketBuilder::ethernet2(sm, dm)
        .ipv4(s, d, 64)
        .tcp(sp, dp, seq, 65535);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, &vec![0x5a; payload])?;
    Ok(out)
}

/// A switch cut after `cut` stages (0 = whole), configured as the lab
/// configures it (`lever` changes that), with connection 1 armed and
/// synced and two events that never match, as in switch-overhead.
fn load(cut: u8, lever: impl FnOnce(&mut Config)) -> Result<Switch> {
    let mut config = Config {
        bench_cut: cut,
        // As in the lab, whose switch ports are steered to one CPU.
        track_lock: false,
        ..Config::default()
    };
    lever(&mut config);
    let sw = Switch::load(config).context("loading the switch")?;
    // Test runs arrive on loopback (ifindex 1).
    sw.add_port(1, 1)?;
    sw.add_fwd(MAC_B, 4242, 2)?;
    sw.add_fwd(MAC_A, 1, 1)?;
    let key = |a: [u8; 4], b: [u8; 4], sp, dp| FlowKey {
        saddr: a.into(),
        daddr: b.into(),
        sport: sp,
        dport: dp,
    };
    sw.add_flow(key(A, B, 40001, 5201), 1, true, false)?;
    sw.add_flow(key(B, A, 5201, 40001), 1, false, true)?;
    sw.add_event(1, 1, 99, Action::Drop, 1)?;
    sw.add_event(1, 0, 99, Action::Ecn, 2)?;
    sw.test_run(&tcp(true, 1000, true, 0)?)?;
    sw.discard_ring()?;
    Ok(sw)
}

fn ns_per_packet(sw: &Switch, frame: &[u8], forward_only: bool, chunks: u32) -> Result<f64> {
    let mut total = 0u64;
    for _ in 0..chunks {
        total += sw.time_per_run(frame, CHUNK, forward_only)?;
        sw.discard_ring()?;
    }
    Ok(total as f64 / f64::from(chunks))
}

pub fn run(rounds: usize, chunks: u32) -> Result<()> {
    // A full-sized data segment (every repeat after the first is a
    // retransmission: a new iteration and the window search) and the
    // reverse direction's pure ACK (classified, never tracked).
    let frames = [
        ("data 1514B", tcp(true, 1001, false, 1460)?),
        ("ack 54B", tcp(false, 1, false, 0)?),
    ];
    println!(
        "per-stage cost in BPF_PROG_TEST_RUN: {chunks} x {CHUNK} repeats, median of {rounds} rounds, \
         cuts interleaved"
    );
    let cuts: Vec<Switch> = (1..=STAGES.len() as u8)
        .map(|n| load(if n as usize == STAGES.len() { 0 } else { n }, |_| {}))
        .collect::<Result<_>>()?;
    // Levers that are settings, measured in the same rounds: the whole
    // pipeline with one setting changed.
    let levers: Vec<(&str, Switch)> = vec![(
        "with the tracking lock (track_lock, ports on several CPUs)",
        load(0, |c| c.track_lock = true)?,
    )];
    // The capture floor (switch.bpf.c, capture_floor): the ingress stage,
    // one capture record and forwarding; and the same with the clock read
    // from a map (the tests' clock, an inlined array load) instead of
    // bpf_ktime_get_ns, which shows the clock's share apart.
    let floor = load(BENCH_FLOOR, |_| {})?;
    let unclocked = load(BENCH_FLOOR, |c| c.test_clock = true)?;
    unclocked.set_test_clock(1)?;
    let mut fwd = vec![Vec::new(); frames.len()];
    let mut per = vec![vec![Vec::new(); cuts.len()]; frames.len()];
    let mut lev = vec![vec![Vec::new(); levers.len()]; frames.len()];
    let mut flo = vec![Vec::new(); frames.len()];
    let mut unc = vec![Vec::new(); frames.len()];
    for _ in 0..rounds {
        for (f, (_, frame)) in frames.iter().enumerate() {
            fwd[f].push(ns_per_packet(&cuts[0], frame, true, chunks)?);
            for (i, sw) in cuts.iter().enumerate() {
                per[f][i].push(ns_per_packet(sw, frame, false, chunks)?);
            }
            for (i, (_, sw)) in levers.iter().enumerate() {
                lev[f][i].push(ns_per_packet(sw, frame, false, chunks)?);
            }
            flo[f].push(ns_per_packet(&floor, frame, false, chunks)?);
            unc[f].push(ns_per_packet(&unclocked, frame, false, chunks)?);
        }
    }
    print!("{:>10}", "stage");
    for (name, _) in &frames {
        print!("  {name:>12}");
    }
    println!();
    let base: Vec<f64> = fwd.into_iter().map(median).collect();
    let med: Vec<Vec<f64>> = per
        .into_iter()
        .map(|p| p.into_iter().map(median).collect())
        .collect();
    print!("{:>10}", "(forward)");
    for b in &base {
        print!("  {b:>12.1}");
    }
    println!();
    for (i, name) in STAGES.iter().enumerate() {
        print!("{name:>10}");
        for f in 0..frames.len() {
            let before = if i == 0 { base[f] } else { med[f][i - 1] };
            print!("  {:>12.1}", med[f][i] - before);
        }
        println!();
    }
    print!("{:>10}", "total");
    for f in 0..frames.len() {
        print!(
            "  {:>6.1} {:>4.2}x",
            med[f][STAGES.len() - 1],
            med[f][STAGES.len() - 1] / base[f]
        );
    }
    println!();
    // What the floor adds to forwarding is the kernel's (the clock, the
    // ring's reserve and commit): the pipeline's own stages are the rest.
    print!("{:>10}", "floor");
    for f in 0..frames.len() {
        let ns = median(flo[f].clone());
        print!("  {:>6.1} {:>4.2}x", ns, ns / base[f]);
    }
    println!(
        "   (ingress + one capture record + forwarding: the least a switch that captures \
         every packet does here)"
    );
    print!("{:>10}", "stages");
    for f in 0..frames.len() {
        let ns = med[f][STAGES.len() - 1] - median(flo[f].clone());
        print!("  {:>12.1}", ns);
    }
    println!("   (the pipeline's own: total - floor)");
    print!("{:>10}", "clock");
    for f in 0..frames.len() {
        print!(
            "  {:>12.1}",
            median(flo[f].clone()) - median(unc[f].clone())
        );
    }
    println!("   (of the floor: bpf_ktime_get_ns against a clock read from a map)");
    for (i, (name, _)) in levers.iter().enumerate() {
        print!("{name}:");
        for (f, (frame, _)) in frames.iter().enumerate() {
            let ns = median(lev[f][i].clone());
            print!("  {frame} {ns:.1} ({:+.1})", ns - med[f][STAGES.len() - 1]);
        }
        println!();
    }
    Ok(())
}
