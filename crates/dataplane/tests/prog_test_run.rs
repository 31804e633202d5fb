//! Fixture tables for the switch pipeline run through `BPF_PROG_TEST_RUN`
//! (Katran/aya style): each step feeds one crafted packet and states the
//! expected verdict, output bytes, mirror record and map changes.
//!
//! Needs root (BPF). Without it every test is skipped with the reason.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;

mod common;
use common::{check_table, have_bpf, pin, run_frame, Change, Fixture, Out, Rec};
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
    tcp.rst = p.flags.contains('R');
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
    sw.add_flow(fwd, 1, true, false).unwrap();
    sw.add_flow(rev, 1, false, true).unwrap();
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

/// Connection 1's SYN.
fn syn() -> Pkt {
    Pkt {
        seq: ISN,
        flags: "S",
        payload: 0,
        ecn: IpEcn::NotEct,
        reverse: false,
    }
}

fn handshake(sw: &Switch) {
    let (v, _, m) = run(sw, &syn());
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

/// A data packet of connection 1's data direction at relative sequence `rel`.
fn data(rel: u32, len: u32) -> Vec<u8> {
    build(&pkt(seq(rel), len as usize))
}

/// The record of a data packet of connection 1.
fn rec(index: u32, iter: u32, first_tx: u32) -> Rec {
    Rec {
        conn: 1,
        data_dir: 1,
        index,
        iter,
        first_tx,
        ..Rec::NONE
    }
}

/// A row forwarded unchanged with the record `r`.
fn passes(what: &str, input: Vec<u8>, r: Rec) -> Fixture {
    Fixture {
        what: what.into(),
        at: None,
        input,
        verdict: verdict::REDIRECT,
        output: Out::Same,
        record: Some(r),
        maps: vec![],
    }
}

#[test]
fn iteration_tracking_follows_lumina_rule() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    handshake(&sw);
    let m = MSS;
    let d = |rel| data(rel, MSS);
    let ack = Pkt {
        seq: 77,
        flags: "A",
        payload: 8,
        ecn: IpEcn::NotEct,
        reverse: true,
    };
    check_table(
        &sw,
        &[
            passes("packet 1", d(1), rec(1, 1, 1)),
            passes("packet 2", d(1 + m), rec(2, 1, 1)),
            passes("packet 3", d(1 + 2 * m), rec(3, 1, 1)),
            passes("packet 4", d(1 + 3 * m), rec(4, 1, 1)),
            passes(
                "retransmit 2: seq not larger than last -> iteration 2",
                d(1 + m),
                rec(2, 2, 0),
            ),
            passes(
                "new data after it stays in iteration 2",
                d(1 + 4 * m),
                rec(5, 2, 1),
            ),
            passes(
                "retransmit 5: equal seq is 'not larger' -> iteration 3",
                d(1 + 4 * m),
                rec(5, 3, 0),
            ),
            passes(
                "retransmit 5 again -> iteration 4",
                d(1 + 4 * m),
                rec(5, 4, 0),
            ),
            passes("retransmit 1 -> iteration 5", d(1), rec(1, 5, 0)),
            passes(
                "retransmit 3 (larger than last) -> same iteration",
                d(1 + 2 * m),
                rec(3, 5, 0),
            ),
            passes(
                "the reverse direction (ACKs) is classified but never indexed",
                build(&ack),
                Rec {
                    conn: 1,
                    ..Rec::NONE
                },
            ),
        ],
    );
    let st = sw.conn_state(1).unwrap();
    assert_eq!((st.iter, st.first_tx), (5, 5));
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
    let d = |rel| data(rel, MSS);
    let mirrored = Change {
        what: "port 1 mirrored",
        read: |s| s.counters(1).unwrap().mirrored,
        by: 1,
    };
    let dropped = |by, hits: fn(&Switch) -> u64| {
        vec![
            Change {
                what: "port 1 event drops",
                read: |s| s.counters(1).unwrap().event_drops,
                by,
            },
            Change {
                what: "port 2 transmitted",
                read: |s| s.counters(2).unwrap().tx_pkts,
                by: 1 - by,
            },
            Change {
                what: "the event's hits",
                read: hits,
                by,
            },
            Change {
                what: "mirror sequence numbers",
                read: |s| s.mirror_seq().unwrap(),
                by: 1,
            },
            mirrored,
        ]
    };
    let hits1: fn(&Switch) -> u64 = |s| s.event_hits(1, 2, 1).unwrap();
    let hits2: fn(&Switch) -> u64 = |s| s.event_hits(1, 2, 2).unwrap();
    let row = |what: &str, input, verdict, record, maps| Fixture {
        what: what.into(),
        at: None,
        input,
        verdict,
        output: Out::Same,
        record: Some(record),
        maps,
    };
    let drop = |index, iter, id| Rec {
        action: Action::Drop,
        event_id: id,
        ..rec(index, iter, 0)
    };
    check_table(
        &sw,
        &[
            row(
                "packet 1 passes",
                d(1),
                verdict::REDIRECT,
                rec(1, 1, 1),
                dropped(0, hits1),
            ),
            row(
                "packet 2 iteration 1: dropped by event 1, mirrored first",
                d(1 + MSS),
                verdict::SHOT,
                Rec {
                    first_tx: 1,
                    ..drop(2, 1, 1)
                },
                dropped(1, hits1),
            ),
            row(
                "packet 3 passes",
                d(1 + 2 * MSS),
                verdict::REDIRECT,
                rec(3, 1, 1),
                dropped(0, hits2),
            ),
            row(
                "packet 2 iteration 2: dropped by event 2",
                d(1 + MSS),
                verdict::SHOT,
                drop(2, 2, 2),
                dropped(1, hits2),
            ),
            row(
                "packet 2 iteration 3 passes",
                d(1 + MSS),
                verdict::REDIRECT,
                rec(2, 3, 0),
                [dropped(0, hits1), dropped(0, hits2)].concat(),
            ),
        ],
    );
    // The records themselves: cut to the snap length, the length on the wire.
    let frame = d(1 + 3 * MSS);
    let (_, _, r) = run_frame(&sw, &frame);
    let (h, bytes) = &r[0];
    assert_eq!((h.cap_len, bytes.len()), (128, 128), "default snap length");
    // Copied inline from the linear frame (the mirror's fast path): the
    // frame's first bytes, each of them.
    assert_eq!(bytes[..], frame[..128]);
    // A frame shorter than the snap takes the helper's path: all of it.
    let ack = build(&Pkt {
        seq: 77,
        flags: "A",
        payload: 0,
        ecn: IpEcn::NotEct,
        reverse: true,
    });
    let (_, _, r) = run_frame(&sw, &ack);
    assert_eq!(r[0].0.cap_len as usize, ack.len());
    assert_eq!(r[0].1[..], ack[..]);
    assert_eq!(h.pkt_len as usize, 14 + 20 + 20 + MSS as usize);
    assert_eq!(h.seq, 6, "mirror sequence numbers have no gaps (SYN was 0)");
}

