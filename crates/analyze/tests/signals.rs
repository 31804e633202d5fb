//! What justifies a retransmission, on made connections with exactly the
//! timing a case needs.
//!
//! Resending data the receiver had SACKed is a violation (RFC 6675 §4:
//! NextSeg skips SACKed data) only when the sender surely had the SACK
//! first: it passed the capture point more than a sender-side round trip
//! plus the sender's own transmit queue (`SEND_QUEUE_NS`, 1 ms) before the
//! retransmission. Sooner, the retransmission may have been committed on
//! an earlier loss signal and sat in the queue while the SACK arrived: a
//! real capture of Linux (tcpdump at the sender, veth) did exactly that 51
//! us after the SACK, and was wrongly called a violation.

mod common;

const MSS: u32 = 1000;

/// Segment 2 arrives late (reordered), after RACK marked it lost; it is
/// resent `resend_after_ns` after the SACK that reported it.
fn sacked_then_resent(resend_after_ns: u64) -> Vec<String> {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..6 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    g.push(false, sisn + 1, seq(1), 0, false);
    // Segment 3 delivered before 1 and 2: RACK (RFC 8985 §6.2) marks both
    // lost; segment 1 is resent at once.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(3), seq(4))]);
    g.push(true, seq(1), sisn + 1, MSS, false);
    // Segment 2 arrives after all; the receiver SACKs it.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(6))]);
    g.wait(resend_after_ns);
    g.push(true, seq(2), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(6), 0, false);
    violations(&g)
}

fn violations(g: &common::TcpGen) -> Vec<String> {
    let r = g.loss_recovery();
    r.analyzers[0]
        .findings
        .iter()
        .filter(|f| f.kind == wirelab_analyze::Kind::Violation)
        .map(|f| f.name.to_string())
        .collect()
}

#[test]
fn sacked_data_resent_long_after_the_sack_is_a_violation() {
    assert_eq!(sacked_then_resent(5_000_000), ["sacked-data-retransmitted"]);
}

#[test]
fn sacked_data_resent_while_the_sack_was_in_flight_is_not() {
    assert_eq!(sacked_then_resent(50_000), Vec::<String>::new());
}

/// RACK goes by send time, not sequence (RFC 8985 §6.2): a repair of a
/// lower segment sent after this one and delivered first marks this one
/// lost. Seen in a real capture of Linux (the last segment of a flight
/// resent 29 us after the ACK of the repair sent behind it).
#[test]
fn a_delivered_repair_sent_later_marks_earlier_data_lost() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..5 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    g.push(false, sisn + 1, seq(1), 0, false);
    // Segment 1 lost: three SACKed above it (RFC 6675 IsLost).
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(5))]);
    // New data, then the repair of segment 1 behind it.
    g.push(true, seq(5), sisn + 1, MSS, false);
    g.push(true, seq(1), sisn + 1, MSS, false);
    // The repair is delivered (and 2-4), segment 5 is not: RACK.
    g.push(false, sisn + 1, seq(5), 0, false);
    g.push(true, seq(5), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(6), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// The same seen from the receiver's side, with reordering before the
/// capture point (a dumpcap capture at the receiver of a real transfer):
/// segment 1 arrives late, so both its late arrival and its (spurious)
/// repair are bytes never seen first-sent, and the repair passes the
/// capture point after the ACK the sender took as delivering it. The
/// repair still left the sender before that ACK reached it.
#[test]
fn a_repair_seen_after_its_ack_at_the_receiver_still_marks_earlier_data_lost() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in [0, 2, 3] {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    // Round trips of 50 us and more: 10 us of quiet is no tail probe.
    g.wait(40_000);
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(4))]);
    g.push(true, seq(1), sisn + 1, MSS, false); // late, never seen before
    g.push(true, seq(4), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(4), 0, false);
    g.wait(40_000);
    g.push(true, seq(1), sisn + 1, MSS, false); // the repair
    g.push(true, seq(4), sisn + 1, MSS, false); // RACK, by the repair
    g.push(false, sisn + 1, seq(5), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// A SACK of a repair marks lost what was sent before the repair, above it
/// or below (RFC 8985 §6.2: RACK goes by send time). With two holes, the
/// repair of the upper one can be SACKed while the lower one still holds
/// the cumulative ACK back; Linux takes that SACK as the repair's delivery
/// (tcp_rack_advance, once min_rtt has passed since the repair) and marks
/// the new data sent before the repair lost. A real capture of Linux
/// (tcpdump at the sender, veth reordering both ways) resent two segments
/// 59 us after their first transmission for exactly this reason, and was
/// wrongly called unjustified.
#[test]
fn a_sacked_repair_marks_data_sent_before_it_lost() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..6 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    g.push(false, sisn + 1, seq(1), 0, false);
    // Holes at segments 1 and 3.
    g.push_sacked(
        false,
        sisn + 1,
        seq(1),
        0,
        false,
        &[(seq(4), seq(6)), (seq(2), seq(3))],
    );
    g.push(true, seq(1), sisn + 1, MSS, false); // repair of 1
    g.push(true, seq(6), sisn + 1, MSS, false); // new data
    g.push(true, seq(7), sisn + 1, MSS, false);
    g.push(true, seq(3), sisn + 1, MSS, false); // repair of 3, after 6 and 7
                                                // The repair of 3 is SACKed; 1 still holds the cumulative ACK back,
                                                // and 6 and 7 (sent before the repair) are not delivered: RACK.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(6))]);
    g.push(true, seq(6), sisn + 1, MSS, false);
    g.push(true, seq(7), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(8), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// Two segments stamped with the same microsecond: RACK breaks the tie by
/// sequence (RFC 8985 §6.2, Linux's tcp_rack_sent_after), so the higher
/// one, once delivered, marks the lower one lost. A dumpcap at the
/// receiver of a real transfer, written as pcap (microseconds), had the
/// dropped segment and the one SACKed after it in the same microsecond,
/// and the repair 22 us later was called unjustified.
#[test]
fn a_segment_stamped_with_the_same_microsecond_counts_as_sent_after() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    g.push(true, seq(0), sisn + 1, MSS, false);
    g.push(true, seq(1), sisn + 1, MSS, false); // dropped after the capture
    g.same_instant();
    g.push(true, seq(3), sisn + 1, MSS, false);
    g.push(true, seq(2), sisn + 1, MSS, false); // reordered behind 3
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(3), seq(4))]);
    g.push(true, seq(1), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(4), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// One segment SACKed above a hole, then the repair `after_ns` later.
fn repaired_after_a_sack(after_ns: u64) -> Vec<String> {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..3 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    g.push(false, sisn + 1, seq(1), 0, false);
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(3))]);
    g.wait(after_ns);
    g.push(true, seq(1), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(3), 0, false);
    violations(&g)
}

