//! Fixture tables for the switch pipeline run through `BPF_PROG_TEST_RUN`
//! (Katran/aya style): each step feeds one crafted packet and states the
//! expected verdict, output bytes, mirror record and map changes.
//!
//! Needs root (BPF). Without it every test is skipped with the reason.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;

mod common;
use common::{have_bpf, run_frame};
use etherparse::{IpEcn, IpNumber, Ipv4Header, TcpHeader};
use wirelab_dataplane::{verdict, wl_mirror_hdr, Action, Config, FlowKey, Switch};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const ISN: u32 = 0xffff_fff0; // wraps during the test on purpose
/// `BPF_PROG_TEST_RUN` delivers packets "on" the loopback device.
const LO_IFINDEX: u32 = 1;
const OUT_IFINDEX: u32 = 4242;

struct Pkt {
    seq: u32,
    flags: &'static str,
    payload: usize,
    ecn: IpEcn,
    reverse: bool,
}

fn pkt(seq: u32, payload: usize) -> Pkt {
    Pkt {
        seq,
        flags: "A",
        payload,
        ecn: IpEcn::Ect0,
        reverse: false,
    }
}

fn build(p: &Pkt) -> Vec<u8> {
    let (src, dst, smac, dmac, sport, dport) = if p.reverse {
        (B, A, MAC_B, MAC_A, 5201, 40001)
    } else {
        (A, B, MAC_A, MAC_B, 40001, 5201)
    };
    let payload: Vec<u8> = (0..p.payload).map(|i| (i % 251) as u8).collect();
    let mut tcp = TcpHeader::new(sport, dport, p.seq, 64240);
    tcp.syn = p.flags.contains('S');
    tcp.ack = p.flags.contains('A');
    let mut ip = Ipv4Header::new(
        (tcp.header_len() + payload.len()) as u16,
        64,
        IpNumber::TCP,
        src.octets(),
        dst.octets(),
    )
    .unwrap();
    ip.ecn = p.ecn;
    ip.header_checksum = ip.calc_header_checksum();
    tcp.checksum = tcp.calc_checksum_ipv4(&ip, &payload).unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(&dmac);
    out.extend_from_slice(&smac);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    ip.write(&mut out).unwrap();
    tcp.write(&mut out).unwrap();
    out.extend_from_slice(&payload);
    out
}

/// A switch with port 1 = loopback (where test runs arrive), B reachable on
/// port 2, and connection 1 = A:40001 -> B:5201 carrying the data.
fn switch(cfg: Config) -> Switch {
    let sw = Switch::load(cfg).expect("switch loads");
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    sw.add_fwd(MAC_A, LO_IFINDEX, 1).unwrap();
    let fwd = FlowKey {
        saddr: A,
        daddr: B,
        sport: 40001,
        dport: 5201,
    };
    let rev = FlowKey {
        saddr: B,
        daddr: A,
        sport: 5201,
        dport: 40001,
    };
    sw.add_flow(fwd, 1, true).unwrap();
    sw.add_flow(rev, 1, false).unwrap();
    sw
}

/// Runs one packet and returns (verdict, output bytes, mirror record).
fn run(sw: &Switch, p: &Pkt) -> (u32, Vec<u8>, Option<(wl_mirror_hdr, Vec<u8>)>) {
    let (v, out, mut records) = run_frame(sw, &build(p));
    assert!(records.len() <= 1, "one packet in, at most one record out");
    (v, out, records.pop())
}

/// Consumes every record waiting in the ring; returns how many there were.
fn drain(sw: &Switch) -> usize {
    let n = Rc::new(RefCell::new(0usize));
    let c = n.clone();
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(sw.ring(), move |_: &[u8]| {
        *c.borrow_mut() += 1;
        0
    })
    .unwrap();
    b.build().unwrap().consume().unwrap();
    let v = *n.borrow();
    v
}

const MSS: u32 = 1000;

fn handshake(sw: &Switch) {
    let syn = Pkt {
        seq: ISN,
        flags: "S",
        payload: 0,
        ecn: IpEcn::NotEct,
        reverse: false,
    };
    let (v, _, m) = run(sw, &syn);
    assert_eq!(v, verdict::REDIRECT);
    let m = m.unwrap().0;
    assert_eq!(
        (m.conn, m.index, m.iter),
        (1, 0, 0),
        "a SYN is not a data packet"
    );
    let st = sw.conn_state(1).unwrap();
    assert!(st.synced && st.isn == ISN && st.iter == 1 && st.first_tx == 0);
}

/// Relative sequence `rel` (1 = first data byte).
fn seq(rel: u32) -> u32 {
    ISN.wrapping_add(rel)
}