/// Wire events (DETER's logical packet, issue 21): the n-th packet one end
/// sent, data or ACK, counted per end from the handshake on; SYNs and RSTs
/// are not numbered, and retransmissions are, as IP-IDs number them.
#[test]
fn wire_events_count_each_ends_packets_data_or_not() {
    if !have_bpf() {
        return;
    }
    use wirelab_dataplane::wire_iter;
    let sw = switch(Config::default());
    sw.add_event(1, 2, wire_iter(true), Action::Drop, 1)
        .unwrap();
    sw.add_event(1, 3, wire_iter(false), Action::Ecn, 2)
        .unwrap();
    let from_b = |flags, payload| {
        build(&Pkt {
            seq: 9,
            flags,
            payload,
            ecn: IpEcn::NotEct,
            reverse: true,
        })
    };
    let from_a = |flags, rel: u32, payload| {
        build(&Pkt {
            seq: seq(rel),
            flags,
            payload,
            ecn: IpEcn::Ect0,
            reverse: false,
        })
    };
    let b_rec = |action, event_id| Rec {
        conn: 1,
        action,
        event_id,
        ..Rec::NONE
    };
    let a_ack = Rec {
        conn: 1,
        data_dir: 1,
        ..Rec::NONE
    };
    let hits = |what: &'static str, read: fn(&Switch) -> u64, by| Change { what, read, by };
    let drop_hits: fn(&Switch) -> u64 = |s| s.event_hits(1, 2, wire_iter(true)).unwrap();
    let ecn_hits: fn(&Switch) -> u64 = |s| s.event_hits(1, 3, wire_iter(false)).unwrap();
    let row = |what: &str, input, verdict, output, record, maps| Fixture {
        what: what.into(),
        at: None,
        input,
        verdict,
        output,
        record: Some(record),
        maps,
    };
    let ce_input = from_a("A", 1 + MSS, MSS as usize);
    let ce_output = common::with_ce(&ce_input);
    check_table(
        &sw,
        &[
            row(
                "A's SYN is not numbered",
                from_a("S", 0, 0),
                verdict::REDIRECT,
                Out::Same,
                Rec {
                    data_dir: 1,
                    ..a_ack
                },
                vec![],
            ),
            row(
                "B's SYN-ACK is not numbered",
                from_b("SA", 0),
                verdict::REDIRECT,
                Out::Same,
                b_rec(Action::None, 0),
                vec![],
            ),
            row(
                "A's 1st: the handshake's ACK",
                from_a("A", 1, 0),
                verdict::REDIRECT,
                Out::Same,
                a_ack,
                vec![],
            ),
            row(
                "A's 2nd: data packet 1",
                from_a("A", 1, MSS as usize),
                verdict::REDIRECT,
                Out::Same,
                rec(1, 1, 1),
                vec![],
            ),
            row(
                "B's 1st, an ACK, passes",
                from_b("A", 0),
                verdict::REDIRECT,
                Out::Same,
                b_rec(Action::None, 0),
                vec![hits("the drop's hits", drop_hits, 0)],
            ),
            row(
                "a RST from B is not numbered",
                from_b("R", 0),
                verdict::REDIRECT,
                Out::Same,
                b_rec(Action::None, 0),
                vec![hits("the drop's hits", drop_hits, 0)],
            ),
            row(
                "B's 2nd, an ACK: dropped by event 1",
                from_b("A", 0),
                verdict::SHOT,
                Out::Same,
                b_rec(Action::Drop, 1),
                vec![hits("the drop's hits", drop_hits, 1)],
            ),
            row(
                "A's 3rd, data packet 2: CE by event 2",
                ce_input,
                verdict::REDIRECT,
                Out::Bytes(ce_output),
                Rec {
                    action: Action::Ecn,
                    event_id: 2,
                    ..rec(2, 1, 1)
                },
                vec![hits("the mark's hits", ecn_hits, 1)],
            ),
            row(
                "A's 4th, a retransmission of packet 1: numbered, passes",
                from_a("A", 1, MSS as usize),
                verdict::REDIRECT,
                Out::Same,
                rec(1, 2, 0),
                vec![hits("the mark's hits", ecn_hits, 0)],
            ),
            row(
                "B's 3rd passes: event 1 was for the 2nd only",
                from_b("A", 0),
                verdict::REDIRECT,
                Out::Same,
                b_rec(Action::None, 0),
                vec![hits("the drop's hits", drop_hits, 0)],
            ),
        ],
    );
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
    let input = data(1, 100);
    let marked = common::with_ce(&input);
    let not_ect = build(&Pkt {
        ecn: IpEcn::NotEct,
        ..pkt(seq(101), 100)
    });
    check_table(
        &sw,
        &[
            Fixture {
                what: "an ECT(0) packet: CE set, only TOS and the IP checksum change".into(),
                at: None,
                input,
                verdict: verdict::REDIRECT,
                output: Out::Bytes(marked),
                record: Some(Rec {
                    action: Action::Ecn,
                    event_id: 1,
                    ..rec(1, 1, 1)
                }),
                maps: vec![Change {
                    what: "event 1's hits",
                    read: |s| s.event_hits(1, 1, 1).unwrap(),
                    by: 1,
                }],
            },
            Fixture {
                what: "RFC 3168: a Not-ECT packet is never marked, and the trace says so".into(),
                at: None,
                input: not_ect,
                verdict: verdict::REDIRECT,
                output: Out::Same,
                record: Some(Rec {
                    action: Action::EcnNotEct,
                    event_id: 2,
                    ..rec(2, 1, 1)
                }),
                maps: vec![Change {
                    what: "event 2's hits",
                    read: |s| s.event_hits(1, 2, 1).unwrap(),
                    by: 1,
                }],
            },
        ],
    );
}

