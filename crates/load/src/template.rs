//! The frames the generator replicates (Norma's template packets, §3.2),
//! built with etherparse so the checksums the program then patches start
//! right, and the offsets the program needs.

use std::net::Ipv4Addr;

use etherparse::{EtherType, IpNumber, Ipv4Header, Ipv6Header, UdpHeader};
use serde::Serialize;
use wirelab_spec::load::{vxlan_overhead, L4Kind};

/// The stamp: sequence number and send time, 8 bytes each.
pub const STAMP: usize = 16;
/// The smallest frame (60 bytes: 64 on a wire with its FCS).
pub const MIN_FRAME: usize = 60;

/// One template and where its fields are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Template {
    #[serde(skip)]
    pub bytes: Vec<u8>,
    pub l3_off: u16,
    pub l4_off: u16,
    /// The (outer) L4 checksum (0: the template carries none).
    pub csum_off: u16,
    /// The inner TCP checksum under VXLAN, which covers the stamp (0:
    /// none).
    pub inner_csum_off: u16,
    /// The inner IPv4 header under VXLAN (0: none), whose lengths a size
    /// mix changes.
    pub inner_l3_off: u16,
    /// The stamp, after the innermost headers and the raw bytes (None: no
    /// room).
    pub stamp_off: Option<u16>,
    /// The network header is IPv6.
    pub ipv6: bool,
    /// The (outer) L4 header is TCP.
    pub tcp: bool,
    /// No IP header at all (an ARP reply).
    pub no_ip: bool,
    /// How the sink finds the stream's frames and their stamps.
    pub sink: SinkMatch,
}

/// Where an ARP reply's sender protocol address is (RFC 826, after the
/// Ethernet header: hardware and protocol types and lengths, the
/// operation, the sender's hardware address): the field the editor steps
/// to announce a range of addresses.
pub const ARP_SPA: u16 = 14 + 14;

/// An ARP reply (RFC 826) from `sender` (its MAC and the address it
/// announces) to `target`, padded to the smallest frame: a frame without
/// IP, so without the measurement's version bit and stamp; the sink does
/// not count it (port 0). A DUT that accepts unsolicited replies (Linux
/// with `arp_accept`) learns the sender from it (Norma §8's ARP-learning
/// test).
pub fn arp_reply(
    sender: ([u8; 6], Ipv4Addr),
    target: ([u8; 6], Ipv4Addr),
) -> Result<Template, String> {
    use etherparse::{ArpEthIpv4Packet, ArpOperation, PacketBuilder};
    let arp = ArpEthIpv4Packet {
        operation: ArpOperation::REPLY,
        sender_mac: sender.0,
        sender_ipv4: sender.1.octets(),
        target_mac: target.0,
        target_ipv4: target.1.octets(),
    };
    let mut bytes = Vec::with_capacity(MIN_FRAME);
    PacketBuilder::ethernet2(sender.0, target.0)
        .arp(arp.into())
        .write(&mut bytes)
        .map_err(|e| format!("building the ARP reply: {e}"))?;
    let end = bytes.len() as u16;
    bytes.resize(MIN_FRAME, 0);
    Ok(Template {
        bytes,
        // An empty IP header range: the editor patches no checksum.
        l3_off: end,
        l4_off: end,
        csum_off: 0,
        inner_csum_off: 0,
        inner_l3_off: 0,
        stamp_off: None,
        ipv6: false,
        tcp: false,
        no_ip: true,
        sink: SinkMatch {
            tcp: false,
            port: 0,
            stamp_off: None,
        },
    })
}

/// What the sink matches: the outer L4 protocol and destination port, and
/// where the stamp is from the start of the outer L4 payload (through a
/// VXLAN header and the inner frame, past the raw bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SinkMatch {
    pub tcp: bool,
    pub port: u16,
    pub stamp_off: Option<u16>,
}

