//! The vAQM stage (NetBump) under `BPF_PROG_TEST_RUN` with crafted
//! timestamps (`Config::test_clock`) and sizes: the leaky bucket's estimate
//! (NetBump Fig. 5), DCTCP's threshold and RED's average and probability at
//! their boundaries, and the classifier, against hand-computed values.
//! Needs root.

use std::net::Ipv4Addr;

mod common;
use common::{check_table, have_bpf, pin, run_frame, Fixture, Out, Rec};
use etherparse::IpEcn;
use wirelab_dataplane::{verdict, wl_mirror_hdr, Aqm, Config, Discipline, Switch, VqConfig};

const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const LO_IFINDEX: u32 = 1;
const OUT_IFINDEX: u32 = 4242;
/// Whole frames of this many bytes (skb->len, what a qdisc counts).
const LEN: usize = 1000;
const PASS: Option<Aqm> = Some(Aqm::None);
const MARK: Option<Aqm> = Some(Aqm::Mark);
const DROP: Option<Aqm> = Some(Aqm::Drop);

/// A UDP frame from 198.18.0.1 to `dst` of `len` bytes in all.
fn frame(dst: Ipv4Addr, len: usize, ecn: IpEcn) -> Vec<u8> {
    common::udp_frame(dst, 9000, len, ecn)
}

/// A switch with the vAQM stage: port 1 = loopback, B behind port 2, whose
/// packets go to virtual queue 1.
fn switch(q: VqConfig) -> Switch {
    switch_with(q, false)
}

fn switch_with(q: VqConfig, vaqm_lock: bool) -> Switch {
    let sw = Switch::load(Config {
        vaqm: true,
        test_clock: true,
        vaqm_lock,
        ..Config::default()
    })
    .expect("switch loads");
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    sw.set_vq(1, &q).unwrap();
    sw.vq_for_port(2, 1).unwrap();
    sw
}

/// A RED queue that marks between the thresholds.
fn red(rate_bps: u64, min_bytes: u64, max_bytes: u64, w_q: f64, max_p: f64) -> VqConfig {
    VqConfig {
        rate_bps,
        buffer_bytes: 0,
        discipline: Discipline::Red {
            min_bytes,
            max_bytes,
            w_q,
            max_p,
            drop: false,
        },
    }
}

/// One packet at switch time `t`: (verdict, output, mirror header).
fn send(sw: &Switch, t: u64, input: &[u8]) -> (u32, Vec<u8>, wl_mirror_hdr) {
    sw.set_test_clock(t).unwrap();
    let (v, out, mut records) = run_frame(sw, input);
    let m = records.pop().expect("mirrored").0;
    (v, out, m)
}

/// One packet at time `t`, its mirror record left in the ring: (verdict,
/// output). For the long loops, where reading each record costs a ring
/// buffer set-up.
fn send_quick(sw: &Switch, t: u64, input: &[u8]) -> (u32, Vec<u8>) {
    sw.set_test_clock(t).unwrap();
    sw.test_run(input).expect("test run")
}

/// A frame forwarded to port 2 at switch time `t`, through queue 1, whose
/// estimate is then `bytes` and whose verdict is `aqm`.
fn queued(what: &str, t: u64, input: Vec<u8>, bytes: u32, aqm: Aqm, output: Out) -> Fixture {
    Fixture {
        what: what.into(),
        at: Some(t),
        input,
        verdict: verdict::REDIRECT,
        output,
        record: Some(Rec {
            vq: 1,
            vq_bytes: bytes,
            aqm,
            ..Rec::NONE
        }),
        maps: vec![],
    }
}

const US: u64 = 1_000;
const T0: u64 = 1_000_000;

#[test]
fn the_spin_locked_stage_estimates_the_same_and_cpu_moves_are_counted() {
    if !have_bpf() {
        return;
    }
    let p = frame(B, LEN, IpEcn::Ect0);
    let mut per_variant = Vec::new();
    for lock in [false, true] {
        let sw = switch_with(
            VqConfig {
                rate_bps: 8_000_000,
                buffer_bytes: 0,
                discipline: Discipline::Dctcp { k_bytes: 2500 },
            },
            lock,
        );
        assert!(pin(0), "CPU 0 exists");
        let mut seen = Vec::new();
        for t in [T0, T0 + 300 * US, T0 + 301 * US] {
            let (_, _, m) = send(&sw, t, &p);
            seen.push((m.vq_bytes, m.verdict()));
        }
        assert_eq!(sw.vq_state(1).unwrap().cpu_moves, 0, "lock {lock}");
        if pin(1) {
            let (_, _, m) = send(&sw, T0 + 302 * US, &p);
            seen.push((m.vq_bytes, m.verdict()));
            assert_eq!(sw.vq_state(1).unwrap().cpu_moves, 1, "lock {lock}");
        }
        per_variant.push(seen);
    }
    let _ = pin(0);
    assert_eq!(
        per_variant[0][..3],
        [(1000, PASS), (1700, PASS), (2699, MARK)]
    );
    assert_eq!(per_variant[0], per_variant[1]);
}