#[test]
fn corrupt_flips_one_payload_bit_and_leaves_checksums() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config::default());
    sw.add_event(1, 1, 1, Action::Corrupt, 1).unwrap();
    handshake(&sw);
    let input = data(1, 200);
    let mut flipped = input.clone();
    flipped[54] ^= 1; // the first payload byte, by one bit
    check_table(
        &sw,
        &[Fixture {
            what: "corrupt: one payload bit flipped, checksums left as they were".into(),
            at: None,
            input,
            verdict: verdict::REDIRECT,
            output: Out::Bytes(flipped),
            record: Some(Rec {
                action: Action::Corrupt,
                event_id: 1,
                ..rec(1, 1, 1)
            }),
            maps: vec![],
        }],
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
    // The flow's egress was learned on its first packet; a frame of the
    // same flow to another MAC is looked up again, not sent there.
    let fwd = FlowKey {
        saddr: A,
        daddr: B,
        sport: 40001,
        dport: 5201,
    };
    assert_eq!(sw.flow_egress(fwd), Some((OUT_IFINDEX, 2)));
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
    // ... and the flow's own MAC is still routed where the table says.
    assert_eq!(sw.flow_egress(fwd), Some((OUT_IFINDEX, 2)));
    let (v, _) = sw
        .test_run(&build(&pkt(seq(1 + 3 * MSS), MSS as usize)))
        .unwrap();
    assert_eq!(v, verdict::REDIRECT);
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

#[test]
fn without_the_lock_tracking_counts_each_move_to_another_cpu() {
    if !have_bpf() {
        return;
    }
    if !pin(0) || !pin(1) {
        eprintln!("SKIPPED: needs two CPUs to move between");
        return;
    }
    let sw = switch(Config {
        track_lock: false,
        ..Config::default()
    });
    pin(0);
    handshake(&sw);
    check_table(
        &sw,
        &[passes("packet 1 on CPU 0", data(1, MSS), rec(1, 1, 1))],
    );
    assert_eq!(sw.conn_state(1).unwrap().cpu_moves, 0, "one CPU so far");
    pin(1);
    check_table(
        &sw,
        &[passes(
            "packet 2 on CPU 1",
            data(1 + MSS, MSS),
            rec(2, 1, 1),
        )],
    );
    pin(0);
    check_table(
        &sw,
        &[passes(
            "packet 3 back on CPU 0",
            data(1 + 2 * MSS, MSS),
            rec(3, 1, 1),
        )],
    );
    assert_eq!(
        sw.conn_state(1).unwrap().cpu_moves,
        2,
        "each move between CPUs is counted, so the run summary can warn"
    );
}

#[test]
fn the_event_filter_lets_through_every_iteration_an_event_can_match() {
    if !have_bpf() {
        return;
    }
    // Iteration 3 only for packet 1; any iteration for packet 2. The
    // filter's range (3..3) must not hide the any-iteration event.
    let sw = switch(Config::default());
    sw.add_event(1, 1, 3, Action::Ecn, 1).unwrap();
    sw.add_event(1, 2, 0, Action::Drop, 2).unwrap();
    handshake(&sw);
    let drop = |iter, first| Rec {
        action: Action::Drop,
        event_id: 2,
        ..rec(2, iter, first)
    };
    let shot = |what: &str, r| Fixture {
        what: what.into(),
        at: None,
        input: data(1 + MSS, MSS),
        verdict: verdict::SHOT,
        output: Out::Same,
        record: Some(r),
        maps: vec![],
    };
    let marked = common::with_ce(&data(1, MSS));
    let p1 = |what, iter, first| passes(what, data(1, MSS), rec(1, iter, first));
    check_table(
        &sw,
        &[
            p1("packet 1, iteration 1: below the range", 1, 1),
            shot("packet 2, iteration 1: any iteration", drop(1, 1)),
            p1("packet 1, iteration 2: below the range", 2, 0),
            shot("packet 2, iteration 2", drop(2, 0)),
            Fixture {
                what: "packet 1, iteration 3: in the range, marked".into(),
                at: None,
                input: data(1, MSS),
                verdict: verdict::REDIRECT,
                output: Out::Bytes(marked),
                record: Some(Rec {
                    action: Action::Ecn,
                    event_id: 1,
                    ..rec(1, 3, 0)
                }),
                maps: vec![],
            },
            shot("packet 2, iteration 3", drop(3, 0)),
            p1("packet 1, iteration 4: above the range", 4, 0),
            shot("packet 2, iteration 4: any iteration still", drop(4, 0)),
        ],
    );
}

/// A `reorder` event holds its packet, and the `after`-th next packet of
/// the same direction carries it out: that packet is cloned out of the
/// port, and the skb the program returns is the held frame. Run in a
/// network namespace of its own, whose veth takes the clones (the usual
/// fixtures' port 2 does not exist, and a clone on the loopback would go
/// up the machine's own stack).
#[test]
fn reorder_holds_a_packet_until_the_next_ones_passed() {
    if !have_bpf() {
        return;
    }
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("a namespace");
        let ip = |args: &[&str]| {
            let o = std::process::Command::new("ip")
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "ip {args:?}: {o:?}");
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        // No IPv6 on the veths: their own neighbour discovery would add to
        // the packets counted below.
        for k in ["all", "default"] {
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{k}/disable_ipv6"), "1").unwrap();
        }
        ip(&[
            "link", "add", "wlr0", "type", "veth", "peer", "name", "wlr1",
        ]);
        ip(&["link", "set", "wlr0", "up"]);
        ip(&["link", "set", "wlr1", "up"]);
        let j: serde_json::Value =
            serde_json::from_str(&ip(&["-j", "link", "show", "wlr0"])).unwrap();
        let out = j[0]["ifindex"].as_u64().unwrap() as u32;
        let sw = Switch::load(Config::default()).expect("switch loads");
        sw.add_port(LO_IFINDEX, 1).unwrap();
        sw.add_fwd(MAC_B, out, 2).unwrap();
        sw.add_fwd(MAC_A, LO_IFINDEX, 1).unwrap();
        let (fwd, rev) = (
            FlowKey {
                saddr: A,
                daddr: B,
                sport: 40001,
                dport: 5201,
            },
            FlowKey {
                saddr: B,
                daddr: A,
                sport: 5201,
                dport: 40001,
            },
        );
        sw.add_flow(fwd, 1, true, false).unwrap();
        sw.add_flow(rev, 1, false, true).unwrap();
        // Data packet 2, overtaken by the next 2; packets 6 and 7 both
        // overtaken by packet 8 (a run of late arrivals, as a router's
        // reordering of ACKs gives).
        sw.add_event_held(1, 2, 1, Action::Reorder, 1, 2).unwrap();
        sw.add_event_held(1, 6, 1, Action::Reorder, 3, 1).unwrap();
        sw.add_event_held(1, 7, 1, Action::Reorder, 4, 1).unwrap();
        // Packet 9 waits for 2, packet 10 for 1: 10 leaves first, with 11;
        // then 12 (after 1) is held, and 13 carries out 9 and 12, in the
        // order they were held though 9's slot comes before 12's.
        sw.add_event_held(1, 9, 1, Action::Reorder, 5, 2).unwrap();
        sw.add_event_held(1, 10, 1, Action::Reorder, 6, 1).unwrap();
        sw.add_event_held(1, 12, 1, Action::Reorder, 7, 1).unwrap();
        // A reorder names how many overtake it; nothing else does.
        assert!(sw.add_event_held(1, 3, 1, Action::Drop, 2, 2).is_err());
        assert!(sw.add_event_held(1, 3, 1, Action::Reorder, 2, 0).is_err());
        handshake(&sw);
        let d = |k: u32| data(1 + k * MSS, MSS);
        let held: fn(&Switch) -> u64 = |s| s.held_frames() as u64;
        let change = |what, read, by| Change { what, read, by };
        let sent = |by| {
            change(
                "port 2 transmitted",
                |s: &Switch| s.counters(2).unwrap().tx_pkts,
                by,
            )
        };
        let row = |what: &str, k, verdict, output, record, maps| Fixture {
            what: what.into(),
            at: None,
            input: d(k),
            verdict,
            output,
            record: Some(record),
            maps,
        };
        // A packet a reorder event holds: dropped here, mirrored with its
        // event, one more frame held.
        let holds = |what: &str, k: u32, event_id| {
            row(
                what,
                k,
                verdict::SHOT,
                Out::Same,
                Rec {
                    action: Action::Reorder,
                    event_id,
                    ..rec(k + 1, 1, 1)
                },
                vec![change("frames held", held, 1)],
            )
        };
        // A packet that goes through and carries out `n` held frames, the
        // last of them `last` (its skb).
        let released = |n| {
            change(
                "port 1 released",
                |s: &Switch| s.counters(1).unwrap().released,
                n,
            )
        };
        let carries = |what: &str, k: u32, last: u32, n| {
            row(
                what,
                k,
                verdict::REDIRECT,
                Out::Carries(d(last)),
                rec(k + 1, 1, 1),
                vec![released(n), sent(1)],
            )
        };
        check_table(
            &sw,
            &[
                row(
                    "packet 1: ahead of the event, through",
                    0,
                    verdict::REDIRECT,
                    Out::Same,
                    rec(1, 1, 1),
                    vec![change("frames held", held, 0), sent(1)],
                ),
                row(
                    "packet 2: held (mirrored as it came, with its event)",
                    1,
                    verdict::SHOT,
                    Out::Same,
                    Rec {
                        action: Action::Reorder,
                        event_id: 1,
                        ..rec(2, 1, 1)
                    },
                    vec![
                        change("frames held", held, 1),
                        change("port 1 held", |s: &Switch| s.counters(1).unwrap().held, 1),
                        change("the event's hits", |s| s.event_hits(1, 2, 1).unwrap(), 1),
                        sent(1),
                    ],
                ),
                row(
                    "packet 3: overtakes it, the hold goes on",
                    2,
                    verdict::REDIRECT,
                    Out::Same,
                    rec(3, 1, 1),
                    vec![change("frames held", held, 0), sent(1)],
                ),
                carries(
                    "packet 4: the last to overtake goes out as a clone, and the skb is packet 2",
                    3,
                    1,
                    1,
                ),
                row(
                    "packet 5: nothing held, through",
                    4,
                    verdict::REDIRECT,
                    Out::Same,
                    rec(5, 1, 1),
                    vec![released(0), sent(1)],
                ),
                holds("packet 6: held", 5, 3),
                holds("packet 7: held too (it does not overtake packet 6)", 6, 4),
                carries(
                    "packet 8: carries both out, 6 as a clone and then 7 as the skb",
                    7,
                    6,
                    2,
                ),
                holds("packet 9: held, 2 to wait for", 8, 5),
                holds("packet 10: held, 1 to wait for", 9, 6),
                carries("packet 11: carries out 10 only", 10, 9, 1),
                holds("packet 12: held behind 9", 11, 7),
                carries(
                    "packet 13: carries out 9 (a clone) and then 12 (the skb)",
                    12,
                    11,
                    2,
                ),
            ],
        );
        assert_eq!(sw.held_frames(), 0, "every held frame left");
        // A run of ten late arrivals overtaken by one packet (a router
        // once overtook nine ACKs with one): packets 14-23 are all held,
        // and 24 carries them out in order.
        for (i, k) in (14..=23u32).enumerate() {
            sw.add_event_held(1, k, 1, Action::Reorder, 8 + i as u32, 1)
                .unwrap();
        }
        let mut run: Vec<Fixture> = (13..=22u32)
            .map(|k| holds(&format!("packet {}: held", k + 1), k, k - 5))
            .collect();
        run.push(carries(
            "packet 24: carries out 14-22 (clones) and then 23 (the skb)",
            23,
            22,
            10,
        ));
        check_table(&sw, &run);
        assert_eq!(sw.held_frames(), 0, "every held frame left");
        // The clones went out of wlr0 to its peer: packets 4, 8, 6, 11, 13,
        // 9, 24 and 14-22 (the skbs the program returned are not sent by a
        // test run).
        let s: serde_json::Value =
            serde_json::from_str(&ip(&["-s", "-j", "link", "show", "wlr0"])).unwrap();
        assert_eq!(s[0]["stats64"]["tx"]["packets"].as_u64(), Some(16), "{s}");
        assert_eq!(
            s[0]["stats64"]["tx"]["bytes"].as_u64(),
            Some(16 * d(3).len() as u64),
            "{s}"
        );
    })
    .join()
    .unwrap();
}

