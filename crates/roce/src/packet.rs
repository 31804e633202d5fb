//! RoCEv2 packets: the InfiniBand transport headers carried in UDP to port
//! 4791 (IBTA Annex A17 "RoCEv2"), and the invariant CRC.
//!
//! Headers follow IBTA Vol. 1 §9.2 (BTH), §9.3.2 (RETH), §9.3.5 (AETH) and
//! §9.3.3 (ImmDt). Which headers an opcode carries is Table 38 (§9.2.3 "Valid
//! packet opcodes for RC"). A CNP is Annex A17.9.3: a BTH with opcode
//! 0x81 and 16 reserved bytes.

use std::net::Ipv4Addr;

/// The UDP destination port of every RoCEv2 packet (Annex A17.3).
pub const ROCEV2_PORT: u16 = 4791;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const IMM_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;
/// The default P_Key (IBTA §10.9.1.1): full membership of the default partition.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// RC opcodes, IBTA Table 38 (transport type 000 = RC), and the RoCEv2 CNP.
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    /// Annex A17.9.3: "CNP ... BTH.OpCode = 10000001b".
    pub const CNP: u8 = 0x81;
}

/// What an opcode is, for the transport and for the analyzers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request packet that carries message data (send/write).
    Data,
    ReadRequest,
    ReadResponse,
    Ack,
    Cnp,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

pub fn kind(opcode: u8) -> Kind {
    match opcode {
        0x00..=0x0b => Kind::Data,
        op::READ_REQUEST => Kind::ReadRequest,
        0x0d..=0x10 => Kind::ReadResponse,
        op::ACKNOWLEDGE => Kind::Ack,
        op::CNP => Kind::Cnp,
        _ => Kind::Other,
    }
}

pub fn position(opcode: u8) -> Position {
    match opcode {
        op::SEND_FIRST | op::WRITE_FIRST | op::READ_RESPONSE_FIRST => Position::First,
        op::SEND_MIDDLE | op::WRITE_MIDDLE | op::READ_RESPONSE_MIDDLE => Position::Middle,
        op::SEND_LAST
        | op::SEND_LAST_IMM
        | op::WRITE_LAST
        | op::WRITE_LAST_IMM
        | op::READ_RESPONSE_LAST => Position::Last,
        _ => Position::Only,
    }
}

pub fn opcode_name(opcode: u8) -> &'static str {
    match opcode {
        op::SEND_FIRST => "SEND_FIRST",
        op::SEND_MIDDLE => "SEND_MIDDLE",
        op::SEND_LAST => "SEND_LAST",
        op::SEND_LAST_IMM => "SEND_LAST_IMM",
        op::SEND_ONLY => "SEND_ONLY",
        op::SEND_ONLY_IMM => "SEND_ONLY_IMM",
        op::WRITE_FIRST => "WRITE_FIRST",
        op::WRITE_MIDDLE => "WRITE_MIDDLE",
        op::WRITE_LAST => "WRITE_LAST",
        op::WRITE_LAST_IMM => "WRITE_LAST_IMM",
        op::WRITE_ONLY => "WRITE_ONLY",
        op::WRITE_ONLY_IMM => "WRITE_ONLY_IMM",
        op::READ_REQUEST => "READ_REQUEST",
        op::READ_RESPONSE_FIRST => "READ_RESPONSE_FIRST",
        op::READ_RESPONSE_MIDDLE => "READ_RESPONSE_MIDDLE",
        op::READ_RESPONSE_LAST => "READ_RESPONSE_LAST",
        op::READ_RESPONSE_ONLY => "READ_RESPONSE_ONLY",
        op::ACKNOWLEDGE => "ACK",
        op::CNP => "CNP",
        _ => "UNKNOWN",
    }
}

fn has_reth(opcode: u8) -> bool {
    matches!(
        opcode,
        op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM | op::READ_REQUEST
    )
}