#[test]
fn iteration_tracking_follows_lumina_rule() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    handshake(&sw);
    // (relative seq, expected index, expected iteration, first transmission)
    let table: &[(&str, u32, u32, u32, u32)] = &[
        ("packet 1", 1, 1, 1, 1),
        ("packet 2", 1 + MSS, 2, 1, 1),
        ("packet 3", 1 + 2 * MSS, 3, 1, 1),
        ("packet 4", 1 + 3 * MSS, 4, 1, 1),
        (
            "retransmit 2: seq not larger than last -> iteration 2",
            1 + MSS,
            2,
            2,
            0,
        ),
        (
            "new data after it stays in iteration 2",
            1 + 4 * MSS,
            5,
            2,
            1,
        ),
        (
            "retransmit 5: equal seq is 'not larger' -> iteration 3",
            1 + 4 * MSS,
            5,
            3,
            0,
        ),
        ("retransmit 5 again -> iteration 4", 1 + 4 * MSS, 5, 4, 0),
        ("retransmit 1 -> iteration 5", 1, 1, 5, 0),
        (
            "retransmit 3 (larger than last) -> same iteration",
            1 + 2 * MSS,
            3,
            5,
            0,
        ),
    ];
    for (what, rel, idx, iter, first) in table {
        let (v, _, m) = run(&sw, &pkt(seq(*rel), MSS as usize));
        assert_eq!(v, verdict::REDIRECT, "{what}: forwarded");
        let m = m.expect("mirrored").0;
        assert_eq!(
            (m.index, m.iter, m.first_tx),
            (*idx, *iter, *first),
            "{what}"
        );
        assert_eq!((m.conn, m.data_dir, m.port), (1, 1, 1), "{what}");
    }
    let st = sw.conn_state(1).unwrap();
    assert_eq!((st.iter, st.first_tx), (5, 5));
    // The reverse direction (ACKs, completions) is classified but never indexed.
    let ack = Pkt {
        seq: 77,
        flags: "A",
        payload: 8,
        ecn: IpEcn::NotEct,
        reverse: true,
    };
    let (v, _, m) = run(&sw, &ack);
    assert_eq!(v, verdict::REDIRECT);
    let m = m.unwrap().0;
    assert_eq!((m.conn, m.data_dir, m.index, m.iter), (1, 0, 0, 0));
}

#[test]
fn drop_event_hits_only_its_iteration_and_is_mirrored_first() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    sw.add_event(1, 2, 1, Action::Drop, 1).unwrap();
    sw.add_event(1, 2, 2, Action::Drop, 2).unwrap();
    handshake(&sw);
    let steps: &[(&str, u32, u32, Action, u32)] = &[
        ("packet 1 passes", 1, verdict::REDIRECT, Action::None, 0),
        (
            "packet 2 iteration 1 dropped by event 1",
            1 + MSS,
            verdict::SHOT,
            Action::Drop,
            1,
        ),
        (
            "packet 3 passes",
            1 + 2 * MSS,
            verdict::REDIRECT,
            Action::None,
            0,
        ),
        (
            "packet 2 iteration 2 dropped by event 2",
            1 + MSS,
            verdict::SHOT,
            Action::Drop,
            2,
        ),
        (
            "packet 2 iteration 3 passes",
            1 + MSS,
            verdict::REDIRECT,
            Action::None,
            0,
        ),
    ];
    for (i, (what, rel, want_v, want_a, want_id)) in steps.iter().enumerate() {
        let (v, _, m) = run(&sw, &pkt(seq(*rel), MSS as usize));
        assert_eq!(v, *want_v, "{what}");
        let (m, data) = m.expect("every packet is mirrored, dropped ones too");
        assert_eq!(
            m.seq,
            i as u64 + 1,
            "{what}: mirror seq contiguous (SYN was 0)"
        );
        assert_eq!(m.applied(), Some(*want_a), "{what}");
        assert_eq!(m.event_id, *want_id, "{what}");
        assert_eq!(m.cap_len, 128, "{what}: trimmed to the default snap length");
        assert_eq!(data.len(), 128);
        assert_eq!(m.pkt_len as usize, 14 + 20 + 20 + MSS as usize);
    }
    assert_eq!(sw.event_hits(1, 2, 1).unwrap(), 1);
    assert_eq!(sw.event_hits(1, 2, 2).unwrap(), 1);
    let c1 = sw.counters(1).unwrap();
    assert_eq!(
        (c1.rx_pkts, c1.mirrored, c1.event_drops, c1.mirror_lost),
        (6, 6, 2, 0)
    );
    let c2 = sw.counters(2).unwrap();
    assert_eq!(
        c2.tx_pkts, 4,
        "SYN + 3 forwarded data packets leave on port 2"
    );
    assert_eq!(sw.mirror_seq().unwrap(), 6);
}

