//! Classic pcap in every form editcap writes, at any snap length, reads
//! whole. pcap-file 2.0.0 stopped at the first record longer than the
//! file's snap length, so `tcpdump -s 128` captures read as 8 packets and a
//! "damaged file" (issue 19).

mod common;

use common::{capinfos, golden, tool};
use wirelab_trace::{read, read_bytes, Trace};

fn check_against_golden(t: &Trace, g: &Trace, snap: usize, ts_step: u64, what: &str) {
    assert!(t.truncated.is_none(), "{what}: {:?}", t.truncated);
    assert_eq!(t.packets.len(), g.packets.len(), "{what}");
    for (p, q) in t.packets.iter().zip(&g.packets) {
        assert_eq!(p.orig_len, q.orig_len, "{what}: frame {}", p.frame);
        let kept = q.data.len().min(snap);
        assert_eq!(p.data, q.data[..kept], "{what}: frame {}", p.frame);
        assert!(
            p.ts_ns.abs_diff(q.ts_ns) < ts_step,
            "{what}: frame {}",
            p.frame
        );
        assert_eq!(
            p.tcp().is_ok(),
            q.tcp().is_ok(),
            "{what}: frame {}",
            p.frame
        );
    }
}

#[test]
fn every_pcap_form_editcap_writes_reads_every_packet_at_any_snap_length() {
    let g = read(&golden()).unwrap();
    // The golden was captured at the lab's snap length (128): its full-size
    // frames already exceed it, which is the case pcap-file refused.
    assert!(
        g.packets.iter().any(|p| p.orig_len as usize > p.data.len()),
        "the golden has frames longer than its snap length"
    );
    let dir = tempfile::tempdir().unwrap();
    let src = golden();
    for (format, snap, ts_step) in [
        ("pcap", None, 1000),
        ("pcap", Some(96), 1000),
        ("nsecpcap", Some(128), 1),
        ("modpcap", Some(128), 1000),
        ("suse6_3pcap", Some(128), 1000),
        ("rh6_1pcap", Some(128), 1000),
        ("nokiapcap", Some(128), 1000),
        ("rh6_1pcap", None, 1000),
        ("nokiapcap", None, 1000),
    ] {
        let out = dir
            .path()
            .join(format!("{format}-{}.pcap", snap.unwrap_or(0)));
        let mut args = vec!["-F", format];
        let s = snap.map(|s| s.to_string());
        if let Some(s) = &s {
            args.extend(["-s", s]);
        }
        args.extend([src.to_str().unwrap(), out.to_str().unwrap()]);
        tool("editcap", &args);
        let what = format!("editcap -F {format} -s {snap:?}");
        let t = read(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            t.packets.len(),
            capinfos(&out),
            "{what}: capinfos counts the same"
        );
        check_against_golden(&t, &g, snap.unwrap_or(usize::MAX), ts_step, &what);
    }
}

/// A big-endian, nanosecond file whose header says snap length 0 (libpcap
/// writes that for "no limit" on some systems), made by hand.
#[test]
fn big_endian_nanosecond_pcap_with_snap_length_zero_reads() {
    let g = read(&golden()).unwrap();
    let mut b = Vec::new();
    b.extend(0xa1b2_3c4du32.to_be_bytes());
    b.extend(2u16.to_be_bytes());
    b.extend(4u16.to_be_bytes());
    b.extend([0; 8]);
    b.extend(0u32.to_be_bytes()); // snap length 0
    b.extend(1u32.to_be_bytes()); // Ethernet
    for p in &g.packets {
        let kept = p.data.len().min(100);
        b.extend(((p.ts_ns / 1_000_000_000) as u32).to_be_bytes());
        b.extend(((p.ts_ns % 1_000_000_000) as u32).to_be_bytes());
        b.extend((kept as u32).to_be_bytes());
        b.extend(p.orig_len.to_be_bytes());
        b.extend(&p.data[..kept]);
    }
    let t = read_bytes(&b).unwrap();
    check_against_golden(&t, &g, 100, 1, "big-endian ns, snap 0");
    // Cut inside the last record: every record before it, and where it stopped.
    let t = read_bytes(&b[..b.len() - 10]).unwrap();
    assert_eq!(t.packets.len(), g.packets.len() - 1);
    let d = t.truncated.expect("the cut is reported");
    assert!(d.detail.contains("the file ends inside it"), "{}", d.detail);
}

