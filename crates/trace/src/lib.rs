//! Traces: pcap or pcapng files read into packets in capture order, with
//! wirelab's per-packet metadata when present (an EPB comment, so Wireshark
//! shows it as `frame.comment` and the headers stay untouched), and TCP views
//! parsed with etherparse (lax: snapped packets still yield their headers).

pub mod meta;
mod stream;

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;

pub use meta::{Action, Aqm, Meta};
pub use stream::{Fail, PacketRef, Reader, MAX_RECORD};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open trace {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a pcap or pcapng file ({detail})")]
    Format { path: String, detail: String },
    #[error("{path}: at byte {offset}: {detail}")]
    Block {
        path: String,
        offset: u64,
        detail: String,
    },
}

/// One captured packet.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet {
    /// 1-based position in the file (Wireshark's frame number).
    pub frame: u64,
    /// Capture timestamp, ns since the epoch.
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: Vec<u8>,
    pub interface: u32,
    pub link: Link,
    pub meta: Option<Meta>,
}

/// Parsed TCP headers of a packet (what the analyzers need), IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tcp {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub has_ack: bool,
    pub ece: bool,
    pub cwr: bool,
    /// Advertised window, unscaled (RFC 5681 §2 compares it for duplicate ACKs).
    pub window: u16,
    /// IP ECN field: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// Payload length from the IP header (not limited by the snap length).
    pub payload_len: u32,
    /// Offset of the TCP header in the captured frame.
    pub tcp_offset: u16,
    /// SACK blocks (RFC 2018), as (left, right) edges.
    pub sack: [(u32, u32); 4],
    pub sack_count: u8,
    /// The MSS option (RFC 9293 §3.7.1), on a SYN or SYN-ACK.
    pub mss: Option<u16>,
    /// The window scale option's shift (RFC 7323 §2), on a SYN or SYN-ACK.
    pub wscale: Option<u8>,
    /// The IPv4 Identification field (IPv6 has none). Linux numbers a
    /// connected socket's packets consecutively (`ip_select_ident_segs`),
    /// so it gives the order a sender sent them in.
    pub ip_id: Option<u16>,
}

impl Tcp {
    /// The SACK blocks present.
    pub fn sacks(&self) -> &[(u32, u32)] {
        &self.sack[..self.sack_count as usize]
    }
}

/// How a capture's frames start (pcap LINKTYPE_*, tcpdump.org/linktypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Ethernet, with or without 802.1Q/QinQ tags.
    Ethernet,
    /// Bare IPv4/IPv6 (LINKTYPE_RAW, _IPV4, _IPV6).
    RawIp,
    /// Linux cooked capture v1 (`tcpdump -i any` before libpcap 1.10).
    LinuxSll,
    /// Linux cooked capture v2 (`tcpdump -i any` since libpcap 1.10).
    LinuxSll2,
    /// BSD loopback (LINKTYPE_NULL, _LOOP): a 4-byte address family, then IP.
    Null,
    /// A link type wirelab does not read (a pcapng interface of 802.11 or
    /// USB beside the Ethernet ones): its packets are counted, not parsed.
    Unread(u32),
}

/// Where the network layer starts after a link header.
enum L3 {
    /// An Ethernet header (its tags parsed by etherparse).
    Ethernet,
    /// IP at this offset.
    Ip(usize),
    /// The protocol the link header names (an EtherType), at this offset.
    EtherType(u16, usize),
}

impl Link {
    /// The link type of a pcap header or pcapng interface.
    pub fn of(linktype: u32) -> Option<Link> {
        Some(match linktype {
            1 => Link::Ethernet,
            101 | 228 | 229 => Link::RawIp,
            113 => Link::LinuxSll,
            276 => Link::LinuxSll2,
            0 | 108 => Link::Null,
            _ => return None,
        })
    }

