//! `wirelab bench eswitch`: the eSwitch stage's cost against the number of
//! masks a packet searches before its own (ScalaCN's "scalability wall",
//! seed 001 §3 S1-S2), measured in the kernel alone through
//! `BPF_PROG_TEST_RUN`'s repeat loop, against the same pipeline without
//! the stage in the same run. Prints ns per packet, the ratio to the
//! pipeline without flow tables, and the cost per mask (the slope); next
//! to each, the same tables with the flow in ScalaCN's hyper mask (§4.3),
//! where `flowtables.optimise: scalacn` puts a flow it has seen.

use anyhow::{Context, Result};
use etherparse::PacketBuilder;
use wirelab_dataplane::eswitch::{Action, Match};
use wirelab_dataplane::{Config, Switch};

use crate::bench::median;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const CHUNK: u32 = 20_000;

/// The bench frame's whole key, as the stage reads it (ingress port 1):
/// what ScalaCN's optimiser activates into the hyper mask.
fn exact() -> Match {
    Match {
        dmac: MAC_B,
        smac: MAC_A,
        saddr: [198, 18, 0, 1],
        daddr: [198, 18, 0, 2],
        sport: 40001,
        dport: 5201,
        proto: 6,
        in_port: 1,
        ..Match::default()
    }
}

/// `load(Some(n))` with ScalaCN's hyper mask (§4.3) ahead of the n masks,
/// the packet's flow activated in it, as `flowtables.optimise: scalacn`
/// leaves a flow it has seen.
fn load_hyper(n: u32) -> Result<Switch> {
    let sw = load(Some(n))?;
    sw.set_es_mask(0, n, &Match::all())?;
    sw.set_es_hyper(0, Some(n))?;
    sw.add_es_entry(
        0,
        n,
        &exact(),
        Action::Forward {
            ifindex: 4242,
            port: 2,
        },
    )?;
    let order: Vec<u16> = std::iter::once(n as u16).chain(0..n as u16).collect();
    sw.set_es_order(0, &order)?;
    Ok(sw)
}

/// A switch whose table 0 holds `masks` masks; the packet's entry is in
/// the last (None: no eSwitch stage at all).
fn load(masks: Option<u32>) -> Result<Switch> {
    let sw = Switch::load(Config {
        eswitch: masks.is_some(),
        ..Config::default()
    })
    .context("loading the switch")?;
    sw.add_port(1, 1)?;
    sw.add_fwd(MAC_B, 4242, 2)?;
    let Some(n) = masks else {
        return Ok(sw);
    };
    for i in 0..n {
        // Distinct prefixes; entries nobody sends to (203.0.113.0/24),
        // except the last mask's, which holds the packet's destination.
        let bits = Match {
            daddr: Match::prefix(8 + (i % 25) as u8),
            dport: if (i / 25) % 2 == 1 { 0xffff } else { 0 },
            proto: 0xff,
            ..Match::default()
        };
        sw.set_es_mask(0, i, &bits)?;
        let last = i == n - 1;
        let e = Match {
            daddr: if last {
                [198, 18, 0, 2]
            } else {
                [203, 0, 113, 1]
            },
            dport: 5201,
            proto: 6,
            ..Match::default()
        };
        let action = if last {
            Action::Forward {
                ifindex: 4242,
                port: 2,
            }
        } else {
            Action::Drop
        };
        sw.add_es_entry(0, i, &e, action)?;
    }
    sw.set_es_order(0, &(0..n as u16).collect::<Vec<_>>())?;
    Ok(sw)
}

fn ns_per_packet(sw: &Switch, frame: &[u8]) -> Result<f64> {
    let ns = sw.time_per_run(frame, CHUNK, false)?;
    sw.discard_ring()?;
    Ok(ns as f64)
}