/// The same IP packet behind each link header wirelab reads gives the same
/// TCP view: Ethernet, Linux cooked v1 and v2 (`tcpdump -i any`, libpcap
/// before and since 1.10), BSD loopback, raw IP.
#[test]
fn every_link_type_yields_the_same_tcp_view() {
    use wirelab_trace::{parse, Link};
    let g = read(&golden()).unwrap();
    let mut compared = 0;
    for p in g.packets.iter().filter(|p| p.tcp().is_ok()).take(10) {
        let eth = &p.data;
        let ip = &eth[14..];
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0];
        sll.extend([0x08, 0x00]);
        sll.extend(ip);
        let mut sll2 = vec![0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6];
        sll2.extend([2, 0, 0, 0, 0, 0, 0, 0]);
        sll2.extend(ip);
        let mut null = 2u32.to_le_bytes().to_vec(); // AF_INET, host order
        null.extend(ip);
        let want = parse(Link::Ethernet, eth).unwrap();
        for (link, frame) in [
            (Link::LinuxSll, &sll),
            (Link::LinuxSll2, &sll2),
            (Link::Null, &null),
            (Link::RawIp, &ip.to_vec()),
        ] {
            let got = parse(link, frame).unwrap_or_else(|e| panic!("{link:?}: {e:?}"));
            assert_eq!(
                (
                    got.src,
                    got.dst,
                    got.sport,
                    got.dport,
                    got.seq,
                    got.ack,
                    got.payload_len
                ),
                (
                    want.src,
                    want.dst,
                    want.sport,
                    want.dport,
                    want.seq,
                    want.ack,
                    want.payload_len
                ),
                "{link:?}"
            );
        }
        compared += 1;
    }
    assert_eq!(compared, 10);
    // Link types by number (tcpdump.org/linktypes.html).
    assert_eq!(Link::of(276), Some(Link::LinuxSll2));
    assert_eq!(Link::of(113), Some(Link::LinuxSll));
    assert_eq!(Link::of(0), Some(Link::Null));
    assert_eq!(Link::of(105), None, "802.11 is not read");
    // A header cut short is malformed at its layer.
    assert!(format!("{:?}", parse(Link::LinuxSll2, &sll_short())).contains("linux_sll2"));
}

fn sll_short() -> Vec<u8> {
    vec![0x08, 0x00, 0, 0]
}

/// gzip- and zstd-compressed captures read as the plain file does, known by
/// their magic numbers; a compressed stream cut short keeps the packets
/// before the cut and says where it stopped.
#[test]
fn compressed_captures_read_through() {
    use std::io::Write;
    let plain = std::fs::read(golden()).unwrap();
    let g = read_bytes(&plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&plain[..], 3).unwrap();
    assert!(gz.len() > 1000, "a cut falls inside the stream");
    for (kind, bytes) in [("gzip", &gz), ("zstd", &zst)] {
        let t = read_bytes(bytes).unwrap_or_else(|e| panic!("{kind}: {e:?}"));
        assert!(t.truncated.is_none(), "{kind}");
        assert_eq!(t.packets, g.packets, "{kind}");
        // zstd decodes whole blocks (128 KiB): a small file cut anywhere
        // yields no packet, and says why; gzip yields those before the cut.
        match read_bytes(&bytes[..bytes.len() * 2 / 3]) {
            Ok(cut) => {
                assert!(!cut.packets.is_empty() && cut.packets.len() < g.packets.len());
                let d = cut.truncated.expect("the cut is reported");
                assert!(d.detail.contains(kind), "{kind}: {}", d.detail);
            }
            Err((e, _)) => {
                assert!(
                    kind == "zstd" && e.contains("zstd: the stream ends early"),
                    "{kind}: {e}"
                )
            }
        }
    }
}