/// A port whose egress queues in this kernel (`Config::release_ports`)
/// gets a clone, made and sent at once, while the frame itself is
/// consumed: here the port's device (4242) does not exist, so the clone
/// cannot go and the frame is dropped and counted, where the same frame
/// to a port without the setting is redirected (the device is looked up
/// only after the program).
#[test]
fn a_frame_to_a_release_port_leaves_as_a_clone_made_at_once() {
    if !have_bpf() {
        return;
    }
    for (release, want) in [(1u64 << 3, verdict::REDIRECT), (1 << 2, verdict::SHOT)] {
        let sw = switch(Config {
            release_ports: release,
            ..Config::default()
        });
        let before = sw.counters(1).unwrap();
        let (v, _) = sw.test_run(&data(1, MSS)).unwrap();
        assert_eq!(v, want, "release_ports {release:#x}");
        let after = sw.counters(1).unwrap();
        assert_eq!(
            after.no_route - before.no_route,
            u64::from(want == verdict::SHOT),
            "release_ports {release:#x}"
        );
    }
}

/// The verifier's work on the pipeline stays a small share of its
/// 1,000,000-instruction limit, with every stage on and with the default
/// stages: each run's start pays for it, and a stage that multiplies the
/// paths through the inlined core (the retransmission's binary search did:
/// 618,922 instructions, 0.47 s a run) would otherwise surface only when
/// a later change crosses the limit.
#[test]
fn the_verifier_walks_a_small_share_of_its_limit() {
    if !have_bpf() {
        return;
    }
    const BUDGET: u32 = 100_000;
    for (what, cfg) in [
        ("default", Config::default()),
        (
            "every stage",
            Config {
                vaqm: true,
                eswitch: true,
                dut: true,
                ..Config::default()
            },
        ),
        (
            "without the connection lock",
            Config {
                track_lock: false,
                ..Config::default()
            },
        ),
    ] {
        let sw = Switch::load(cfg).expect("switch loads");
        let n = sw.verified_insns().unwrap();
        eprintln!("{what}: the verifier walked {n} instructions");
        assert!(n > 0, "{what}: no count");
        assert!(
            n <= BUDGET,
            "{what}: {n} instructions verified, over {BUDGET}"
        );
    }
}

