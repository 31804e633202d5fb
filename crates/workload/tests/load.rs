//! Norma's load test through a Linux router (issue 20): the generator in
//! A sends a constant rate through R to the sink in B. What must hold:
//! the receiver's rate is the rate asked for; the version-bit counters
//! (§6.1) account for every packet, interval by interval, where the naive
//! counters read at the same instants see packets in flight as "loss";
//! the blind average delay (§6.2) agrees with the per-packet latencies.
//!
//! Needs root (namespaces, BPF). Without it the test is skipped.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use wirelab_load::rate::{plan, Request};
use wirelab_load::template::{self, Udp};
use wirelab_netns::Routed;
use wirelab_workload::load::{run, Ports, Stream, Timing};

fn root() -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    eprintln!("SKIPPED: namespaces and BPF need root");
    false
}

fn mac(ns: &str, dev: &str) -> [u8; 6] {
    let out = wirelab_netns::run("ip", &["-n", ns, "-br", "link", "show", "dev", dev]).unwrap();
    let field = out
        .split_whitespace()
        .nth(2)
        .expect("ip -br prints the MAC third");
    let v: Vec<u8> = field
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

#[test]
fn a_constant_rate_through_a_router_is_received_at_the_rate_asked_and_counted_exactly() {
    if !root() {
        return;
    }
    let net = Routed::new(&format!("ld{}", std::process::id()), 79).unwrap();
    // B's first packet makes it ask R for its address, and R learns B's
    // (so the stream's first packets do not wait on R's ARP).
    wirelab_netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &net.b,
            "bash",
            "-c",
            "echo x > /dev/udp/10.79.1.2/9",
        ],
    )
    .unwrap();
    let pps = 100_000.0;
    let rate = plan(Request { pps, burst: None }, 3).unwrap();
    let tm = template::udp(
        &Udp {
            src_mac: mac(&net.a, "va"),
            dst_mac: mac(&net.r, "ra"),
            src: "10.79.1.2".parse().unwrap(),
            dst: net.b_addr.parse().unwrap(),
            sport: 40000,
            dport: 7001,
        },
        64,
    )
    .unwrap();
    let stream = Stream {
        template: tm,
        rate,
        edits: Vec::new(),
        table: Vec::new(),
        schedule: Vec::new(),
        sample_every: 0,
        sizes: Vec::new(),
        port: Default::default(),
        catch_up: Duration::ZERO,
    };
    let ports = Ports {
        tx_ns: net.a.clone(),
        tx_dev: "va".into(),
        rx_ns: net.b.clone(),
        rx_dev: "vb".into(),
        tx_peer: Some((net.r.clone(), "ra".into())),
        rx_peer: None,
    };
    let timing = Timing {
        duration: Duration::from_secs(2),
        interval: Duration::from_millis(100),
        grace: Duration::from_millis(10),
    };
    let mut lines = Vec::new();
    let out = run(
        &ports,
        std::slice::from_ref(&stream),
        timing,
        &AtomicBool::new(false),
        |r| lines.push(format!("{r:?}")),
    )
    .unwrap();
    let show = || format!("{out:#?}");
    for i in &out.intervals {
        let l = i.latency.unwrap_or_default();
        eprintln!(
            "{:5.2}-{:5.2} s  sent {:6}  received {:6}  lost {:3} (naive {:4})  blind delay {:7.0} ns  stamped mean {:7.0} p50 {:6} p99 {:6} ns",
            i.start_s, i.end_s, i.counts.sent.packets, i.counts.received.packets, i.counts.lost,
            i.counts.naive_lost, i.counts.blind_delay_ns.unwrap_or(f64::NAN), l.mean, l.p50, l.p99
        );
    }
    eprintln!(
        "sent {} at {:.3} pps, received {}, generator CPU {:.2} s, missed {}",
        out.sent,
        out.sent_pps.unwrap_or(0.0),
        out.received,
        out.generator_cpu_ns as f64 / 1e9,
        out.generator.missed
    );

    assert!(out.intervals.len() >= 15, "{}", show());
    // Every packet is in exactly one version's interval, on both sides.
    let sent: u64 = out.intervals.iter().map(|i| i.counts.sent.packets).sum();
    let received: u64 = out
        .intervals
        .iter()
        .map(|i| i.counts.received.packets)
        .sum();
    assert_eq!((sent, received), (out.sent, out.received), "{}", show());
    assert!(out.received > 0, "nothing arrived: {}", show());
    // Versions: an interval never receives more than it sent, and its loss
    // is the run's (R drops only if starved). Naive counters, read at the
    // same flips, count packets in flight in the wrong interval.
    assert!(
        out.intervals.iter().all(|i| i.counts.lost >= 0),
        "{}",
        show()
    );
    let lost: i64 = out.intervals.iter().map(|i| i.counts.lost).sum();
    assert_eq!(lost, out.sent as i64 - out.received as i64);
    assert!(
        out.intervals
            .iter()
            .any(|i| i.counts.naive_lost != i.counts.lost),
        "no packet was ever in flight at a flip: {}",
        show()
    );
    // The rate sent, first packet to last: the tester's own accuracy. (What
    // arrives is that less what R and the veth rings dropped, which the
    // versions count exactly, above.)
    let err = (out.sent_pps.unwrap() - pps) / pps;
    if out.generator.missed == 0 {
        assert!(err.abs() < 1e-3, "rate error {err:e}: {}", show());
    } else {
        // The generator was starved of CPU (two cores shared with other
        // tests): it says how many slots it gave up.
        let short = out.generator.missed as f64 / (pps * 2.0);
        assert!(
            (err + short).abs() < 1e-2,
            "rate error {err:e}, {short:e} given up: {}",
            show()
        );
    }
    // Latency: ordered figures, and the blind delay agrees with the mean
    // of the stamped packets where nothing was lost (App. D: its error is
    // at most drops / rate).
    for i in &out.intervals {
        let l = i.latency.expect("every packet is stamped");
        assert!(l.min > 0 && l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.p999);
        assert!(l.p999 <= l.p9999 && l.p9999 <= l.max + l.max / 50, "{l:?}");
        assert!(l.p999 <= l.max + l.max / 50, "{l:?}");
        if i.counts.lost == 0 && i.counts.sent.packets > 100 {
            let d = i.counts.blind_delay_ns.unwrap();
            assert!(
                (d - l.mean).abs() < 0.03 * l.mean + 200.0,
                "blind delay {d:.0} ns, stamped mean {:.0} ns",
                l.mean
            );
        }
    }
}
