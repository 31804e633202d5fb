//! `wirelab diagnose`'s causes beyond losses (DETER Table 2): a zero
//! window, a delayed ACK the sender waited on, slow start after idle, each
//! on a made connection with exactly the timing that shows it, and a
//! twin without it that must not be blamed.

mod common;

use common::TcpGen;
use wirelab_analyze::diagnose::{diagnose, Cause};
use wirelab_analyze::Reason;

const ISN: u32 = 1000;
const SISN: u32 = 5000;
const SEG: u32 = 1000;
const MS: u64 = 1_000_000;

/// The causes of the one connection, by kind.
fn causes(g: &TcpGen) -> Vec<Cause> {
    let r = g.loss_recovery();
    let slow = diagnose(&r.analysis.connections, 0.0, &[]);
    assert_eq!(slow.len(), 1, "one connection");
    slow.into_iter().next().unwrap().causes
}

/// The cause of `kind`, which must be there.
fn the<'a>(c: &'a [Cause], kind: &str) -> &'a Cause {
    c.iter()
        .find(|c| c.kind == kind)
        .unwrap_or_else(|| panic!("no {kind}: {:?}", kinds(c)))
}

fn kinds(c: &[Cause]) -> Vec<&'static str> {
    c.iter().map(|c| c.kind).collect()
}

/// Segment k (from 0) of the client's data.
fn send(g: &mut TcpGen, k: u32) {
    g.push(true, ISN + 1 + k * SEG, SISN + 1, SEG, false);
}

/// The server's ACK of the first k segments.
fn ack(g: &mut TcpGen, k: u32) {
    g.push(false, SISN + 1, ISN + 1 + k * SEG, 0, false);
}

/// DETER §2.1's sender: rto_min 10 ms, no tail loss probe.
fn deter_sender() -> wirelab_analyze::Options {
    wirelab_analyze::Options {
        min_rto_ns: 10 * MS,
        tlp: false,
        ..wirelab_analyze::Options::default()
    }
}

/// The names of a report's violations.
fn violations(r: &wirelab_analyze::report::Report) -> Vec<&'static str> {
    r.analyzers
        .iter()
        .flat_map(|a| a.findings.iter())
        .filter(|f| f.kind == wirelab_analyze::Kind::Violation)
        .map(|f| f.name)
        .collect()
}

#[test]
fn a_closed_window_is_named_with_how_long_it_stayed_closed() {
    for closed in [true, false] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        for k in 0..4 {
            send(&mut g, k);
        }
        if closed {
            g.window = 0;
        }
        ack(&mut g, 4);
        g.wait(50 * MS);
        g.window = 65535;
        // The window update opens it.
        ack(&mut g, 4);
        for k in 4..8 {
            send(&mut g, k);
        }
        ack(&mut g, 8);
        let c = causes(&g);
        let z = c.iter().find(|c| c.kind == "zero-window");
        assert_eq!(z.is_some(), closed, "{:?}", kinds(&c));
        if let Some(z) = z {
            assert!(z.text.contains("closed 50.0ms in 1 stall"), "{}", z.text);
            assert_eq!(z.evidence.len(), 2, "the ACKs that closed and opened it");
        }
    }
}

#[test]
fn an_ack_held_while_the_sender_waited_is_a_delayed_ack() {
    for held in [45 * MS, MS] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        send(&mut g, 0);
        g.wait(held);
        ack(&mut g, 1);
        for k in 1..4 {
            send(&mut g, k);
        }
        ack(&mut g, 4);
        let c = causes(&g);
        let d = c.iter().find(|c| c.kind == "delayed-ack");
        assert_eq!(d.is_some(), held > 20 * MS, "held {held}: {:?}", kinds(&c));
        if let Some(d) = d {
            assert!(d.text.contains("1 time(s)"), "{}", d.text);
        }
    }
    // An ACK late for data the sender kept sending past is not waited on.
    let mut g = TcpGen::new();
    g.handshake(ISN, SISN);
    send(&mut g, 0);
    g.wait(45 * MS);
    send(&mut g, 1);
    ack(&mut g, 1);
    ack(&mut g, 2);
    let c = causes(&g);
    assert!(!kinds(&c).contains(&"delayed-ack"), "{:?}", kinds(&c));
}

