//! A connection longer than the history the model keeps (`KEEP`): its
//! memory stays bounded, verdicts within the history are unchanged, and a
//! retransmission reaching further back is counted, not misjudged.

use wirelab_analyze::model::KEEP;

mod common;

const MSS: u32 = 1000;

#[test]
fn history_beyond_keep_is_forgotten_and_counted_not_misjudged() {
    let mut g = common::TcpGen::new();
    let (isn, server_isn) = (1000u32, 5000u32);
    g.handshake(isn, server_isn);
    let n = 2 * KEEP as u32 + 100;
    let seq = |k: u32| isn + 1 + k * MSS;
    for k in 0..n {
        g.push(true, seq(k), server_isn + 1, MSS, false);
        g.push(false, server_isn + 1, seq(k + 1), 0, false);
    }
    // 1 s later: the first segment again (beyond the history), and one
    // acknowledged 50 segments before the end (within it).
    g.ts += 1_000_000_000;
    g.push(true, seq(0), server_isn + 1, MSS, false);
    g.push(true, seq(n - 50), server_isn + 1, MSS, false);
    let r = g.loss_recovery();
    let c = &r.analysis.connections[0];
    assert_eq!(c.first_transmissions, n);
    assert_eq!(c.forgotten_retransmissions, 1);
    // The recent one is judged as before: acknowledged data resent.
    assert_eq!(c.retransmissions.len(), 1);
    assert!(c.retransmissions[0].already_acked);
    assert_eq!(c.retransmissions[0].packet, n - 50 + 1);
    let f = &r.analyzers[0].findings;
    let named = |name: &str| f.iter().filter(|f| f.name == name).count();
    assert_eq!(named("acked-data-retransmitted"), 1, "{f:#?}");
    assert_eq!(named("forgotten-retransmission"), 1, "{f:#?}");
    // RTT samples: one per segment, counted exactly though the values are
    // a sample.
    assert_eq!(c.rtt.count(), u64::from(n));
}

/// A connection past 4 GB: relative sequence numbers wrap (RFC 9293 §3.4
/// compares them modulo 2^32), and the model's history, kept in sequence
/// order, stays in order across the wrap. 80,000 segments of 60,000 bytes
/// (4.8 GB, captured as headers only); a segment acknowledged 50 segments
/// before the end, past the wrap, is resent and judged as such.
#[test]
fn a_connection_past_4_gb_is_judged_across_the_sequence_wrap() {
    const LEN: u32 = 60_000;
    let mut g = common::TcpGen::new();
    let (isn, server_isn) = (1000u32, 5000u32);
    g.handshake(isn, server_isn);
    let n = 80_000u32;
    let seq = |k: u32| (isn + 1).wrapping_add(k.wrapping_mul(LEN));
    for k in 0..n {
        g.push_snapped(true, seq(k), server_isn + 1, LEN);
        g.push(false, server_isn + 1, seq(k + 1), 0, false);
    }
    assert!(u64::from(n) * u64::from(LEN) > 1 << 32);
    g.wait(1_000_000_000);
    g.push_snapped(true, seq(n - 50), server_isn + 1, LEN);
    let r = g.loss_recovery();
    let c = &r.analysis.connections[0];
    assert_eq!(c.first_transmissions, n);
    assert_eq!(c.bytes_acked, u64::from(n) * u64::from(LEN));
    assert_eq!(c.retransmissions.len(), 1);
    let rt = &c.retransmissions[0];
    assert_eq!(rt.packet, n - 50 + 1);
    assert!(rt.already_acked, "{rt:?}");
    assert_eq!(c.rtt.count(), u64::from(n), "one RTT sample per segment");
    let f = &r.analyzers[0].findings;
    assert_eq!(
        f.iter()
            .filter(|f| f.name == "acked-data-retransmitted")
            .count(),
        1,
        "{f:#?}"
    );
}
