//! Resending data the receiver had SACKed is a violation (RFC 6675 §4:
//! NextSeg skips SACKed data) only when the sender surely had the SACK
//! first: it passed the capture point more than a sender-side round trip
//! plus the sender's own transmit queue (`SEND_QUEUE_NS`, 1 ms) before the
//! retransmission. Sooner, the retransmission may have been committed on
//! an earlier loss signal and sat in the queue while the SACK arrived: a
//! real capture of Linux (tcpdump at the sender, veth) did exactly that 51
//! us after the SACK, and was wrongly called a violation.

use wirelab_analyze::report::build;
use wirelab_analyze::Options;

mod common;

const MSS: u32 = 1000;

/// Segment 2 arrives late (reordered), after RACK marked it lost; it is
/// resent `resend_after_ns` after the SACK that reported it.
fn findings(resend_after_ns: u64) -> Vec<String> {
    let mut g = common::TcpGen::new();
    let (isn, sisn) = (1000u32, 5000u32);
    let seq = |k: u32| isn + 1 + k * MSS;
    g.push(true, isn, 0, 0, true);
    g.push(false, sisn, isn + 1, 0, true);
    g.push(true, isn + 1, sisn + 1, 0, false);
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
    let r = build(
        "sacked",
        &g.t,
        Options::default(),
        None,
        &["loss-recovery"],
        &[],
        &|_| {},
    );
    r.analyzers[0]
        .findings
        .iter()
        .filter(|f| f.kind == wirelab_analyze::Kind::Violation)
        .map(|f| f.name.to_string())
        .collect()
}

#[test]
fn sacked_data_resent_long_after_the_sack_is_a_violation() {
    assert_eq!(findings(5_000_000), ["sacked-data-retransmitted"]);
}

#[test]
fn sacked_data_resent_while_the_sack_was_in_flight_is_not() {
    assert_eq!(findings(50_000), Vec::<String>::new());
}
