//! Cross-check against a tool nobody here wrote: on every golden trace,
//! wirelab's per-packet classification (retransmission, fast retransmission,
//! duplicate ACK) against tshark's `tcp.analysis.*` flags. They must agree on
//! at least 99% of packets, and every difference must be one of the
//! systematic differences explained in `common/tshark.rs`.

use std::path::Path;

mod common;

use common::tshark::{compare, Agreement};

#[test]
fn tshark_agrees_on_99_percent_of_packets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut a = Agreement::default();
    for g in common::GOLDENS {
        let path = root.join(g).join("trace.pcapng");
        if compare(&path, common::options(g), &mut a).is_none() {
            eprintln!("SKIPPED: tshark is not installed (make deps installs it)");
            return;
        }
    }
    eprintln!("tshark agreement: {a}");
    assert!(
        a.total > 1000,
        "enough packets to mean something: {}",
        a.total
    );
    assert!(a.share() >= 0.99, "{}/{}", a.agree, a.total);
}

/// ACKs captured out of order at the sender (a receiver's ACKs leave from
/// two CPUs; a CI run met this): the ACK of everything is captured before
/// two older ACKs that repeat each other. tshark calls the second of those
/// a duplicate ACK; RFC 5681 §2 (a) does not, since no data was
/// outstanding once everything was acknowledged. The comparison must judge
/// "outstanding" by the highest ACK seen, as the RFC does, not by the
/// repeated ACK's own number.
#[test]
fn a_repeated_old_ack_after_everything_was_acknowledged_is_explained() {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let mut g = common::TcpGen::new();
    g.handshake(1000, 5000);
    g.push(true, 1001, 5001, 1000, false);
    g.push(true, 2001, 5001, 1000, false);
    g.push(false, 5001, 2001, 0, false);
    g.push(false, 5001, 3001, 0, false);
    g.push(false, 5001, 2001, 0, false);
    g.push(false, 5001, 2001, 0, false);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reordered-acks.pcap");
    let hdr = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), hdr).unwrap();
    for p in &g.t.packets {
        let ts = std::time::Duration::from_nanos(p.ts_ns);
        w.write_packet(&PcapPacket::new(ts, p.data.len() as u32, &p.data))
            .unwrap();
    }
    drop(w);
    let Some(theirs) = common::tshark::flags(&path) else {
        eprintln!("SKIPPED: tshark is not installed (make deps installs it)");
        return;
    };
    assert_eq!(
        theirs[&9].0,
        (false, false, true),
        "tshark calls the last ACK a duplicate: {theirs:?}"
    );
    let mut a = Agreement::default();
    compare(&path, wirelab_analyze::Options::default(), &mut a).unwrap();
    assert_eq!(a.total, 9, "{a}");
    assert_eq!(
        a.why
            .get("a repeated ACK with no data outstanding (RFC 5681 §2 (a))"),
        Some(&1),
        "{a}"
    );
}
