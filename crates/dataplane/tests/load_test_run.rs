//! Norma's tester programs (bpf/load.bpf.c) through `BPF_PROG_TEST_RUN`:
//! the meter and the cascaded units pass and skip exactly as the control
//! plane's model says (wirelab_load::rate::Cascade); each of App. C's
//! editor modes writes the values it should, with both checksums right
//! (checked by etherparse, not by the arithmetic under test), and ranged
//! random is uniform (Norma Fig. 13); the version bit selects the bank on
//! both sides and the blind delay comes out of them (§6).
//!
//! Needs root (BPF). Without it every test is skipped with the reason.

use std::net::Ipv4Addr;

use etherparse::{SlicedPacket, TransportSlice};
use wirelab_dataplane::load::{Edit, EditMode, GenConfig, Tester};
use wirelab_load::rate::{Cascade, Unit};
use wirelab_load::template::{self, Template, Udp};

mod common;
use common::have_bpf;

const XDP_PASS: u32 = 2;
const XDP_DROP: u32 = 1;
const XDP_REDIRECT: u32 = 4;

const STREAM: Udp = Udp {
    src_mac: [2, 0, 0, 0, 0, 1],
    dst_mac: [2, 0, 0, 0, 0, 2],
    src: Ipv4Addr::new(198, 18, 0, 1),
    dst: Ipv4Addr::new(198, 18, 1, 2),
    sport: 40000,
    dport: 9,
};

fn template(len: usize) -> Template {
    template::udp(&STREAM, len).expect("a valid template")
}

fn conf(t: &Template) -> GenConfig {
    GenConfig {
        ifindex: 1,
        l3_off: t.l3_off,
        l4_off: t.l4_off,
        csum_off: t.csum_off,
        inner_csum_off: t.inner_csum_off,
        inner_l3_off: t.inner_l3_off,
        stamp_off: t.stamp_off.unwrap_or(0),
        template: t.bytes.clone(),
        ..Default::default()
    }
}

/// What a generated frame says, read by etherparse, which also checks
/// that both checksums are right for the bytes as they are.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    id: u16,
    seq: u64,
    sent_ns: u64,
}

fn seen(frame: &[u8]) -> Seen {
    let p = SlicedPacket::from_ethernet(frame).expect("the frame parses");
    let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 checksum");
    let Some(TransportSlice::Udp(u)) = &p.transport else {
        panic!("not UDP")
    };
    let payload = u.payload();
    let udp = u.to_header();
    assert_eq!(
        udp.checksum,
        udp.calc_checksum_ipv4(&h, payload).unwrap(),
        "UDP checksum"
    );
    let be = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap());
    Seen {
        src: h.source.into(),
        dst: h.destination.into(),
        sport: udp.source_port,
        dport: udp.destination_port,
        id: h.identification,
        seq: be(&payload[..8]),
        sent_ns: be(&payload[8..16]),
    }
}

/// Runs the generator `n` times on the template; the verdicts.
fn verdicts(t: &Tester, frame: &[u8], n: usize) -> Vec<bool> {
    (0..n)
        .map(|_| {
            let (v, _) = t.test_gen(0, frame).expect("test run");
            assert!(v == XDP_DROP || v == XDP_REDIRECT, "verdict {v}");
            v == XDP_REDIRECT
        })
        .collect()
}

#[test]
fn the_units_pass_and_skip_as_the_control_plane_s_model_says() {
    if !have_bpf() {
        return;
    }
    let t0 = template(60);
    let mut t = Tester::load(true).unwrap();
    for units in [
        vec![Unit { pass: 3, skip: 2 }],
        vec![Unit { pass: 1, skip: 4 }],
        // Norma's Figure 4: A trims, B shapes bursts; B sees A's passes.
        vec![Unit { pass: 4, skip: 1 }, Unit { pass: 3, skip: 5 }],
        vec![
            Unit { pass: 2, skip: 1 },
            Unit { pass: 5, skip: 2 },
            Unit { pass: 7, skip: 3 },
            Unit { pass: 1, skip: 1 },
        ],
    ] {
        let mut c = conf(&t0);
        c.units = units.iter().map(|u| (u.pass, u.skip)).collect();
        t.configure(0, &c).unwrap();
        let mut model = Cascade::new(&units);
        let want: Vec<bool> = (0..200).map(|_| model.pass()).collect();
        let got = verdicts(&t, &t0.bytes, 200);
        assert_eq!(got, want, "units {units:?}");
        let counts = t.gen_counts(0).unwrap();
        let sent = want.iter().filter(|&&p| p).count() as u64;
        assert_eq!(counts.sent, sent, "units {units:?}: sent");
        assert_eq!(counts.skipped, 200 - sent, "units {units:?}: skipped");
        assert_eq!(t.gen_bank(0, 2).unwrap().packets, sent);
    }
}