/// The benchmarks' capture floor (`BENCH_FLOOR`): a frame is counted,
/// timestamped, captured and forwarded on the MAC table, and nothing
/// else: not classified (an armed flow's packet has no connection in its
/// record), and an event armed for it is not applied. What the benches
/// print as the floor is then the cost of exactly that.
#[test]
fn the_capture_floor_counts_captures_and_forwards_and_does_nothing_else() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config {
        bench_cut: wirelab_dataplane::BENCH_FLOOR,
        test_clock: true,
        ..Config::default()
    });
    sw.set_test_clock(7_000).unwrap();
    // Packet 1 of iteration 1 would be dropped by the whole pipeline.
    sw.add_event(1, 1, 1, Action::Drop, 1).unwrap();
    // The SYN: captured as record 0, not classified.
    let (v, _, m) = run(&sw, &syn());
    assert_eq!(v, verdict::REDIRECT);
    let m = m.expect("captured").0;
    assert_eq!((m.seq, m.conn), (0, 0));
    let frame = data(1, MSS);
    let (v, out, mut records) = run_frame(&sw, &frame);
    assert_eq!(
        v,
        verdict::REDIRECT,
        "forwarded, the drop event not applied"
    );
    assert_eq!(out, frame, "unchanged");
    let (h, bytes) = records.pop().expect("captured");
    assert!(records.is_empty());
    assert_eq!((h.seq, h.ts_ns, h.pkt_len), (1, 7_000, frame.len() as u32));
    assert_eq!((h.conn, h.index, h.event_id), (0, 0, 0), "not classified");
    assert_eq!(bytes[..], frame[..h.cap_len as usize]);
    assert_eq!(sw.counters(1).unwrap().rx_pkts, 2);
    assert_eq!(sw.counters(1).unwrap().event_drops, 0);
}

