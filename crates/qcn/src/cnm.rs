//! The congestion notification message (IEEE 802.1Qau-2010 §33.4), as the
//! wirelab switch sends it back towards the source of a sampled frame:
//!
//! ```text
//!  0  destination MAC (the sampled frame's source: the reaction point)
//!  6  source MAC (the congestion point)
//! 12  EtherType 0x22E9 (CN-TAG)
//! 14  Version:4 | ReservedV:6 | QntzFb:6
//! 16  CPID (8): the congestion point, here switch MAC + virtual queue
//! 24  cnmQOffset (2, signed, 64-byte units)
//! 26  cnmQDelta (2, signed, 64-byte units)
//! 28  Encapsulated priority (2)
//! 30  Encapsulated destination MAC (6)
//! 36  Encapsulated MSDU length (2): the sampled frame's MSDU length
//! 38  Encapsulated MSDU (up to 64 bytes of it)
//! ```
//!
//! A view over bytes, checked once, plus an owned representation with
//! `parse`/`emit` (smoltcp's wire style); errors name the offset and how
//! many bytes were needed.

use serde::Serialize;

pub const ETHERTYPE: u16 = 0x22E9;
pub const HEADER_LEN: usize = 38;
/// Bytes of the sampled frame's MSDU a CNM carries at most.
pub const MAX_ENCAPSULATED: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("CNM truncated: {need} bytes needed at offset {offset}, {have} in the frame")]
    Truncated {
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("not a CNM: EtherType {found:#06x} at offset 12, expected {ETHERTYPE:#06x}")]
    EtherType { found: u16 },
    #[error("CNM version {0} at offset 14: only version 0 is defined")]
    Version(u8),
}

/// An owned CNM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cnm {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// |Fb| quantised, 0..=63.
    pub quantised_fb: u8,
    pub cpid: u64,
    /// Q − Q_eq and Q − Q_old in 64-byte units, saturated to 16 bits.
    pub q_offset: i16,
    pub q_delta: i16,
    pub encapsulated_priority: u16,
    pub encapsulated_dst: [u8; 6],
    /// Length of the sampled frame's whole MSDU.
    pub encapsulated_len: u16,
    /// Its first bytes (at most 64).
    pub encapsulated: Vec<u8>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl Cnm {
    /// Parses a whole Ethernet frame.
    pub fn parse(frame: &[u8]) -> Result<Cnm, Error> {
        if frame.len() < HEADER_LEN {
            return Err(Error::Truncated {
                offset: 0,
                need: HEADER_LEN,
                have: frame.len(),
            });
        }
        let et = be16(frame, 12);
        if et != ETHERTYPE {
            return Err(Error::EtherType { found: et });
        }
        let version = frame[14] >> 4;
        if version != 0 {
            return Err(Error::Version(version));
        }
        let encapsulated_len = be16(frame, 36);
        let carried = (encapsulated_len as usize).min(MAX_ENCAPSULATED);
        if frame.len() < HEADER_LEN + carried {
            return Err(Error::Truncated {
                offset: HEADER_LEN,
                need: carried,
                have: frame.len() - HEADER_LEN,
            });
        }
        let mac = |at: usize| -> [u8; 6] { frame[at..at + 6].try_into().expect("6 bytes") };
        Ok(Cnm {
            dst: mac(0),
            src: mac(6),
            quantised_fb: frame[15] & 0x3f,
            cpid: u64::from_be_bytes(frame[16..24].try_into().expect("8 bytes")),
            q_offset: be16(frame, 24) as i16,
            q_delta: be16(frame, 26) as i16,
            encapsulated_priority: be16(frame, 28),
            encapsulated_dst: mac(30),
            encapsulated_len,
            encapsulated: frame[HEADER_LEN..HEADER_LEN + carried].to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.encapsulated.len().min(MAX_ENCAPSULATED)
    }

    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.buffer_len());
        b.extend_from_slice(&self.dst);
        b.extend_from_slice(&self.src);
        b.extend_from_slice(&ETHERTYPE.to_be_bytes());
        b.push(0); // version 0, ReservedV high bits 0
        b.push(self.quantised_fb & 0x3f);
        b.extend_from_slice(&self.cpid.to_be_bytes());
        b.extend_from_slice(&self.q_offset.to_be_bytes());
        b.extend_from_slice(&self.q_delta.to_be_bytes());
        b.extend_from_slice(&self.encapsulated_priority.to_be_bytes());
        b.extend_from_slice(&self.encapsulated_dst);
        b.extend_from_slice(&self.encapsulated_len.to_be_bytes());
        b.extend_from_slice(&self.encapsulated[..self.encapsulated.len().min(MAX_ENCAPSULATED)]);
        b
    }

    /// The sampled frame's IPv4 source and destination, when its MSDU was
    /// IPv4 and long enough: which flow the feedback is about.
    pub fn encapsulated_ipv4(&self) -> Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)> {
        let e = &self.encapsulated;
        if e.len() < 20 || e[0] >> 4 != 4 {
            return None;
        }
        let a = |at: usize| std::net::Ipv4Addr::new(e[at], e[at + 1], e[at + 2], e[at + 3]);
        Some((a(12), a(16)))
    }
}