/// A sender that has seen reordering waits for RACK's reordering timer,
/// which Linux arms in whole ticks, at least two (RFC 8985 §6.3;
/// tcp_rack_mark_lost). A tcpdump of Linux on veth had repairs 2.0 and
/// 2.5ms after the SACK, called late against a 1.7ms allowance.
#[test]
fn a_repair_after_racks_reordering_timer_is_not_late() {
    assert_eq!(repaired_after_a_sack(2_500_000), Vec::<String>::new());
}

/// Far beyond the timer's ticks, the repair is late.
#[test]
fn a_repair_long_after_the_timer_is_late() {
    assert_eq!(repaired_after_a_sack(50_000_000), ["late-retransmission"]);
}

/// At the receiver, with reordering ahead of the capture point: segments 2
/// to 4 pass it only after 5, so they are bytes never seen first-sent (and
/// the receiver, short of memory, drops them). Their repairs, sent after
/// the first repair of segment 1, are SACKed while 1 is still missing:
/// RACK marks that repair lost too. Seen in a dumpcap at the receiver of
/// a real transfer, where five retransmissions were called unjustified.
#[test]
fn sacked_repairs_of_bytes_never_seen_sent_mark_earlier_data_lost() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    g.push(true, seq(0), sisn + 1, MSS, false);
    g.push(true, seq(1), sisn + 1, MSS, false); // dropped after the capture
    g.push(true, seq(5), sisn + 1, MSS, false); // ahead of 2-4
    for k in 2..5 {
        g.push(true, seq(k), sisn + 1, MSS, false); // dropped by the receiver
    }
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(5), seq(6))]);
    g.push(true, seq(1), sisn + 1, MSS, false); // RACK: 5 delivered
    g.push(true, seq(6), sisn + 1, MSS, false);
    for k in 2..5 {
        g.push(true, seq(k), sisn + 1, MSS, false); // RACK: 5 delivered
    }
    // The repairs of 2-4 are SACKed, 1's is not: RACK marks it lost again.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(6))]);
    g.push(true, seq(1), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(7), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// The capture missed the segment above all it saw sent (tcpdump dropped
/// it, or a frame was deleted); the receiver SACKs it, and RACK marks the
/// segment below lost. The missing transmission came after every one the
/// capture saw: the SACK is a RACK signal, not a retransmission without
/// one. Seen in the deleted-frame capture of a real transfer.
#[test]
fn a_sack_of_data_the_capture_never_saw_sent_is_a_signal() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..3 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    // Segment 3 went out; the capture lost it. 2 was dropped after it.
    g.push_sacked(false, sisn + 1, seq(2), 0, false, &[(seq(3), seq(4))]);
    g.push(true, seq(2), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(4), 0, false);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// The receiver repeats the SACK of data the capture never saw sent until
/// the sender moves on; only the first one stands for that transmission.
/// A later repeat must not make it "sent" after a retransmission it came
/// before: here segment 1's repair follows the repeat at once, with no
/// new signal since its own transmission, and is still unjustified.
#[test]
fn a_repeated_sack_of_unseen_data_is_one_signal_not_many() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..2 {
        g.push(true, seq(k), sisn + 1, MSS, false);
    }
    // Segment 2 went out unseen; the receiver SACKs it: 1 is lost.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(3))]);
    g.push(true, seq(1), sisn + 1, MSS, false);
    // The same SACK again, then 1 resent once more with nothing new.
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(3))]);
    g.push(true, seq(1), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(3), 0, false);
    assert_eq!(violations(&g), ["unjustified-retransmission"]);
}