    fn l3(self, data: &[u8]) -> Result<L3, NotTcp> {
        let header = |len: usize, layer: &str| {
            if data.len() < len {
                Err(malformed(
                    layer,
                    data.len(),
                    format!("shorter than the {len}-byte header"),
                ))
            } else {
                Ok(())
            }
        };
        let be16 = |at: usize| u16::from_be_bytes([data[at], data[at + 1]]);
        Ok(match self {
            Link::Ethernet => L3::Ethernet,
            Link::RawIp => L3::Ip(0),
            Link::Unread(_) => return Err(NotTcp::Other),
            Link::Null => {
                header(4, "null")?;
                L3::Ip(4)
            }
            // SLL: 16 bytes, the protocol in the last two.
            Link::LinuxSll => {
                header(16, "linux_sll")?;
                L3::EtherType(be16(14), 16)
            }
            // SLL2: 20 bytes, the protocol in the first two.
            Link::LinuxSll2 => {
                header(20, "linux_sll2")?;
                L3::EtherType(be16(0), 20)
            }
        })
    }

    /// Offset of an IPv4 header in the frame, if the frame carries one.
    pub fn ipv4_offset(self, data: &[u8]) -> Option<usize> {
        match self.l3(data).ok()? {
            L3::Ethernet => (data.get(12..14)? == [0x08, 0x00]).then_some(14),
            L3::Ip(o) => Some(o),
            L3::EtherType(0x0800, o) => Some(o),
            L3::EtherType(..) => None,
        }
    }

    fn slice(self, data: &[u8]) -> Result<etherparse::LaxSlicedPacket<'_>, NotTcp> {
        use etherparse::LaxSlicedPacket;
        Ok(match self.l3(data)? {
            L3::Ethernet => {
                LaxSlicedPacket::from_ethernet(data).map_err(|e| malformed("ethernet", 0, e))?
            }
            L3::Ip(o) => LaxSlicedPacket::from_ip(&data[o..]).map_err(|e| malformed("ip", o, e))?,
            L3::EtherType(et, o) => {
                LaxSlicedPacket::from_ether_type(etherparse::EtherType(et), &data[o..])
            }
        })
    }
}

/// Why a packet did not yield TCP headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTcp {
    /// Another protocol (ARP, UDP, ICMP ...).
    Other,
    /// The bytes stop or are wrong at `offset` (in the frame) in `layer`.
    Malformed {
        layer: String,
        offset: usize,
        detail: String,
    },
}

impl Packet {
    pub fn tcp(&self) -> Result<Tcp, NotTcp> {
        parse(self.link, &self.data)
    }

    /// The packet as the streaming reader hands packets out.
    pub fn as_ref(&self) -> PacketRef<'_> {
        PacketRef {
            frame: self.frame,
            ts_ns: self.ts_ns,
            orig_len: self.orig_len,
            data: &self.data,
            interface: self.interface,
            link: self.link,
            meta: self.meta,
        }
    }
}

/// Parses an Ethernet frame.
pub fn parse_tcp(data: &[u8]) -> Result<Tcp, NotTcp> {
    parse(Link::Ethernet, data)
}

fn malformed(layer: &str, offset: usize, detail: impl ToString) -> NotTcp {
    NotTcp::Malformed {
        layer: layer.into(),
        offset,
        detail: detail.to_string(),
    }
}

/// RFC 791 §3.1: the ones' complement sum of the header's 16-bit words,
/// its checksum included, is all ones.
fn ipv4_checksum_ok(header: &[u8]) -> bool {
    // An IPv4 header is whole 32-bit words (IHL); summed a word at a time
    // (RFC 1071 §2 (B): the sum is independent of the unit's size).
    let words = header.chunks_exact(4);
    let tail: u64 = words
        .remainder()
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    let mut sum = words
        .map(|w| u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]])))
        .sum::<u64>()
        + tail;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// The IP ECN field of any IPv4 or IPv6 packet (0 Not-ECT, 1 ECT(1),
/// 2 ECT(0), 3 CE); None when the packet is not IP.
pub fn ip_ecn(link: Link, data: &[u8]) -> Option<u8> {
    use etherparse::LaxNetSlice;
    match &sliced(link, data)?.net {
        Some(LaxNetSlice::Ipv4(ip)) => Some(ip.header().ecn().value()),
        Some(LaxNetSlice::Ipv6(ip)) => Some(ip.header().traffic_class() & 3),
        _ => None,
    }
}

