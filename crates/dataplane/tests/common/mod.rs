//! What every `BPF_PROG_TEST_RUN` fixture file needs: the root check and
//! one frame through the switch with the mirror records it produced.

use std::cell::RefCell;
use std::rc::Rc;

use wirelab_dataplane::{parse_mirror_record, wl_mirror_hdr, Switch};

pub fn have_bpf() -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    eprintln!("SKIPPED: BPF_PROG_TEST_RUN needs root (CAP_BPF + CAP_NET_ADMIN)");
    false
}

/// Runs one frame: (verdict, output bytes, the mirror records waiting in
/// the ring afterwards, oldest first).
pub fn run_frame(sw: &Switch, input: &[u8]) -> (u32, Vec<u8>, Vec<(wl_mirror_hdr, Vec<u8>)>) {
    let (v, out) = sw.test_run(input).expect("test run");
    let got: Rc<RefCell<Vec<(wl_mirror_hdr, Vec<u8>)>>> = Rc::default();
    let sink = got.clone();
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(sw.ring(), move |d: &[u8]| {
        let (h, data) = parse_mirror_record(d).expect("record parses");
        sink.borrow_mut().push((h, data.to_vec()));
        0
    })
    .unwrap();
    // Records are submitted without a wakeup; consume() reads them anyway.
    b.build().unwrap().consume().unwrap();
    let records = got.take();
    (v, out, records)
}

/// An ECN-settable UDP frame of `len` bytes in all, from 198.18.0.1
/// (02:00:00:00:00:01) port 40000 to `dst` (02:00:00:00:00:02) port
/// `dport`: what the vAQM fixtures queue.
#[allow(dead_code)] // not every fixture file sends UDP
pub fn udp_frame(
    dst: std::net::Ipv4Addr,
    dport: u16,
    len: usize,
    ecn: etherparse::IpEcn,
) -> Vec<u8> {
    use etherparse::{IpNumber, Ipv4Header, UdpHeader};
    let payload = vec![0x5a; len - 14 - 20 - 8];
    let udp = UdpHeader::without_ipv4_checksum(40000, dport, payload.len()).unwrap();
    let mut ip = Ipv4Header::new(
        (8 + payload.len()) as u16,
        64,
        IpNumber::UDP,
        [198, 18, 0, 1],
        dst.octets(),
    )
    .unwrap();
    ip.ecn = ecn;
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = Vec::new();
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    ip.write(&mut out).unwrap();
    udp.write(&mut out).unwrap();
    out.extend_from_slice(&payload);
    assert_eq!(out.len(), len);
    out
}
