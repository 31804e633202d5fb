//! RoCEv2 through the switch pipeline under `BPF_PROG_TEST_RUN`: BTH
//! parsing, events addressed by relative PSN and iteration (Lumina §3.3,
//! Fig. 2 and 3), and the actions on RoCE packets. Needs root.

use std::net::Ipv4Addr;

mod common;
use common::{check_table, have_bpf, run_frame, Change, Fixture, Out, Rec};
use wirelab_dataplane::{verdict, wl_mirror_hdr, Action, Config, Switch, Track};
use wirelab_roce::packet::{self, op, Bth, Ipv4Udp, Syndrome};

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const LO_IFINDEX: u32 = 1;
const OUT_IFINDEX: u32 = 4242;
/// Wraps after three packets, on purpose.
const IPSN: u32 = 0xff_fffd;
const QP_A: u32 = 0x11;
const QP_B: u32 = 0x2233;

/// An Ethernet frame with a sealed RoCEv2 packet, as wirelab's hosts send it
/// (IP ID 0 with DF, UDP checksum 0, ECT(0)).
fn frame(from_a: bool, opcode: u8, psn: u32) -> Vec<u8> {
    let (src, dst, smac, dmac, dqpn) = if from_a {
        (A, B, MAC_A, MAC_B, QP_B)
    } else {
        (B, A, MAC_B, MAC_A, QP_A)
    };
    let bth = Bth {
        opcode,
        se: false,
        migreq: true,
        pad: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dqpn,
        ack_req: false,
        psn,
    };
    let aeth = (opcode == op::ACKNOWLEDGE).then_some((Syndrome::Ack { credits: 31 }, 1));
    let len = if opcode == op::ACKNOWLEDGE { 0 } else { 256 };
    let h = Ipv4Udp::lab(src, dst, 49152);
    let mut roce = packet::build(bth, None, aeth, len, |i| i as u8);
    packet::seal_ipv4(&h, &mut roce);
    let mut out = Vec::new();
    out.extend_from_slice(&dmac);
    out.extend_from_slice(&smac);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    let tot = (20 + 8 + roce.len()) as u16;
    let mut ip = vec![0x45, 0x02];
    ip.extend_from_slice(&tot.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let sum = !ip.chunks(2).fold(0u32, |s, c| {
        let s = s + u16::from_be_bytes([c[0], c[1]]) as u32;
        (s & 0xffff) + (s >> 16)
    }) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&ip);
    out.extend_from_slice(&49152u16.to_be_bytes());
    out.extend_from_slice(&4791u16.to_be_bytes());
    out.extend_from_slice(&((8 + roce.len()) as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&roce);
    out
}

fn run(sw: &Switch, input: &[u8]) -> (u32, Vec<u8>, wl_mirror_hdr) {
    let (v, out, mut records) = run_frame(sw, input);
    let m = records.pop().expect("mirrored").0;
    (v, out, m)
}

fn icrc_ok(frame: &[u8]) -> bool {
    let (h, roce) = packet::split_ipv4_udp(&frame[14..]).unwrap();
    packet::icrc_ok_ipv4(&h, roce)
}

#[test]
fn roce_events_follow_relative_psn_and_iteration() {
    if !have_bpf() {
        return;
    }
    let sw = Switch::load(Config::default()).unwrap();
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    sw.add_fwd(MAC_A, LO_IFINDEX, 1).unwrap();
    // Connection 1: A's QP writes to B's QP; ACKs come back to A's QP.
    sw.add_roce_flow(A, B, QP_B, 1, Track::First { ipsn: IPSN })
        .unwrap();
    sw.add_roce_flow(B, A, QP_A, 1, Track::No).unwrap();
    sw.add_event(1, 4, 1, Action::Drop, 1).unwrap();
    sw.add_event(1, 3, 1, Action::Corrupt, 2).unwrap();
    sw.add_event(1, 4, 2, Action::Ecn, 3).unwrap();
    let psn = |rel: u32| (IPSN + rel) & 0xff_ffff;
    let data = |rel| frame(true, op::WRITE_MIDDLE, psn(rel));
    let rec = |index, iter, first_tx, action, event_id| Rec {
        conn: 1,
        data_dir: 1,
        index,
        iter,
        first_tx,
        action,
        event_id,
        ..Rec::NONE
    };
    let row = |what: &str, input: Vec<u8>, verdict, output, record, maps| Fixture {
        what: what.into(),
        at: None,
        input,
        verdict,
        output,
        record: Some(record),
        maps,
    };
    let hits = |what, read: fn(&Switch) -> u64| Change { what, read, by: 1 };
    // Corrupt: a bit error only the ICRC catches (the UDP checksum is 0):
    // one bit of the last payload byte, before the ICRC.
    let mut corrupted = data(2);
    let last = corrupted.len() - 5;
    corrupted[last] ^= 1;
    let mut other_qp = frame(true, op::WRITE_ONLY, psn(6));
    other_qp[14 + 20 + 8 + 7] ^= 0x80; // another destination QPN
    let marked = common::with_ce(&data(3));
    assert!(
        icrc_ok(&marked),
        "the ICRC masks the ECN bits (Annex A17.8)"
    );
    assert!(!icrc_ok(&corrupted));
    check_table(
        &sw,
        &[
            // Relative PSNs 0..4 are packets 1..5 of iteration 1, across
            // the wrap.
            row(
                "PSN +0: packet 1",
                frame(true, op::WRITE_FIRST, psn(0)),
                verdict::REDIRECT,
                Out::Same,
                rec(1, 1, 1, Action::None, 0),
                vec![],
            ),
            row(
                "PSN +1: packet 2",
                data(1),
                verdict::REDIRECT,
                Out::Same,
                rec(2, 1, 1, Action::None, 0),
                vec![],
            ),
            row(
                "PSN +2: packet 3, corrupted in its last payload byte",
                data(2),
                verdict::REDIRECT,
                Out::Bytes(corrupted),
                rec(3, 1, 1, Action::Corrupt, 2),
                vec![hits("event 2's hits", |s| s.event_hits(1, 3, 1).unwrap())],
            ),
            row(
                "PSN +3: packet 4, dropped",
                data(3),
                verdict::SHOT,
                Out::Same,
                rec(4, 1, 1, Action::Drop, 1),
                vec![hits("event 1's hits", |s| s.event_hits(1, 4, 1).unwrap())],
            ),
            row(
                "PSN +4: packet 5",
                frame(true, op::WRITE_LAST, psn(4)),
                verdict::REDIRECT,
                Out::Same,
                rec(5, 1, 1, Action::None, 0),
                vec![],
            ),
            row(
                "the NAK from B is the connection's, but not a data packet",
                frame(false, op::ACKNOWLEDGE, psn(3)),
                verdict::REDIRECT,
                Out::Same,
                Rec {
                    conn: 1,
                    ..Rec::NONE
                },
                vec![],
            ),
            row(
                "go-back-N from PSN +2: iteration 2 (Lumina's Last_PSN rule)",
                data(2),
                verdict::REDIRECT,
                Out::Same,
                rec(3, 2, 0, Action::None, 0),
                vec![],
            ),
            row(
                "packet 4 of iteration 2 gets CE, its ICRC still valid",
                data(3),
                verdict::REDIRECT,
                Out::Bytes(marked),
                rec(4, 2, 0, Action::Ecn, 3),
                vec![hits("event 3's hits", |s| s.event_hits(1, 4, 2).unwrap())],
            ),
            row(
                "a read request is not a data packet",
                frame(true, op::READ_REQUEST, psn(5)),
                verdict::REDIRECT,
                Out::Same,
                rec(0, 0, 0, Action::None, 0),
                vec![],
            ),
            row(
                "RoCE to an unarmed QP is not the connection's",
                other_qp,
                verdict::REDIRECT,
                Out::Same,
                Rec::NONE,
                vec![],
            ),
        ],
    );
    let st = sw.conn_state(1).unwrap();
    assert_eq!((st.iter, st.first_tx), (2, 5));
}

#[test]
fn a_qp_mixing_send_and_read_is_tracked_in_each_direction() {
    if !have_bpf() {
        return;
    }
    let sw = Switch::load(Config::default()).unwrap();
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    sw.add_fwd(MAC_A, LO_IFINDEX, 1).unwrap();
    // Connection 1: A sends (data A->B) and reads (data B->A), one PSN space.
    sw.add_roce_flow(A, B, QP_B, 1, Track::First { ipsn: IPSN })
        .unwrap();
    sw.add_roce_flow(B, A, QP_A, 1, Track::Second { ipsn: IPSN })
        .unwrap();
    // Drop relative PSN 4 (a read response) in its second round only.
    sw.add_event(1, 5, 2, Action::Drop, 1).unwrap();
    let psn = |rel: u32| (IPSN + rel) & 0xff_ffff;
    let mut seen = Vec::new();
    let mut send = |from_a: bool, opc: u8, rel: u32| {
        let (v, _, m) = run(&sw, &frame(from_a, opc, psn(rel)));
        seen.push((m.data_dir, m.index, m.iter, m.first_tx, v));
    };
    // Send 1 (PSN 0..1), read 2 (request PSN 2, responses 2..4) and, with
    // tx depth 2, send 3 (PSN 5..6) on the wire before the responses.
    send(true, op::SEND_FIRST, 0);
    send(true, op::SEND_LAST, 1);
    send(true, op::READ_REQUEST, 2);
    send(true, op::SEND_FIRST, 5);
    send(false, op::READ_RESPONSE_FIRST, 2);
    send(true, op::SEND_LAST, 6);
    send(false, op::READ_RESPONSE_MIDDLE, 3);
    send(false, op::READ_RESPONSE_LAST, 4);
    // The requester re-reads from PSN 3 after losing a response: the
    // responses' second round; A->B stays in its first.
    send(false, op::READ_RESPONSE_FIRST, 3);
    send(false, op::READ_RESPONSE_LAST, 4);
    let r = verdict::REDIRECT;
    assert_eq!(
        seen,
        vec![
            (1, 1, 1, 1, r),
            (1, 2, 1, 1, r),
            (1, 0, 0, 0, r), // a read request is not data
            (1, 6, 1, 1, r),
            (1, 3, 1, 1, r),
            (1, 7, 1, 1, r),
            (1, 4, 1, 1, r),
            (1, 5, 1, 1, r),
            (1, 4, 2, 0, r),
            (1, 5, 2, 0, verdict::SHOT),
        ]
    );
    assert_eq!(sw.event_hits(1, 5, 2).unwrap(), 1);
    let (a, b) = (sw.conn_state(1).unwrap(), sw.second_conn_state(1).unwrap());
    assert_eq!((a.iter, a.first_tx, b.iter, b.first_tx), (1, 4, 2, 3));
}

fn migreq(frame: &[u8]) -> bool {
    frame[14 + 20 + 8 + 1] & 0x40 != 0
}

fn armed_switch(table: bool) -> Switch {
    let sw = Switch::load(Config::default()).unwrap();
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    sw.add_roce_flow(A, B, QP_B, 1, Track::First { ipsn: IPSN })
        .unwrap();
    if table {
        let deltas: Vec<u32> = (0..wirelab_dataplane::ICRC_SHIFTS)
            .map(packet::migreq_icrc_delta)
            .collect();
        sw.set_icrc_migreq_table(&deltas).unwrap();
    }
    sw.add_event(1, 1, 1, Action::MigReq(false), 1).unwrap();
    sw.add_event(1, 2, 1, Action::MigReq(true), 2).unwrap();
    sw
}

#[test]
fn edit_rewrites_migreq_and_patches_the_icrc() {
    if !have_bpf() {
        return;
    }
    let psn = |rel: u32| (IPSN + rel) & 0xff_ffff;
    let sw = armed_switch(true);
    // Packet 1: MigReq cleared; only the BTH byte and the ICRC change, and
    // the ICRC is valid for the new header (Lumina §6.2.3).
    let input = frame(true, op::WRITE_FIRST, psn(0));
    let (v, out, m) = run(&sw, &input);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(m.applied(), Some(Action::MigReq(false)));
    assert!(migreq(&input) && !migreq(&out));
    assert!(icrc_ok(&out), "the ICRC was patched");
    let diff: Vec<usize> = (0..input.len()).filter(|&i| input[i] != out[i]).collect();
    let n = input.len();
    let bth1 = 14 + 20 + 8 + 1;
    assert!(
        diff.iter().all(|&i| i == bth1 || i >= n - 4) && diff.contains(&bth1),
        "{diff:?}"
    );
    // Packet 2: already MigReq = 1, so setting it changes nothing.
    let input = frame(true, op::WRITE_MIDDLE, psn(1));
    let (_, out, m) = run(&sw, &input);
    assert_eq!(m.applied(), Some(Action::MigReq(true)));
    assert_eq!(out, input);
    assert_eq!(sw.event_hits(1, 1, 1).unwrap(), 1);

    // Without the ICRC table the switch refuses to edit: the packet goes
    // through intact and the trace shows no event.
    let sw = armed_switch(false);
    let input = frame(true, op::WRITE_FIRST, psn(0));
    let (_, out, m) = run(&sw, &input);
    assert_eq!((m.applied(), out), (Some(Action::None), input));
}