fn has_imm(opcode: u8) -> bool {
    matches!(
        opcode,
        op::SEND_LAST_IMM | op::SEND_ONLY_IMM | op::WRITE_LAST_IMM | op::WRITE_ONLY_IMM
    )
}

fn has_aeth(opcode: u8) -> bool {
    matches!(
        opcode,
        op::READ_RESPONSE_FIRST | op::READ_RESPONSE_LAST | op::READ_RESPONSE_ONLY | op::ACKNOWLEDGE
    )
}

/// Base Transport Header, IBTA §9.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    /// MigReq (§9.2.4): "set to one ... in the Migrated state" — the initial
    /// state of an RC QP's path migration state machine (§17.2.8).
    pub migreq: bool,
    /// Pad count: bytes added to the payload to reach a multiple of 4.
    pub pad: u8,
    pub tver: u8,
    pub pkey: u16,
    /// Annex A17.9.1: RoCEv2 keeps the FECN/BECN bits unused (ECN is in IP).
    pub fecn: bool,
    pub becn: bool,
    pub dqpn: u32,
    /// AckReq (§9.2.6): the requester asks for an acknowledgement.
    pub ack_req: bool,
    pub psn: u32,
}

impl Bth {
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.opcode);
        out.push(
            (self.se as u8) << 7
                | (self.migreq as u8) << 6
                | (self.pad & 3) << 4
                | (self.tver & 0xf),
        );
        out.extend_from_slice(&self.pkey.to_be_bytes());
        out.push((self.fecn as u8) << 7 | (self.becn as u8) << 6);
        out.extend_from_slice(&(self.dqpn & 0xff_ffff).to_be_bytes()[1..]);
        out.push((self.ack_req as u8) << 7);
        out.extend_from_slice(&(self.psn & 0xff_ffff).to_be_bytes()[1..]);
    }

    pub fn parse(b: &[u8]) -> Option<Bth> {
        if b.len() < BTH_LEN {
            return None;
        }
        Some(Bth {
            opcode: b[0],
            se: b[1] & 0x80 != 0,
            migreq: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            tver: b[1] & 0xf,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dqpn: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        })
    }
}

/// RDMA Extended Transport Header, IBTA §9.3.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// AETH syndrome, IBTA §9.3.5 Table 43/44: bits 6..5 select ACK (00),
/// RNR NAK (01) or NAK (11); bits 4..0 are the credit count, the RNR timer
/// or the NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    Ack { credits: u8 },
    RnrNak { timer: u8 },
    Nak(NakCode),
    Reserved(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    /// PSN sequence error (Table 44, code 0).
    SequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    Other(u8),
}

impl Syndrome {
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => {
                0x60 | match code {
                    NakCode::SequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::Other(c) => c & 0x1f,
                }
            }
            Syndrome::Reserved(b) => b,
        }
    }

    pub fn from_byte(b: u8) -> Syndrome {
        match (b >> 5) & 3 {
            0 => Syndrome::Ack { credits: b & 0x1f },
            1 => Syndrome::RnrNak { timer: b & 0x1f },
            3 => Syndrome::Nak(match b & 0x1f {
                0 => NakCode::SequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                c => NakCode::Other(c),
            }),
            _ => Syndrome::Reserved(b),
        }
    }
}

/// The RNR NAK timer field in ns (IBTA Table 45, "Encoding for RNR NAK Timer
/// Field"): 0 means 655.36 ms, 1 is 0.01 ms, and the steps grow to 491.52 ms.
pub fn rnr_timer_ns(code: u8) -> u64 {
    const US_X100: [u64; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    US_X100[(code & 0x1f) as usize] * 10_000
}

/// A parsed RoCEv2 UDP payload (BTH up to, not including, the ICRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<'a> {
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<(Syndrome, u32)>,
    pub imm: Option<u32>,
    /// Message payload without pad bytes.
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("{0} bytes is shorter than a BTH and ICRC")]
    Short(usize),
    #[error("opcode {opcode:#04x} needs {need} header bytes after the BTH, {have} present")]
    Headers {
        opcode: u8,
        need: usize,
        have: usize,
    },
    #[error("pad count {pad} is larger than the {len}-byte payload")]
    Pad { pad: u8, len: usize },
}