pub fn run(rounds: usize) -> Result<()> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40001, 5201, 1, 65535)
        .ack(1)
        .write(&mut frame, &[0x5a; 1448])?;
    let counts = [1u32, 2, 4, 8, 16, 32, 64, 128, 256];
    let mut switches = vec![load(None)?];
    for &n in &counts {
        switches.push(load(Some(n))?);
    }
    // The same tables with the flow in the hyper mask (n = 256 leaves no
    // id for it: the stage holds 256 masks a table).
    let hyper_counts: Vec<u32> = counts.iter().copied().filter(|&n| n < 256).collect();
    for &n in &hyper_counts {
        switches.push(load_hyper(n)?);
    }
    // Rounds interleave the cases, so drift hits them all alike.
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); switches.len()];
    for _ in 0..rounds.max(1) {
        for (i, sw) in switches.iter().enumerate() {
            t[i].push(ns_per_packet(sw, &frame)?);
        }
    }
    let med: Vec<f64> = t.into_iter().map(median).collect();
    let base = med[0];
    println!(
        "wirelab bench eswitch: one 1514-byte TCP frame, BPF_PROG_TEST_RUN x {CHUNK}, median of {rounds} rounds"
    );
    println!("  no flow tables             {base:>8.1} ns/packet");
    for (i, n) in counts.iter().enumerate() {
        let ns = med[i + 1];
        let hyper = hyper_counts
            .iter()
            .position(|h| h == n)
            .map(|j| med[1 + counts.len() + j]);
        println!(
            "  {n:>3} mask(s), hit in last  {ns:>8.1} ns/packet  ({:.2}x, +{:.1} ns){}",
            ns / base,
            ns - base,
            hyper.map_or(String::new(), |h| format!(
                "   with the flow in a hyper mask {h:>6.1} ns ({:.2}x)",
                h / base
            ))
        );
    }
    // The hyper mask must have taken the packets, or the column lies.
    for (j, &n) in hyper_counts.iter().enumerate() {
        let (lookups, hits) = switches[1 + counts.len() + j].es_mask_stats(0, n)?;
        anyhow::ensure!(
            lookups > 0 && hits == lookups,
            "the hyper mask over {n} masks missed: {hits} hits of {lookups}"
        );
    }
    // Least squares over the mask counts: the cost of one more mask.
    let xs: Vec<f64> = counts.iter().map(|&n| f64::from(n)).collect();
    let ys = &med[1..];
    let (mx, my) = (
        xs.iter().sum::<f64>() / xs.len() as f64,
        ys.iter().sum::<f64>() / ys.len() as f64,
    );
    let slope = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| (x - mx) * (y - my))
        .sum::<f64>()
        / xs.iter().map(|x| (x - mx).powi(2)).sum::<f64>();
    println!(
        "  per mask searched: {slope:.1} ns (ScalaCN measured 62-88 ns per flow group on a CX-7)"
    );
    Ok(())
}

/// One lab run's costs per packet on one DUT.
struct DutCost {
    /// The switch program's kernel time per packet (with the eSwitch stage
    /// on the eSwitch; capture and hand-off alone in front of OVS).
    switch_ns: f64,
    /// ovs-vswitchd's CPU time per packet (0 on the eSwitch).
    ovs_ns: f64,
    /// Masks searched per packet (eSwitch), subtable lookups per megaflow
    /// hit (OVS).
    lookups: f64,
    /// OVS: the share of packets its exact-match cache answered.
    emc: f64,
}

/// The spec both DUTs run: one UDP flow (4 MB at 1 Gbit/s, about 2,900
/// packets) whose own mask comes after `masks - 1` generated ones.
fn dut_spec(masks: u32, dut: &str) -> String {
    format!(
        "topology:\n  hosts: [{{name: requester}}, {{name: responder}}]\n\
         traffic:\n  transport: udp\n  connections:\n\
         \x20   - {{from: requester, to: responder, rate: 1gbit, messages: 1, message_size: 4MB}}\n\
         flowtables:\n  dut: {dut}\n  generate: {{masks: {}, entries: 4}}\n  tables:\n\
         \x20   - masks:\n        - match: {{dst: 32, proto: true}}\n          entries:\n\
         \x20           - {{dst: responder, proto: udp, action: forward, to: responder}}\n\
         \x20           - {{dst: requester, proto: udp, action: forward, to: requester}}\n",
        masks - 1
    )
}