#[test]
fn a_window_restarted_after_idle_is_slow_start_after_idle() {
    // 20 segments in flight, idle 300 ms (above the 200 ms minimum RTO),
    // then 10 in the first round trip and more after: restarted. The twin
    // has only those 10 to send: it was not held back.
    for more in [true, false] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        for k in 0..20 {
            send(&mut g, k);
        }
        ack(&mut g, 20);
        g.wait(300 * MS);
        for k in 20..30 {
            send(&mut g, k);
        }
        ack(&mut g, 30);
        if more {
            for k in 30..50 {
                send(&mut g, k);
            }
            ack(&mut g, 50);
        }
        let c = causes(&g);
        let s = c.iter().find(|c| c.kind == "slow-start-after-idle");
        assert_eq!(s.is_some(), more, "{:?}", kinds(&c));
        if let Some(s) = s {
            assert!(
                s.text
                    .contains("10 segment(s) in the round trip, against 20"),
                "{}",
                s.text
            );
        }
    }
}

#[test]
fn a_sender_waiting_on_a_full_receive_window_is_receive_window_limited() {
    // A 4,000-byte window (no scaling offered) and 1,000-byte segments:
    // after each 4 the sender waits 5 ms for the ACK that opens it. The
    // twin's window is ten times larger: never full.
    for window in [4000u16, 40000] {
        let mut g = TcpGen::new();
        g.window = window;
        g.handshake(ISN, SISN);
        for round in 0..5 {
            for k in 0..4 {
                send(&mut g, round * 4 + k);
            }
            g.wait(5 * MS);
            ack(&mut g, round * 4 + 4);
        }
        let c = causes(&g);
        let w = c.iter().find(|c| c.kind == "receive-window-limited");
        assert_eq!(w.is_some(), window == 4000, "{:?}", kinds(&c));
        if let Some(w) = w {
            assert!(w.text.contains("4 time(s)"), "{}", w.text);
            assert!(
                w.text.contains("largest window was 4000 bytes"),
                "{}",
                w.text
            );
        }
    }
}

#[test]
fn acks_that_grow_the_window_are_named_when_a_timeout_follows() {
    // DETER §5.3, root cause 2: segment 2 of 10 is lost; the receiver
    // answers each of the 7 later ones with an ACK of segment 2, each with
    // a larger window (no SACK). None is a duplicate (RFC 5681 §2 (e)),
    // so the sender waits for its timer. The twin's ACKs keep one window:
    // duplicates, whatever made its sender wait.
    for grow in [true, false] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        // Room for 7 window steps of 2 segments in 16 bits.
        g.window = 8000;
        for k in 0..10 {
            send(&mut g, k);
        }
        ack(&mut g, 2);
        for _ in 0..7 {
            if grow {
                g.window += 2 * SEG as u16;
            }
            ack(&mut g, 2);
        }
        g.wait(210 * MS);
        send(&mut g, 2);
        ack(&mut g, 10);
        let c = causes(&g);
        let t = the(&c, "timeout");
        assert_eq!(
            t.text.contains("7 of them each advertised another window"),
            grow,
            "{}",
            t.text
        );
        if grow {
            assert!(t.text.contains("0 of DupThresh 3 counted"), "{}", t.text);
        }
    }
}

#[test]
fn a_timeout_after_too_few_packets_names_them() {
    // DETER §5.3, root cause 1: 7 segments, the 5th lost; 2 duplicate
    // ACKs. The twin loses the 4th: 3 follow it, enough to signal it.
    for lost in [4u32, 3] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        for k in 0..7 {
            send(&mut g, k);
        }
        for _ in lost..7 {
            ack(&mut g, lost);
        }
        g.wait(210 * MS);
        send(&mut g, lost);
        ack(&mut g, 7);
        let c = causes(&g);
        let t = the(&c, "timeout");
        assert_eq!(
            t.text
                .contains("too few packets after it for duplicate ACKs (2 of DupThresh 3"),
            lost == 4,
            "{}",
            t.text
        );
    }
}