impl<'a> Packet<'a> {
    /// Parses a UDP payload: BTH, extension headers, payload, ICRC (not
    /// checked here: see [`icrc_ipv4`]).
    pub fn parse(udp_payload: &'a [u8]) -> Result<Packet<'a>, ParseError> {
        let n = udp_payload.len();
        if n < BTH_LEN + ICRC_LEN {
            return Err(ParseError::Short(n));
        }
        let bth = Bth::parse(udp_payload).expect("length checked");
        let body = &udp_payload[BTH_LEN..n - ICRC_LEN];
        let op = bth.opcode;
        let need = if op == op::CNP {
            16
        } else {
            has_reth(op) as usize * RETH_LEN
                + has_aeth(op) as usize * AETH_LEN
                + has_imm(op) as usize * IMM_LEN
        };
        if body.len() < need {
            return Err(ParseError::Headers {
                opcode: op,
                need,
                have: body.len(),
            });
        }
        let mut at = 0;
        let mut reth = None;
        let mut aeth = None;
        let mut imm = None;
        if op != op::CNP {
            if has_reth(op) {
                let r = &body[..RETH_LEN];
                reth = Some(Reth {
                    va: u64::from_be_bytes(r[0..8].try_into().unwrap()),
                    rkey: u32::from_be_bytes(r[8..12].try_into().unwrap()),
                    len: u32::from_be_bytes(r[12..16].try_into().unwrap()),
                });
                at += RETH_LEN;
            }
            if has_aeth(op) {
                let a = &body[at..at + AETH_LEN];
                aeth = Some((
                    Syndrome::from_byte(a[0]),
                    u32::from_be_bytes([0, a[1], a[2], a[3]]),
                ));
                at += AETH_LEN;
            }
            if has_imm(op) {
                imm = Some(u32::from_be_bytes(body[at..at + 4].try_into().unwrap()));
                at += IMM_LEN;
            }
        } else {
            at = 16;
        }
        let data = &body[at..];
        let pad = bth.pad as usize;
        if pad > data.len() {
            return Err(ParseError::Pad {
                pad: bth.pad,
                len: data.len(),
            });
        }
        Ok(Packet {
            bth,
            reth,
            aeth,
            imm,
            payload: &data[..data.len() - pad],
        })
    }
}

/// Builds a UDP payload (BTH .. payload, pad, and room for the ICRC, zeroed;
/// [`seal_ipv4`] fills it in once the addresses are known).
pub fn build(
    bth: Bth,
    reth: Option<Reth>,
    aeth: Option<(Syndrome, u32)>,
    payload_len: usize,
    fill: impl Fn(usize) -> u8,
) -> Vec<u8> {
    let pad = (4 - payload_len % 4) % 4;
    let mut out = Vec::with_capacity(BTH_LEN + RETH_LEN + AETH_LEN + payload_len + pad + ICRC_LEN);
    let mut bth = bth;
    bth.pad = pad as u8;
    bth.write(&mut out);
    if bth.opcode == op::CNP {
        out.extend_from_slice(&[0u8; 16]);
    }
    if let Some(r) = reth {
        out.extend_from_slice(&r.va.to_be_bytes());
        out.extend_from_slice(&r.rkey.to_be_bytes());
        out.extend_from_slice(&r.len.to_be_bytes());
    }
    if let Some((s, msn)) = aeth {
        out.push(s.to_byte());
        out.extend_from_slice(&(msn & 0xff_ffff).to_be_bytes()[1..]);
    }
    out.extend((0..payload_len).map(fill));
    out.extend(std::iter::repeat_n(0u8, pad + ICRC_LEN));
    out
}

/// The IPv4 and UDP header fields the ICRC covers (Annex A17.8: TOS, TTL,
/// the IP header checksum and the UDP checksum are masked, so only these
/// matter). wirelab writes the headers itself (`header`) and sends them from
/// a raw socket with DF set and IP ID 0, which Linux keeps for a DF packet
/// sent without a connected socket (ip_select_ident_segs), so the receiver
/// and any analyzer can recompute the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Udp {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub ip_id: u16,
    /// The 16 bits holding the flags and fragment offset (DF = 0x4000).
    pub frag: u16,
}