#[test]
fn the_meter_holds_early_runs_catches_up_within_its_tolerance_and_gives_up_slots_beyond() {
    if !have_bpf() {
        return;
    }
    let t0 = template(60);
    let mut t = Tester::load(true).unwrap();
    let mut c = conf(&t0);
    c.interval_ns = 100;
    c.tolerance_ns = 250;
    t.configure(0, &c).unwrap();
    // (clock, leaves?, held, missed, behind so far)
    let rows: [(u64, bool, u64, u64, u64); 10] = [
        (10_000, true, 0, 0, 0),  // the first run sets the schedule: next 10,100
        (10_050, false, 1, 0, 0), // early: held
        (10_099, false, 2, 0, 0),
        (10_100, true, 2, 0, 0),  // on time: next 10,200
        (10_390, true, 2, 0, 1),  // 190 late, within 250: sent behind, next 10,300
        (10_390, true, 2, 0, 1),  // catching up (90 late, within its slot): next 10,400
        (10_390, false, 3, 0, 1), // caught up
        (11_000, true, 3, 6, 1),  // 600 late: 6 slots given up, next 11,100
        (11_099, false, 4, 6, 1),
        (11_350, true, 4, 6, 2), // 250 late, the tolerance itself: caught up
    ];
    for (i, (at, leaves, held, missed, behind)) in rows.into_iter().enumerate() {
        t.set_test_clock(at).unwrap();
        let (v, _) = t.test_gen(0, &t0.bytes).unwrap();
        assert_eq!(v == XDP_REDIRECT, leaves, "row {i} at {at}");
        let k = t.gen_counts(0).unwrap();
        assert_eq!(
            (k.held, k.missed, k.behind),
            (held, missed, behind),
            "row {i} at {at}"
        );
    }
}

/// The generator's frames for `edits`, `n` of them.
fn edited(edits: Vec<Edit>, table: &[u32], n: usize) -> Vec<Seen> {
    let t0 = template(60);
    let mut t = Tester::load(true).unwrap();
    let mut c = conf(&t0);
    c.edits = edits;
    t.configure(0, &c).unwrap();
    t.set_table(0, table).unwrap();
    t.set_test_clock(5_000).unwrap();
    // Live frames reuse pages with whatever the last run wrote; feeding
    // each output back in checks that an edit works from either.
    let mut frame = t0.bytes.clone();
    (0..n)
        .map(|i| {
            let (v, out) = t
                .test_gen(0, if i % 2 == 0 { &t0.bytes } else { &frame })
                .unwrap();
            assert_eq!(v, XDP_REDIRECT);
            frame = out;
            seen(&frame)
        })
        .collect()
}

const SPORT: u16 = 34;
const DPORT: u16 = 36;
const SRC_LOW: u16 = 29; // the last byte of the source address

fn edit(offset: u16, width: u8, mode: EditMode, lo: u32, hi: u32, step: u32) -> Edit {
    Edit {
        offset,
        width,
        mode,
        carry_from: None,
        rand_bits: 0,
        table: 0,
        lo,
        hi,
        step,
    }
}

#[test]
fn direct_step_wraps_by_the_range() {
    if !have_bpf() {
        return;
    }
    let got = edited(vec![edit(SPORT, 2, EditMode::Step, 1000, 1006, 3)], &[], 7);
    let ports: Vec<u16> = got.iter().map(|s| s.sport).collect();
    // 1000, +3, +3, then 1009 is past 1006: less the range's 7.
    assert_eq!(ports, [1000, 1003, 1006, 1002, 1005, 1001, 1004]);
    // Stamp and version on every packet: sequence 0.., time, ID bit 0.
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, s)| s.seq == i as u64 && s.sent_ns == 5_000 && s.id == i as u16));
}

#[test]
fn indirect_step_writes_the_table_s_entries() {
    if !have_bpf() {
        return;
    }
    let mut e = edit(DPORT, 2, EditMode::Indirect, 0, 2, 1);
    e.table = 5;
    let table = [0, 0, 0, 0, 0, 7, 70, 700, 9999];
    let got = edited(vec![e], &table, 5);
    let ports: Vec<u16> = got.iter().map(|s| s.dport).collect();
    assert_eq!(ports, [7, 70, 700, 7, 70]);
}

#[test]
fn cascaded_step_is_an_odometer() {
    if !have_bpf() {
        return;
    }
    let mut second = edit(SRC_LOW, 1, EditMode::Step, 1, 3, 1);
    second.carry_from = Some(0);
    let got = edited(
        vec![edit(DPORT, 2, EditMode::Step, 5000, 5001, 1), second],
        &[],
        7,
    );
    let pairs: Vec<(u8, u16)> = got.iter().map(|s| (s.src.octets()[3], s.dport)).collect();
    assert_eq!(
        pairs,
        [
            (1, 5000),
            (1, 5001),
            (2, 5000),
            (2, 5001),
            (3, 5000),
            (3, 5001),
            (1, 5000)
        ]
    );
}

#[test]
fn direct_random_changes_only_the_masked_bits() {
    if !have_bpf() {
        return;
    }
    // The low 8 bits of the source address random: a /24 (App. C 4).
    let e = edit(28, 2, EditMode::Random, 0x0000, 0x00ff, 0);
    let got = edited(vec![e], &[], 300);
    let lows: std::collections::BTreeSet<u8> = got.iter().map(|s| s.src.octets()[3]).collect();
    assert!(got.iter().all(|s| s.src.octets()[..3] == [198, 18, 0]));
    // 300 draws of 256 values: fewer than 150 distinct has p < 1e-20.
    assert!(lows.len() > 150, "{} distinct", lows.len());
}

