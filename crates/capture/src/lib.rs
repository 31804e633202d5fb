//! The dumper: drains the switch's capture ring while a run goes on, then
//! writes the trace in mirror-sequence order as pcapng (Lumina §3.4–3.5), and
//! checks its integrity against the switch's and the kernel's counters.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use serde::Serialize;
use wirelab_dataplane::{parse_mirror_record, parse_truth_sample, Switch, TruthSample};
use wirelab_trace::Meta;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("capture ring: {0}")]
    Ring(#[from] libbpf_rs::Error),
    #[error("starting the dumper: {0}")]
    Setup(String),
    #[error("writing {path}: {detail}")]
    Write { path: String, detail: String },
}

/// One mirrored packet as the switch reported it.
#[derive(Debug, Clone)]
pub struct MirrorRecord {
    pub meta: Meta,
    pub pkt_len: u32,
    pub data: Vec<u8>,
}

/// Offset from the switch clock (CLOCK_MONOTONIC, what bpf_ktime_get_ns
/// reads) to wall-clock time, for pcapng timestamps.
pub fn monotonic_to_realtime_ns() -> i128 {
    use nix::time::{clock_gettime, ClockId};
    let ts = |c| {
        clock_gettime(c)
            .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
            .unwrap_or(0)
    };
    let m1 = ts(ClockId::CLOCK_MONOTONIC);
    let r = ts(ClockId::CLOCK_REALTIME);
    let m2 = ts(ClockId::CLOCK_MONOTONIC);
    r - (m1 + m2) / 2
}

fn record_from(bytes: &[u8]) -> Option<MirrorRecord> {
    let (h, data) = parse_mirror_record(bytes)?;
    Some(MirrorRecord {
        meta: Meta {
            seq: h.seq,
            ts: h.ts_ns,
            sent: h.sent_ns,
            port: h.port,
            conn: h.conn,
            data_dir: h.data_dir != 0,
            index: h.index,
            iter: h.iter,
            first_tx: h.first_tx != 0,
            // A number this build does not know means the program and
            // this reader disagree: the record is not read as another.
            event: h.applied()?,
            event_id: h.event_id,
            vq: h.vq,
            vq_bytes: h.vq_bytes,
            aqm: h.verdict()?,
            cnm: h.qcn_fb,
            masks: h.es_visited,
            es_drop: h.es_drop != 0,
        },
        pkt_len: h.pkt_len,
        data: data.to_vec(),
    })
}

const DRAIN_EVERY: Duration = Duration::from_millis(2);

/// Drains the capture ring on its own thread.
///
/// Records are appended to one growing buffer as `[len: u32][record]` and
/// parsed only when the run is over: no allocation or lock per packet on the
/// thread that competes with the lab for CPU.
pub struct Dumper {
    drain: Drain,
}

/// A ring being drained on its own thread (`spawn_drain`).
struct Drain {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Vec<u8>, libbpf_rs::Error>>>,
}

impl Drop for Drain {
    /// A run that ends early (an error) still stops its drain thread.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drain {
    /// Stops after draining what is in the ring; the raw buffer.
    fn finish(mut self) -> Result<Vec<u8>, Error> {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.take().expect("finish runs once");
        Ok(thread.join().expect("ring drain thread panicked")?)
    }
}

/// Drains `ring` on a thread named `name` into one growing buffer of
/// `[len: u32][record]`, until `stop`; `stall` delays the first drain.
fn spawn_drain(ring: libbpf_rs::MapHandle, name: &str, stall: Duration) -> Result<Drain, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let buf: Rc<RefCell<Vec<u8>>> = Rc::new(RefCell::new(Vec::with_capacity(1 << 20)));
            let sink = buf.clone();
            let mut b = libbpf_rs::RingBufferBuilder::new();
            let built = b
                .add(&ring, move |bytes: &[u8]| {
                    let mut v = sink.borrow_mut();
                    v.extend_from_slice(&(bytes.len() as u32).to_ne_bytes());
                    v.extend_from_slice(bytes);
                    0
                })
                .map(|_| ())
                .and_then(|_| b.build());
            let rb = match built {
                Ok(rb) => {
                    let _ = ready_tx.send(Ok(()));
                    rb
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return Err(e);
                }
            };
            if !stall.is_zero() {
                std::thread::sleep(stall);
            }
            // The producer wakes us only when a quarter of the ring is
            // full (or never); otherwise records are collected every
            // DRAIN_EVERY.
            while !stop2.load(Ordering::Acquire) {
                rb.poll(DRAIN_EVERY)?;
                rb.consume()?;
            }
            rb.consume()?;
            drop(rb);
            Ok(Rc::try_unwrap(buf)
                .map(RefCell::into_inner)
                .unwrap_or_default())
        })
        .expect("spawning a ring drain thread");
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Drain {
            stop,
            thread: Some(thread),
        }),
        Ok(Err(e)) => Err(Error::Setup(e)),
        Err(_) => Err(Error::Setup(format!("the {name} thread died"))),
    }
}