/// The last packet made gets IPv4 ID `id` (its header checksum redone).
fn set_id(g: &mut common::TcpGen, id: u16) {
    let p = g.t.packets.last_mut().expect("a packet");
    p.data[18..20].copy_from_slice(&id.to_be_bytes());
    p.data[24..26].fill(0);
    let (ip, _) = etherparse::Ipv4Header::from_slice(&p.data[14..]).unwrap();
    p.data[24..26].copy_from_slice(&ip.calc_header_checksum().to_be_bytes());
}

/// Ten segments numbered by IPv4 ID as Linux numbers them, the first two
/// acknowledged, then segment 2 resent with no loss signal, and new
/// segment 10. When the capture holds
/// the new segment first though its ID says the sender sent it second
/// (a capture on several CPUs did this at a receiver), the resend is not
/// judged on capture order: a `capture-reordered` note. In send order it
/// is what it looks like, a violation; the findings, by name.
fn resent_beside_a_later_packet(capture_reordered: bool) -> Vec<String> {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    for k in 0..10 {
        g.push(true, seq(k), sisn + 1, MSS, false);
        set_id(&mut g, 100 + k as u16);
    }
    g.push(false, sisn + 1, seq(2), 0, false);
    let (resend_id, new_id) = if capture_reordered {
        (110, 111)
    } else {
        (111, 110)
    };
    g.push(true, seq(10), sisn + 1, MSS, false);
    set_id(&mut g, new_id);
    g.same_instant();
    g.push(true, seq(2), sisn + 1, MSS, false);
    set_id(&mut g, resend_id);
    g.push(false, sisn + 1, seq(11), 0, false);
    let r = g.loss_recovery();
    r.analyzers[0]
        .findings
        .iter()
        .filter(|f| f.kind != wirelab_analyze::Kind::Measurement)
        .map(|f| f.name.to_string())
        .collect()
}

#[test]
fn a_resend_the_capture_reordered_is_a_note_not_a_violation() {
    let names = resent_beside_a_later_packet(true);
    assert!(names.contains(&"capture-reordered".into()), "{names:?}");
    assert!(
        !names.contains(&"unjustified-retransmission".into()),
        "{names:?}"
    );
    let names = resent_beside_a_later_packet(false);
    assert!(
        names.contains(&"unjustified-retransmission".into()),
        "{names:?}"
    );
    assert!(!names.contains(&"capture-reordered".into()), "{names:?}");
}

/// A connection opened on an idle path (20 µs handshake) whose data then
/// waits behind a queue (10 ms round trips): the sender's smoothed RTT
/// still holds the handshake's, so its probe timer (2 SRTT + 2 ms in
/// Linux) can fire long before a data round trip. A tail resent 5 ms
/// after it was sent is a tail loss probe, not unjustified; one resent at
/// once still is (a fig16 baseline capture called such a probe
/// unjustified).
#[test]
fn a_probe_timed_by_the_handshakes_rtt_is_a_probe() {
    let resent_after = |ns: u64| {
        let mut g = common::TcpGen::new();
        let (isn, sisn) = (1000u32, 5000u32);
        let seq = |k: u32| isn + 1 + k * MSS;
        g.handshake(isn, sisn);
        for k in 0..2 {
            g.push(true, seq(k), sisn + 1, MSS, false);
        }
        g.wait(10_000_000);
        g.push(false, sisn + 1, seq(2), 0, false);
        for k in 2..4 {
            g.push(true, seq(k), sisn + 1, MSS, false);
        }
        g.same_instant();
        g.wait(ns);
        g.push(true, seq(3), sisn + 1, MSS, false);
        g.push(false, sisn + 1, seq(4), 0, false);
        let r = g.loss_recovery();
        let c = &r.analysis.connections[0];
        (
            c.retransmissions
                .iter()
                .map(|r| r.reason)
                .collect::<Vec<_>>(),
            violations(&g),
        )
    };
    assert_eq!(
        resent_after(5_000_000),
        (vec![wirelab_analyze::Reason::Tlp], vec![])
    );
    assert_eq!(
        resent_after(0).1,
        vec!["unjustified-retransmission".to_string()]
    );
}