#[test]
fn ranged_random_is_uniform_over_a_range_that_is_no_power_of_two() {
    if !have_bpf() {
        return;
    }
    // Norma Fig. 13: source ports 0-999, k = 9 (2^9 <= 1000).
    let mut e = edit(SPORT, 2, EditMode::Ranged, 0, 999, 0);
    e.rand_bits = 9;
    let n = 100_000;
    let got = edited(vec![e], &[], n);
    let mut counts = vec![0u32; 1000];
    for s in &got {
        assert!(s.sport < 1000, "{} out of the range", s.sport);
        counts[usize::from(s.sport)] += 1;
    }
    // Each value near 0.1%: a chi-square over 999 degrees of freedom
    // (mean 999, sd 45); successive values are correlated (a random walk
    // mod l), which the bound allows for.
    let expect = n as f64 / 1000.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (f64::from(c) - expect).powi(2) / expect)
        .sum();
    let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(chi2 < 1400.0, "chi-square {chi2:.0}, counts {lo}..{hi}");
    assert!(*lo >= 40 && *hi <= 170, "counts {lo}..{hi}");
}

#[test]
fn the_version_bit_picks_the_bank_on_both_sides_and_the_blind_delay_follows() {
    if !have_bpf() {
        return;
    }
    let t0 = template(60);
    let mut t = Tester::load(true).unwrap();
    t.configure(0, &conf(&t0)).unwrap();
    t.configure_sink(0, t0.sink, 0).unwrap();
    // Three packets in version 1 sent at 1000, 1010, 1020 and received at
    // 1105, 1120, 1130; one in version 0 around them.
    t.set_version(1).unwrap();
    let mut sent = Vec::new();
    for at in [1000, 1010, 1020] {
        t.set_test_clock(at).unwrap();
        sent.push(t.test_gen(0, &t0.bytes).unwrap().1);
    }
    t.set_version(0).unwrap();
    t.set_test_clock(1030).unwrap();
    let v0 = t.test_gen(0, &t0.bytes).unwrap().1;
    assert!(sent.iter().all(|f| seen(f).id >> 15 == 1));
    assert_eq!(seen(&v0).id >> 15, 0);
    for (f, at) in sent.iter().zip([1105, 1120, 1130]) {
        t.set_test_clock(at).unwrap();
        assert_eq!(
            t.test_sink(f).unwrap(),
            XDP_DROP,
            "the sink ends the stream"
        );
    }
    let (o, i) = (t.gen_bank(0, 1).unwrap(), t.sink_bank(0, 1).unwrap());
    assert_eq!((o.packets, i.packets, o.bytes, i.bytes), (3, 3, 180, 180));
    assert_eq!(t.gen_bank(0, 0).unwrap().packets, 1);
    assert_eq!(t.sink_bank(0, 0).unwrap().packets, 0);
    assert_eq!(
        (
            t.gen_bank(0, 2).unwrap().packets,
            t.sink_bank(0, 2).unwrap().packets
        ),
        (4, 3)
    );
    // d = (B_i + T_i/P_i) − (B_o + T_o/P_o) = 1118.33 − 1010.
    let d = i.mean_ns().unwrap() - o.mean_ns().unwrap();
    assert!((d - 108.333).abs() < 0.001, "{d}");
    // Per-packet latencies 105, 110, 110: extremes and histogram.
    assert_eq!(
        (i.stamped, i.lat_min, i.lat_max, i.late_seq),
        (3, 105, 110, 0)
    );
    let h = t.sink_hist(0, 1).unwrap();
    assert_eq!(h.iter().sum::<u64>(), 3);
    assert_eq!(h[wirelab_load::hist::bucket(110)], 2);
    assert_eq!(
        wirelab_dataplane::load::HIST_BUCKETS,
        wirelab_load::hist::BUCKETS
    );
    // A duplicate is a late sequence number; another port is not counted.
    t.set_test_clock(1200).unwrap();
    t.test_sink(&sent[2]).unwrap();
    assert_eq!(t.sink_bank(0, 1).unwrap().late_seq, 1);
    let other = template::udp(
        &Udp {
            dport: 10,
            ..STREAM
        },
        60,
    )
    .unwrap();
    assert_eq!(t.test_sink(&other.bytes).unwrap(), 2, "XDP_PASS");
    assert_eq!(t.sink_bank(0, 2).unwrap().packets, 4);
    // Clearing a bank readies it for its next interval.
    t.clear_sink_bank(0, 1).unwrap();
    assert_eq!(t.sink_bank(0, 1).unwrap(), Default::default());
    assert_eq!(t.sink_hist(0, 1).unwrap().iter().sum::<u64>(), 0);
}

