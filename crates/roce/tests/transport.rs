//! The transport on virtual time (wirelab_roce::sim): two devices joined by
//! a link with a fixed one-way delay and a hook that drops, CE-marks or
//! corrupts chosen packets.

use std::net::Ipv4Addr;

use wirelab_roce::packet::{self, op, Syndrome};
use wirelab_roce::sim::{Action, Seen, Sim};
use wirelab_roce::{Device, DeviceConfig, QpConfig, Status, Verb, WorkRequest};
use wirelab_spec::roce::load_profile;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const DELAY: u64 = 2_000;

/// The first device is A (the requester), the second B.
trait FromA {
    fn is_from_a(&self) -> bool;
}

impl FromA for Seen {
    fn is_from_a(&self) -> bool {
        self.from == 0
    }
}

struct Lab {
    sim: Sim,
}

impl std::ops::Deref for Lab {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

impl std::ops::DerefMut for Lab {
    fn deref_mut(&mut self) -> &mut Sim {
        &mut self.sim
    }
}

fn cfg(profile: &str) -> DeviceConfig {
    let mut c = DeviceConfig::new(load_profile(profile).unwrap());
    c.dcqcn_rp = false;
    c.line_rate_bps = 10e9;
    c
}

fn qp(
    qpn: u32,
    remote_qpn: u32,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    ipsn: u32,
    remote_ipsn: u32,
) -> QpConfig {
    QpConfig {
        ipsn,
        remote_ipsn,
        ..QpConfig::new(qpn, remote_qpn, local, remote)
    }
}

impl Lab {
    fn new(ca: DeviceConfig, cb: DeviceConfig, ipsn_a: u32, ipsn_b: u32) -> Lab {
        let mut a = Device::new(ca);
        let mut b = Device::new(cb);
        a.create_qp(qp(0x11, 0x22, A, B, ipsn_a, ipsn_b));
        b.create_qp(qp(0x22, 0x11, B, A, ipsn_b, ipsn_a));
        let mut sim = Sim::new(DELAY);
        sim.add(a, &[A]);
        sim.add(b, &[B]);
        Lab { sim }
    }

    fn hook(mut self, f: impl FnMut(&Seen, &[Seen]) -> Action + 'static) -> Lab {
        self.sim.set_hook(f);
        self
    }

    fn post(&mut self, id: u64, verb: Verb, len: u32) {
        self.devs[0]
            .post_send(
                0x11,
                WorkRequest {
                    id,
                    verb,
                    len,
                    remote_va: 0x10000 * id,
                    rkey: 7,
                },
            )
            .unwrap();
    }

    fn sent_by_a(&self) -> Vec<(u8, u32)> {
        self.log
            .iter()
            .filter(|s| s.is_from_a())
            .map(|s| (s.opcode, s.psn))
            .collect()
    }

    fn requester_done(&self) -> Vec<(u64, Status)> {
        self.done
            .iter()
            .filter(|(d, c)| *d == 0 && !c.recv)
            .map(|(_, c)| (c.wr_id, c.status))
            .collect()
    }
}

#[test]
fn write_is_segmented_at_the_mtu_and_acked_once() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 100, 500);
    lab.post(1, Verb::Write, 3000);
    lab.run(1_000_000_000);
    assert_eq!(
        lab.sent_by_a(),
        vec![
            (op::WRITE_FIRST, 100),
            (op::WRITE_MIDDLE, 101),
            (op::WRITE_LAST, 102)
        ]
    );
    let first = &lab.log[0];
    assert_eq!(
        first.reth,
        Some(packet::Reth {
            va: 0x10000,
            rkey: 7,
            len: 3000
        })
    );
    assert_eq!(
        (first.len, lab.log[1].len, lab.log[2].len),
        (1024, 1024, 952)
    );
    assert!(
        !first.ack_req && lab.log[2].ack_req,
        "AckReq on the last packet only"
    );
    assert!(first.migreq, "MigReq = 1 (IBTA §9.2.4)");
    let acks: Vec<_> = lab.log.iter().filter(|s| !s.is_from_a()).collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(
        (acks[0].opcode, acks[0].psn, acks[0].dqpn),
        (op::ACKNOWLEDGE, 102, 0x11)
    );
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
    assert_eq!(lab.devs[1].counters().get("rx_write_requests"), 1);
    assert_eq!(lab.devs[0].counters().get("tx_roce_packets"), 3);
}