fn dut_run(
    masks: u32,
    dut: &str,
    out: &std::path::Path,
    abort: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<DutCost> {
    let text = dut_spec(masks, dut);
    let spec = wirelab_spec::parse(&text, wirelab_lab::catalog())
        .map_err(|e| anyhow::anyhow!("the bench's spec: {e}"))?;
    let opts = wirelab_lab::RunOptions {
        abort: abort.clone(),
        ..wirelab_lab::RunOptions::new(out)
    };
    let r = wirelab_lab::run(&spec, None, &opts, &wirelab_lab::Quiet)
        .with_context(|| format!("{masks} masks on {dut}"))?;
    let s = &r.summary;
    anyhow::ensure!(
        s.workload.iter().all(|c| c.error.is_none()),
        "{masks} masks on {dut}: the workload failed"
    );
    let switch_ns = s
        .switch_kernel
        .map(|k| k.ns_per_run)
        .context("the kernel did not count the switch's run time")?;
    Ok(match &s.ovs {
        Some(o) => {
            anyhow::ensure!(
                o.packets > 1000 && o.cpu_ns > 0,
                "{masks} masks on OVS: {} packets, {} ns of CPU",
                o.packets,
                o.cpu_ns
            );
            DutCost {
                switch_ns,
                ovs_ns: o.cpu_ns_per_packet,
                lookups: o.subtable_lookups_per_hit,
                emc: o.emc_hits as f64 / o.packets as f64,
            }
        }
        None => {
            let f = s.flowtables.as_ref().context("no eSwitch summary")?;
            DutCost {
                switch_ns,
                ovs_ns: 0.0,
                lookups: f.masks_per_packet,
                emc: 0.0,
            }
        }
    })
}

/// `wirelab bench eswitch --duts`: both DUTs on the same tables and the
/// same traffic, in labs: the eSwitch stage's cost (the switch program's
/// kernel time per packet) against Open vSwitch's (the switch in front,
/// plus ovs-vswitchd's CPU time per packet), interleaved over rounds.
pub fn duts(abort: &std::sync::Arc<std::sync::atomic::AtomicBool>, rounds: usize) -> Result<()> {
    let _stats = wirelab_dataplane::RunTimeStats::enable()?;
    let out = tempfile::Builder::new()
        .prefix("wirelab-bench-duts")
        .tempdir()
        .context("a folder for the runs")?;
    let counts = [1u32, 16, 64, 200];
    let cases: Vec<(u32, &str)> = counts
        .iter()
        .flat_map(|&n| [(n, "eswitch"), (n, "ovs")])
        .collect();
    println!(
        "wirelab bench eswitch --duts: one UDP flow (4 MB at 1 Gbit/s) whose own mask follows n-1 others, \
         on each DUT; median of {rounds} rounds, DUTs interleaved"
    );
    let bar = indicatif::ProgressBar::new((rounds * cases.len()) as u64);
    let mut got: Vec<Vec<DutCost>> = (0..cases.len()).map(|_| Vec::new()).collect();
    for _ in 0..rounds.max(1) {
        for (i, &(n, dut)) in cases.iter().enumerate() {
            if abort.load(std::sync::atomic::Ordering::SeqCst) {
                anyhow::bail!("interrupted");
            }
            got[i].push(dut_run(n, dut, out.path(), abort)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let med = |v: &[DutCost], f: fn(&DutCost) -> f64| median(v.iter().map(f).collect());
    println!(
        "{:>5}  {:>26}  {:>44}  {:>8}",
        "masks",
        "eSwitch: masks/pkt, ns/pkt",
        "OVS: lookups/hit, EMC, switch + vswitchd ns/pkt",
        "OVS/eSw"
    );
    for (k, &n) in counts.iter().enumerate() {
        let (e, o) = (&got[2 * k], &got[2 * k + 1]);
        let es = med(e, |c| c.switch_ns);
        let (os, ov) = (med(o, |c| c.switch_ns), med(o, |c| c.ovs_ns));
        println!(
            "{n:>5}  {:>11.1} {:>14.0}  {:>11.2} {:>6.0}% {:>9.0} + {:>9.0} = {:>7.0}  {:>7.2}x",
            med(e, |c| c.lookups),
            es,
            med(o, |c| c.lookups),
            100.0 * med(o, |c| c.emc),
            os,
            ov,
            os + ov,
            (os + ov) / es
        );
    }
    println!(
        "  (eSwitch: the switch program's kernel time per packet, the stage included; OVS: the same \
         program in front of it, capture and hand-off, plus ovs-vswitchd's CPU time per packet beyond its idle polling rate, all threads)"
    );
    Ok(())
}