#[test]
fn frames_whose_sequence_is_a_multiple_of_the_sampling_are_sampled_as_sent_and_received() {
    if !have_bpf() {
        return;
    }
    let t0 = template(100);
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            sample_every: 3,
            ..conf(&t0)
        },
    )
    .unwrap();
    t.configure_sink(0, t0.sink, 3).unwrap();
    let mut sent = Vec::new();
    for k in 0..7u64 {
        t.set_test_clock(1000 + 10 * k).unwrap();
        sent.push(t.test_gen(0, &t0.bytes).unwrap().1);
    }
    for (k, f) in sent.iter().enumerate() {
        t.set_test_clock(2000 + 10 * k as u64).unwrap();
        assert_eq!(t.test_sink(f).unwrap(), XDP_DROP);
    }
    let mut got = Vec::new();
    t.drain_samples(|s| got.push(s)).unwrap();
    let summary: Vec<(bool, u64, u64, u32)> = got
        .iter()
        .map(|s| (s.received, s.seq, s.ts, s.len))
        .collect();
    // Sequence numbers 0, 3 and 6 on each side, at their times, whole
    // frames (100 bytes is below the 128 kept), as they left the editor.
    assert_eq!(
        summary,
        vec![
            (false, 0, 1000, 100),
            (false, 3, 1030, 100),
            (false, 6, 1060, 100),
            (true, 0, 2000, 100),
            (true, 3, 2030, 100),
            (true, 6, 2060, 100),
        ]
    );
    for s in &got {
        assert_eq!(s.data, sent[s.seq as usize], "seq {}", s.seq);
    }
    assert_eq!(t.samples_lost().unwrap(), (0, 0));
    // Off: nothing.
    t.configure(0, &conf(&t0)).unwrap();
    t.configure_sink(0, t0.sink, 0).unwrap();
    let f = t.test_gen(0, &t0.bytes).unwrap().1;
    t.test_sink(&f).unwrap();
    let mut none = 0;
    t.drain_samples(|_| none += 1).unwrap();
    assert_eq!(none, 0);
}

#[test]
fn configurations_the_program_cannot_run_are_refused() {
    if !have_bpf() {
        return;
    }
    let t0 = template(60);
    let mut t = Tester::load(true).unwrap();
    let bad = |f: &dyn Fn(&mut GenConfig)| {
        let mut c = conf(&t0);
        f(&mut c);
        c
    };
    for (c, says) in [
        (bad(&|c| c.units = vec![(1, 1); 5]), "5 rate units"),
        (bad(&|c| c.units = vec![(0, 1)]), "passes no packet"),
        (
            bad(&|c| c.edits = vec![edit(35, 2, EditMode::Step, 0, 1, 1)]),
            "odd offset",
        ),
        (
            bad(&|c| c.edits = vec![edit(34, 3, EditMode::Step, 0, 1, 1)]),
            "3-byte",
        ),
        (
            bad(&|c| c.edits = vec![edit(34, 2, EditMode::Step, 5, 1, 1)]),
            "ends before",
        ),
    ] {
        let e = t.configure(0, &c).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn a_size_mix_cuts_each_frame_to_its_turn_with_both_checksums_right() {
    if !have_bpf() {
        return;
    }
    // The simple IMIX's sizes without the FCS, in a pattern of five.
    let pattern = vec![60u16, 590, 60, 1514, 60];
    let t0 = template(1514);
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            sizes: pattern.clone(),
            ..conf(&t0)
        },
    )
    .unwrap();
    for k in 0..15usize {
        // A live frame starts a run at the length its last run left:
        // every other run here starts from a 60-byte one.
        let input = if k % 2 == 1 {
            &t0.bytes[..60]
        } else {
            &t0.bytes[..]
        };
        let (v, out) = t.test_gen(0, input).expect("test run");
        assert_eq!(v, XDP_REDIRECT);
        let want = usize::from(pattern[k % pattern.len()]);
        assert_eq!(out.len(), want, "frame {k}");
        let s = seen(&out);
        assert_eq!(s.seq, k as u64, "frame {k}");
        assert_eq!(
            usize::from(u16::from_be_bytes([out[16], out[17]])),
            want - 14,
            "frame {k}: IPv4 total length"
        );
    }
    // The banks count each frame's own bytes.
    let b = t.gen_bank(0, 0).unwrap();
    let bytes: u64 = (0..15).map(|k| u64::from(pattern[k % 5])).sum();
    assert_eq!((b.packets, b.bytes), (15, bytes));
    // Sizes the template cannot be cut to are refused before loading.
    let err = t
        .configure(
            0,
            &GenConfig {
                sizes: vec![60, 1600],
                ..conf(&t0)
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("1600-byte frame"), "{err}");
}

#[test]
fn tagged_ipv6_frames_carry_the_version_in_the_flow_label_and_right_checksums() {
    if !have_bpf() {
        return;
    }
    let v6 = |h: u8| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x00, 0x02]);
        a[15] = h;
        a
    };
    let stack = template::Stack {
        vlan: Some(100),
        ipv6: Some((v6(2), v6(3))),
        ..Default::default()
    };
    let tm = template::frame(&STREAM, &stack, 200).unwrap();
    assert_eq!((tm.l3_off, tm.l4_off, tm.ipv6), (18, 58, true));
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            ipv6: true,
            l3_off: tm.l3_off,
            l4_off: tm.l4_off,
            csum_off: tm.csum_off,
            stamp_off: tm.stamp_off.unwrap(),
            // udp.sport stepped, and cut to 100 and 200 bytes in turn.
            edits: vec![Edit {
                offset: tm.l4_off,
                width: 2,
                mode: EditMode::Step,
                carry_from: None,
                rand_bits: 0,
                table: 0,
                lo: 5000,
                hi: 5002,
                step: 1,
            }],
            sizes: vec![100, 200],
            template: tm.bytes.clone(),
            ifindex: 1,
            ..Default::default()
        },
    )
    .unwrap();
    t.configure_sink(0, tm.sink, 0).unwrap();
    for k in 0..6u64 {
        if k == 3 {
            t.set_version(1).unwrap();
        }
        let (v, out) = t.test_gen(0, &tm.bytes).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(out.len(), if k % 2 == 0 { 100 } else { 200 });
        let p = SlicedPacket::from_ethernet(&out).expect("parses");
        assert!(p.link_exts.len() == 1, "one VLAN tag");
        let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else {
            panic!("not IPv6")
        };
        let h = ip.header().to_header();
        assert_eq!(usize::from(h.payload_length), out.len() - 58, "frame {k}");
        // The version bit and the sequence in the flow label's low word.
        let label = u32::from(h.flow_label);
        assert_eq!(label >> 15 & 1, u32::from(k >= 3), "frame {k}: {label:#x}");
        assert_eq!(u64::from(label & 0x7fff), k);
        let Some(TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        let udp = u.to_header();
        assert_eq!(udp.source_port, 5000 + (k % 3) as u16);
        assert_eq!(
            udp.checksum,
            udp.calc_checksum_ipv6(&h, u.payload()).unwrap(),
            "frame {k}: UDP checksum"
        );
        // The sink counts it in the bank of its version.
        assert_eq!(t.test_sink(&out).unwrap(), XDP_DROP);
    }
    assert_eq!(t.sink_bank(0, 0).unwrap().packets, 3);
    assert_eq!(t.sink_bank(0, 1).unwrap().packets, 3);
}