/// The IP source address of any IPv4 or IPv6 packet; None when not IP.
pub fn ip_source(link: Link, data: &[u8]) -> Option<std::net::IpAddr> {
    use etherparse::LaxNetSlice;
    match &sliced(link, data)?.net {
        Some(LaxNetSlice::Ipv4(ip)) => Some(ip.header().source_addr().into()),
        Some(LaxNetSlice::Ipv6(ip)) => Some(ip.header().source_addr().into()),
        _ => None,
    }
}

/// The packet's layers, leniently (a truncated snapshot still has its IP header).
fn sliced(link: Link, data: &[u8]) -> Option<etherparse::LaxSlicedPacket<'_>> {
    link.slice(data).ok()
}

/// Parses a frame of the given link type. Never panics, whatever the bytes
/// (fuzzed: fuzz/fuzz_targets/parse_packet.rs).
pub fn parse(link: Link, data: &[u8]) -> Result<Tcp, NotTcp> {
    match fast_ipv4_tcp(link, data) {
        // Returned as it came, not rewrapped from an `Option` (with the
        // packet borrowed in `Model::add`, not moved: 4% of `wirelab
        // analyze` on the bench's trace, 30 interleaved runs each).
        t @ Ok(_) => t,
        Err(_) => parse_layers(link, data),
    }
}

/// The common case, IPv4 and TCP, read with etherparse's header slices
/// rather than its whole-packet view: `LaxSlicedPacket` is a large value,
/// and copying it was a sixth of `wirelab analyze`'s time. Only a packet
/// the general path reads the same way takes this one (unfragmented,
/// headers whole, checksum good, lengths consistent); anything else is
/// `Err(NotTcp::Other)` and goes the general way, which also names what
/// is wrong. The two are compared on every test capture
/// (tests/fast_path.rs).
fn fast_ipv4_tcp(link: Link, data: &[u8]) -> Result<Tcp, NotTcp> {
    fast_ipv4_tcp_fields(link, data).ok_or(NotTcp::Other)
}

// Inlined (as `tcp_of` is) so that the packet is built in the `Result`.
#[inline(always)]
fn fast_ipv4_tcp_fields(link: Link, data: &[u8]) -> Option<Tcp> {
    let o = link.ipv4_offset(data)?;
    let ipb = data.get(o..)?;
    if ipb.first()? >> 4 != 4 {
        return None;
    }
    let ip = etherparse::Ipv4HeaderSlice::from_slice(ipb).ok()?;
    if ip.protocol() != etherparse::IpNumber::TCP || ip.is_fragmenting_payload() {
        return None;
    }
    let hl = ip.slice().len();
    let total = usize::from(ip.total_len());
    if total < hl || (ip.header_checksum() != 0 && !ipv4_checksum_ok(ip.slice())) {
        return None;
    }
    let tcp = data.get(o + hl..(o + total).min(data.len()))?;
    let t = etherparse::TcpHeaderSlice::from_slice(tcp).ok()?;
    Some(tcp_of(
        (
            IpAddr::V4(Ipv4Addr::from(ip.source())),
            IpAddr::V4(Ipv4Addr::from(ip.destination())),
        ),
        Some(ip.identification()),
        ip.ecn().value(),
        o + total,
        o + hl,
        &t,
    ))
}