/// A stream's header stack: an 802.1Q tag; IPv6 instead of IPv4 (with
/// these addresses); UDP or TCP, or a VXLAN encapsulation (outer UDP) of
/// an inner Ethernet + IPv4 + UDP or TCP frame; raw bytes at the start of
/// the (innermost) payload, before the stamp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stack {
    pub vlan: Option<u16>,
    pub ipv6: Option<([u8; 16], [u8; 16])>,
    /// The transport: the inner frame's under VXLAN.
    pub l4: L4,
    pub vxlan: Option<Vxlan>,
    pub raw: Vec<u8>,
}

/// The (outer) transport header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum L4 {
    #[default]
    Udp,
    /// TCP with these flags (RFC 9293 §3.1's bit order: CWR ECE URG ACK
    /// PSH RST SYN FIN, FIN the lowest), sequence number 1, window 65535,
    /// no options: a stateless stream, not a connection.
    Tcp { flags: u8 },
}

/// RFC 7348's encapsulation: outer UDP to port 4789 from the stream's
/// source port (the entropy §5 puts there), a VXLAN header with `vni`,
/// then the inner frame with these addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vxlan {
    pub vni: u32,
    pub inner: Udp,
}

/// VXLAN's IANA port (RFC 7348 §5).
pub const VXLAN_PORT: u16 = 4789;
impl L4 {
    /// The spec's kind of this transport, whose header lengths the spec's
    /// validation counts too.
    fn kind(self) -> L4Kind {
        match self {
            L4::Udp => L4Kind::Udp,
            L4::Tcp { .. } => L4Kind::Tcp,
        }
    }

    fn header_len(self) -> usize {
        usize::from(self.kind().header_len())
    }

    /// The header with these ports and, for TCP, RFC 9293 §3.1's flag
    /// bits (CWR ECE URG ACK PSH RST SYN FIN, FIN the lowest); checksum 0.
    fn header(self, sport: u16, dport: u16, len: usize) -> Header {
        match self {
            L4::Udp => Header::Udp(UdpHeader {
                source_port: sport,
                destination_port: dport,
                length: len as u16,
                checksum: 0,
            }),
            L4::Tcp { flags } => {
                let mut tcp = etherparse::TcpHeader::new(sport, dport, 1, 65535);
                let bit = |k: u8| flags & (1 << k) != 0;
                (tcp.fin, tcp.syn, tcp.rst, tcp.psh) = (bit(0), bit(1), bit(2), bit(3));
                (tcp.ack, tcp.urg, tcp.ece, tcp.cwr) = (bit(4), bit(5), bit(6), bit(7));
                Header::Tcp(tcp)
            }
        }
    }
}

enum Header {
    Udp(UdpHeader),
    Tcp(etherparse::TcpHeader),
}

impl Stack {
    /// (network header, L4 header) offsets.
    pub fn offsets(&self) -> (u16, u16) {
        let l3 = 14 + if self.vlan.is_some() { 4 } else { 0 };
        (l3, l3 + if self.ipv6.is_some() { 40 } else { 20 })
    }
    /// The outer transport: UDP under VXLAN (RFC 7348 §5).
    fn outer(&self) -> L4 {
        if self.vxlan.is_some() {
            L4::Udp
        } else {
            self.l4
        }
    }
    /// Every header's bytes: the start of the innermost payload.
    pub fn headers(&self) -> usize {
        usize::from(self.offsets().1)
            + self.outer().header_len()
            + self
                .vxlan
                .map_or(0, |_| usize::from(vxlan_overhead(self.l4.kind())))
    }
}

/// Addresses of a UDP stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

