//! What the analyzer tests share.

// Each test file uses part of it.
#![allow(dead_code)]

pub mod tshark;

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

/// Makes a TCP connection packet by packet (198.18.0.1:40000 to
/// 198.18.0.2:5001), each 10 us after the one before unless `wait` says
/// otherwise: traces with exactly the timing and SACK blocks a test needs.
pub struct TcpGen {
    pub t: wirelab_trace::Trace,
    pub ts: u64,
    /// The window the next packets advertise (unscaled).
    pub window: u16,
}

impl TcpGen {
    pub fn new() -> TcpGen {
        TcpGen {
            t: wirelab_trace::Trace::default(),
            ts: 1_000_000_000,
            window: 65535,
        }
    }

    /// The three-way handshake (client ISN `isn`, server ISN `sisn`).
    pub fn handshake(&mut self, isn: u32, sisn: u32) {
        self.push(true, isn, 0, 0, true);
        self.push(false, sisn, isn + 1, 0, true);
        self.push(true, isn + 1, sisn + 1, 0, false);
    }

    /// The loss-recovery analyzer's report on the connection, with Linux's
    /// defaults.
    pub fn loss_recovery(&self) -> wirelab_analyze::report::Report {
        wirelab_analyze::report::build(
            "made",
            &self.t,
            wirelab_analyze::Options::default(),
            None,
            &["loss-recovery"],
            &[],
            &|_| {},
        )
    }

    /// The next packet carries the last one's timestamp (a capture's
    /// microsecond resolution makes such ties).
    pub fn same_instant(&mut self) {
        self.ts -= 10_000;
    }

    /// Time passes.
    pub fn wait(&mut self, ns: u64) {
        self.ts += ns;
    }

    pub fn push(&mut self, from_client: bool, seq: u32, ack: u32, len: u32, syn: bool) {
        self.push_sacked(from_client, seq, ack, len, syn, &[]);
    }

    /// A data packet of `len` payload bytes captured with its headers only
    /// (as with a small snap length): long connections in little memory.
    pub fn push_snapped(&mut self, from_client: bool, seq: u32, ack: u32, len: u32) {
        self.push(from_client, seq, ack, 0, false);
        let p = self.t.packets.last_mut().expect("just pushed");
        let total = 40 + len as usize;
        p.data[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        p.data[24..26].fill(0);
        let (ip, _) = etherparse::Ipv4Header::from_slice(&p.data[14..]).unwrap();
        p.data[24..26].copy_from_slice(&ip.calc_header_checksum().to_be_bytes());
        p.orig_len = (14 + total) as u32;
    }

    /// A packet with SACK blocks (at most 4; RFC 2018).
    pub fn push_sacked(
        &mut self,
        from_client: bool,
        seq: u32,
        ack: u32,
        len: u32,
        syn: bool,
        sacks: &[(u32, u32)],
    ) {
        let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        let b0 = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b1 = if from_client {
            b0.ipv4(a, b, 64).tcp(40000, 5001, seq, self.window)
        } else {
            b0.ipv4(b, a, 64).tcp(5001, 40000, seq, self.window)
        };
        let b2 = if syn { b1.syn() } else { b1 };
        let b3 = if syn && from_client { b2 } else { b2.ack(ack) };
        let b4 = match sacks {
            [] => b3,
            [first, rest @ ..] => {
                let mut more = [None; 3];
                for (m, s) in more.iter_mut().zip(rest) {
                    *m = Some(*s);
                }
                b3.options(&[etherparse::TcpOptionElement::SelectiveAcknowledgement(
                    *first, more,
                )])
                .expect("SACK blocks fit")
            }
        };
        let mut data = Vec::new();
        b4.write(&mut data, &vec![0u8; len as usize]).unwrap();
        self.ts += 10_000;
        self.t.packets.push(wirelab_trace::Packet {
            frame: self.t.packets.len() as u64 + 1,
            ts_ns: self.ts,
            orig_len: data.len() as u32,
            data,
            interface: 0,
            link: wirelab_trace::Link::Ethernet,
            meta: None,
        });
    }
}