fn parse_layers(link: Link, data: &[u8]) -> Result<Tcp, NotTcp> {
    use etherparse::{LaxNetSlice, TransportSlice};
    let p = link.slice(data)?;
    let at = |s: &[u8]| s.as_ptr() as usize - data.as_ptr() as usize;
    // (source, destination, IPv4 ID, ECN, where the IP datagram ends by
    // its own length)
    let (src, dst, ip_id, ecn, declared_end, is_tcp) = match &p.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let h = ip.header();
            // A header whose bytes do not sum to its checksum was damaged
            // (a bit flipped, a length field overwritten: IHL 15 reads
            // payload as options and puts the TCP header elsewhere). Its
            // fields cannot be trusted, so it is malformed rather than
            // read as some other connection's. 0 is skipped: a header
            // whose checksum was left to hardware.
            if h.header_checksum() != 0 && !ipv4_checksum_ok(h.slice()) {
                return Err(malformed(
                    "ip",
                    at(h.slice()),
                    format!(
                        "IPv4 header checksum {:#06x} does not match the header's bytes",
                        h.header_checksum()
                    ),
                ));
            }
            (
                IpAddr::V4(Ipv4Addr::from(h.source())),
                IpAddr::V4(Ipv4Addr::from(h.destination())),
                Some(h.identification()),
                h.ecn().value(),
                at(h.slice()) + usize::from(h.total_len()),
                ip.payload().ip_number == etherparse::IpNumber::TCP,
            )
        }
        Some(LaxNetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                None,
                h.traffic_class() & 3,
                at(h.slice()) + 40 + usize::from(h.payload_length()),
                ip.payload().ip_number == etherparse::IpNumber::TCP,
            )
        }
        _ => {
            return match &p.stop_err {
                Some((e, layer)) => Err(malformed(&format!("{layer:?}"), 0, e)),
                None => Err(NotTcp::Other),
            }
        }
    };
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        if is_tcp {
            let (detail, offset) = match (&p.stop_err, &p.net) {
                (Some((e, _)), Some(LaxNetSlice::Ipv4(ip))) => {
                    (e.to_string(), at(ip.payload().payload))
                }
                (Some((e, _)), Some(LaxNetSlice::Ipv6(ip))) => {
                    (e.to_string(), at(ip.payload().payload))
                }
                _ => ("TCP header missing".to_string(), data.len()),
            };
            return Err(malformed("tcp", offset, detail));
        }
        return Err(NotTcp::Other);
    };
    let tcp_offset = at(t.slice());
    let header = etherparse::TcpHeaderSlice::from_slice(&data[tcp_offset..])
        .map_err(|e| malformed("tcp", tcp_offset, e))?;
    Ok(tcp_of(
        (src, dst),
        ip_id,
        ecn,
        declared_end,
        tcp_offset,
        &header,
    ))
}

/// The TCP header's fields, with the payload length from where the IP
/// datagram ends by its own length (not limited by the snap length).
#[inline(always)]
fn tcp_of(
    (src, dst): (IpAddr, IpAddr),
    ip_id: Option<u16>,
    ecn: u8,
    declared_end: usize,
    tcp_offset: usize,
    t: &etherparse::TcpHeaderSlice,
) -> Tcp {
    let hdr_end = tcp_offset + t.data_offset() as usize * 4;
    let payload_len = declared_end.saturating_sub(hdr_end) as u32;
    let mut sack = [(0, 0); 4];
    let mut sack_count = 0;
    let mut mss = None;
    let mut wscale = None;
    // An option etherparse does not know (MPTCP, TFO ...) ends the walk;
    // SACK and MSS come first in Linux's option order anyway.
    for opt in t.options_iterator().map_while(Result::ok) {
        match opt {
            etherparse::TcpOptionElement::SelectiveAcknowledgement(first, rest) => {
                sack[0] = first;
                sack_count = 1;
                for b in rest.iter().flatten() {
                    sack[sack_count as usize] = *b;
                    sack_count += 1;
                }
            }
            etherparse::TcpOptionElement::MaximumSegmentSize(m) => mss = Some(m),
            etherparse::TcpOptionElement::WindowScale(w) => wscale = Some(w),
            _ => {}
        }
    }
    Tcp {
        src,
        dst,
        sport: t.source_port(),
        dport: t.destination_port(),
        seq: t.sequence_number(),
        ack: t.acknowledgment_number(),
        syn: t.syn(),
        fin: t.fin(),
        rst: t.rst(),
        has_ack: t.ack(),
        ece: t.ece(),
        cwr: t.cwr(),
        window: t.window_size(),
        ecn,
        payload_len,
        tcp_offset: tcp_offset as u16,
        sack,
        sack_count,
        mss,
        wscale,
        ip_id,
    }
}

/// A whole trace in memory.
#[derive(Debug, Default)]
pub struct Trace {
    pub packets: Vec<Packet>,
    /// Interface names, by pcapng interface id (switch ports in our traces).
    pub interfaces: Vec<String>,
    /// The file stops inside a block or record: where, and why. Everything
    /// before it was read; analyzers report it as a finding.
    pub truncated: Option<Damage>,
}

/// Where a file is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the block or record that could not be read.
    pub offset: u64,
    pub detail: String,
}