#[test]
fn the_leaky_bucket_drains_elapsed_time_times_rate_exactly() {
    if !have_bpf() {
        return;
    }
    // 8 Mbit/s = one byte per microsecond.
    let sw = switch(VqConfig {
        rate_bps: 8_000_000,
        buffer_bytes: 0,
        discipline: Discipline::None,
    });
    let p = frame(B, LEN, IpEcn::Ect0);
    let row = |what: &str, t, bytes| queued(what, t, p.clone(), bytes, Aqm::None, Out::Same);
    check_table(
        &sw,
        &[
            row("first packet: no drain (Fig. 5 line 1)", T0, 1000),
            row("300 bytes drained: 700 + 1000", T0 + 300 * US, 1700),
            row(
                "half a byte: nothing yet, carried",
                T0 + 300 * US + 500,
                2700,
            ),
            row("the other half: one byte", T0 + 301 * US, 3699),
            row(
                "earlier (another CPU's clock): no drain",
                T0 + 300 * US,
                4699,
            ),
            row("long idle: empty, then this packet", T0 + 20_000 * US, 1000),
        ],
    );
    let st = sw.vq_state(1).unwrap();
    assert_eq!((st.pkts, st.last_ns, st.frac), (6, T0 + 20_000 * US, 0));

    // Many small gaps drain exactly as much as one long one: 1000 gaps of
    // 333 ns at 3 bytes per µs is 999 bytes, not 1000 × floor(0.999) = 0.
    let sw = switch(VqConfig {
        rate_bps: 24_000_000,
        buffer_bytes: 0,
        discipline: Discipline::None,
    });
    let tiny = frame(B, 64, IpEcn::Ect0);
    send(&sw, T0, &p);
    let mut t = T0;
    for _ in 0..1000 {
        t += 333;
        send_quick(&sw, t, &tiny);
    }
    // 1000 + 1000 × 64 added, 333_000 ns × 3 B/µs = 999 bytes drained.
    assert_eq!(sw.vq_state(1).unwrap().bytes, 1000 + 64_000 - 999);
}

#[test]
fn dctcp_marks_above_k_only_and_queues_what_it_cannot_mark() {
    if !have_bpf() {
        return;
    }
    let sw = switch(VqConfig {
        rate_bps: 8_000_000,
        buffer_bytes: 0,
        discipline: Discipline::Dctcp { k_bytes: 3000 },
    });
    let ect = frame(B, LEN, IpEcn::Ect0);
    let marked = common::with_ce(&ect);
    // One timestamp: no drain, the queue grows by 1000 per packet.
    let pass = |what: &str, bytes| queued(what, T0, ect.clone(), bytes, Aqm::None, Out::Same);
    let mark = |what: &str, bytes| {
        queued(
            what,
            T0,
            ect.clone(),
            bytes,
            Aqm::Mark,
            Out::Bytes(marked.clone()),
        )
    };
    check_table(
        &sw,
        &[
            pass("1000 bytes", 1000),
            pass("2000 bytes", 2000),
            pass("K itself: not above it", 3000),
            mark("above K: CE set, the IP checksum fixed", 4000),
            mark("still above K", 5000),
            queued(
                "Not-ECT above K (a SYN, a pure ACK): a DCTCP switch only marks, so \
                 it is queued unmarked",
                T0,
                frame(B, LEN, IpEcn::NotEct),
                6000,
                Aqm::None,
                Out::Same,
            ),
        ],
    );
    let st = sw.vq_state(1).unwrap();
    assert_eq!((st.marks, st.drops, st.unmarkable), (2, 0, 1));
    let c = sw.counters(1).unwrap();
    assert_eq!((c.aqm_marks, c.aqm_drops), (2, 0));
}

