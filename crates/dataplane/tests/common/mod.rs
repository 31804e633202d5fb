//! What every `BPF_PROG_TEST_RUN` fixture file needs: the root check and
//! one frame through the switch with the mirror records it produced.

use std::cell::RefCell;
use std::rc::Rc;

use wirelab_dataplane::{parse_mirror_record, wl_mirror_hdr, Switch};

/// Pins this thread to `cpu`; false if the machine does not have it.
#[allow(dead_code)] // not every fixture file moves between CPUs
pub fn pin(cpu: usize) -> bool {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).is_ok()
        && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
}

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

/// One packet of a fixture table, written as Katran's and aya's BPF tests
/// write them: what it is, the frame in, the verdict and frame out, the
/// mirror record it leaves, and what it changes in the maps.
#[allow(dead_code)] // not every fixture file uses tables
pub struct Fixture {
    pub what: String,
    /// The pipeline's clock for this packet (`Config::test_clock`), or
    /// the real one.
    pub at: Option<u64>,
    pub input: Vec<u8>,
    pub verdict: u32,
    pub output: Out,
    /// The record's pipeline metadata; `None`: no record at all.
    pub record: Option<Rec>,
    /// Every map change this packet makes that the fixture cares about.
    pub maps: Vec<Change>,
}

/// The frame the program leaves.
#[allow(dead_code)]
pub enum Out {
    /// Unchanged.
    Same,
    /// Exactly these bytes.
    Bytes(Vec<u8>),
    /// Another frame the switch held, which this packet carries out behind
    /// its own clone (a `reorder` event's release): the skb left as these
    /// bytes, while the trace shows the packet as it came in.
    Carries(Vec<u8>),
}

/// A mirror record's metadata (`wl_mirror_hdr`), as a fixture states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    pub conn: u32,
    pub data_dir: u32,
    pub index: u32,
    pub iter: u32,
    pub first_tx: u32,
    pub action: wirelab_dataplane::Action,
    pub event_id: u32,
    /// The vAQM stage's queue, its estimate after the packet, its verdict.
    pub vq: u32,
    pub vq_bytes: u32,
    pub aqm: wirelab_dataplane::Aqm,
}

#[allow(dead_code)]
impl Rec {
    /// A packet of no connection of the spec.
    pub const NONE: Rec = Rec {
        conn: 0,
        data_dir: 0,
        index: 0,
        iter: 0,
        first_tx: 0,
        action: wirelab_dataplane::Action::None,
        event_id: 0,
        vq: 0,
        vq_bytes: 0,
        aqm: wirelab_dataplane::Aqm::None,
    };

    fn of(h: &wl_mirror_hdr) -> Rec {
        Rec {
            conn: h.conn,
            data_dir: h.data_dir,
            index: h.index,
            iter: h.iter,
            first_tx: h.first_tx,
            action: h.applied().expect("an action this build knows"),
            event_id: h.event_id,
            vq: h.vq,
            vq_bytes: h.vq_bytes,
            aqm: h.verdict().expect("a verdict this build knows"),
        }
    }
}

/// A map value a packet changes: `read` it before and after, and it must
/// have grown by `by`.
#[allow(dead_code)]
#[derive(Clone, Copy)]
pub struct Change {
    pub what: &'static str,
    pub read: fn(&Switch) -> u64,
    pub by: u64,
}

/// Runs a fixture table in order on one switch, checking every field of
/// every row; a failure names the row.
#[allow(dead_code)]
pub fn check_table(sw: &Switch, table: &[Fixture]) {
    for f in table {
        let what = &f.what;
        let before: Vec<u64> = f.maps.iter().map(|c| (c.read)(sw)).collect();
        if let Some(t) = f.at {
            sw.set_test_clock(t).expect("the switch has the test clock");
        }
        let (v, out, records) = run_frame(sw, &f.input);
        assert_eq!(v, f.verdict, "{what}: verdict");
        match &f.output {
            Out::Same => assert_eq!(out, f.input, "{what}: the frame is unchanged"),
            Out::Bytes(b) => assert_eq!(&out, b, "{what}: output frame"),
            Out::Carries(b) => assert_eq!(&out, b, "{what}: the held frame it carries"),
        }
        let shown = match &f.output {
            Out::Carries(_) => &f.input,
            _ => &out,
        };
        match (&f.record, records.as_slice()) {
            (None, []) => {}
            (Some(want), [(h, data)]) => {
                assert_eq!(Rec::of(h), *want, "{what}: mirror record");
                let cap = (h.cap_len as usize).min(shown.len());
                assert_eq!(
                    data[..],
                    shown[..cap],
                    "{what}: the trace shows the packet as the program left it"
                );
            }
            (want, got) => panic!(
                "{what}: expected record {want:?}, got {} records",
                got.len()
            ),
        }
        for (c, b) in f.maps.iter().zip(before) {
            assert_eq!((c.read)(sw), b + c.by, "{what}: {}", c.what);
        }
    }
}

/// `frame` (Ethernet + IPv4) as the switch leaves it after setting CE: the
/// ECN bits 11 and the IPv4 header checksum recomputed (by etherparse, not
/// by the arithmetic under test).
#[allow(dead_code)]
pub fn with_ce(frame: &[u8]) -> Vec<u8> {
    let mut out = frame.to_vec();
    out[15] |= 3;
    let (ip, _) = etherparse::Ipv4Header::from_slice(&out[14..]).expect("an IPv4 frame");
    out[24..26].copy_from_slice(&ip.calc_header_checksum().to_be_bytes());
    out
}