pub(crate) fn tsresol_to_ns(raw: u64, resol: u8) -> u64 {
    // pcapng §4.2 if_tsresol: MSB clear = 10^-n s, MSB set = 2^-n s.
    if resol & 0x80 == 0 {
        let n = u32::from(resol);
        if n <= 9 {
            raw.saturating_mul(10u64.pow(9 - n))
        } else {
            raw / 10u64.pow((n - 9).min(19))
        }
    } else {
        let n = u32::from(resol & 0x7f);
        ((u128::from(raw) * 1_000_000_000) >> n.min(127)) as u64
    }
}

/// Reads any pcap or pcapng file into memory (for traces of runs and for
/// tests; `wirelab analyze` streams with [`Reader`]).
pub fn read(path: &Path) -> Result<Trace, Error> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| Error::Open {
        path: name.clone(),
        source,
    })?;
    collect(Reader::new(file)).map_err(|e| Error::at(&name, e))
}

impl Error {
    /// A file that cannot be read at all, at an offset when one is known.
    pub fn at(path: &str, (detail, offset): stream::Fail) -> Error {
        match offset {
            Some(offset) => Error::Block {
                path: path.to_string(),
                offset,
                detail,
            },
            None => Error::Format {
                path: path.to_string(),
                detail,
            },
        }
    }
}

/// Reads a pcap or pcapng file held in memory. Errors are (what, byte
/// offset) and only for damage before the first packet; later damage ends
/// the trace there and is recorded in [`Trace::truncated`]. Never panics
/// (fuzzed: fuzz/fuzz_targets/read_trace.rs).
pub fn read_bytes(bytes: &[u8]) -> Result<Trace, (String, Option<u64>)> {
    collect(Reader::new(bytes))
}

fn collect(reader: Result<Reader<'_>, stream::Fail>) -> Result<Trace, stream::Fail> {
    let mut r = reader?;
    let mut packets = Vec::new();
    while let Some(p) = r.next() {
        packets.push(p.to_owned());
    }
    let truncated = r.damage().cloned();
    if packets.is_empty() {
        if let Some(d) = truncated {
            return Err(before_first_packet(&d, r.compressed()));
        }
    }
    Ok(Trace {
        packets,
        interfaces: r.interfaces().to_vec(),
        truncated,
    })
}

/// Damage before the first packet: the file cannot be read at all.
pub fn before_first_packet(d: &Damage, compressed: Option<&str>) -> stream::Fail {
    // A decoder error (`Reader::next`) is at an offset in the decompressed
    // bytes, not one a user can find in the file.
    let why = compressed.and_then(|kind| {
        let why = d
            .detail
            .strip_prefix(&format!("the {kind} stream ends early or is damaged: "))?;
        Some(format!(
            "{kind}: the stream ends early or is damaged before the first packet: {why}"
        ))
    });
    match why {
        Some(why) => (why, None),
        None => (d.detail.clone(), Some(d.offset)),
    }
}

/// Record layouts of classic pcap (Wireshark's wiretap/libpcap.c names
/// them). Behind the standard magic number: the plain 16-byte record
/// header, Nokia's with 4 bytes more, and RedHat 6.1's (SS990417) with
/// Kuznetzov's 8 (interface index, protocol, packet type). Behind the
/// modified magic number: Kuznetzov's 8 more, or SuSE 6.3's (SS990915) 12
/// (CPU numbers and padding too). Only the record sizes tell them apart,
/// so the first records are tried with each, as Wireshark does; no reader
/// library does this, hence this small probe. Returns the bytes between
/// the standard header and the data.
pub(crate) fn probe_record_layout(bytes: &[u8], be: bool, modified: bool) -> usize {
    let candidates: &[usize] = if modified { &[8, 12] } else { &[0, 4, 8] };
    let u32_at = |b: &[u8], at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if be {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    };
    'layout: for &extra in candidates {
        let hdr = 16 + extra;
        let mut rest = bytes;
        // The first records (up to 3) must be sane: captured length at most
        // the original and the bytes left, the sub-second part below 1 s.
        for _ in 0..3 {
            if rest.is_empty() {
                break;
            }
            if rest.len() < hdr {
                continue 'layout;
            }
            let (sub, cap, orig) = (u32_at(rest, 4), u32_at(rest, 8), u32_at(rest, 12));
            let cap = cap as usize;
            if sub >= 1_000_000_000 || cap > orig as usize || cap > rest.len() - hdr {
                continue 'layout;
            }
            rest = &rest[hdr + cap..];
        }
        return extra;
    }
    candidates[0]
}