impl Ipv4Udp {
    pub fn lab(src: Ipv4Addr, dst: Ipv4Addr, sport: u16) -> Ipv4Udp {
        Ipv4Udp {
            src,
            dst,
            sport,
            dport: ROCEV2_PORT,
            ip_id: 0,
            frag: 0x4000,
        }
    }

    /// The IPv4 (no options, TTL 64) and UDP headers of a packet carrying
    /// `roce_len` bytes of RoCE, with a valid IP header checksum and no UDP
    /// checksum (RoCEv2 may leave it 0, Annex A17.3). Built with etherparse.
    pub fn header(&self, ecn: u8, roce_len: usize) -> Vec<u8> {
        use etherparse::{IpEcn, IpNumber, Ipv4Header, UdpHeader};
        let mut ip = Ipv4Header::new(
            (8 + roce_len) as u16,
            64,
            IpNumber::UDP,
            self.src.octets(),
            self.dst.octets(),
        )
        .expect("a RoCE packet fits in an IPv4 packet");
        ip.ecn = IpEcn::try_new(ecn & 3).expect("two bits");
        ip.identification = self.ip_id;
        ip.dont_fragment = self.frag & 0x4000 != 0;
        ip.header_checksum = ip.calc_header_checksum();
        let udp = UdpHeader::without_ipv4_checksum(self.sport, self.dport, roce_len)
            .expect("a RoCE packet fits in a UDP datagram");
        let mut out = ip.to_bytes().to_vec();
        out.extend_from_slice(&udp.to_bytes());
        out
    }
}

/// The invariant CRC of a RoCEv2 packet over IPv4 (IBTA Annex A17.8,
/// "ICRC for RoCEv2"): CRC-32 (the Ethernet polynomial) over 8 bytes of
/// ones standing in for the LRH, then the IPv4 header with TOS, TTL and
/// checksum set to ones, the UDP header with its checksum set to ones, and
/// the BTH with its 8-bit Resv8a field (FECN, BECN, reserved) set to ones,
/// followed by the rest of the packet up to the ICRC. It is sent least
/// significant byte first, like the Ethernet FCS.
pub fn icrc_ipv4(h: &Ipv4Udp, roce: &[u8]) -> u32 {
    let udp_len = (8 + roce.len()) as u16;
    let mut pseudo = [0u8; 8 + 20 + 8];
    pseudo[..8].fill(0xff);
    let ip = &mut pseudo[8..28];
    ip[0] = 0x45;
    ip[1] = 0xff; // TOS masked
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    ip[4..6].copy_from_slice(&h.ip_id.to_be_bytes());
    ip[6..8].copy_from_slice(&h.frag.to_be_bytes());
    ip[8] = 0xff; // TTL masked
    ip[9] = 17;
    ip[10] = 0xff; // header checksum masked
    ip[11] = 0xff;
    ip[12..16].copy_from_slice(&h.src.octets());
    ip[16..20].copy_from_slice(&h.dst.octets());
    let udp = &mut pseudo[28..36];
    udp[0..2].copy_from_slice(&h.sport.to_be_bytes());
    udp[2..4].copy_from_slice(&h.dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6] = 0xff; // UDP checksum masked
    udp[7] = 0xff;
    let covered = &roce[..roce.len().saturating_sub(ICRC_LEN)];
    let mut crc = crc32fast::Hasher::new();
    crc.update(&pseudo);
    if covered.len() >= BTH_LEN {
        crc.update(&covered[..4]);
        crc.update(&[0xff]); // BTH Resv8a masked
        crc.update(&covered[5..]);
    } else {
        crc.update(covered);
    }
    crc.finalize()
}