#[test]
fn ecn_sets_ce_on_ect_and_fixes_the_ip_checksum() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    sw.add_event(1, 1, 1, Action::Ecn, 1).unwrap();
    sw.add_event(1, 2, 1, Action::Ecn, 2).unwrap();
    handshake(&sw);
    let p1 = pkt(seq(1), 100);
    let input = build(&p1);
    let (v, out, m) = run(&sw, &p1);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(out[15] & 3, 3, "CE set");
    let mut expect = input.clone();
    expect[15] |= 3;
    let (ip, _) = Ipv4Header::from_slice(&expect[14..]).unwrap();
    let csum = ip.calc_header_checksum().to_be_bytes();
    expect[24..26].copy_from_slice(&csum);
    assert_eq!(out, expect, "only TOS and the IP checksum change");
    let (m, data) = m.unwrap();
    assert_eq!(m.applied(), Some(Action::Ecn));
    assert_eq!(
        data[15] & 3,
        3,
        "the trace shows the packet as the receiver gets it"
    );

    let p2 = Pkt {
        ecn: IpEcn::NotEct,
        ..pkt(seq(101), 100)
    };
    let input = build(&p2);
    let (v, out, m) = run(&sw, &p2);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(out, input, "RFC 3168: a Not-ECT packet is never marked");
    assert_eq!(m.unwrap().0.applied(), Some(Action::EcnNotEct));
}

#[test]
fn corrupt_flips_one_payload_bit_and_leaves_checksums() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    sw.add_event(1, 1, 1, Action::Corrupt, 1).unwrap();
    handshake(&sw);
    let p = pkt(seq(1), 200);
    let input = build(&p);
    let (v, out, m) = run(&sw, &p);
    assert_eq!(v, verdict::REDIRECT);
    let diff: Vec<usize> = (0..input.len()).filter(|&i| input[i] != out[i]).collect();
    assert_eq!(diff, vec![54], "exactly the first payload byte differs");
    assert_eq!(input[54] ^ out[54], 1, "by one bit");
    let (m, data) = m.unwrap();
    assert_eq!(m.applied(), Some(Action::Corrupt));
    assert_eq!(
        data[..],
        out[..128],
        "the trace shows the bytes as received"
    );
}

#[test]
fn wildcards_and_unknown_traffic() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config {
        snap_len: 64,
        ..Config::default()
    });
    // `packet: all` at iteration 1
    sw.add_event(1, 0, 1, Action::Ecn, 7).unwrap();
    handshake(&sw);
    for i in 0..3 {
        let (_, out, m) = run(&sw, &pkt(seq(1 + i * MSS), MSS as usize));
        assert_eq!(out[15] & 3, 3, "packet {} marked", i + 1);
        let m = m.unwrap();
        assert_eq!(m.0.event_id, 7);
        assert_eq!(m.1.len(), 64, "snap length 64 honoured");
    }
    // Iteration 2 is not covered by the wildcard.
    let (_, out, m) = run(&sw, &pkt(seq(1), MSS as usize));
    assert_eq!(out[15] & 3, 2, "iteration 2 untouched (ECT(0) stays)");
    assert_eq!(m.unwrap().0.iter, 2);

    // A flow the control plane never armed is forwarded and mirrored, conn 0.
    let mut other = build(&pkt(1, 10));
    other[34..36].copy_from_slice(&999u16.to_be_bytes());
    let (v, _) = sw.test_run(&other).unwrap();
    assert_eq!(v, verdict::REDIRECT);
    // No forwarding entry for this MAC: dropped and counted as no_route.
    let mut lost = build(&pkt(1, 10));
    lost[0..6].copy_from_slice(&[0x02, 9, 9, 9, 9, 9]);
    let before = sw.counters(1).unwrap();
    let (v, _) = sw.test_run(&lost).unwrap();
    assert_eq!(v, verdict::SHOT);
    let after = sw.counters(1).unwrap();
    assert_eq!(after.no_route, before.no_route + 1);
    assert_eq!(
        after.mirrored,
        before.mirrored + 1,
        "mirrored even when unroutable"
    );
}