/// 64-byte units rounded down, saturated to i16 (the CNM's cnmQOffset /
/// cnmQDelta; the switch shifts, as BPF has no signed division before v4).
pub fn units64(bytes: i64) -> i16 {
    (bytes >> 6).clamp(i16::MIN as i64, i16::MAX as i64) as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CNM with |Fb| 12 for a UDP frame from 198.18.0.1 to 198.18.0.3.
    #[rustfmt::skip]
    static FRAME: [u8; 38 + 28] = [
        0x02, 0, 0, 0, 0, 0x01,                 // to the reaction point
        0x02, 0x77, 0x6c, 0, 0, 0x03,           // from the congestion point
        0x22, 0xe9,                             // CN-TAG
        0x00, 0x0c,                             // version 0, QntzFb 12
        0x02, 0x77, 0x6c, 0, 0, 0x03, 0, 0x01,  // CPID: CP MAC, queue 1
        0x00, 0x9c,                             // Q_off 10000 B = 156 × 64
        0x00, 0x4e,                             // Q_δ 5000 B = 78 × 64
        0x00, 0x00,                             // priority 0
        0x02, 0, 0, 0, 0, 0x03,                 // the sampled frame's DA
        0x00, 0x1c,                             // its MSDU: 28 bytes
        0x45, 0x00, 0x00, 0x1c, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0,
        198, 18, 0, 1, 198, 18, 0, 3,
        0x9c, 0x40, 0x23, 0x28, 0x00, 0x08, 0, 0,
    ];

    fn repr() -> Cnm {
        Cnm {
            dst: [2, 0, 0, 0, 0, 1],
            src: [2, 0x77, 0x6c, 0, 0, 3],
            quantised_fb: 12,
            cpid: 0x0277_6c00_0003_0001,
            q_offset: units64(10_000),
            q_delta: units64(5_000),
            encapsulated_priority: 0,
            encapsulated_dst: [2, 0, 0, 0, 0, 3],
            encapsulated_len: 28,
            encapsulated: FRAME[38..].to_vec(),
        }
    }

    #[test]
    fn parse_reads_every_field() {
        let c = Cnm::parse(&FRAME).unwrap();
        assert_eq!(c, repr());
        assert_eq!(
            c.encapsulated_ipv4(),
            Some(("198.18.0.1".parse().unwrap(), "198.18.0.3".parse().unwrap()))
        );
    }

    #[test]
    fn emit_writes_the_same_bytes() {
        assert_eq!(repr().emit(), FRAME.to_vec());
        assert_eq!(repr().buffer_len(), FRAME.len());
    }

    #[test]
    fn errors_name_offsets() {
        assert_eq!(
            Cnm::parse(&FRAME[..20]),
            Err(Error::Truncated {
                offset: 0,
                need: 38,
                have: 20
            })
        );
        assert_eq!(
            Cnm::parse(&FRAME[..50]),
            Err(Error::Truncated {
                offset: 38,
                need: 28,
                have: 12
            })
        );
        let mut other = FRAME;
        other[12] = 0x08;
        other[13] = 0x00;
        assert_eq!(Cnm::parse(&other), Err(Error::EtherType { found: 0x0800 }));
        let mut v1 = FRAME;
        v1[14] = 0x10;
        assert_eq!(Cnm::parse(&v1), Err(Error::Version(1)));
    }

    #[test]
    fn units_saturate() {
        assert_eq!(units64(64 * 40_000), i16::MAX);
        assert_eq!(units64(-64 * 40_000), i16::MIN);
        assert_eq!(units64(-640), -10);
        assert_eq!(units64(-1), -1);
    }
}
