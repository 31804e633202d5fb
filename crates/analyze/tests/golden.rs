//! Golden traces: real wirelab runs checked in with their findings verified
//! by hand (and by tshark), plus edits of them where the stack misbehaves and
//! the analyzer must say so.
//!
//! The goldens are never regenerated to make a test pass. They came from:
//!   wirelab run specs/tcp/drop-5th-packet-twice-second-recovery-by-timeout.yaml
//!   wirelab run specs/tcp/ecn-mark-is-echoed-by-the-receiver.yaml
//! (results/<run>/trace.pcapng copied to tests/golden/).

use std::path::Path;
use std::process::Command;

use wirelab_analyze::expect::{evaluate, RunFacts};
use wirelab_analyze::{analyze, Analysis};
use wirelab_spec::Recovery;
use wirelab_trace::Trace;

fn golden(name: &str) -> Trace {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    wirelab_trace::read(&p).unwrap()
}

fn claims(yaml: &str, a: &Analysis) -> Vec<bool> {
    let spec = wirelab_spec::parse(&format!(
        "topology:\n  hosts: [{{name: a}}, {{name: b}}]\ntraffic:\n  connections:\n    - {{from: a, to: b, message_size: 1}}\nexpect:\n{yaml}"
    ))
    .unwrap();
    evaluate(&spec.expect, a, &RunFacts::default(), &[])
        .iter()
        .map(|v| v.pass)
        .collect()
}

#[test]
fn drop_twice_fast_then_timeout() {
    let t = golden("drop-5th-packet-twice.pcapng");
    assert_eq!(t.packets.len(), 30);
    let a = analyze(&t);
    assert_eq!(a.connections.len(), 1);
    let c = &a.connections[0];
    assert_eq!((c.id, c.first_transmissions, c.data_packets), (1, 10, 12));
    assert!(
        c.iteration_mismatches.is_empty(),
        "switch and analyzer agree"
    );
    let r = c.retransmissions_of(5);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].recovery, r[0].iteration, r[0].at.mirror_seq),
        (Recovery::Fast, 2, Some(22))
    );
    assert_eq!(r[0].previous.mirror_seq, Some(7));
    assert_eq!(r[0].previous_event, "drop");
    assert!(
        r[0].trigger.is_some(),
        "the SACK that triggered it is named"
    );
    assert_eq!(
        (r[1].recovery, r[1].iteration, r[1].at.mirror_seq),
        (Recovery::Timeout, 3, Some(23))
    );
    assert_eq!(r[1].previous_event, "drop");
    // RTO with rto_min 200ms: more than 200ms, far less than a second.
    assert!(
        (200_000_000..1_000_000_000).contains(&r[1].since_loss_ns),
        "{}",
        r[1].since_loss_ns
    );
    assert!(
        r[0].since_loss_ns < 1_000_000,
        "fast: well under a millisecond"
    );
    let events: Vec<_> = c
        .events
        .iter()
        .map(|e| (e.event_id, e.packet, e.iteration))
        .collect();
    assert_eq!(events, vec![(1, 5, 1), (2, 5, 2)]);
    assert_eq!(
        claims(
            "  - {connection: 1, packet: 5, retransmitted: 2, recovery: [fast, timeout]}\n",
            &a
        ),
        vec![true]
    );
}

#[test]
fn without_the_sacks_the_first_recovery_is_a_timeout() {
    // A receiver that never reports the hole: delete every ACK from the
    // receiver between the first loss and the first retransmission.
    let mut t = golden("drop-5th-packet-twice.pcapng");
    let seq_of = |p: &wirelab_trace::Packet| p.meta.as_ref().unwrap().seq;
    t.packets.retain(|p| {
        let s = seq_of(p);
        let from_receiver = p.tcp().map(|x| x.sport == 5001).unwrap_or(false);
        !(from_receiver && (8..22).contains(&s))
    });
    for (i, p) in t.packets.iter_mut().enumerate() {
        p.frame = i as u64 + 1;
    }
    let a = analyze(&t);
    let r = a.connections[0].retransmissions_of(5);
    assert_eq!(
        r[0].recovery,
        Recovery::Timeout,
        "no loss signal, so no fast retransmit"
    );
    assert_eq!(
        claims(
            "  - {connection: 1, packet: 5, retransmitted: 2, recovery: [fast, timeout]}\n",
            &a
        ),
        vec![false],
        "the expectation of the correct behaviour now fails"
    );
}

#[test]
fn ecn_mark_echoed_and_answered() {
    let a = analyze(&golden("ecn-mark-echoed.pcapng"));
    let c = &a.connections[0];
    assert_eq!(c.ce_marks.len(), 1);
    let m = &c.ce_marks[0];
    assert_eq!(m.packet, 3);
    assert!(m.echo.is_some() && m.cwr.is_some());
    assert!(m.echo_latency_ns.unwrap() < 10_000_000);
    assert!(c.retransmissions.is_empty());
    assert_eq!(
        claims("  - {connection: 1, ce_echoed: true}\n", &a),
        vec![true]
    );
}

#[test]
fn a_receiver_that_ignores_ce_is_caught() {
    let mut t = golden("ecn-mark-echoed.pcapng");
    // Clear ECE (byte 13 of the TCP header, bit 0x40) on the receiver's
    // packets after the handshake: the receiver "forgot" to echo.
    for p in &mut t.packets {
        if let Ok(x) = p.tcp() {
            if x.sport == 5001 && !x.syn {
                let off = 14 + 20 + 13;
                p.data[off] &= !0x40;
            }
        }
    }
    let a = analyze(&t);
    let m = &a.connections[0].ce_marks[0];
    assert!(m.echo.is_none());
    assert_eq!(
        claims("  - {connection: 1, ce_echoed: true}\n", &a),
        vec![false]
    );
}

#[test]
fn a_claim_about_marks_needs_marks() {
    let a = analyze(&golden("drop-5th-packet-twice.pcapng"));
    assert_eq!(
        claims("  - {connection: 1, ce_echoed: true}\n", &a),
        vec![false],
        "vacuous truth is not a pass"
    );
}

/// tshark's `tcp.analysis` (written by nobody here) on the same trace.
#[test]
fn tshark_agrees_on_which_retransmissions_are_fast() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/drop-5th-packet-twice.pcapng");
    let out = match Command::new("tshark")
        .args([
            "-r",
            p.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "tcp.analysis.retransmission",
            "-e",
            "tcp.analysis.fast_retransmission",
        ])
        .output()
    {
        Ok(o) => o,
        Err(_) => {
            eprintln!("SKIPPED: tshark is not installed (make deps installs it)");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut theirs = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() == 3 && (!f[1].is_empty() || !f[2].is_empty()) {
            theirs.push((f[0].parse::<u64>().unwrap(), !f[2].is_empty()));
        }
    }
    let a = analyze(&golden("drop-5th-packet-twice.pcapng"));
    let ours: Vec<(u64, bool)> = a.connections[0]
        .retransmissions
        .iter()
        .map(|r| (r.at.frame, r.recovery == Recovery::Fast))
        .collect();
    assert_eq!(ours, theirs, "(frame, fast) for every retransmission");
}