/// What flipping MigReq (BTH byte 1, bit 0x40) changes in the ICRC of a
/// packet with `k` covered bytes after that byte. CRC-32 is linear over
/// messages of one length, crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0), so the
/// change depends only on the flipped bit's distance from the end: the
/// switch's `edit` patches the ICRC with this instead of recomputing it.
pub fn migreq_icrc_delta(k: usize) -> u32 {
    let mut d = vec![0u8; k + 1];
    let zero = crc32fast::hash(&d);
    d[0] = 0x40;
    crc32fast::hash(&d) ^ zero
}

/// Writes the ICRC into the last four bytes of a built packet.
pub fn seal_ipv4(h: &Ipv4Udp, roce: &mut [u8]) {
    let c = icrc_ipv4(h, roce);
    let n = roce.len();
    roce[n - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
}

/// True when the packet's ICRC matches its contents.
pub fn icrc_ok_ipv4(h: &Ipv4Udp, roce: &[u8]) -> bool {
    if roce.len() < BTH_LEN + ICRC_LEN {
        return false;
    }
    let n = roce.len();
    let got = u32::from_le_bytes(roce[n - ICRC_LEN..].try_into().unwrap());
    got == icrc_ipv4(h, roce)
}

/// Reads the ICRC-relevant fields from a raw IPv4 packet carrying UDP, and
/// returns them with the UDP payload. Used by the analyzers on captures.
pub fn split_ipv4_udp(ip: &[u8]) -> Option<(Ipv4Udp, &[u8])> {
    if ip.len() < 28 || ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let ihl = (ip[0] & 0xf) as usize * 4;
    let tot = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if ihl != 20 || tot > ip.len() || tot < ihl + 8 {
        return None;
    }
    let udp = &ip[ihl..tot];
    let h = Ipv4Udp {
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        sport: u16::from_be_bytes([udp[0], udp[1]]),
        dport: u16::from_be_bytes([udp[2], udp[3]]),
        ip_id: u16::from_be_bytes([ip[4], ip[5]]),
        frag: u16::from_be_bytes([ip[6], ip[7]]),
    };
    Some((h, &udp[8..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTH as wirelab's QPs send it: MigReq 1, default P_Key, no flags.
    fn bth(opcode: u8, dqpn: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            se: false,
            migreq: true,
            pad: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dqpn,
            ack_req: false,
            psn,
        }
    }

    fn lab_header() -> Ipv4Udp {
        Ipv4Udp::lab(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            49152,
        )
    }

    #[test]
    fn bth_round_trips_every_field() {
        let b = Bth {
            opcode: op::WRITE_MIDDLE,
            se: true,
            migreq: true,
            pad: 2,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dqpn: 0xabcdef,
            ack_req: true,
            psn: 0xff_fffe,
        };
        let mut v = Vec::new();
        b.write(&mut v);
        assert_eq!(
            v,
            [0x07, 0xe0, 0xff, 0xff, 0x40, 0xab, 0xcd, 0xef, 0x80, 0xff, 0xff, 0xfe]
        );
        assert_eq!(Bth::parse(&v), Some(b));
    }

    #[test]
    fn syndromes_follow_table_44() {
        assert_eq!(Syndrome::Nak(NakCode::SequenceError).to_byte(), 0x60);
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::SequenceError)
        );
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(rnr_timer_ns(13), 960_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }

    #[test]
    fn every_opcode_parses_back_with_its_headers() {
        let h = lab_header();
        for opc in [
            op::SEND_FIRST,
            op::SEND_MIDDLE,
            op::SEND_LAST,
            op::SEND_ONLY,
            op::WRITE_FIRST,
            op::WRITE_MIDDLE,
            op::WRITE_LAST,
            op::WRITE_ONLY,
            op::READ_REQUEST,
            op::READ_RESPONSE_FIRST,
            op::READ_RESPONSE_MIDDLE,
            op::READ_RESPONSE_LAST,
            op::READ_RESPONSE_ONLY,
            op::ACKNOWLEDGE,
            op::CNP,
        ] {
            let bth = bth(opc, 0x12, 7);
            let reth = has_reth(opc).then_some(Reth {
                va: 0x1000,
                rkey: 0x55,
                len: 3000,
            });
            let aeth = has_aeth(opc).then_some((Syndrome::Ack { credits: 31 }, 9));
            let payload = match kind(opc) {
                Kind::Data | Kind::ReadResponse => 1023,
                _ => 0,
            };
            let mut p = build(bth, reth, aeth, payload, |i| i as u8);
            seal_ipv4(&h, &mut p);
            assert!(icrc_ok_ipv4(&h, &p), "{}", opcode_name(opc));
            let parsed = Packet::parse(&p).unwrap();
            assert_eq!(parsed.bth.opcode, opc);
            assert_eq!(parsed.reth, reth);
            assert_eq!(parsed.aeth, aeth);
            assert_eq!(parsed.payload.len(), payload);
            assert_eq!(parsed.bth.pad as usize, (4 - payload % 4) % 4);
        }
    }

    #[test]
    fn flipping_migreq_changes_the_icrc_by_the_delta_for_its_distance() {
        let h = lab_header();
        for (opcode, reth, len) in [
            (op::SEND_ONLY, false, 0),
            (op::WRITE_FIRST, true, 1024),
            (op::WRITE_MIDDLE, false, 4096),
            (op::SEND_LAST, false, 37),
        ] {
            let bth = Bth {
                migreq: false,
                ack_req: true,
                ..bth(opcode, 3, 7)
            };
            let reth = reth.then_some(Reth {
                va: 0x1000,
                rkey: 9,
                len: 4096,
            });
            let mut p = build(bth, reth, None, len, |i| i as u8);
            seal_ipv4(&h, &mut p);
            let n = p.len();
            let icrc = u32::from_le_bytes(p[n - 4..].try_into().unwrap());
            let k = n - ICRC_LEN - 2;
            p[1] |= 0x40;
            assert!(!icrc_ok_ipv4(&h, &p));
            let patched = icrc ^ migreq_icrc_delta(k);
            p[n - 4..].copy_from_slice(&patched.to_le_bytes());
            assert!(icrc_ok_ipv4(&h, &p), "opcode {opcode:#x}, {len} bytes");
        }
    }

    #[test]
    fn icrc_masks_only_the_variant_fields() {
        let h = lab_header();
        let bth = Bth {
            ack_req: true,
            ..bth(op::SEND_ONLY, 3, 1)
        };
        let mut p = build(bth, None, None, 64, |_| 0xa5);
        seal_ipv4(&h, &mut p);
        // FECN/BECN (Resv8a) may change in flight without breaking the ICRC.
        let mut q = p.clone();
        q[4] ^= 0xc0;
        assert!(icrc_ok_ipv4(&h, &q));
        // A payload bit or MigReq may not.
        let mut q = p.clone();
        q[20] ^= 1;
        assert!(!icrc_ok_ipv4(&h, &q));
        let mut q = p.clone();
        q[1] ^= 0x40;
        assert!(!icrc_ok_ipv4(&h, &q));
        // Nor may the addresses.
        let other = Ipv4Udp {
            src: Ipv4Addr::new(10, 0, 0, 3),
            ..h
        };
        assert!(!icrc_ok_ipv4(&other, &p));
    }

    #[test]
    fn short_or_inconsistent_packets_are_rejected() {
        assert_eq!(Packet::parse(&[0; 10]), Err(ParseError::Short(10)));
        let mut v = Vec::new();
        Bth {
            pkey: 0,
            ..bth(op::READ_REQUEST, 1, 0)
        }
        .write(&mut v);
        v.extend_from_slice(&[0; 8]);
        assert!(matches!(
            Packet::parse(&v),
            Err(ParseError::Headers { need: 16, .. })
        ));
    }
}