/// A frame of `frame_len` bytes (Ethernet header to the end of the
/// payload, no FCS) on `stack`, its headers written by etherparse, its
/// payload the raw bytes then zeros, its checksums computed. The IPv4
/// addresses of `a` are unused with IPv6.
///
/// Checksums that are zero on purpose: an outer UDP checksum over IPv4
/// under VXLAN (RFC 7348 §5: it SHOULD be zero) and an inner UDP
/// checksum (RFC 768 allows none over IPv4), so the stamp the generator
/// writes into the inner payload needs no checksum of its own; an inner
/// TCP checksum is computed (TCP has no "none", RFC 9293 §3.1), and the
/// generator patches it for the stamp (`inner_csum_off`). A TCP
/// checksum that comes out 0 is sent as 0xffff, its equal in ones'
/// complement, because the generator patches only a non-zero checksum.
pub fn frame(a: &Udp, stack: &Stack, frame_len: usize) -> Result<Template, String> {
    let (l3, l4) = stack.offsets();
    let headers = stack.headers();
    let least = MIN_FRAME.max(headers + stack.raw.len());
    if frame_len < least {
        return Err(format!(
            "a frame of {frame_len} bytes is below its headers' {} or Ethernet's minimum of {MIN_FRAME}",
            headers + stack.raw.len()
        ));
    }
    let io = |e: std::io::Error| e.to_string();
    let mut payload = vec![0u8; frame_len - headers];
    payload[..stack.raw.len()].copy_from_slice(&stack.raw);
    let room = payload.len() - stack.raw.len() >= STAMP;
    // The outer L4 payload: the payload itself, or VXLAN and the inner
    // frame (and where in it the inner TCP checksum is).
    let mut inner_csum = 0;
    let l4_payload = match &stack.vxlan {
        None => payload,
        Some(vx) => {
            let i = &vx.inner;
            let mut b =
                Vec::with_capacity(usize::from(vxlan_overhead(stack.l4.kind())) + payload.len());
            // RFC 7348 §5: flags with I set, 24 reserved bits, the VNI,
            // 8 reserved bits.
            b.extend_from_slice(&[0x08, 0, 0, 0]);
            b.extend_from_slice(&(vx.vni << 8).to_be_bytes());
            etherparse::Ethernet2Header {
                source: i.src_mac,
                destination: i.dst_mac,
                ether_type: EtherType::IPV4,
            }
            .write(&mut b)
            .map_err(io)?;
            let len = stack.l4.header_len() + payload.len();
            let proto = match stack.l4 {
                L4::Udp => IpNumber::UDP,
                L4::Tcp { .. } => IpNumber::TCP,
            };
            let mut ip = Ipv4Header::new(len as u16, 64, proto, i.src.octets(), i.dst.octets())
                .map_err(|e| e.to_string())?;
            ip.header_checksum = ip.calc_header_checksum();
            ip.write(&mut b).map_err(io)?;
            match stack.l4.header(i.sport, i.dport, len) {
                Header::Udp(u) => u.write(&mut b).map_err(io)?,
                Header::Tcp(mut t) => {
                    let c = t
                        .calc_checksum_ipv4(&ip, &payload)
                        .map_err(|e| e.to_string())?;
                    t.checksum = if c == 0 { 0xffff } else { c };
                    // From the outer L4 payload's start.
                    inner_csum = b.len() + 16;
                    t.write(&mut b).map_err(io)?;
                }
            }
            b.extend_from_slice(&payload);
            b
        }
    };
    let outer = stack.outer();
    let l4_len = outer.header_len() + l4_payload.len();
    let (proto, dport) = match (outer, &stack.vxlan) {
        (_, Some(_)) => (IpNumber::UDP, VXLAN_PORT),
        (L4::Tcp { .. }, None) => (IpNumber::TCP, a.dport),
        (L4::Udp, None) => (IpNumber::UDP, a.dport),
    };
    let mut out = Vec::with_capacity(frame_len);
    let ip_type = if stack.ipv6.is_some() {
        EtherType::IPV6
    } else {
        EtherType::IPV4
    };
    etherparse::Ethernet2Header {
        source: a.src_mac,
        destination: a.dst_mac,
        ether_type: if stack.vlan.is_some() {
            EtherType::VLAN_TAGGED_FRAME
        } else {
            ip_type
        },
    }
    .write(&mut out)
    .map_err(io)?;
    if let Some(v) = stack.vlan {
        etherparse::SingleVlanHeader {
            pcp: etherparse::VlanPcp::ZERO,
            drop_eligible_indicator: false,
            vlan_id: etherparse::VlanId::try_new(v).map_err(|e| e.to_string())?,
            ether_type: ip_type,
        }
        .write(&mut out)
        .map_err(io)?;
    }
    // The L4 checksum over the network header's pseudo-header.
    enum Net {
        V4(Ipv4Header),
        V6(Ipv6Header),
    }
    let net = match stack.ipv6 {
        None => {
            let mut ip = Ipv4Header::new(l4_len as u16, 64, proto, a.src.octets(), a.dst.octets())
                .map_err(|e| e.to_string())?;
            ip.header_checksum = ip.calc_header_checksum();
            ip.write(&mut out).map_err(io)?;
            Net::V4(ip)
        }
        Some((s, d)) => {
            let ip = Ipv6Header {
                traffic_class: 0,
                flow_label: Default::default(),
                payload_length: l4_len as u16,
                next_header: proto,
                hop_limit: 64,
                source: s,
                destination: d,
            };
            ip.write(&mut out).map_err(io)?;
            Net::V6(ip)
        }
    };
    let csum_off;
    match outer.header(a.sport, dport, l4_len) {
        Header::Udp(mut udp) => {
            udp.checksum = match (&net, &stack.vxlan) {
                (Net::V4(_), Some(_)) => Ok(0),
                (Net::V4(ip), None) => udp.calc_checksum_ipv4(ip, &l4_payload),
                (Net::V6(ip), _) => udp.calc_checksum_ipv6(ip, &l4_payload),
            }
            .map_err(|e| e.to_string())?;
            udp.write(&mut out).map_err(io)?;
            csum_off = l4 + 6;
        }
        Header::Tcp(mut tcp) => {
            let c = match &net {
                Net::V4(ip) => tcp.calc_checksum_ipv4(ip, &l4_payload),
                Net::V6(ip) => tcp.calc_checksum_ipv6(ip, &l4_payload),
            }
            .map_err(|e| e.to_string())?;
            tcp.checksum = if c == 0 { 0xffff } else { c };
            tcp.write(&mut out).map_err(io)?;
            csum_off = l4 + 16;
        }
    }
    let l4_payload_off = out.len();
    out.extend_from_slice(&l4_payload);
    debug_assert_eq!(out.len(), frame_len);
    let stamp = room.then_some((headers + stack.raw.len()) as u16);
    Ok(Template {
        bytes: out,
        l3_off: l3,
        l4_off: l4,
        csum_off,
        inner_csum_off: if inner_csum > 0 {
            (l4_payload_off + inner_csum) as u16
        } else {
            0
        },
        // Past the VXLAN header and the inner Ethernet header.
        inner_l3_off: if stack.vxlan.is_some() {
            (l4_payload_off + 8 + 14) as u16
        } else {
            0
        },
        stamp_off: stamp,
        ipv6: stack.ipv6.is_some(),
        tcp: matches!(outer, L4::Tcp { .. }),
        no_ip: false,
        sink: SinkMatch {
            tcp: matches!(outer, L4::Tcp { .. }),
            port: dport,
            stamp_off: stamp.map(|s| s - l4_payload_off as u16),
        },
    })
}