/// Splits a drained buffer into its records.
fn records(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = u32::from_ne_bytes(raw.get(off..off + 4)?.try_into().expect("4 bytes")) as usize;
        let r = raw.get(off + 4..off + 4 + len)?;
        off += 4 + len;
        Some(r)
    })
}

impl Dumper {
    /// Starts draining. `stall` delays the first drain: fault injection
    /// into wirelab's own capture path, to prove the integrity check works.
    pub fn start(switch: &Switch, stall: Duration) -> Result<Dumper, Error> {
        let ring = switch
            .ring_handle()
            .map_err(|e| Error::Setup(e.to_string()))?;
        Ok(Dumper {
            drain: spawn_drain(ring, "wirelab-dumper", stall)?,
        })
    }

    /// Stops after draining what is in the ring; records in mirror order.
    pub fn finish(self) -> Result<Vec<MirrorRecord>, Error> {
        let raw = self.drain.finish()?;
        let mut v: Vec<MirrorRecord> = records(&raw).filter_map(record_from).collect();
        // Records from different CPUs reach the ring slightly out of order;
        // the mirror sequence number is the order (Lumina §3.5).
        v.sort_by_key(|r| r.meta.seq);
        Ok(v)
    }
}

/// Drains the switch's ground-truth ring (bpf/truth.bpf.c) on its own thread.
pub struct TruthDumper {
    drain: Drain,
}

impl TruthDumper {
    pub fn start(switch: &Switch) -> Result<TruthDumper, Error> {
        let ring = switch
            .truth_ring_handle()
            .map_err(|e| Error::Setup(e.to_string()))?;
        Ok(TruthDumper {
            drain: spawn_drain(ring, "wirelab-truth", Duration::ZERO)?,
        })
    }

    /// Stops after draining what is in the ring; samples in time order.
    pub fn finish(self) -> Result<Vec<TruthSample>, Error> {
        let raw = self.drain.finish()?;
        let mut v: Vec<TruthSample> = records(&raw).filter_map(parse_truth_sample).collect();
        // Enqueues and dequeues may run on different CPUs.
        v.sort_by_key(|s| s.ts_ns);
        Ok(v)
    }
}

/// A switch port as the trace names it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    pub port: u32,
    pub name: String,
    /// Packets the switch received on this port (isb_ifrecv).
    pub received: u64,
    /// Records lost to a full ring (isb_ifdrop).
    pub lost: u64,
}