#[test]
fn a_timeout_after_enough_duplicate_acks_the_sender_did_not_count_says_so() {
    // 10 segments, the first lost, 9 ACKs of nothing new with one window:
    // the first has no ACK before it to repeat (the SYN-ACK aside), the
    // other 8 are duplicates by RFC 5681, enough for DupThresh, and still
    // a timeout.
    // Linux merges such ACKs with the window update before them when they
    // wait in the socket's backlog (a lab spec pinned to one CPU). The
    // twin has 2: too few, named as such. The third's ACKs carry SACK
    // blocks: with SACK, Linux decides by RACK's timer (RFC 8985), not by
    // counting, so that is not said of it.
    for (dups, sacked) in [(9u32, false), (2, false), (9, true)] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        for k in 0..=dups {
            send(&mut g, k);
        }
        for k in 0..dups {
            if sacked {
                let (l, r) = (ISN + 1 + SEG, ISN + 1 + (k + 2) * SEG);
                g.push_sacked(false, SISN + 1, ISN + 1, 0, false, &[(l, r)]);
            } else {
                ack(&mut g, 0);
            }
        }
        g.wait(210 * MS);
        send(&mut g, 0);
        ack(&mut g, dups + 1);
        let c = causes(&g);
        let t = the(&c, "timeout");
        assert_eq!(
            t.text.contains("8 duplicate ACKs came back, DupThresh 3 (RFC 5681 §3.2), and still the timer: the sender did not count them")
                && t.text.contains("TcpExtTCPBacklogCoalesce"),
            dups == 9 && !sacked,
            "{}",
            t.text
        );
    }
}

/// DETER §2.1's sender (rto_min 10 ms, no tail loss probe): 5 segments,
/// the last lost; a timeout resends it 10 ms later, and again 20 ms after
/// that (`between` runs between the two); then the ACK of all, with a
/// DSACK of the last segment when `dsack`. The loss-recovery report.
fn tail_resent_twice(
    between: impl FnOnce(&mut TcpGen),
    dsack: bool,
) -> wirelab_analyze::report::Report {
    let mut g = TcpGen::new();
    g.handshake(ISN, SISN);
    for k in 0..5 {
        send(&mut g, k);
    }
    ack(&mut g, 4);
    g.wait(10 * MS);
    send(&mut g, 4);
    let t0 = g.ts;
    between(&mut g);
    g.wait((20 * MS).saturating_sub(g.ts - t0));
    send(&mut g, 4);
    let last = ISN + 1 + 4 * SEG;
    let block: &[(u32, u32)] = if dsack { &[(last, last + SEG)] } else { &[] };
    g.push_sacked(false, SISN + 1, last + SEG, 0, false, block);
    let opts = deter_sender();
    wirelab_analyze::report::build("made", &g.t, opts, None, &["loss-recovery"], &[], &|_| {})
}

#[test]
fn a_second_timeout_after_an_unacknowledged_retransmission_that_arrived_is_a_delayed_ack() {
    // DETER §2.1: the timeout's retransmission arrives but its ACK is
    // held, so the timer (doubled) runs out again and the duplicate is
    // answered at once, with a DSACK. The twin's first retransmission was
    // lost too: no DSACK, no such claim.
    for arrived in [true, false] {
        let r = tail_resent_twice(|_| {}, arrived);
        let slow = diagnose(&r.analysis.connections, 0.0, &[]);
        let c = slow.into_iter().next().unwrap().causes;
        let t: Vec<&Cause> = c.iter().filter(|c| c.kind == "timeout").collect();
        assert_eq!(t.len(), 2, "{:?}", kinds(&c));
        assert!(
            t[0].text.contains("a tail loss"),
            "the first: {}",
            t[0].text
        );
        assert_eq!(
            t[1].text
                .contains("held its ACK past the sender's backed-off timer")
                && t[1].text.contains("(DETER §2.1)"),
            arrived,
            "{}",
            t[1].text
        );
    }
}

