//! What the analyzer tests share.

// Each test file uses part of it.
#![allow(dead_code)]

/// Every golden trace folder under tests/golden/ (scripts/goldens.sh makes
/// all but the first, an older run kept without its run facts).
pub const GOLDENS: [&str; 6] = [
    "drop-5th-packet-twice",
    "fast-retransmit",
    "timeouts-back-off",
    "tail-loss-probe",
    "ecn",
    "incast",
];

/// The analysis options of a golden's run (from its facts.json); Linux
/// defaults for a golden kept without run facts.
pub fn options(name: &str) -> wirelab_analyze::Options {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    wirelab_analyze::results::options(&dir, 200_000_000).unwrap()
}

/// A UDP frame of `len` bytes in all from 198.18.0.`src` (port 40000 +
/// src) to 198.18.0.4:5001: the made traces of the vAQM tests.
pub fn udp_frame(src: u8, len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, src], [2, 0, 0, 0, 0, 4])
        .ipv4([198, 18, 0, src], [198, 18, 0, 4], 64)
        .udp(40000 + u16::from(src), 5001);
    let mut out = Vec::new();
    b.write(&mut out, &vec![0u8; len - 42]).unwrap();
    out
}

/// Packet `i` (from 0) of a made trace: a UDP frame of `len` bytes from
/// 198.18.0.`src` captured at `ts_ns`, with `meta` (its seq and port
/// filled in from `i` and `src`).
pub fn made_packet(
    i: u64,
    src: u8,
    len: usize,
    ts_ns: u64,
    meta: wirelab_trace::Meta,
) -> wirelab_trace::Packet {
    let data = udp_frame(src, len);
    wirelab_trace::Packet {
        frame: i + 1,
        ts_ns,
        orig_len: data.len() as u32,
        data,
        interface: u32::from(src) - 1,
        link: wirelab_trace::Link::Ethernet,
        meta: Some(wirelab_trace::Meta {
            seq: i,
            port: u32::from(src),
            ..meta
        }),
    }
}