/// Writes records as pcapng: one interface per switch port (by port number),
/// nanosecond timestamps, metadata in each packet's comment, and interface
/// statistics at the end. Written to a temporary name and renamed, so a
/// failed write leaves no half file.
pub fn write_pcapng(
    path: &Path,
    records: &[MirrorRecord],
    ports: &[PortInfo],
    snap_len: u32,
    clock_offset_ns: i128,
) -> Result<(), Error> {
    let werr = write_error(path);
    let tmp = path.with_extension("pcapng.tmp");
    let mut w = begin(&tmp).map_err(|e| werr(&e))?;
    let mut max_port = 0;
    for p in ports {
        max_port = max_port.max(p.port);
    }
    // Interface ids are port - 1; a gap (none in our plans) gets a placeholder.
    for port in 1..=max_port {
        let name = ports
            .iter()
            .find(|p| p.port == port)
            .map_or_else(|| format!("port{port}"), |p| p.name.clone());
        interface(
            &mut w,
            name,
            format!("wirelab switch ingress port {port}"),
            snap_len,
        )
        .map_err(|e| werr(&e))?;
    }
    let wall = |ts: u64| (ts as i128 + clock_offset_ns).max(0) as u64;
    for r in records {
        if r.meta.port == 0 || r.meta.port > max_port {
            return Err(werr(&format!(
                "record {} has unknown port {}",
                r.meta.seq, r.meta.port
            )));
        }
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: r.meta.port - 1,
            timestamp: Duration::from_nanos(wall(r.meta.ts)),
            original_len: r.pkt_len,
            data: Cow::Borrowed(&r.data),
            options: vec![wirelab_trace::comment_option(&r.meta)],
        })
        .map_err(|e| werr(&e))?;
    }
    let end = records.last().map_or(0, |r| wall(r.meta.ts));
    for p in ports {
        w.write_pcapng_block(InterfaceStatisticsBlock {
            interface_id: p.port - 1,
            timestamp: end,
            options: vec![
                InterfaceStatisticsOption::IsbIfRecv(p.received),
                InterfaceStatisticsOption::IsbIfDrop(p.lost),
            ],
        })
        .map_err(|e| werr(&e))?;
    }
    finish(w, &tmp, path).map_err(|e| werr(&e))
}

type Writer = PcapNgWriter<BufWriter<File>>;

/// An error of writing `path`, from any error's text.
fn write_error(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> Error + '_ {
    move |e| Error::Write {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

/// A pcapng file begun at `tmp`, with wirelab's section header.
fn begin(tmp: &Path) -> Result<Writer, Box<dyn std::error::Error>> {
    let f = File::create(tmp)?;
    let shb = SectionHeaderBlock {
        endianness: Endianness::native(),
        major_version: 1,
        minor_version: 0,
        section_length: -1,
        options: vec![SectionHeaderOption::UserApplication(Cow::Owned(format!(
            "wirelab {}",
            env!("CARGO_PKG_VERSION")
        )))],
    };
    Ok(PcapNgWriter::with_section_header(BufWriter::new(f), shb)?)
}

/// An Ethernet interface with nanosecond timestamps.
fn interface(
    w: &mut Writer,
    name: String,
    description: String,
    snap_len: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: snap_len,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(name)),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(description)),
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    })?;
    Ok(())
}

/// Flushes `w` and renames `tmp` to `path`: a reader never sees half a file.
fn finish(w: Writer, tmp: &Path, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut inner = w.into_inner();
    std::io::Write::flush(&mut inner)?;
    drop(inner);
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// One frame of a sample file (`write_sample_pcapng`).
pub struct SamplePacket<'a> {
    /// Index into the file's interfaces.
    pub iface: u32,
    /// Wall-clock time (ns since the epoch).
    pub ts_ns: u64,
    /// The frame's length on the wire, of which `data` is the start.
    pub len: u32,
    pub data: &'a [u8],
    pub comment: String,
}

/// A pcapng of sampled frames (a load test's, as sent and as received):
/// one Ethernet interface per (name, description), nanosecond times, each
/// frame's comment kept (Wireshark shows it as `frame.comment`).
pub fn write_sample_pcapng<'a>(
    path: &Path,
    interfaces: &[(String, String)],
    snap_len: u32,
    packets: impl IntoIterator<Item = SamplePacket<'a>>,
) -> Result<(), Error> {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    let werr = write_error(path);
    let tmp = path.with_extension("pcapng.tmp");
    let mut w = begin(&tmp).map_err(|e| werr(&e))?;
    for (name, description) in interfaces {
        interface(&mut w, name.clone(), description.clone(), snap_len).map_err(|e| werr(&e))?;
    }
    for p in packets {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: p.iface,
            timestamp: Duration::from_nanos(p.ts_ns),
            original_len: p.len,
            data: Cow::Borrowed(p.data),
            options: vec![EnhancedPacketOption::Comment(Cow::Owned(p.comment))],
        })
        .map_err(|e| werr(&e))?;
    }
    finish(w, &tmp, path).map_err(|e| werr(&e))
}

