//! The frames the generator replicates (Norma's template packets, §3.2),
//! built with etherparse so the checksums the program then patches start
//! right, and the offsets the program needs.

use std::net::Ipv4Addr;

use etherparse::{IpNumber, Ipv4Header, UdpHeader};
use serde::Serialize;

/// Ethernet + IPv4 + UDP header bytes.
pub const UDP_HEADERS: usize = 14 + 20 + 8;
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
    /// The UDP checksum (0: the template carries none).
    pub csum_off: u16,
    /// The stamp, at the start of the payload (None: no room).
    pub stamp_off: Option<u16>,
    /// The network header is IPv6.
    pub ipv6: bool,
}

/// A stream's header stack below UDP: an 802.1Q tag, and IPv6 instead of
/// IPv4 (with these addresses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stack {
    pub vlan: Option<u16>,
    pub ipv6: Option<([u8; 16], [u8; 16])>,
}

impl Stack {
    /// (network header, UDP header) offsets.
    pub fn offsets(&self) -> (u16, u16) {
        let l3 = 14 + if self.vlan.is_some() { 4 } else { 0 };
        (l3, l3 + if self.ipv6.is_some() { 40 } else { 20 })
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

/// A UDP frame of `frame_len` bytes on `stack` (an 802.1Q tag, IPv6),
/// built by etherparse: its payload zeros, its checksums computed. The
/// IPv4 addresses of `a` are unused with IPv6.
pub fn udp_on(a: &Udp, stack: &Stack, frame_len: usize) -> Result<Template, String> {
    if *stack == Stack::default() {
        return udp(a, frame_len);
    }
    let (l3, l4) = stack.offsets();
    let headers = usize::from(l4) + 8;
    if frame_len < MIN_FRAME.max(headers) {
        return Err(format!(
            "a frame of {frame_len} bytes is below its headers' {headers} or Ethernet's minimum of {MIN_FRAME}"
        ));
    }
    let payload = vec![0u8; frame_len - headers];
    let eth = etherparse::PacketBuilder::ethernet2(a.src_mac, a.dst_mac);
    let vid = |v: u16| etherparse::VlanId::try_new(v).map_err(|e| e.to_string());
    let mut out = Vec::with_capacity(frame_len);
    let r = match (stack.vlan, stack.ipv6) {
        (Some(v), Some((s, d))) => eth
            .single_vlan(vid(v)?)
            .ipv6(s, d, 64)
            .udp(a.sport, a.dport)
            .write(&mut out, &payload),
        (Some(v), None) => eth
            .single_vlan(vid(v)?)
            .ipv4(a.src.octets(), a.dst.octets(), 64)
            .udp(a.sport, a.dport)
            .write(&mut out, &payload),
        (None, Some((s, d))) => eth
            .ipv6(s, d, 64)
            .udp(a.sport, a.dport)
            .write(&mut out, &payload),
        (None, None) => unreachable!("handled above"),
    };
    r.map_err(|e| e.to_string())?;
    Ok(Template {
        bytes: out,
        l3_off: l3,
        l4_off: l4,
        csum_off: l4 + 6,
        stamp_off: (payload.len() >= STAMP).then_some(headers as u16),
        ipv6: stack.ipv6.is_some(),
    })
}

/// A UDP frame of `frame_len` bytes (Ethernet header to the end of the
/// payload, no FCS), its payload zeros, its UDP checksum computed.
pub fn udp(a: &Udp, frame_len: usize) -> Result<Template, String> {
    if frame_len < MIN_FRAME.max(UDP_HEADERS) {
        return Err(format!(
            "a frame of {frame_len} bytes is below Ethernet's minimum of {MIN_FRAME}"
        ));
    }
    let payload = vec![0u8; frame_len - UDP_HEADERS];
    let udp =
        UdpHeader::with_ipv4_checksum(a.sport, a.dport, &ip_header(a, payload.len())?, &payload)
            .map_err(|e| e.to_string())?;
    let ip = ip_header(a, payload.len())?;
    let mut out = Vec::with_capacity(frame_len);
    out.extend_from_slice(&a.dst_mac);
    out.extend_from_slice(&a.src_mac);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    ip.write(&mut out).map_err(|e| e.to_string())?;
    udp.write(&mut out).map_err(|e| e.to_string())?;
    out.extend_from_slice(&payload);
    Ok(Template {
        bytes: out,
        l3_off: 14,
        l4_off: 34,
        csum_off: 34 + 6,
        stamp_off: (payload.len() >= STAMP).then_some(UDP_HEADERS as u16),
        ipv6: false,
    })
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
        stamp_off: None,
        ipv6: false,
    })
}

fn ip_header(a: &Udp, payload: usize) -> Result<Ipv4Header, String> {
    let mut ip = Ipv4Header::new(
        (8 + payload) as u16,
        64,
        IpNumber::UDP,
        a.src.octets(),
        a.dst.octets(),
    )
    .map_err(|e| e.to_string())?;
    ip.header_checksum = ip.calc_header_checksum();
    Ok(ip)
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