/// A UDP frame of `frame_len` bytes (Ethernet header to the end of the
/// payload, no FCS), its payload zeros, its UDP checksum computed.
pub fn udp(a: &Udp, frame_len: usize) -> Result<Template, String> {
    frame(a, &Stack::default(), frame_len)
}

/// A TCP SYN from `a.sport` to `a.dport` with sequence number `isn` and
/// the MSS option (RFC 793 §3.1; RFC 879), padded to Ethernet's minimum:
/// the stateful test's clients open their connections with it, the
/// generator stepping its source port (`Udp` holds the addresses).
pub fn tcp_syn(a: &Udp, isn: u32, mss: u16) -> Result<Template, String> {
    let mut tcp = etherparse::TcpHeader::new(a.sport, a.dport, isn, 65535);
    tcp.syn = true;
    tcp.set_options(&[etherparse::TcpOptionElement::MaximumSegmentSize(mss)])
        .map_err(|e| e.to_string())?;
    let mut ip = Ipv4Header::new(
        tcp.header_len() as u16,
        64,
        IpNumber::TCP,
        a.src.octets(),
        a.dst.octets(),
    )
    .map_err(|e| e.to_string())?;
    ip.dont_fragment = true;
    ip.header_checksum = ip.calc_header_checksum();
    tcp.checksum = tcp
        .calc_checksum_ipv4(&ip, &[])
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(MIN_FRAME);
    out.extend_from_slice(&a.dst_mac);
    out.extend_from_slice(&a.src_mac);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    ip.write(&mut out).map_err(|e| e.to_string())?;
    tcp.write(&mut out).map_err(|e| e.to_string())?;
    out.resize(out.len().max(MIN_FRAME), 0);
    Ok(Template {
        bytes: out,
        l3_off: 14,
        l4_off: 34,
        csum_off: 34 + 16,
        inner_csum_off: 0,
        inner_l3_off: 0,
        stamp_off: None,
        ipv6: false,
        tcp: true,
        no_ip: false,
        sink: SinkMatch {
            tcp: true,
            port: a.dport,
            stamp_off: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Udp = Udp {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: Ipv4Addr::new(198, 18, 0, 1),
        dst: Ipv4Addr::new(198, 18, 0, 2),
        sport: 40000,
        dport: 9,
    };

    #[test]
    fn a_64_byte_frame_has_room_for_the_stamp() {
        let t = udp(&A, 60).unwrap();
        assert_eq!(t.bytes.len(), 60);
        assert_eq!(t.stamp_off, Some(42));
        let p = etherparse::SlicedPacket::from_ethernet(&t.bytes).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = p.transport else {
            panic!("not UDP")
        };
        assert_eq!(u.destination_port(), 9);
        assert!(udp(&A, 59).unwrap_err().contains("minimum"));
    }

    #[test]
    fn a_tcp_stack_has_its_flags_raw_bytes_and_a_stamp_after_them() {
        let stack = Stack {
            l4: L4::Tcp { flags: 0x18 },
            raw: b"GET /".to_vec(),
            ..Default::default()
        };
        let t = frame(&A, &stack, 100).unwrap();
        assert_eq!((t.l4_off, t.csum_off, t.tcp), (34, 50, true));
        assert_eq!(t.stamp_off, Some(54 + 5));
        assert_eq!(
            t.sink,
            SinkMatch {
                tcp: true,
                port: 9,
                stamp_off: Some(5)
            }
        );
        let p = etherparse::SlicedPacket::from_ethernet(&t.bytes).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let Some(etherparse::TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("not TCP")
        };
        assert!(tcp.psh() && tcp.ack() && !tcp.syn());
        assert_eq!(&tcp.payload()[..5], b"GET /");
        assert_eq!(
            tcp.checksum(),
            tcp.to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
                .unwrap()
        );
        // Headers and raw bytes must fit the frame.
        let big = Stack {
            raw: vec![1; 20],
            ..stack
        };
        assert!(frame(&A, &big, 60).is_err());
    }

    /// The inner frame's addresses in the VXLAN tests.
    const INNER: Udp = Udp {
        src_mac: [2, 0, 0, 0, 1, 1],
        dst_mac: [2, 0, 0, 0, 1, 2],
        src: Ipv4Addr::new(198, 19, 100, 1),
        dst: Ipv4Addr::new(198, 19, 100, 2),
        sport: 5000,
        dport: 6000,
    };

    #[test]
    fn a_vxlan_stack_wraps_an_inner_udp_frame_as_rfc_7348_says() {
        let inner = INNER;
        let stack = Stack {
            vxlan: Some(Vxlan {
                vni: 0x123456,
                inner,
            }),
            ..Default::default()
        };
        let t = frame(&A, &stack, 128).unwrap();
        assert_eq!(t.bytes.len(), 128);
        // The stamp after the inner UDP header: 42 + 50.
        assert_eq!(t.stamp_off, Some(92));
        assert_eq!(t.sink.port, VXLAN_PORT);
        assert_eq!(t.sink.stamp_off, Some(50));
        let p = etherparse::SlicedPacket::from_ethernet(&t.bytes).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!((u.source_port(), u.destination_port()), (40000, 4789));
        assert_eq!(u.checksum(), 0, "RFC 7348 §5: the outer checksum is zero");
        let vx = u.payload();
        assert_eq!(&vx[..8], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        let q = etherparse::SlicedPacket::from_ethernet(&vx[8..]).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &q.net else {
            panic!("inner not IPv4")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        assert_eq!(h.destination, [198, 19, 100, 2]);
        let Some(etherparse::TransportSlice::Udp(iu)) = &q.transport else {
            panic!("inner not UDP")
        };
        assert_eq!(iu.destination_port(), 6000);
        assert_eq!(usize::from(iu.length()), 128 - 92 + 8);
    }

    #[test]
    fn a_vxlan_stack_can_carry_an_inner_tcp_segment_with_its_checksum() {
        let inner = Udp { dport: 80, ..INNER };
        let stack = Stack {
            l4: L4::Tcp { flags: 0x18 },
            vxlan: Some(Vxlan { vni: 9, inner }),
            raw: b"GET /".to_vec(),
            ..Default::default()
        };
        let t = frame(&A, &stack, 160).unwrap();
        // The outer stays UDP to 4789, without a checksum; the inner TCP
        // header is 12 bytes longer than UDP's.
        assert!(!t.tcp && !t.sink.tcp);
        assert_eq!((t.sink.port, t.csum_off), (VXLAN_PORT, 34 + 6));
        assert_eq!(t.stamp_off, Some(42 + 62 + 5));
        assert_eq!(t.inner_csum_off, 42 + 8 + 14 + 20 + 16);
        assert_eq!(t.inner_l3_off, 42 + 8 + 14);
        assert_eq!(t.bytes[usize::from(t.inner_l3_off)], 0x45, "IPv4, 20 bytes");
        let p = etherparse::SlicedPacket::from_ethernet(&t.bytes).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!((u.destination_port(), u.checksum()), (4789, 0));
        let q = etherparse::SlicedPacket::from_ethernet(&u.payload()[8..]).unwrap();
        let (Some(etherparse::NetSlice::Ipv4(ip)), Some(etherparse::TransportSlice::Tcp(tcp))) =
            (&q.net, &q.transport)
        else {
            panic!("inner not IPv4 and TCP")
        };
        assert!(tcp.psh() && tcp.ack());
        assert_eq!((tcp.source_port(), tcp.destination_port()), (5000, 80));
        assert_eq!(&tcp.payload()[..5], b"GET /");
        let at = usize::from(t.inner_csum_off);
        assert_eq!(
            u16::from_be_bytes([t.bytes[at], t.bytes[at + 1]]),
            tcp.checksum()
        );
        assert_eq!(
            tcp.checksum(),
            tcp.to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
                .unwrap()
        );
        // A UDP inner frame has no checksum to patch.
        let udp = Stack {
            l4: L4::Udp,
            ..stack
        };
        assert_eq!(frame(&A, &udp, 160).unwrap().inner_csum_off, 0);
    }

    #[test]
    fn a_syn_carries_the_mss_and_right_checksums() {
        let t = tcp_syn(&A, 1000, 1460).unwrap();
        assert_eq!(t.bytes.len(), 60);
        let p = etherparse::SlicedPacket::from_ethernet(&t.bytes).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let Some(etherparse::TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("not TCP")
        };
        let h = ip.header().to_header();
        assert!(tcp.syn() && !tcp.ack());
        assert_eq!(tcp.sequence_number(), 1000);
        assert_eq!(&t.bytes[54..58], &[2, 4, 0x05, 0xb4]);
        assert_eq!(
            tcp.checksum(),
            tcp.to_header().calc_checksum_ipv4(&h, &[]).unwrap()
        );
    }
}
