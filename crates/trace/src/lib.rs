//! Traces: pcap or pcapng files read into packets in capture order, with
//! wirelab's per-packet metadata when present (an EPB comment, so Wireshark
//! shows it as `frame.comment` and the headers stay untouched), and TCP views
//! parsed with etherparse (lax: snapped packets still yield their headers).

pub mod meta;

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;

pub use meta::{Action, Aqm, Meta};

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
#[derive(Debug, Clone)]
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
}

impl Tcp {
    /// The SACK blocks present.
    pub fn sacks(&self) -> &[(u32, u32)] {
        &self.sack[..self.sack_count as usize]
    }
}

/// How a capture's frames start (pcap LINKTYPE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Ethernet,
    /// Bare IPv4/IPv6 (LINKTYPE_RAW, _IPV4, _IPV6).
    RawIp,
    /// Linux cooked capture v1 (`tcpdump -i any`).
    LinuxSll,
}

impl Link {
    fn of(d: DataLink) -> Option<Link> {
        match d {
            DataLink::ETHERNET => Some(Link::Ethernet),
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(Link::RawIp),
            DataLink::LINUX_SLL => Some(Link::LinuxSll),
            _ => None,
        }
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

/// Parses a frame of the given link type. Never panics, whatever the bytes
/// (fuzzed: fuzz/fuzz_targets/parse_tcp.rs).
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
    use etherparse::LaxSlicedPacket;
    match link {
        Link::Ethernet => LaxSlicedPacket::from_ethernet(data).ok(),
        Link::RawIp => LaxSlicedPacket::from_ip(data).ok(),
        Link::LinuxSll => {
            let et = u16::from_be_bytes([*data.get(14)?, *data.get(15)?]);
            Some(LaxSlicedPacket::from_ether_type(
                etherparse::EtherType(et),
                data.get(16..)?,
            ))
        }
    }
}

pub fn parse(link: Link, data: &[u8]) -> Result<Tcp, NotTcp> {
    use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
    let p = match link {
        Link::Ethernet => {
            LaxSlicedPacket::from_ethernet(data).map_err(|e| malformed("ethernet", 0, e))?
        }
        Link::RawIp => LaxSlicedPacket::from_ip(data).map_err(|e| malformed("ip", 0, e))?,
        Link::LinuxSll => {
            // SLL header: 16 bytes, protocol (an EtherType) in the last two.
            if data.len() < 16 {
                return Err(malformed(
                    "linux_sll",
                    data.len(),
                    "shorter than the 16-byte header",
                ));
            }
            let et = u16::from_be_bytes([data[14], data[15]]);
            LaxSlicedPacket::from_ether_type(etherparse::EtherType(et), &data[16..])
        }
    };
    let at = |s: &[u8]| s.as_ptr() as usize - data.as_ptr() as usize;
    // (source, destination, ECN, where the IP datagram ends by its own length)
    let (src, dst, ecn, declared_end, is_tcp) = match &p.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let h = ip.header();
            (
                IpAddr::V4(Ipv4Addr::from(h.source())),
                IpAddr::V4(Ipv4Addr::from(h.destination())),
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
    let hdr_end = tcp_offset + t.data_offset() as usize * 4;
    let payload_len = declared_end.saturating_sub(hdr_end) as u32;
    let mut sack = [(0, 0); 4];
    let mut sack_count = 0;
    // An option etherparse does not know (MPTCP, TFO ...) ends the walk;
    // SACK comes first in Linux's option order anyway.
    for opt in t.options_iterator().map_while(Result::ok) {
        if let etherparse::TcpOptionElement::SelectiveAcknowledgement(first, rest) = opt {
            sack[0] = first;
            sack_count = 1;
            for b in rest.iter().flatten() {
                sack[sack_count as usize] = *b;
                sack_count += 1;
            }
        }
    }
    Ok(Tcp {
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
    })
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

fn tsresol_to_ns(raw: u64, resol: u8) -> u64 {
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

/// Reads any pcap or pcapng file.
pub fn read(path: &Path) -> Result<Trace, Error> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| Error::Open {
        path: name.clone(),
        source,
    })?;
    read_bytes(&bytes).map_err(|(detail, block)| match block {
        Some(offset) => Error::Block {
            path: name.clone(),
            offset,
            detail,
        },
        None => Error::Format { path: name, detail },
    })
}

/// Reads a pcap or pcapng file held in memory. Errors are (what, byte
/// offset) and only for damage before the first packet; later damage ends
/// the trace there and is recorded in [`Trace::truncated`]. Never panics
/// (fuzzed: fuzz/fuzz_targets/read_trace.rs).
pub fn read_bytes(bytes: &[u8]) -> Result<Trace, (String, Option<u64>)> {
    if bytes.len() < 4 {
        return Err(("shorter than a file header".into(), None));
    }
    let off = |rest: &[u8]| (bytes.len() - rest.len()) as u64;
    let mut trace = Trace::default();
    if bytes[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        let (mut rest, mut parser) =
            PcapNgParser::new(bytes).map_err(|e| (format!("pcapng section header: {e}"), None))?;
        // Per interface: timestamp resolution and link type.
        let mut ifs: Vec<(u8, Link)> = Vec::new();
        while !rest.is_empty() {
            let at = off(rest);
            let fail = |detail: String, trace: &mut Trace| {
                if trace.packets.is_empty() {
                    Err((detail, Some(at)))
                } else {
                    trace.truncated = Some(Damage { offset: at, detail });
                    Ok(())
                }
            };
            let (next, block) = match parser.next_block(rest) {
                Ok(x) => x,
                Err(e) => {
                    fail(e.to_string(), &mut trace)?;
                    break;
                }
            };
            rest = next;
            match block {
                Block::InterfaceDescription(idb) => {
                    let mut res = 6; // pcapng default: microseconds
                    let mut ifname = format!("if{}", trace.interfaces.len());
                    for o in &idb.options {
                        match o {
                            InterfaceDescriptionOption::IfTsResol(r) => res = *r,
                            InterfaceDescriptionOption::IfName(n) => ifname = n.to_string(),
                            _ => {}
                        }
                    }
                    let Some(link) = Link::of(idb.linktype) else {
                        return Err((
                            format!(
                                "interface {} has link type {:?}; wirelab reads Ethernet, raw IP and Linux cooked captures",
                                trace.interfaces.len(),
                                idb.linktype
                            ),
                            Some(at),
                        ));
                    };
                    ifs.push((res, link));
                    trace.interfaces.push(ifname);
                }
                Block::EnhancedPacket(epb) => {
                    let Some(&(res, link)) = ifs.get(epb.interface_id as usize) else {
                        fail(
                            format!("packet on undeclared interface {}", epb.interface_id),
                            &mut trace,
                        )?;
                        break;
                    };
                    // pcap-file hands the raw 64-bit count over as "nanoseconds".
                    let raw = epb.timestamp.as_nanos() as u64;
                    let meta = epb.options.iter().find_map(|o| match o {
                        EnhancedPacketOption::Comment(c) => Meta::decode(c),
                        _ => None,
                    });
                    trace.packets.push(Packet {
                        frame: trace.packets.len() as u64 + 1,
                        ts_ns: tsresol_to_ns(raw, res),
                        orig_len: epb.original_len,
                        data: epb.data.into_owned(),
                        interface: epb.interface_id,
                        link,
                        meta,
                    });
                }
                Block::SimplePacket(spb) => {
                    let link = ifs.first().map_or(Link::Ethernet, |i| i.1);
                    trace.packets.push(Packet {
                        frame: trace.packets.len() as u64 + 1,
                        ts_ns: 0,
                        orig_len: spb.original_len,
                        data: spb.data.into_owned(),
                        interface: 0,
                        link,
                        meta: None,
                    });
                }
                _ => {}
            }
        }
    } else {
        let (mut rest, parser) = PcapParser::new(bytes)
            .map_err(|e| (format!("not a pcap or pcapng file: {e}"), None))?;
        let hdr = parser.header();
        let Some(link) = Link::of(hdr.datalink) else {
            return Err((
                format!(
                    "link type {:?}; wirelab reads Ethernet, raw IP and Linux cooked captures",
                    hdr.datalink
                ),
                Some(20),
            ));
        };
        trace.interfaces.push("if0".into());
        while !rest.is_empty() {
            let at = off(rest);
            match parser.next_packet(rest) {
                Ok((next, p)) => {
                    rest = next;
                    trace.packets.push(Packet {
                        frame: trace.packets.len() as u64 + 1,
                        // pcap-file already scales µs/ns pcap timestamps.
                        ts_ns: p.timestamp.as_nanos() as u64,
                        orig_len: p.orig_len,
                        data: p.data.into_owned(),
                        interface: 0,
                        link,
                        meta: None,
                    });
                }
                Err(e) => {
                    trace.truncated = Some(Damage {
                        offset: at,
                        detail: format!("record {}: {e}", trace.packets.len() + 1),
                    });
                    break;
                }
            }
        }
    }
    Ok(trace)
}

/// Helper for writers: an EPB comment option.
pub fn comment_option(m: &Meta) -> EnhancedPacketOption<'static> {
    EnhancedPacketOption::Comment(Cow::Owned(m.encode()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let link = match k % 3 {
            0 => super::Link::Ethernet,
            1 => super::Link::RawIp,
            _ => super::Link::LinuxSll,
        };
        if let Ok(t) = super::parse(link, frame) {
            // Offsets the analyzers and tests index with stay in the frame.
            assert!(usize::from(t.tcp_offset) + 20 <= frame.len());
            assert!(t.sack_count <= 4);
        }
    }
}