#[test]
fn every_packet_type_is_produced() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0);
    lab.devs[1].post_recv(0x22, 2).unwrap();
    lab.post(1, Verb::Send, 100);
    lab.post(2, Verb::Send, 2500);
    lab.post(3, Verb::Write, 10);
    lab.post(4, Verb::Read, 1024);
    lab.post(5, Verb::Read, 3000);
    lab.run(1_000_000_000);
    let mut ops: Vec<u8> = lab.log.iter().map(|s| s.opcode).collect();
    ops.sort();
    ops.dedup();
    assert_eq!(
        ops,
        vec![
            op::SEND_FIRST,
            op::SEND_MIDDLE,
            op::SEND_LAST,
            op::SEND_ONLY,
            op::WRITE_ONLY,
            op::READ_REQUEST,
            op::READ_RESPONSE_FIRST,
            op::READ_RESPONSE_MIDDLE,
            op::READ_RESPONSE_LAST,
            op::READ_RESPONSE_ONLY,
            op::ACKNOWLEDGE
        ]
    );
    let ids: Vec<u64> = lab.requester_done().iter().map(|c| c.0).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    let recvs = lab.done.iter().filter(|(_, c)| c.recv).count();
    assert_eq!(recvs, 2);
    // Read requests consume one PSN per response packet (IBTA §9.7.1).
    let reads: Vec<u32> = lab
        .log
        .iter()
        .filter(|s| s.opcode == op::READ_REQUEST)
        .map(|s| s.psn)
        .collect();
    assert_eq!(reads, vec![5, 6]);
    let resp: Vec<u32> = lab
        .log
        .iter()
        .filter(|s| packet::kind(s.opcode) == packet::Kind::ReadResponse)
        .map(|s| s.psn)
        .collect();
    assert_eq!(resp, vec![5, 6, 7, 8]);
}

#[test]
fn psns_wrap_at_24_bits() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0xff_fffe, 0);
    lab.post(1, Verb::Write, 4 * 1024);
    lab.post(2, Verb::Read, 2 * 1024);
    lab.run(1_000_000_000);
    let psns: Vec<u32> = lab.sent_by_a().iter().map(|x| x.1).collect();
    assert_eq!(psns, vec![0xff_fffe, 0xff_ffff, 0, 1, 2]);
    assert_eq!(
        lab.requester_done(),
        vec![(1, Status::Success), (2, Status::Success)]
    );
}

