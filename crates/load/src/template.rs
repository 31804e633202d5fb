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