/// A sender that processes its ACKs late (a socket busy in `sendmsg`
/// queues them in its backlog) resends data the receiver had SACKed just
/// before, then reads that SACK and takes it as the repair's delivery
/// (tcp_rack_advance takes the latest transmission's time): what it sent
/// before the repair is lost by RACK (RFC 8985 §6.2), and it resends that
/// again. The analyzer already grants that the sender may not have had
/// the SACK (the repair is no `sacked-data-retransmitted`); it must then
/// grant the signal the SACK becomes. A dumpcap at the receiver of a real
/// transfer (CI, 2026-11-27) called the second repair unjustified.
#[test]
fn a_sack_read_after_the_repair_it_covers_marks_earlier_repairs_lost() {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    g.push(true, seq(0), sisn + 1, MSS, false);
    g.push(true, seq(1), sisn + 1, MSS, false); // dropped after the capture
    g.push(false, sisn + 1, seq(1), 0, false);
    g.push(true, seq(2), sisn + 1, MSS, false);
    g.push(true, seq(5), sisn + 1, MSS, false); // reordered ahead of 3, 4
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(3))]);
    g.push(true, seq(3), sisn + 1, MSS, false);
    g.push_sacked(
        false,
        sisn + 1,
        seq(1),
        0,
        false,
        &[(seq(5), seq(6)), (seq(2), seq(3))],
    );
    g.push(true, seq(6), sisn + 1, MSS, false);
    // The SACK of 3: the sender reads it only after it resent 3.
    g.push_sacked(
        false,
        sisn + 1,
        seq(1),
        0,
        false,
        &[(seq(2), seq(4)), (seq(5), seq(6))],
    );
    g.push(true, seq(4), sisn + 1, MSS, false);
    g.push(true, seq(7), sisn + 1, MSS, false);
    g.push(true, seq(1), sisn + 1, MSS, false); // repair of 1: three dup ACKs
    g.push(false, sisn + 1, seq(8), 0, false);
    g.push(true, seq(3), sisn + 1, MSS, false); // repair of 3: RACK, by 5
    g.push_sacked(false, sisn + 1, seq(8), 0, false, &[(seq(3), seq(4))]);
    g.push(true, seq(1), sisn + 1, MSS, false); // RACK, by the repair of 3
    g.push_sacked(false, sisn + 1, seq(8), 0, false, &[(seq(1), seq(2))]);
    assert_eq!(violations(&g), Vec::<String>::new());
}

/// The capture missed a segment in the middle of a flight (tcpdump
/// dropped it; here a frame deleted with editcap), and the receiver SACKs
/// it while the segment below it is lost: RACK marks that one lost (it
/// was sent before the missed one: new data goes out in sequence order).
/// The SACK of bytes the capture never saw sent, between two it did, is
/// that signal. Seen in the deleted-frame capture of a real transfer (a
/// repair 3 us after such a SACK, called unjustified).
fn missed_mid_flight(resend: u32) -> Vec<String> {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.handshake(isn, sisn);
    g.push(true, seq(0), sisn + 1, MSS, false);
    g.push(false, sisn + 1, seq(1), 0, false);
    // Segment 1 is dropped after the capture point; segment 2 goes out
    // next, and the capture loses it; 3 is dropped too.
    g.push(true, seq(1), sisn + 1, MSS, false);
    g.push(true, seq(3), sisn + 1, MSS, false);
    g.push(true, seq(4), sisn + 1, MSS, false);
    g.push_sacked(false, sisn + 1, seq(1), 0, false, &[(seq(2), seq(3))]);
    g.push(true, seq(resend), sisn + 1, MSS, false);
    violations(&g)
}

#[test]
fn a_sack_of_a_segment_the_capture_missed_mid_flight_is_a_signal() {
    assert_eq!(missed_mid_flight(1), Vec::<String>::new());
}

/// ... for what was sent before it only: segment 3 went out after the
/// missed one, and nothing sent after 3 is delivered yet.
#[test]
fn a_sack_of_a_missed_segment_is_no_signal_for_data_sent_after_it() {
    assert_eq!(missed_mid_flight(3), ["unjustified-retransmission"]);
}