/// `bench switch-overhead`'s paired turns (`Config::bench_alternate`): while
/// user space says so, a frame is forwarded as the forward-only baseline
/// forwards it (no counter, no record, the same redirect), and the
/// pipeline takes the next frame again when it says no.
#[test]
fn an_alternating_switch_forwards_as_the_baseline_only_in_its_turns() {
    if !have_bpf() {
        return;
    }
    let sw = switch(Config {
        bench_alternate: true,
        ..Config::default()
    });
    handshake(&sw);
    let one = |sw: &Switch, f: &[u8]| {
        let (v, out, mut records) = run_frame(sw, f);
        (v, out, records.pop())
    };
    let rx = |sw: &Switch| sw.counters(1).unwrap().rx_pkts;
    let before = rx(&sw);
    let (v, out, r) = one(&sw, &data(1, MSS));
    assert_eq!(v, verdict::REDIRECT);
    assert!(r.is_some(), "the pipeline's turn: mirrored");
    assert_eq!(rx(&sw), before + 1);

    sw.set_bench_forward(true);
    let (v2, out2, r2) = one(&sw, &data(1 + MSS, MSS));
    assert_eq!(v2, verdict::REDIRECT, "forwarded on the MAC table");
    assert!(r2.is_none(), "the baseline's turn: nothing mirrored");
    assert_eq!(rx(&sw), before + 1, "nor counted");
    assert_eq!(out2.len(), out.len());

    sw.set_bench_forward(false);
    let (_, _, r3) = one(&sw, &data(1 + 2 * MSS, MSS));
    assert!(r3.is_some());
    assert_eq!(rx(&sw), before + 2);

    // A switch loaded without it ignores the flag (the verifier removed
    // the check).
    let plain = switch(Config::default());
    plain.set_bench_forward(true);
    let (_, _, r4) = one(&plain, &data(1, MSS));
    assert!(r4.is_some());
}