#[test]
fn ring_overflow_is_counted_and_leaves_a_gap() {
    if !have_bpf() {
        return;
    }
    // One page of ring holds 4096 / (8 + 72 + 128) = 19 records.
    let sw = switch(Config {
        snap_len: 128,
        ring_bytes: 4096,
        ..Config::default()
    });
    let mut v = 0;
    for i in 0..40 {
        v = sw
            .test_run(&build(&pkt(1 + i * MSS, MSS as usize)))
            .unwrap()
            .0;
    }
    assert_eq!(
        v,
        verdict::REDIRECT,
        "forwarding continues when the ring is full"
    );
    let c = sw.counters(1).unwrap();
    assert_eq!(c.rx_pkts, 40);
    assert!(c.mirror_lost > 0, "lost records are counted: {c:?}");
    assert_eq!(c.mirrored + c.mirror_lost, 40);
    assert_eq!(
        sw.mirror_seq().unwrap(),
        40,
        "a lost record still used its sequence number"
    );
}

#[test]
fn bad_config_is_rejected_before_load() {
    let e = Switch::load(Config {
        snap_len: 0,
        ..Config::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("snap length 0"), "{e}");
    let e = Switch::load(Config {
        snap_len: 128,
        ring_bytes: 5000,
        ..Config::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("power of two"), "{e}");
}

#[test]
fn retransmissions_are_indexed_within_the_window_and_unknown_beyond() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    handshake(&sw);
    const N: u32 = 5000; // more first transmissions than WL_SEG_WINDOW (4096)
    const LEN: u32 = 100;
    for i in 0..N {
        let (v, _) = sw
            .test_run(&build(&pkt(seq(1 + i * LEN), LEN as usize)))
            .unwrap();
        assert_eq!(v, verdict::REDIRECT);
    }
    assert_eq!(sw.conn_state(1).unwrap().first_tx, N);
    assert_eq!(
        drain(&sw),
        N as usize,
        "every first transmission was mirrored"
    );
    // (what, relative seq, expected index)
    let table: &[(&str, u32, u32)] = &[
        ("newest packet", 1 + (N - 1) * LEN, N),
        (
            "a byte in the middle of packet 4500",
            1 + 4499 * LEN + 37,
            4500,
        ),
        ("inside the window", 1 + 3999 * LEN, 4000),
        (
            "oldest packet in the window",
            1 + (N - 4096) * LEN,
            N - 4095,
        ),
        ("older than the window: unknown", 1 + 99 * LEN, 0),
    ];
    let mut iter = 1;
    for (what, rel, want) in table {
        let (_, _, m) = run(&sw, &pkt(seq(*rel), LEN as usize));
        let m = m.expect("mirrored").0;
        iter += 1;
        assert_eq!(m.first_tx, 0, "{what}");
        assert_eq!(m.index, *want, "{what}");
        assert_eq!(
            m.iter, iter,
            "{what}: each one starts below the last, so a new iteration"
        );
    }
}

#[test]
fn every_key_shape_matches_with_the_mask() {
    if !have_bpf() {
        return;
    }
    // (index, any iteration): packet 2 marked in every iteration.
    let sw = switch(Config::default());
    sw.add_event(1, 2, 0, Action::Ecn, 1).unwrap();
    handshake(&sw);
    run(&sw, &pkt(seq(1), MSS as usize));
    for want_iter in [1, 2, 3] {
        let (_, out, m) = run(&sw, &pkt(seq(1 + MSS), MSS as usize));
        let m = m.unwrap().0;
        assert_eq!((m.index, m.iter), (2, want_iter));
        assert_eq!(out[15] & 3, 3, "iteration {want_iter} marked");
        assert_eq!(m.event_id, 1);
    }
    assert_eq!(sw.event_hits(1, 2, 0).unwrap(), 3);

    // (all, any): every data packet of connection 1, and only data packets.
    let sw = switch(Config::default());
    sw.add_event(1, 0, 0, Action::Drop, 9).unwrap();
    handshake(&sw);
    for rel in [1, 1 + MSS, 1] {
        let (v, _, m) = run(&sw, &pkt(seq(rel), MSS as usize));
        assert_eq!(v, verdict::SHOT);
        assert_eq!(m.unwrap().0.event_id, 9);
    }
    let ack = Pkt {
        seq: 77,
        flags: "A",
        payload: 0,
        ecn: IpEcn::NotEct,
        reverse: true,
    };
    let (v, _, _) = run(&sw, &ack);
    assert_eq!(
        v,
        verdict::REDIRECT,
        "the reverse direction is never an event target"
    );

    // No events on a connection: nothing is looked up, nothing happens.
    let sw = switch(Config::default());
    handshake(&sw);
    let (v, _, m) = run(&sw, &pkt(seq(1), MSS as usize));
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(m.unwrap().0.applied(), Some(Action::None));
}