#[test]
fn red_follows_its_average_and_count_at_the_boundaries() {
    if !have_bpf() {
        return;
    }
    // w_q = 1: the average is the queue, so each boundary is exact.
    let sw = switch(red(8_000_000, 2000, 4000, 1.0, 1.0));
    let p = frame(B, LEN, IpEcn::Ect0);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let (_, _, m) = send(&sw, T0, &p);
        seen.push((m.vq_bytes, m.verdict(), sw.vq_state(1).unwrap().count));
    }
    assert_eq!(
        seen,
        vec![
            (1000, PASS, -1), // below min: count = -1
            (2000, PASS, 0),  // at min: p_b = 0
            (3000, MARK, 0),  // p_b = 1/2, count 1: p_a = 1/2 / (1 - 1/2) = 1
            (3000, DROP, 0),  // avg 4000 = max: dropped, leaves the queue
            (3000, DROP, 0),
        ]
    );
    // A mark RED cannot set on a Not-ECT packet is a drop (RFC 3168 §7):
    // with the queue at 2000 again, count 1 makes p_a = 1.
    let sw2 = switch(red(8_000_000, 2000, 4000, 1.0, 1.0));
    send(&sw2, T0, &p);
    send(&sw2, T0, &p);
    let (v, _, m) = send(&sw2, T0, &frame(B, LEN, IpEcn::NotEct));
    assert_eq!((v, m.verdict(), m.vq_bytes), (verdict::SHOT, DROP, 2000));
    let st = sw2.vq_state(1).unwrap();
    assert_eq!((st.drops, st.unmarkable), (1, 1));
    assert_eq!(sw2.counters(1).unwrap().aqm_drops, 1);

    // The EWMA with w_q = 1/4: avg = 0 + 1000/4 = 250, then
    // 250 + (2000 - 250)/4 = 687.5, then 687.5 + (3000 - 687.5)/4 = 1265.625.
    let sw = switch(red(8_000_000, 20_000, 40_000, 0.25, 0.1));
    let avgs: Vec<f64> = (0..3)
        .map(|_| {
            send(&sw, T0, &p);
            sw.vq_state(1).unwrap().avg_bytes
        })
        .collect();
    assert_eq!(avgs, vec![250.0, 687.5, 1265.625]);
}

#[test]
fn red_spaces_its_marks_by_count_as_floyd_and_jacobson() {
    if !have_bpf() {
        return;
    }
    // The queue held at 3000 bytes (a packet in, a packet's worth drained
    // per µs at 8 Gbit/s): p_b = max_p × 1/2 = 0.05, and with the count
    // rule p_a = p_b / (1 - count p_b) reaches 1 at count 20, so no gap
    // between marks exceeds 20 packets and the mean gap is about 10.5.
    let sw = switch(red(8_000_000_000, 2000, 4000, 1.0, 0.1));
    let p = frame(B, LEN, IpEcn::Ect0);
    for _ in 0..3 {
        send(&sw, T0, &p);
    }
    let (mut since, mut gaps) = (0u32, Vec::new());
    for i in 1..=2000u64 {
        let (v, out) = send_quick(&sw, T0 + i * US, &p);
        assert_eq!(v, verdict::REDIRECT);
        since += 1;
        if out[15] & 3 == 3 {
            gaps.push(since);
            since = 0;
        }
    }
    assert_eq!(sw.vq_state(1).unwrap().bytes, 3000);
    let max = *gaps.iter().max().unwrap();
    let mean = gaps.iter().sum::<u32>() as f64 / gaps.len() as f64;
    assert!(max <= 20, "a gap of {max} packets");
    assert!((8.5..12.5).contains(&mean), "mean gap {mean}");
}

#[test]
fn the_user_classifier_overrides_the_port_and_the_stage_can_be_off() {
    if !have_bpf() {
        return;
    }
    let q = VqConfig {
        rate_bps: 8_000_000,
        buffer_bytes: 0,
        discipline: Discipline::None,
    };
    let sw = switch(q);
    sw.set_vq(2, &q).unwrap();
    sw.vq_for_dst(C, 2).unwrap();
    let (_, _, m) = send(&sw, T0, &frame(B, LEN, IpEcn::Ect0));
    assert_eq!((m.vq, m.vq_bytes), (1, 1000));
    // Same port (the frame's MAC is B's), another destination address.
    let (_, _, m) = send(&sw, T0, &frame(C, LEN, IpEcn::Ect0));
    assert_eq!((m.vq, m.vq_bytes), (2, 1000));
    assert!(sw.set_vq(65, &q).is_err());

    // Without `vaqm` in the config the stage is not in the program.
    let off = Switch::load(Config {
        test_clock: true,
        ..Config::default()
    })
    .unwrap();
    off.add_port(LO_IFINDEX, 1).unwrap();
    off.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    off.set_vq(1, &q).unwrap();
    off.vq_for_port(2, 1).unwrap();
    let (v, _, m) = send(&off, T0, &frame(B, LEN, IpEcn::Ect0));
    assert_eq!((v, m.vq, m.verdict()), (verdict::REDIRECT, 0, PASS));
    assert_eq!(off.vq_state(1).unwrap().pkts, 0);
}