/// The inner frame's addresses in the VXLAN fixtures: two made-up tenant
/// hosts.
const INNER: Udp = Udp {
    src_mac: [2, 0, 0, 0, 1, 1],
    dst_mac: [2, 0, 0, 0, 1, 2],
    src: Ipv4Addr::new(198, 19, 200, 1),
    dst: Ipv4Addr::new(198, 19, 200, 2),
    sport: 6000,
    dport: 7000,
};

/// A step edit of the L4 source port at `l4_off`, over `lo..=hi`.
fn port_step(l4_off: u16, lo: u32, hi: u32) -> Edit {
    Edit::step(l4_off, 2, lo, hi)
}

#[test]
fn tcp_frames_of_a_size_mix_keep_their_flags_raw_bytes_and_checksums_and_short_ones_go_unstamped() {
    if !have_bpf() {
        return;
    }
    let stack = template::Stack {
        l4: template::L4::Tcp { flags: 0x18 },
        raw: b"GET ".to_vec(),
        ..Default::default()
    };
    let tm = template::frame(&STREAM, &stack, 200).unwrap();
    assert_eq!((tm.l4_off, tm.csum_off, tm.stamp_off), (34, 50, Some(58)));
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            tcp: true,
            edits: vec![port_step(tm.l4_off, 5000, 5002)],
            // 60 bytes hold the headers and the raw bytes, not the stamp.
            sizes: vec![60, 200],
            ..conf(&tm)
        },
    )
    .unwrap();
    t.configure_sink(0, tm.sink, 0).unwrap();
    for k in 0..6u64 {
        let (v, out) = t.test_gen(0, &tm.bytes).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(out.len(), if k % 2 == 0 { 60 } else { 200 });
        let p = SlicedPacket::from_ethernet(&out).expect("parses");
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum(), "frame {k}");
        assert_eq!(usize::from(h.total_len), out.len() - 14, "frame {k}");
        let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("not TCP")
        };
        assert!(tcp.psh() && tcp.ack() && !tcp.syn(), "frame {k}");
        assert_eq!(tcp.source_port(), 5000 + (k % 3) as u16);
        assert_eq!(&tcp.payload()[..4], b"GET ");
        assert_eq!(
            tcp.checksum(),
            tcp.to_header()
                .calc_checksum_ipv4(&h, tcp.payload())
                .unwrap(),
            "frame {k}: TCP checksum"
        );
        if out.len() == 200 {
            let seq = u64::from_be_bytes(tcp.payload()[4..12].try_into().unwrap());
            assert_eq!(seq, k, "the stamp after the raw bytes");
        }
        assert_eq!(t.test_sink(&out).unwrap(), XDP_DROP, "frame {k}");
    }
    let b = t.sink_bank(0, 0).unwrap();
    assert_eq!((b.packets, b.stamped), (6, 3));
    // A sink counting UDP does not count these.
    t.configure_sink(
        0,
        template::SinkMatch {
            tcp: false,
            ..tm.sink
        },
        0,
    )
    .unwrap();
    let (_, out) = t.test_gen(0, &tm.bytes).unwrap();
    assert_eq!(t.test_sink(&out).unwrap(), XDP_PASS);
}