#[test]
fn an_ack_of_new_data_between_two_timeouts_starts_the_backoff_over() {
    // Segments 3 and 4 of 5 are lost. The timeout resends 3, whose ACK
    // comes at once: an RTT sample, after which Linux starts the backoff
    // over (tcp_ack_update_rtt) and re-arms the timer. The recovery
    // resends 4 at once, and that copy is lost too: 4 times out after the
    // same 10 ms, not 20. No `no-backoff` (a congested run saw 207 then
    // 205 ms across such an ACK, and was flagged).
    let mut g = TcpGen::new();
    g.handshake(ISN, SISN);
    for k in 0..5 {
        send(&mut g, k);
    }
    ack(&mut g, 3);
    g.wait(10 * MS);
    send(&mut g, 3);
    ack(&mut g, 4);
    send(&mut g, 4);
    g.wait(10 * MS);
    send(&mut g, 4);
    ack(&mut g, 5);
    let opts = deter_sender();
    let r =
        wirelab_analyze::report::build("made", &g.t, opts, None, &["loss-recovery"], &[], &|_| {});
    let rs = &r.analysis.connections[0].retransmissions;
    let got: Vec<(Reason, u64)> = rs
        .iter()
        .map(|r| (r.reason, r.rto_ns.unwrap_or(0) / 1000))
        .collect();
    assert_eq!(
        got,
        [
            (Reason::Timeout, 10_010),
            (Reason::AfterTimeout, 0),
            (Reason::Timeout, 10_010)
        ],
        "µs"
    );
    let v = violations(&r);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn window_updates_during_a_backoff_do_not_restart_the_timer() {
    // A slow reader's window update comes while the sender backs off.
    // Linux's timer runs on from the first retransmission (only an ACK
    // of new data re-arms it), so the second timeout waited 20 ms, twice
    // the first: no `no-backoff`. Counted from the window update, it
    // would have waited 12 ms.
    let r = tail_resent_twice(
        |g| {
            g.wait(8 * MS);
            g.window -= 100;
            ack(g, 4);
        },
        true,
    );
    let rs = &r.analysis.connections[0].retransmissions;
    let us: Vec<u64> = rs.iter().map(|r| r.rto_ns.unwrap() / 1000).collect();
    assert_eq!(
        us,
        [10_010, 20_010],
        "µs (each made packet 10 µs after the last)"
    );
    let v = violations(&r);
    assert!(v.is_empty(), "{v:?}");
}

/// The made connection from its client, as a record names it.
fn resend(k: u32, reordering: u32, sacked: u32) -> wirelab_analyze::diagnose::KernelResend {
    wirelab_analyze::diagnose::KernelResend {
        local: ("198.18.0.1".parse().unwrap(), 40000),
        remote: ("198.18.0.2".parse().unwrap(), 5001),
        seq: ISN + 1 + k * SEG,
        reordering,
        sacked,
    }
}

/// DETER §5.2 without SACK: segment 1 is resent on the 3rd duplicate ACK,
/// and the receiver acknowledges it at once with the 10 after it (the
/// original had arrived, reordered: the retransmission was spurious).
/// Then segments 12 to `last` - 1 go out, 12 to 19 are acknowledged and
/// segment 20 is lost.
fn reordered_then_sent_to(last: u32) -> TcpGen {
    let mut g = TcpGen::new();
    g.handshake(ISN, SISN);
    for k in 0..12 {
        send(&mut g, k);
    }
    for _ in 0..4 {
        ack(&mut g, 1);
    }
    send(&mut g, 1);
    g.same_instant();
    ack(&mut g, 12);
    for k in 12..last {
        send(&mut g, k);
    }
    for k in 13..=20 {
        ack(&mut g, k);
    }
    g
}

/// `reordered_then_sent_to(31)`: 10 duplicate ACKs follow segment 20's
/// loss, `spaced` apart, and the sender resends it after the `on`-th.
fn reordered_then_lost(spaced: u64, on: u32) -> TcpGen {
    let mut g = reordered_then_sent_to(31);
    for n in 1..=10 {
        g.wait(spaced);
        if spaced == 0 {
            g.same_instant();
        }
        ack(&mut g, 20);
        if n == on {
            send(&mut g, 20);
        }
    }
    ack(&mut g, 31);
    g
}

#[test]
fn a_fast_retransmit_long_after_the_3rd_duplicate_ack_is_late_and_cites_the_reordering() {
    // Resent on the 10th of ACKs 100 us apart: 700 us after the 3rd.
    let c = causes(&reordered_then_lost(100_000, 10));
    assert_eq!(kinds(&c), ["fast-retransmit", "late-fast-retransmit"]);
    let late = &c[1].text;
    assert!(
        late.contains("packet 21 resent at")
            && late.contains("10 duplicate ACKs had passed before it, the 3rd (")
            && late.contains("DupThresh, 3 (RFC 5681 §3.2), had grown")
            && late.contains("packet 2's fast retransmit at")
            && late.contains("acknowledged it 0.0us after the retransmission")
            && late.contains("closed a hole of 11 packets"),
        "{late}"
    );
    assert!(c[1].evidence.len() >= 5, "{:?}", c[1].evidence);
    // The same spacing, resent on the 3rd: a bottleneck's slow duplicate
    // ACKs, not a late sender.
    let c = causes(&reordered_then_lost(100_000, 3));
    assert_eq!(kinds(&c), ["fast-retransmit", "fast-retransmit"]);
}

#[test]
fn a_record_of_the_kernel_s_grown_threshold_makes_it_late_where_the_wire_cannot_show_it() {
    // Every duplicate ACK and the resend at one instant (a replay's lab,
    // no bottleneck): the wire cannot show the wait; the record can.
    let g = reordered_then_lost(0, 10);
    let r = g.loss_recovery();
    let conns = &r.analysis.connections;
    let of = |kernel: &[wirelab_analyze::diagnose::KernelResend]| -> Vec<Cause> {
        diagnose(conns, 0.0, kernel).remove(0).causes
    };
    assert_eq!(kinds(&of(&[])), ["fast-retransmit", "fast-retransmit"]);
    let c = of(&[resend(1, 3, 3), resend(20, 10, 10)]);
    assert_eq!(kinds(&c), ["fast-retransmit", "late-fast-retransmit"]);
    assert!(
        c[1]
            .text
            .contains("the sender's kernel resent it on duplicate ACK 10, its threshold tcp_reordering 10 where RFC 5681 §3.2 has 3: packet 2's"),
        "{}",
        c[1].text
    );
    // A threshold of 3 is no growth; another connection's record is not this one's.
    assert_eq!(
        kinds(&of(&[resend(20, 3, 3)])),
        ["fast-retransmit", "fast-retransmit"]
    );
    let mut other = resend(20, 10, 10);
    other.local.1 = 40001;
    assert_eq!(kinds(&of(&[other])), ["fast-retransmit", "fast-retransmit"]);
}

#[test]
fn a_timeout_after_enough_duplicate_acks_for_rfc_5681_names_the_grown_threshold() {
    // Segment 20 lost with 5 packets after it: 5 duplicate ACKs, and the
    // timer. Linux's threshold had grown to 10.
    let mut g = reordered_then_sent_to(26);
    for _ in 0..5 {
        ack(&mut g, 20);
    }
    g.wait(210 * MS);
    send(&mut g, 20);
    ack(&mut g, 26);
    let r = g.loss_recovery();
    let slow = diagnose(&r.analysis.connections, 0.0, &[resend(20, 10, 5)]);
    let c = &slow[0].causes;
    let t = the(c, "timeout");
    assert!(
        t.text.contains("5 duplicate ACKs came back, DupThresh 3 for RFC 5681 §3.2, but the sender's kernel wanted 10")
            && t.text.contains("packet 2's fast retransmit"),
        "{}",
        t.text
    );
}

/// In the recovery after a timeout the sender resends as ACKs come (RFC
/// 5681 §3.1); a resend after a whole minimum RTO with no ACK and nothing
/// sent is the timer firing again (RFC 6298 §5.5), as Linux counts it.
#[test]
fn a_resend_after_a_quiet_rto_in_a_timeout_s_recovery_is_the_timer_again() {
    for quiet in [450 * MS, MS] {
        let mut g = TcpGen::new();
        g.handshake(ISN, SISN);
        for k in 0..4 {
            send(&mut g, k);
        }
        g.wait(210 * MS);
        send(&mut g, 0);
        ack(&mut g, 1);
        send(&mut g, 1);
        g.wait(quiet);
        send(&mut g, 2);
        ack(&mut g, 4);
        let r = g.loss_recovery();
        let reasons: Vec<Reason> = r.analysis.connections[0]
            .retransmissions
            .iter()
            .map(|r| r.reason)
            .collect();
        let last = if quiet > 200 * MS {
            Reason::Timeout
        } else {
            Reason::AfterTimeout
        };
        assert_eq!(
            reasons,
            [Reason::Timeout, Reason::AfterTimeout, last],
            "quiet {quiet}"
        );
    }
}
