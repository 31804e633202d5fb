//! Traces: pcap or pcapng files read into packets in capture order, with
//! wirelab's per-packet metadata when present (an EPB comment, so Wireshark
//! shows it as `frame.comment` and the headers stay untouched), and TCP views
//! parsed with etherparse (lax: snapped packets still yield their headers).

pub mod meta;

use std::borrow::Cow;
use std::fs::File;
use std::io::BufReader;
use std::net::Ipv4Addr;
use std::path::Path;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::Block;
use pcap_file::DataLink;

pub use meta::Meta;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open trace {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a pcap or pcapng file ({detail})")]
    Format { path: String, detail: String },
    #[error("{path}: block {block}: {detail}")]
    Block {
        path: String,
        block: usize,
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
    pub meta: Option<Meta>,
}

/// Parsed TCP/IPv4 headers of a packet (what the analyzers need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tcp {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
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
    /// IP ECN field: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// Payload length from the IP header (not limited by the snap length).
    pub payload_len: u32,
    /// SACK blocks (RFC 2018), as (left, right) edges.
    pub sack: [(u32, u32); 4],
    pub sack_count: u8,
}

/// Why a packet did not yield TCP headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTcp {
    /// Another protocol (ARP, UDP, IPv6 ...).
    Other,
    /// The bytes stop or are wrong at `offset` in `layer`.
    Malformed {
        layer: String,
        offset: usize,
        detail: String,
    },
}

impl Packet {
    pub fn tcp(&self) -> Result<Tcp, NotTcp> {
        parse_tcp(&self.data)
    }
}

pub fn parse_tcp(data: &[u8]) -> Result<Tcp, NotTcp> {
    use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
    let p = LaxSlicedPacket::from_ethernet(data).map_err(|e| NotTcp::Malformed {
        layer: "ethernet".into(),
        offset: 0,
        detail: e.to_string(),
    })?;
    let Some(LaxNetSlice::Ipv4(ip)) = &p.net else {
        if let Some((e, layer)) = &p.stop_err {
            return Err(NotTcp::Malformed {
                layer: format!("{layer:?}"),
                offset: 14,
                detail: e.to_string(),
            });
        }
        return Err(NotTcp::Other);
    };
    let h = ip.header();
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        if h.protocol() == etherparse::IpNumber::TCP {
            let detail = p
                .stop_err
                .as_ref()
                .map(|(e, _)| e.to_string())
                .unwrap_or_else(|| "TCP header missing".into());
            return Err(NotTcp::Malformed {
                layer: "tcp".into(),
                offset: 14 + h.slice().len(),
                detail,
            });
        }
        return Err(NotTcp::Other);
    };
    let ip_payload = u32::from(h.total_len()).saturating_sub(h.slice().len() as u32);
    let payload_len = ip_payload.saturating_sub(t.data_offset() as u32 * 4);
    let mut sack = [(0, 0); 4];
    let mut sack_count = 0;
    for opt in t.options_iterator().flatten() {
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
        src: Ipv4Addr::from(h.source()),
        dst: Ipv4Addr::from(h.destination()),
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
        ecn: h.ecn().value(),
        payload_len,
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
        ((u128::from(raw) * 1_000_000_000) >> n) as u64
    }
}

/// Reads any pcap or pcapng file.
pub fn read(path: &Path) -> Result<Trace, Error> {
    let name = path.display().to_string();
    let open = || {
        File::open(path)
            .map(BufReader::new)
            .map_err(|source| Error::Open {
                path: name.clone(),
                source,
            })
    };
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        open()?.read_exact(&mut magic).map_err(|e| Error::Format {
            path: name.clone(),
            detail: format!("shorter than a file header: {e}"),
        })?;
    }
    let mut trace = Trace::default();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = pcap_file::pcapng::PcapNgReader::new(open()?).map_err(|e| Error::Format {
            path: name.clone(),
            detail: e.to_string(),
        })?;
        let mut resol: Vec<u8> = Vec::new();
        let mut block = 1; // the section header was block 0
        while let Some(b) = r.next_block() {
            block += 1;
            let b = b.map_err(|e| Error::Block {
                path: name.clone(),
                block,
                detail: e.to_string(),
            })?;
            match b {
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
                    if idb.linktype != DataLink::ETHERNET {
                        return Err(Error::Block {
                            path: name.clone(),
                            block,
                            detail: format!("link type {:?} is not Ethernet", idb.linktype),
                        });
                    }
                    resol.push(res);
                    trace.interfaces.push(ifname);
                }
                Block::EnhancedPacket(epb) => {
                    let res =
                        *resol
                            .get(epb.interface_id as usize)
                            .ok_or_else(|| Error::Block {
                                path: name.clone(),
                                block,
                                detail: format!(
                                    "packet on undeclared interface {}",
                                    epb.interface_id
                                ),
                            })?;
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
                        meta,
                    });
                }
                Block::SimplePacket(spb) => {
                    trace.packets.push(Packet {
                        frame: trace.packets.len() as u64 + 1,
                        ts_ns: 0,
                        orig_len: spb.original_len,
                        data: spb.data.into_owned(),
                        interface: 0,
                        meta: None,
                    });
                }
                _ => {}
            }
        }
    } else {
        let mut r = pcap_file::pcap::PcapReader::new(open()?).map_err(|e| Error::Format {
            path: name.clone(),
            detail: e.to_string(),
        })?;
        let hdr = r.header();
        if hdr.datalink != DataLink::ETHERNET {
            return Err(Error::Format {
                path: name.clone(),
                detail: format!("link type {:?} is not Ethernet", hdr.datalink),
            });
        }
        trace.interfaces.push("if0".into());
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            n += 1;
            let p = p.map_err(|e| Error::Block {
                path: name.clone(),
                block: n,
                detail: e.to_string(),
            })?;
            trace.packets.push(Packet {
                frame: n as u64,
                // pcap-file already scales µs/ns pcap timestamps to a Duration.
                ts_ns: p.timestamp.as_nanos() as u64,
                orig_len: p.orig_len,
                data: p.data.into_owned(),
                interface: 0,
                meta: None,
            });
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