/// Counters of one switch port for the integrity check.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PortCounts {
    pub port: u32,
    /// What the kernel counted into the switch port (veth rx_packets delta)
    /// from before the program was attached to after it was detached.
    pub kernel_rx: u64,
    /// What the kernel counted while the program was certainly attached.
    /// In a lab, where no traffic flows before the switch is armed or
    /// after the workload, this is `kernel_rx`. A bump on interfaces that
    /// carry traffic cannot attach and read a counter at one instant: a
    /// frame that arrives between the two is counted but not seen, so the
    /// switch must have seen between this and `kernel_rx`.
    pub kernel_rx_attached: u64,
    /// What the switch program saw.
    pub switch_rx: u64,
    pub mirrored: u64,
    pub mirror_lost: u64,
}

/// Lumina §3.5 integrity, plus the kernel as an independent witness.
#[derive(Debug, Clone, Serialize)]
pub struct Integrity {
    pub valid: bool,
    pub in_trace: u64,
    pub mirrored: u64,
    pub switch_rx: u64,
    pub kernel_rx: u64,
    pub mirror_lost: u64,
    pub sequence_numbers: u64,
    /// Why the run is INVALID; empty when valid.
    pub reasons: Vec<String>,
    pub ports: Vec<PortCounts>,
}

pub fn check_integrity(
    records: &[MirrorRecord],
    ports: &[PortCounts],
    seq_issued: u64,
) -> Integrity {
    let sum = |f: fn(&PortCounts) -> u64| ports.iter().map(f).sum::<u64>();
    let mut reasons = Vec::new();
    let in_trace = records.len() as u64;
    let mirrored = sum(|p| p.mirrored);
    let switch_rx = sum(|p| p.switch_rx);
    let kernel_rx = sum(|p| p.kernel_rx);
    let lost = sum(|p| p.mirror_lost);
    // (1) consecutive mirror sequence numbers
    let mut expect = 0;
    let mut gaps = 0u64;
    let mut first_gap = None;
    for r in records {
        if r.meta.seq != expect {
            if r.meta.seq < expect {
                reasons.push(format!(
                    "mirror sequence number {} appears twice",
                    r.meta.seq
                ));
            } else {
                gaps += r.meta.seq - expect;
                first_gap.get_or_insert((expect, r.meta.seq));
            }
        }
        expect = r.meta.seq + 1;
    }
    if expect < seq_issued {
        gaps += seq_issued - expect;
        first_gap.get_or_insert((expect, seq_issued));
    }
    if let Some((a, b)) = first_gap {
        reasons.push(format!(
            "{gaps} mirror sequence numbers missing from the trace (first gap: {a}..{})",
            b - 1
        ));
    }
    // (2) mirrored == in trace; (3) received == in trace
    if mirrored != in_trace {
        reasons.push(format!(
            "the switch mirrored {mirrored} packets but the trace has {in_trace}"
        ));
    }
    if switch_rx != in_trace {
        reasons.push(format!(
            "the switch received {switch_rx} packets but the trace has {in_trace}"
        ));
    }
    if lost > 0 {
        reasons.push(format!(
            "the capture ring was full: {lost} packets not captured"
        ));
    }
    for p in ports {
        if !(p.kernel_rx_attached..=p.kernel_rx).contains(&p.switch_rx) {
            reasons.push(if p.kernel_rx_attached == p.kernel_rx {
                format!(
                    "port {}: the kernel received {} packets but the switch program saw {}",
                    p.port, p.kernel_rx, p.switch_rx
                )
            } else {
                format!(
                    "port {}: the kernel received {} packets while the switch program was attached and {} around it, but the program saw {}",
                    p.port, p.kernel_rx_attached, p.kernel_rx, p.switch_rx
                )
            });
        }
        let n = records.iter().filter(|r| r.meta.port == p.port).count() as u64;
        if n != p.switch_rx && lost == 0 {
            reasons.push(format!(
                "port {}: {} received, {n} in the trace",
                p.port, p.switch_rx
            ));
        }
    }
    Integrity {
        valid: reasons.is_empty(),
        in_trace,
        mirrored,
        switch_rx,
        kernel_rx,
        mirror_lost: lost,
        sequence_numbers: seq_issued,
        reasons,
        ports: ports.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirelab_trace::Action;

    fn rec(seq: u64, port: u32) -> MirrorRecord {
        MirrorRecord {
            meta: Meta {
                seq,
                ts: 1000 + seq,
                port,
                conn: 1,
                data_dir: true,
                index: 0,
                iter: 0,
                first_tx: false,
                event: Action::None,
                event_id: 0,
                ..Default::default()
            },
            pkt_len: 60,
            data: vec![0; 60],
        }
    }

    fn counts(port: u32, n: u64) -> PortCounts {
        PortCounts {
            port,
            kernel_rx: n,
            kernel_rx_attached: n,
            switch_rx: n,
            mirrored: n,
            mirror_lost: 0,
        }
    }

    #[test]
    fn complete_trace_is_valid() {
        let r = vec![rec(0, 1), rec(1, 2), rec(2, 1)];
        let i = check_integrity(&r, &[counts(1, 2), counts(2, 1)], 3);
        assert!(i.valid, "{:?}", i.reasons);
    }

    #[test]
    fn each_broken_condition_is_named() {
        let r = vec![rec(0, 1), rec(2, 1)];
        let i = check_integrity(&r, &[counts(1, 3)], 3);
        assert!(!i.valid);
        assert!(
            i.reasons
                .iter()
                .any(|s| s.contains("1 mirror sequence numbers missing") && s.contains("1..1")),
            "{:?}",
            i.reasons
        );
        assert!(i
            .reasons
            .iter()
            .any(|s| s.contains("mirrored 3 packets but the trace has 2")));

        let mut c = counts(1, 2);
        c.kernel_rx = 5;
        c.kernel_rx_attached = 5;
        let i = check_integrity(&[rec(0, 1), rec(1, 1)], &[c], 2);
        assert!(
            i.reasons.iter().any(|s| s.contains("kernel received 5")),
            "{:?}",
            i.reasons
        );
        // A bump's window: 1 to 5 counted, 2 seen, valid; a count below
        // what arrived while attached is not (a frame went round it).
        c.kernel_rx_attached = 1;
        let i = check_integrity(&[rec(0, 1), rec(1, 1)], &[c], 2);
        assert!(i.valid, "{:?}", i.reasons);
        c.kernel_rx_attached = 3;
        let i = check_integrity(&[rec(0, 1), rec(1, 1)], &[c], 2);
        assert!(
            i.reasons.iter().any(|s| s
                .contains("received 3 packets while the switch program was attached and 5 around it, but the program saw 2")),
            "{:?}",
            i.reasons
        );

        let mut c = counts(1, 3);
        c.mirrored = 2;
        c.mirror_lost = 1;
        let i = check_integrity(&[rec(0, 1), rec(1, 1)], &[c], 3);
        assert!(
            i.reasons.iter().any(|s| s.contains("ring was full: 1")),
            "{:?}",
            i.reasons
        );
        assert!(
            i.reasons
                .iter()
                .any(|s| s.contains("missing from the trace (first gap: 2..2)")),
            "{:?}",
            i.reasons
        );
    }

    #[test]
    fn pcapng_round_trips_through_our_reader() {
        let dir = std::env::temp_dir().join(format!("wl-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcapng");
        let mut r = vec![rec(0, 1), rec(1, 2)];
        r[1].meta.event = Action::Drop;
        r[1].meta.event_id = 3;
        let ports = vec![
            PortInfo {
                port: 1,
                name: "p1".into(),
                received: 1,
                lost: 0,
            },
            PortInfo {
                port: 2,
                name: "p2".into(),
                received: 1,
                lost: 0,
            },
        ];
        write_pcapng(&path, &r, &ports, 128, 1_700_000_000_000_000_000).unwrap();
        let t = wirelab_trace::read(&path).unwrap();
        assert_eq!(t.interfaces, vec!["p1", "p2"]);
        assert_eq!(t.packets.len(), 2);
        assert_eq!(t.packets[1].interface, 1);
        assert_eq!(
            t.packets[1].ts_ns, 1_700_000_000_000_001_001,
            "ns resolution kept"
        );
        assert_eq!(t.packets[1].meta.as_ref(), Some(&r[1].meta));
        assert!(!dir.join("t.pcapng.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