/// Helper for writers: an EPB comment option.
pub fn comment_option(m: &Meta) -> EnhancedPacketOption<'static> {
    EnhancedPacketOption::Comment(Cow::Owned(m.encode()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sum a word at a time is RFC 791's, on a header with options and
    /// on every single-bit flip of one without.
    #[test]
    fn the_ipv4_checksum_is_the_ones_complement_sum_of_16_bit_words() {
        let by16 = |h: &[u8]| {
            let mut sum: u32 = h
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            sum == 0xffff
        };
        // 192.168.0.1 → 192.168.0.199, UDP, checksum 0xb861.
        let h: [u8; 20] = [
            0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8,
            0, 0xc7,
        ];
        assert!(ipv4_checksum_ok(&h));
        for bit in 0..160 {
            let mut b = h;
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(ipv4_checksum_ok(&b), by16(&b), "bit {bit}");
            assert!(!ipv4_checksum_ok(&b), "bit {bit}");
        }
        let mut opts = etherparse::Ipv4Header::new(
            100,
            64,
            etherparse::IpNumber::TCP,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
        )
        .unwrap();
        opts.options = [1, 1, 1, 0].into();
        opts.header_checksum = opts.calc_header_checksum();
        let bytes = opts.to_bytes();
        assert_eq!(bytes.len(), 24);
        assert!(ipv4_checksum_ok(&bytes) && by16(&bytes));
    }

    /// A damaged IPv4 header is malformed at the IP header's offset, not
    /// read as some other connection; a checksum left at 0 (to hardware)
    /// is not checked.
    #[test]
    fn an_ipv4_header_that_fails_its_checksum_is_malformed() {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
            .tcp(40000, 5001, 1, 65535)
            .write(&mut f, &[0u8; 100])
            .unwrap();
        assert!(parse_tcp(&f).is_ok());
        let mut bad = f.clone();
        bad[14] = (bad[14] & 0xf0) | 0x0f; // IHL 15
        match parse_tcp(&bad) {
            Err(NotTcp::Malformed {
                layer,
                offset,
                detail,
            }) => {
                assert_eq!((layer.as_str(), offset), ("ip", 14));
                assert!(detail.contains("checksum"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        let mut unset = f.clone();
        unset[24..26].fill(0);
        unset[22] ^= 1; // the TTL changes; the checksum is not checked
        assert!(parse_tcp(&unset).is_ok());
    }

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(tsresol_to_ns(1_500_000, 6), 1_500_000_000);
        assert_eq!(tsresol_to_ns(7, 9), 7);
        assert_eq!(tsresol_to_ns(1 << 30, 0x80 | 30), 1_000_000_000);
    }
}

#[doc(hidden)]
pub mod fuzzing {
    //! Body of the parse_packet fuzz target (also run over the committed
    //! corpus by the stable tests).

    /// The first byte picks the link type; the rest is the frame. Must never
    /// panic.
    pub fn parse_any(data: &[u8]) {
        let Some((&k, frame)) = data.split_first() else {
            return;
        };
        let link = match k % 5 {
            0 => super::Link::Ethernet,
            1 => super::Link::RawIp,
            2 => super::Link::LinuxSll,
            3 => super::Link::LinuxSll2,
            _ => super::Link::Null,
        };
        if let Ok(t) = super::parse(link, frame) {
            // Offsets the analyzers and tests index with stay in the frame.
            assert!(usize::from(t.tcp_offset) + 20 <= frame.len());
            assert!(t.sack_count <= 4);
        }
        same_both_ways(link, frame);
    }

    /// The fast path (IPv4 + TCP) reads a frame exactly as the general
    /// one does, when it reads it at all; returns whether it did.
    pub fn same_both_ways(link: super::Link, frame: &[u8]) -> bool {
        let Ok(fast) = super::fast_ipv4_tcp(link, frame) else {
            return false;
        };
        assert_eq!(Ok(fast), super::parse_layers(link, frame), "{frame:02x?}");
        true
    }
}