#[test]
fn a_lost_write_packet_is_naked_once_and_resent_go_back_n() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 1000, 0).hook(|s, log| {
        if s.is_from_a() && s.psn == 1003 && !log.iter().any(|x| x.is_from_a() && x.psn == 1003) {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 10 * 1024);
    lab.run(1_000_000_000);
    let naks: Vec<_> = lab
        .log
        .iter()
        .filter(|s| matches!(s.syndrome, Some(Syndrome::Nak(_))))
        .collect();
    assert_eq!(naks.len(), 1, "one NAK per sequence error (C9-106)");
    assert_eq!(naks[0].psn, 1003);
    let psns: Vec<u32> = lab.sent_by_a().iter().map(|x| x.1).collect();
    // The burst up to the NAK's arrival, then go-back-N from the NAKed PSN.
    let back = psns.iter().skip(4).position(|&p| p == 1003).unwrap() + 4;
    let last_before = psns[back - 1];
    assert!(last_before > 1004, "{psns:?}");
    assert_eq!(
        psns[..back].to_vec(),
        (1000..=last_before).collect::<Vec<_>>()
    );
    assert_eq!(psns[back..].to_vec(), (1003..=1009).collect::<Vec<_>>());
    let nak_arrival = naks[0].t + DELAY;
    assert!(
        lab.log
            .iter()
            .filter(|s| s.is_from_a())
            .nth(back)
            .unwrap()
            .t
            >= nak_arrival
    );
    // The retransmitted 1003 is a middle packet of the same write.
    assert_eq!(
        lab.log
            .iter()
            .filter(|s| s.is_from_a() && s.psn == 1003)
            .map(|s| s.opcode)
            .collect::<Vec<_>>(),
        vec![op::WRITE_MIDDLE; 2]
    );
    assert_eq!(
        lab.devs[1].counters().get("out_of_sequence"),
        (last_before - 1003) as u64
    );
    assert_eq!(lab.devs[0].counters().get("packet_seq_err"), 1);
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 0);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

#[test]
fn a_lost_read_response_is_recovered_by_reissuing_the_read_from_its_offset() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 50, 0).hook(|s, log| {
        let again = log
            .iter()
            .any(|x| x.psn == 52 && x.opcode == op::READ_RESPONSE_MIDDLE);
        if !s.is_from_a() && s.psn == 52 && !again {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Read, 5 * 1024);
    lab.run(1_000_000_000);
    let reqs: Vec<_> = lab
        .log
        .iter()
        .filter(|s| s.opcode == op::READ_REQUEST)
        .collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].psn, 52);
    assert_eq!(
        reqs[1].reth,
        Some(packet::Reth {
            va: 0x10000 + 2 * 1024,
            rkey: 7,
            len: 3 * 1024
        })
    );
    let resp: Vec<(u8, u32)> = lab
        .log
        .iter()
        .filter(|s| !s.is_from_a())
        .map(|s| (s.opcode, s.psn))
        .collect();
    assert_eq!(
        resp,
        vec![
            (op::READ_RESPONSE_FIRST, 50),
            (op::READ_RESPONSE_MIDDLE, 51),
            (op::READ_RESPONSE_MIDDLE, 52),
            (op::READ_RESPONSE_MIDDLE, 53),
            (op::READ_RESPONSE_LAST, 54),
            (op::READ_RESPONSE_FIRST, 52),
            (op::READ_RESPONSE_MIDDLE, 53),
            (op::READ_RESPONSE_LAST, 54)
        ]
    );
    assert_eq!(lab.devs[0].counters().get("implied_nak_seq_err"), 1);
    // The re-issued read is a duplicate request at the responder (§9.7.5.1.1).
    assert_eq!(lab.devs[1].counters().get("duplicate_request"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

#[test]
fn a_lost_tail_packet_times_out_after_the_local_ack_timeout() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, log| {
        if s.is_from_a() && s.psn == 2 && !log.iter().any(|x| x.psn == 2 && x.is_from_a()) {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 3 * 1024);
    lab.run(10_000_000_000);
    assert_eq!(
        lab.log
            .iter()
            .filter(|s| s.is_from_a() && s.psn == 2)
            .count(),
        2
    );
    // timeout = 14: 4.096 µs × 2^14 = 67.108864 ms after the first packet was
    // sent (nothing was acknowledged since), go-back-N resends from PSN 0.
    let psn0: Vec<u64> = lab
        .log
        .iter()
        .filter(|s| s.is_from_a() && s.psn == 0)
        .map(|s| s.t)
        .collect();
    assert_eq!(psn0.len(), 2);
    assert_eq!(psn0[1] - psn0[0], 4096 << 14);
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

#[test]
fn retries_run_out_with_an_error_completion() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, _| {
        if s.is_from_a() && s.psn == 1 {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 2 * 1024);
    lab.post(2, Verb::Write, 100);
    lab.run(100_000_000_000);
    // The first transmission, one after the NAK that the second write's
    // packet triggers, and 7 retries (retry_cnt 7); the 8th timeout fails.
    assert_eq!(
        lab.log
            .iter()
            .filter(|s| s.is_from_a() && s.psn == 1)
            .count(),
        9
    );
    assert_eq!(
        lab.requester_done(),
        vec![(1, Status::RetryExceeded), (2, Status::Flushed)]
    );
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 8);
    assert_eq!(lab.devs[0].counters().get("req_cqe_error"), 1);
    assert!(lab.devs[0]
        .post_send(
            0x11,
            WorkRequest {
                id: 3,
                verb: Verb::Write,
                len: 1,
                remote_va: 0,
                rkey: 0
            }
        )
        .is_err());
}

#[test]
fn lost_acks_naks_and_read_requests_are_recovered() {
    // The only ACK of a write.
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, log| {
        if s.opcode == op::ACKNOWLEDGE && !log.iter().any(|x| x.opcode == op::ACKNOWLEDGE) {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 1024);
    lab.run(10_000_000_000);
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 1);
    assert_eq!(lab.devs[1].counters().get("duplicate_request"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);

    // A NAK: the requester times out and resends from the oldest unacked PSN.
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, log| {
        let first_try = !log.iter().any(|x| x.is_from_a() && x.psn == 1);
        if (s.is_from_a() && s.psn == 1 && first_try)
            || matches!(s.syndrome, Some(Syndrome::Nak(_)))
        {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 4 * 1024);
    lab.run(10_000_000_000);
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);

    // A read request.
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, log| {
        if s.opcode == op::READ_REQUEST && !log.iter().any(|x| x.opcode == op::READ_REQUEST) {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Read, 2048);
    lab.run(10_000_000_000);
    assert_eq!(lab.devs[0].counters().get("local_ack_timeout_err"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

#[test]
fn a_corrupted_packet_fails_the_icrc_and_is_naked() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0).hook(|s, log| {
        if s.is_from_a() && s.psn == 1 && !log.iter().any(|x| x.is_from_a() && x.psn == 1) {
            Action::Corrupt
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 3 * 1024);
    lab.run(10_000_000_000);
    assert_eq!(lab.devs[1].counters().get("rx_icrc_encapsulated"), 1);
    assert_eq!(lab.devs[0].counters().get("packet_seq_err"), 1);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

#[test]
fn a_send_without_a_receive_gets_an_rnr_nak_and_is_retried() {
    let mut lab = Lab::new(cfg("default"), cfg("default"), 0, 0);
    lab.post(1, Verb::Send, 100);
    lab.run(50_000);
    let rnr = lab
        .log
        .iter()
        .find(|s| matches!(s.syndrome, Some(Syndrome::RnrNak { .. })))
        .expect("RNR NAK");
    assert_eq!(rnr.psn, 0);
    let rnrs = lab.devs[1].counters().get("out_of_buffer");
    assert!(rnrs >= 2, "retried while no receive was posted");
    lab.devs[1].post_recv(0x22, 1).unwrap();
    lab.run(1_000_000_000);
    let sends: Vec<u64> = lab
        .log
        .iter()
        .filter(|s| s.opcode == op::SEND_ONLY)
        .map(|s| s.t)
        .collect();
    assert_eq!(sends.len() as u64, rnrs + 1);
    // Each retry waits out the RNR timer the responder asked for (code 1 = 10 µs).
    assert!(
        sends.windows(2).all(|w| w[1] - w[0] == 10_000 + 2 * DELAY),
        "{sends:?}"
    );
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
}

fn dcqcn(profile: &str) -> DeviceConfig {
    let mut c = cfg(profile);
    c.dcqcn_rp = true;
    c.line_rate_bps = 10e9;
    c.min_time_between_cnps_ns = 4_000;
    c
}

#[test]
fn ce_marks_yield_cnps_at_the_minimum_interval_and_the_rate_is_cut() {
    let mut lab = Lab::new(dcqcn("default"), dcqcn("default"), 0, 0).hook(|s, _| {
        if s.is_from_a() && packet::kind(s.opcode) == packet::Kind::Data {
            Action::Ecn
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 100 * 1024);
    lab.run(150_000);
    let rp = lab.devs[0].rp(0x11).unwrap();
    assert!(rp.rc < 10e9 / 2.0, "rate while marked: {}", rp.rc);
    lab.run(1_000_000_000);
    let cnps: Vec<u64> = lab
        .log
        .iter()
        .filter(|s| s.opcode == op::CNP)
        .map(|s| s.t)
        .collect();
    assert!(cnps.len() > 2);
    assert!(cnps.windows(2).all(|w| w[1] - w[0] >= 4_000), "{cnps:?}");
    assert_eq!(
        lab.devs[1].counters().get("np_ecn_marked_roce_packets"),
        100
    );
    assert_eq!(lab.devs[1].counters().get("np_cnp_sent"), cnps.len() as u64);
    assert_eq!(
        lab.devs[0].counters().get("rp_cnp_handled"),
        cnps.len() as u64
    );
    // Once the marks stop, fast recovery and increases bring it back.
    assert_eq!(lab.devs[0].rp(0x11).unwrap().rc, 10e9);
    assert_eq!(lab.requester_done(), vec![(1, Status::Success)]);
    // Paced: the data took longer than at line rate.
    let data: Vec<u64> = lab
        .log
        .iter()
        .filter(|s| s.is_from_a())
        .map(|s| s.t)
        .collect();
    let at_line = 100.0 * (1024.0 + 16.0 + 46.0) * 8.0 / 10e9 * 1e9;
    assert!((data[data.len() - 1] - data[0]) as f64 > 2.0 * at_line);
}

#[test]
fn profiles_change_what_the_wire_shows() {
    // Slow NACK reaction: the first retransmission comes 400 µs after the NAK.
    let mut lab = Lab::new(cfg("slow-nack-reaction"), cfg("default"), 0, 0).hook(|s, log| {
        if s.is_from_a() && s.psn == 1 && !log.iter().any(|x| x.is_from_a() && x.psn == 1) {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 4 * 1024);
    lab.run(1_000_000_000);
    let nak = lab
        .log
        .iter()
        .find(|s| matches!(s.syndrome, Some(Syndrome::Nak(_))))
        .unwrap()
        .t;
    let resent = lab
        .log
        .iter()
        .filter(|s| s.is_from_a() && s.psn == 1)
        .nth(1)
        .unwrap()
        .t;
    assert_eq!(resent - (nak + DELAY), 400_000);

    // Clears MigReq.
    let mut lab = Lab::new(cfg("clears-migreq"), cfg("default"), 0, 0);
    lab.post(1, Verb::Write, 1024);
    lab.run(1_000_000_000);
    assert!(lab.log.iter().filter(|s| s.is_from_a()).all(|s| !s.migreq));
    assert!(lab.log.iter().filter(|s| !s.is_from_a()).all(|s| s.migreq));

    // A counter that does not count.
    let mut lab = Lab::new(dcqcn("default"), dcqcn("cnp-sent-not-counted"), 0, 0).hook(|s, _| {
        if s.is_from_a() && s.opcode != op::CNP {
            Action::Ecn
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 1024);
    lab.run(1_000_000_000);
    assert_eq!(lab.log.iter().filter(|s| s.opcode == op::CNP).count(), 1);
    assert_eq!(lab.devs[1].counters().get("np_cnp_sent"), 0);

    // Adaptive retransmission ignores the configured timeout.
    let mut c = cfg("adaptive-retransmission");
    c.adaptive_retransmission = true;
    let mut lab = Lab::new(c, cfg("default"), 0, 0).hook(|s, _| {
        if s.is_from_a() {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.post(1, Verb::Write, 1024);
    lab.run(100_000_000_000);
    let t: Vec<u64> = lab
        .log
        .iter()
        .filter(|s| s.is_from_a())
        .map(|s| s.t)
        .collect();
    let gaps: Vec<u64> = t.windows(2).map(|w| (w[1] - w[0]) / 100_000).collect();
    assert_eq!(
        gaps,
        vec![56, 41, 84, 167, 251, 671, 1342, 1342, 1342, 1342],
        "{t:?}"
    );
    assert_eq!(lab.requester_done(), vec![(1, Status::RetryExceeded)]);
    assert_eq!(lab.devs[0].counters().get("roce_adp_retrans"), 11);
}

#[test]
fn a_qp_combining_send_and_read_recovers_losses_in_both_directions() {
    // Lumina §3.2 verb combinations: send, read, send, read posted at once
    // on one QP, 3 packets each (PSNs 100..111). The first transmission of
    // the send's second packet (PSN 101) and of the second read's middle
    // response (PSN 110) are lost.
    let mut lab = Lab::new(cfg("default"), cfg("default"), 100, 0).hook(|s, log| {
        let first = !log.iter().any(|x| x.psn == s.psn && x.opcode == s.opcode);
        let lost = (s.is_from_a() && s.psn == 101) || (!s.is_from_a() && s.psn == 110);
        if lost && first {
            Action::Drop
        } else {
            Action::None
        }
    });
    lab.devs[1].post_recv(0x22, 2).unwrap();
    for (id, verb) in [
        (1, Verb::Send),
        (2, Verb::Read),
        (3, Verb::Send),
        (4, Verb::Read),
    ] {
        lab.post(id, verb, 3 * 1024);
    }
    lab.run(1_000_000_000);
    assert_eq!(
        lab.requester_done(),
        (1..=4).map(|i| (i, Status::Success)).collect::<Vec<_>>()
    );
    let received: Vec<u64> = lab
        .done
        .iter()
        .filter(|(d, c)| *d == 1 && c.recv)
        .map(|(_, c)| c.len as u64)
        .collect();
    assert_eq!(received, vec![3 * 1024, 3 * 1024], "both sends delivered");
    // The send's loss: a NAK and go-back-N from PSN 101; the read's: the
    // read re-issued from PSN 110 (Lumina §6.1, IBTA §9.7.5.2.2).
    let naks = lab
        .log
        .iter()
        .filter(|s| matches!(s.syndrome, Some(Syndrome::Nak(_))))
        .count();
    assert_eq!(naks, 1);
    let reissued: Vec<(u32, u32)> = lab
        .log
        .iter()
        .filter(|s| s.opcode == op::READ_REQUEST)
        .map(|s| (s.psn, s.reth.unwrap().len))
        .collect();
    assert!(reissued.contains(&(110, 2 * 1024)), "{reissued:?}");
    assert_eq!(lab.devs[0].counters().get("implied_nak_seq_err"), 1);
    // Every request behind the gap until go-back-N: PSNs 102, 103 (read
    // request), 106..108 and 109 (read request).
    assert_eq!(lab.devs[1].counters().get("out_of_sequence"), 6);
}

/// Lumina §6.2.2's set-up at a smaller scale: 16 read QPs, ten 8 KiB
/// reads each, the 3rd response of the first read of QPs 1..=10 lost once.
/// Returns (rx_discards_phy, local ACK timeouts, the slowest innocent QP's
/// last completion in ns).
fn sixteen_reads(profile: &str) -> (u64, u64, u64) {
    const QPS: u32 = 16;
    const DROPPED: u32 = 10;
    let mut a = Device::new(cfg(profile));
    let mut b = Device::new(cfg("default"));
    for q in 0..QPS {
        let ipsn = q * 1000;
        a.create_qp(qp(0x100 + q, 0x200 + q, A, B, ipsn, 500_000 + ipsn));
        b.create_qp(qp(0x200 + q, 0x100 + q, B, A, 500_000 + ipsn, ipsn));
        for m in 0..10u64 {
            let wr = WorkRequest {
                id: m + 1,
                verb: Verb::Read,
                len: 8 * 1024,
                remote_va: 0x10000 * (m + 1),
                rkey: 7,
            };
            a.post_send(0x100 + q, wr).unwrap();
        }
    }
    let mut sim = Sim::new(DELAY);
    sim.add(a, &[A]);
    sim.add(b, &[B]);
    sim.set_hook(|s, log| {
        // Responses go to the requester's QPN; PSNs start at q * 1000.
        let q = s.dqpn.wrapping_sub(0x100);
        let third = q * 1000 + 2;
        let again = log
            .iter()
            .any(|x| x.dqpn == s.dqpn && x.psn == s.psn && x.from == 1);
        if s.from == 1 && q < DROPPED && s.psn == third && !again {
            Action::Drop
        } else {
            Action::None
        }
    });
    sim.run(5_000_000_000);
    let c = sim.devs[0].counters();
    let innocent_done = sim
        .done
        .iter()
        .filter(|(d, c)| *d == 0 && !c.recv && c.qpn >= 0x100 + DROPPED)
        .map(|(_, c)| c.at_ns)
        .max()
        .unwrap_or(u64::MAX);
    let all_ok = sim
        .done
        .iter()
        .filter(|(d, c)| *d == 0 && !c.recv)
        .all(|(_, c)| c.status == Status::Success);
    assert!(all_ok, "{profile}: every read completes in the end");
    (
        c.get("rx_discards_phy"),
        c.get("local_ack_timeout_err"),
        innocent_done,
    )
}

#[test]
fn a_shared_slow_path_makes_innocent_qps_wait_and_the_default_isolates_them() {
    let (discards, timeouts, innocent) = sixteen_reads("default");
    assert_eq!(
        (discards, timeouts),
        (0, 0),
        "the default device isolates its QPs"
    );
    let (d, t, slow) = sixteen_reads("noisy-neighbour");
    assert!(d > 0, "the stalled pipeline discards and counts it");
    assert!(t > 0, "discarded tails leave QPs to their timers");
    assert!(
        slow > 10 * innocent,
        "the innocent QPs finish at {slow} ns against {innocent} ns alone"
    );
}