#[test]
fn vxlan_frames_keep_a_zero_outer_checksum_and_the_sink_finds_the_inner_stamp() {
    if !have_bpf() {
        return;
    }
    let inner = INNER;
    let stack = template::Stack {
        vxlan: Some(template::Vxlan { vni: 77, inner }),
        ..Default::default()
    };
    let tm = template::frame(&STREAM, &stack, 128).unwrap();
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            // The outer source port: RFC 7348 §5's entropy.
            edits: vec![port_step(tm.l4_off, 5000, 5001)],
            ..conf(&tm)
        },
    )
    .unwrap();
    t.configure_sink(0, tm.sink, 0).unwrap();
    for k in 0..4u64 {
        if k == 2 {
            t.set_version(1).unwrap();
        }
        let (v, out) = t.test_gen(0, &tm.bytes).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let p = SlicedPacket::from_ethernet(&out).expect("parses");
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum(), "frame {k}");
        assert_eq!(h.identification >> 15, u16::from(k >= 2), "the version bit");
        let Some(TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!(u.source_port(), 5000 + (k % 2) as u16);
        assert_eq!(u.destination_port(), template::VXLAN_PORT);
        assert_eq!(u.checksum(), 0, "frame {k}: no outer checksum");
        let vx = u.payload();
        assert_eq!(&vx[4..7], &[0, 0, 77]);
        let q = SlicedPacket::from_ethernet(&vx[8..]).expect("the inner frame parses");
        let Some(TransportSlice::Udp(iu)) = &q.transport else {
            panic!("inner not UDP")
        };
        assert_eq!(iu.destination_port(), 7000);
        let seq = u64::from_be_bytes(iu.payload()[..8].try_into().unwrap());
        assert_eq!(seq, k);
        assert_eq!(t.test_sink(&out).unwrap(), XDP_DROP, "frame {k}");
    }
    for v in 0..2 {
        let b = t.sink_bank(0, v).unwrap();
        assert_eq!((b.packets, b.stamped), (2, 2), "bank {v}");
    }
}

/// TCP inside VXLAN: the stamp lies in the inner TCP payload, so every
/// frame's inner checksum is patched for it, and over IPv6 the outer UDP
/// checksum (which covers the whole inner frame) too. Each frame is made
/// from the last one's bytes, as a live frame's page comes back; in the
/// tagged IPv6 stack with raw bytes the stamp lies past the head the
/// generator restores (128 bytes), so it keeps the last run's values
/// until the generator restores it too.
#[test]
fn a_tcp_segment_inside_vxlan_keeps_every_checksum_right_stamp_after_stamp() {
    if !have_bpf() {
        return;
    }
    let inner = Udp { dport: 80, ..INNER };
    let mut v6 = [0u8; 16];
    v6[..4].copy_from_slice(&[0x20, 0x01, 0x00, 0x02]);
    let mut v6b = v6;
    v6b[15] = 3;
    for (vlan, ipv6, raw) in [
        (None, None, Vec::new()),
        (Some(5), Some((v6, v6b)), b"GET / HTTP/1.1\r\n".to_vec()),
    ] {
        let stack = template::Stack {
            vlan,
            ipv6,
            l4: template::L4::Tcp { flags: 0x18 },
            vxlan: Some(template::Vxlan { vni: 9, inner }),
            raw: raw.clone(),
        };
        let tm = template::frame(&STREAM, &stack, 300).unwrap();
        let stamp = usize::from(tm.stamp_off.unwrap());
        assert_eq!(
            stamp + 16 > 128,
            ipv6.is_some(),
            "the second is past the head"
        );
        let mut t = Tester::load(true).unwrap();
        t.configure(
            0,
            &GenConfig {
                ipv6: tm.ipv6,
                edits: vec![port_step(tm.l4_off, 5000, 5003)],
                ..conf(&tm)
            },
        )
        .unwrap();
        t.configure_sink(0, tm.sink, 0).unwrap();
        let mut frame = tm.bytes.clone();
        for k in 0..5u64 {
            let (v, out) = t.test_gen(0, &frame).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            let p = SlicedPacket::from_ethernet(&out).expect("parses");
            let Some(TransportSlice::Udp(u)) = &p.transport else {
                panic!("not UDP")
            };
            let outer = u.to_header();
            assert_eq!(outer.source_port, 5000 + (k % 4) as u16);
            match &p.net {
                Some(etherparse::NetSlice::Ipv6(ip)) => assert_eq!(
                    outer.checksum,
                    outer
                        .calc_checksum_ipv6(&ip.header().to_header(), u.payload())
                        .unwrap(),
                    "frame {k}: the outer checksum"
                ),
                _ => assert_eq!(outer.checksum, 0, "RFC 7348 §5"),
            }
            let q = SlicedPacket::from_ethernet(&u.payload()[8..]).expect("the inner frame");
            let (Some(etherparse::NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) =
                (&q.net, &q.transport)
            else {
                panic!("inner not IPv4 and TCP")
            };
            assert_eq!(
                tcp.checksum(),
                tcp.to_header()
                    .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
                    .unwrap(),
                "frame {k}: the inner TCP checksum"
            );
            assert_eq!(&tcp.payload()[..raw.len()], &raw[..]);
            let seq = &tcp.payload()[raw.len()..raw.len() + 8];
            assert_eq!(u64::from_be_bytes(seq.try_into().unwrap()), k);
            assert_eq!(t.test_sink(&out).unwrap(), XDP_DROP, "frame {k}");
            frame = out.clone();
        }
        assert_eq!(t.sink_bank(0, 0).unwrap().stamped, 5);
    }
}

/// A size mix of VXLAN frames: each frame cut from the largest template
/// has the outer and the inner lengths of its size, and every checksum
/// right for its bytes: the inner IPv4 header's, the inner TCP one (its
/// pseudo-header counts the length) and, over IPv6, the outer UDP one.
#[test]
fn a_size_mix_of_vxlan_frames_fixes_the_inner_lengths_and_checksums() {
    if !have_bpf() {
        return;
    }
    let mut v6 = [0u8; 16];
    v6[..4].copy_from_slice(&[0x20, 0x01, 0x00, 0x02]);
    let mut v6b = v6;
    v6b[15] = 3;
    for (ipv6, l4) in [
        (None, template::L4::Tcp { flags: 0x18 }),
        (Some((v6, v6b)), template::L4::Tcp { flags: 0x18 }),
        (None, template::L4::Udp),
    ] {
        let stack = template::Stack {
            ipv6,
            l4,
            vxlan: Some(template::Vxlan {
                vni: 9,
                inner: INNER,
            }),
            ..Default::default()
        };
        let tm = template::frame(&STREAM, &stack, 200).unwrap();
        let mut t = Tester::load(true).unwrap();
        let sizes = [150u16, 200, 160];
        t.configure(
            0,
            &GenConfig {
                ipv6: tm.ipv6,
                sizes: sizes.to_vec(),
                ..conf(&tm)
            },
        )
        .unwrap();
        t.configure_sink(0, tm.sink, 0).unwrap();
        for k in 0..6u64 {
            let (v, out) = t.test_gen(0, &tm.bytes).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(out.len(), usize::from(sizes[k as usize % 3]));
            let p = SlicedPacket::from_ethernet(&out).expect("parses");
            let Some(TransportSlice::Udp(u)) = &p.transport else {
                panic!("not UDP")
            };
            let outer = u.to_header();
            assert_eq!(
                usize::from(outer.length),
                out.len() - usize::from(tm.l4_off)
            );
            if let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net {
                let h = ip.header().to_header();
                assert_eq!(
                    outer.checksum,
                    outer.calc_checksum_ipv6(&h, u.payload()).unwrap(),
                    "{ipv6:?} frame {k}: the outer checksum"
                );
            }
            let inner = &u.payload()[8..];
            let q = SlicedPacket::from_ethernet(inner).expect("the inner frame");
            let Some(etherparse::NetSlice::Ipv4(ip)) = &q.net else {
                panic!("inner not IPv4")
            };
            let h = ip.header().to_header();
            assert_eq!(usize::from(h.total_len), inner.len() - 14, "frame {k}");
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "frame {k}");
            let payload = match &q.transport {
                Some(TransportSlice::Tcp(tcp)) => {
                    assert_eq!(
                        tcp.checksum(),
                        tcp.to_header()
                            .calc_checksum_ipv4(&h, tcp.payload())
                            .unwrap(),
                        "{ipv6:?} frame {k}: the inner TCP checksum"
                    );
                    tcp.payload()
                }
                Some(TransportSlice::Udp(iu)) => {
                    assert_eq!(usize::from(iu.length()), inner.len() - 34, "frame {k}");
                    assert_eq!(iu.checksum(), 0);
                    iu.payload()
                }
                _ => panic!("inner not TCP or UDP"),
            };
            assert_eq!(u64::from_be_bytes(payload[..8].try_into().unwrap()), k);
            assert_eq!(t.test_sink(&out).unwrap(), XDP_DROP, "frame {k}");
        }
        assert_eq!(t.sink_bank(0, 0).unwrap().stamped, 6);
    }
}

#[test]
fn two_streams_keep_their_own_template_editor_meter_banks_and_latency() {
    if !have_bpf() {
        return;
    }
    // Stream 0: 60-byte frames to port 9, source port stepped 100..102.
    // Stream 1: 200-byte frames to port 4000, one frame per 1000 ns.
    let a = template(60);
    let b = template::udp(
        &Udp {
            dport: 4000,
            sport: 50000,
            ..STREAM
        },
        200,
    )
    .unwrap();
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            edits: vec![Edit {
                offset: 34,
                width: 2,
                mode: EditMode::Step,
                carry_from: None,
                rand_bits: 0,
                table: 0,
                lo: 100,
                hi: 102,
                step: 1,
            }],
            ..conf(&a)
        },
    )
    .unwrap();
    t.configure(
        1,
        &GenConfig {
            interval_ns: 1000,
            tolerance_ns: 1_000_000,
            ..conf(&b)
        },
    )
    .unwrap();
    t.configure_sink(0, a.sink, 0).unwrap();
    t.configure_sink(1, b.sink, 0).unwrap();
    t.set_version(1).unwrap();
    // Interleaved, as two generator threads would run: each stream's
    // frames are its own template, edits and sequence numbers.
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    for k in 0..6u64 {
        t.set_test_clock(10_000 + 500 * k).unwrap();
        let (v, f) = t.test_gen(0, &a.bytes).unwrap();
        assert_eq!(v, XDP_REDIRECT, "stream 0 has no meter");
        from_a.push(f);
        let (v, f) = t.test_gen(1, &b.bytes).unwrap();
        if v == XDP_REDIRECT {
            from_b.push(f);
        }
    }
    let sa: Vec<_> = from_a.iter().map(|f| seen(f)).collect();
    let sb: Vec<_> = from_b.iter().map(|f| seen(f)).collect();
    assert_eq!(
        sa.iter().map(|s| s.sport).collect::<Vec<_>>(),
        [100, 101, 102, 100, 101, 102],
        "stream 0's editor"
    );
    assert_eq!(
        sa.iter().map(|s| s.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert!(sa.iter().all(|s| s.dport == 9 && s.id >> 15 == 1));
    assert!(from_a.iter().all(|f| f.len() == 60));
    // Stream 1's meter: one frame per 1000 ns over 2500 ns of runs.
    assert_eq!(sb.len(), 3, "stream 1's meter");
    assert_eq!(sb.iter().map(|s| s.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(sb
        .iter()
        .all(|s| s.dport == 4000 && s.sport == 50000 && s.id >> 15 == 1));
    assert!(from_b.iter().all(|f| f.len() == 200));
    assert_eq!(t.gen_counts(1).unwrap().held, 3);
    assert_eq!(t.gen_counts(0).unwrap().held, 0);
    assert_eq!(
        (
            t.gen_bank(0, 1).unwrap().packets,
            t.gen_bank(1, 1).unwrap().packets
        ),
        (6, 3)
    );
    // The sink tells them apart by port: each in its own banks and
    // histogram, in order within its stream though interleaved.
    t.set_test_clock(20_000).unwrap();
    for f in from_a.iter().zip(&from_b).flat_map(|(x, y)| [x, y]) {
        assert_eq!(t.test_sink(f).unwrap(), XDP_DROP);
    }
    for f in &from_a[3..] {
        t.test_sink(f).unwrap();
    }
    let (ia, ib) = (t.sink_bank(0, 1).unwrap(), t.sink_bank(1, 1).unwrap());
    assert_eq!((ia.packets, ia.bytes, ia.late_seq), (6, 360, 0));
    assert_eq!((ib.packets, ib.bytes, ib.late_seq), (3, 600, 0));
    assert_eq!(t.sink_hist(0, 1).unwrap().iter().sum::<u64>(), 6);
    assert_eq!(t.sink_hist(1, 1).unwrap().iter().sum::<u64>(), 3);
    // Stream 1's latencies: sent at 10000, 11000, 12000 (its meter's
    // slots), all received at 20000.
    assert_eq!((ib.lat_min, ib.lat_max), (8000, 10000));
    // Clearing one stream's bank leaves the other's.
    t.clear_sink_bank(1, 1).unwrap();
    assert_eq!(t.sink_bank(0, 1).unwrap().packets, 6);
    // No stream past the program's table.
    let n = wirelab_dataplane::load::STREAMS;
    assert!(t
        .configure(n, &conf(&a))
        .unwrap_err()
        .to_string()
        .contains("streams at most"));
    assert!(t.gen_bank(n, 0).is_err());
}

#[test]
fn arp_replies_announce_a_stepped_range_with_nothing_of_ip_written() {
    if !have_bpf() {
        return;
    }
    let mac = [2, 0, 0, 0, 0, 9];
    let dut = ([2, 0, 0, 0, 0, 1], Ipv4Addr::new(198, 18, 2, 1));
    let tm = template::arp_reply((mac, Ipv4Addr::new(198, 18, 2, 10)), dut).unwrap();
    let mut t = Tester::load(true).unwrap();
    t.configure(
        0,
        &GenConfig {
            edits: vec![Edit {
                offset: template::ARP_SPA,
                width: 4,
                mode: EditMode::Step,
                carry_from: None,
                rand_bits: 0,
                table: 0,
                lo: u32::from(Ipv4Addr::new(198, 18, 2, 10)),
                hi: u32::from(Ipv4Addr::new(198, 18, 2, 12)),
                step: 1,
            }],
            no_ip: true,
            ..conf(&tm)
        },
    )
    .unwrap();
    t.set_version(1).unwrap();
    let mut announced = Vec::new();
    for _ in 0..4 {
        let (v, f) = t.test_gen(0, &tm.bytes).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(f.len(), 60);
        // Everything but the announced address is the template's: no
        // version bit, stamp or checksum written into the ARP fields.
        assert_eq!(f[..28], tm.bytes[..28]);
        assert_eq!(f[32..], tm.bytes[32..]);
        let p = SlicedPacket::from_ethernet(&f).expect("parses");
        let Some(etherparse::NetSlice::Arp(a)) = &p.net else {
            panic!("not ARP: {f:02x?}")
        };
        let a = a.to_packet().try_eth_ipv4().unwrap();
        assert_eq!(a.operation, etherparse::ArpOperation::REPLY);
        assert_eq!(
            (a.sender_mac, a.target_mac, a.target_ipv4),
            (mac, dut.0, [198, 18, 2, 1])
        );
        announced.push(a.sender_ipv4[3]);
    }
    assert_eq!(announced, [10, 11, 12, 10]);
    // Counted as sent in its interval's bank; the sink counts none.
    assert_eq!(t.gen_bank(0, 1).unwrap().packets, 4);
    t.configure_sink(0, tm.sink, 0).unwrap();
    assert_eq!(t.test_sink(&tm.bytes).unwrap(), XDP_PASS);
    // A frame without IP takes no stamp or checksum.
    let bad = GenConfig {
        stamp_off: 44,
        no_ip: true,
        ..conf(&tm)
    };
    assert!(t.configure(0, &bad).is_err());
}
