//! Norma's generator and measurement (bpf/load.bpf.c; issue 20): the
//! tester's XDP programs, an object of their own. `Generator` replicates a
//! template through `BPF_PROG_RUN` with live frames, under the meter and
//! the cascaded units, through the editor, into a tester port; `Sink`
//! counts what arrives, by version bank, with the latency histogram.
//!
//! The control plane (which interval, which units, which edits) is
//! `wirelab_load`'s; this module only carries its numbers to the kernel.

use libbpf_rs::{MapCore, MapFlags};

use crate::object;
use crate::{bytes_of, from_bytes, map_err, Error};

mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/load.skel.rs"));
}
use skel::types;

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/load.bpf.o"));
const GEN: &str = "wl_gen";
const SINK: &str = "wl_sink";
const PASS: &str = "wl_pass";
const RAW: &str = "wl_raw";
const DROP: &str = "wl_drop";

/// Cascaded "skip m after n" units (`WL_LOAD_UNITS`).
pub const UNITS: usize = types::wl_load_limits::WL_LOAD_UNITS.0 as usize;
/// Edits per template (`WL_LOAD_EDITS`).
pub const EDITS: usize = types::wl_load_limits::WL_LOAD_EDITS.0 as usize;
/// Entries of the indirect step mode's tables (`WL_LOAD_TABLE`).
pub const TABLE: usize = types::wl_load_limits::WL_LOAD_TABLE.0 as usize;
/// Largest frame the generator edits (`WL_LOAD_MAX_FRAME`).
pub const MAX_FRAME: usize = types::wl_load_limits::WL_LOAD_MAX_FRAME.0 as usize;
/// Template bytes restored in every frame (`WL_LOAD_HEAD`).
pub const HEAD: usize = types::wl_load_limits::WL_LOAD_HEAD.0 as usize;
/// Buckets of one version's latency histogram (`WL_HIST_BUCKETS`).
pub const HIST_BUCKETS: usize = types::wl_hist_limits::WL_HIST_BUCKETS.0 as usize;
/// Exact buckets, and buckets per octave above them (2^`WL_HIST_BITS`).
pub const HIST_BITS: u32 = types::wl_hist_limits::WL_HIST_BITS.0;
/// Streams generated and measured at once (`WL_LOAD_STREAMS`).
pub const STREAMS: u32 = types::wl_load_limits::WL_LOAD_STREAMS.0;

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (uapi bpf.h, Linux 5.18).
const LIVE_FRAMES: u32 = 1 << 1;
/// Frames per live-frame batch: the kernel's default (64) and its limit is
/// 256; a batch's redirected frames leave together at its end, so a
/// smaller batch spaces them more finely.
pub const BATCH: u32 = 64;

/// One packet-editor mode (Norma App. C); the cascaded step is a `Step`
/// with `carry_from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditMode {
    Step,
    Indirect,
    Random,
    Ranged,
}

/// One field edit, in the program's terms (`struct wl_load_edit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edit {
    /// Byte offset of the field in the frame; even for 2- and 4-byte fields.
    pub offset: u16,
    /// 1, 2 or 4 bytes, big-endian.
    pub width: u8,
    pub mode: EditMode,
    /// A cascaded step: steps only when this earlier edit (its index)
    /// wrapped in the same packet.
    pub carry_from: Option<u8>,
    /// Ranged random's k (2^k <= hi - lo + 1).
    pub rand_bits: u8,
    /// Indirect: the first of its entries in the table.
    pub table: u16,
    /// Step, indirect, ranged: first and last value (index). Random: the
    /// fixed bits (`lo`) and the mask of random bits (`hi`).
    pub lo: u32,
    pub hi: u32,
    pub step: u32,
}

impl Edit {
    /// App. C 1)'s direct step by one: the `width`-byte field at `offset`
    /// takes lo, lo + 1, ..., hi, then lo again.
    pub fn step(offset: u16, width: u8, lo: u32, hi: u32) -> Edit {
        Edit {
            offset,
            width,
            mode: EditMode::Step,
            carry_from: None,
            rand_bits: 0,
            table: 0,
            lo,
            hi,
            step: 1,
        }
    }
}

/// The generator's settings (`struct wl_gen_conf`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GenConfig {
    /// The meter's interval (ns per packet; 0: no meter).
    pub interval_ns: u64,
    /// How late the generator may be and still send the slots it missed.
    pub tolerance_ns: u64,
    /// The device packets are redirected into (the caller's namespace).
    pub ifindex: u32,
    /// Frame offsets of the IPv4 header and the L4 header.
    pub l3_off: u16,
    pub l4_off: u16,
    /// The L4 checksum's offset (0: none).
    pub csum_off: u16,
    /// An inner TCP checksum under VXLAN (0: none): it covers the stamp,
    /// and the generator patches it for it.
    pub inner_csum_off: u16,
    /// The inner IPv4 header under VXLAN (0: none): a size mix fixes its
    /// lengths too.
    pub inner_l3_off: u16,
    /// Where the 16-byte stamp (sequence, send time) goes (0: no room).
    pub stamp_off: u16,
    /// Cascaded units, (pass n, skip m), in order.
    pub units: Vec<(u32, u32)>,
    pub edits: Vec<Edit>,
    /// The template frame: its first `HEAD` bytes are written back into
    /// every frame before the edits.
    pub template: Vec<u8>,
    /// Frames whose sequence number is a multiple of this are sampled
    /// (0: none); set the sink's alike to have each as sent and received.
    pub sample_every: u32,
    /// A size mix (IMIX): frame k is `sizes[k % len]` bytes, cut from the
    /// template (a UDP frame of the largest); empty: the template's size.
    pub sizes: Vec<u16>,
    /// The network header is IPv6 (at `l3_off`).
    pub ipv6: bool,
    /// The L4 header is TCP (at `l4_off`).
    pub tcp: bool,
    /// No IP header (an ARP reply): no version bit, no stamp, and no
    /// checksum to patch (`l3_off == l4_off`, `csum_off` 0).
    pub no_ip: bool,
}

/// Entries of a size mix's pattern (`WL_LOAD_SIZES`).
pub const SIZES: usize = types::wl_load_limits::WL_LOAD_SIZES.0 as usize;

/// A sampled frame (`struct wl_sample`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// false: as sent; true: as received.
    pub received: bool,
    /// The stream it belongs to.
    pub stream: u32,
    pub seq: u64,
    /// The pipeline clock (CLOCK_MONOTONIC, ns).
    pub ts: u64,
    /// The frame's length, and its first bytes (at most `SAMPLE_CAP`).
    pub len: u32,
    pub data: Vec<u8>,
}

/// Bytes of a sampled frame kept (`WL_SAMPLE_CAP`).
pub const SAMPLE_CAP: usize = types::wl_load_limits::WL_SAMPLE_CAP.0 as usize;

/// One version's counters, summed over CPUs (`struct wl_load_bank`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bank {
    pub packets: u64,
    pub bytes: u64,
    /// Σ over packets of their time (ns) and the number of them, as
    /// Norma's B + T/P per CPU, summed: `mean_ns` = time_sum / packets.
    pub time_sum: u128,
    /// The first and the last packet's time (ns).
    pub first_ns: u64,
    pub last_ns: u64,
    /// Stamped packets (sink), their latency's extremes (ns) and the
    /// sequence numbers not above one seen before.
    pub stamped: u64,
    pub lat_min: u64,
    pub lat_max: u64,
    pub late_seq: u64,
}

impl Bank {
    /// The rate between the first packet and the last (packets/s).
    pub fn pps(&self) -> Option<f64> {
        (self.packets > 1 && self.last_ns > self.first_ns)
            .then(|| (self.packets - 1) as f64 * 1e9 / (self.last_ns - self.first_ns) as f64)
    }

    /// The mean time of the bank's packets (ns; Norma §6.2's B + T/P).
    pub fn mean_ns(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.time_sum as f64 / self.packets as f64)
    }

    fn add(&mut self, b: &types::wl_load_bank) {
        if b.packets == 0 {
            return;
        }
        if b.stamped > 0 {
            self.lat_min = if self.stamped == 0 {
                b.lat_min
            } else {
                self.lat_min.min(b.lat_min)
            };
            self.lat_max = self.lat_max.max(b.lat_max);
        }
        self.first_ns = if self.packets == 0 {
            b.base_ns
        } else {
            self.first_ns.min(b.base_ns)
        };
        self.last_ns = self.last_ns.max(b.last_ns);
        self.packets += b.packets;
        self.bytes += b.bytes;
        self.time_sum += u128::from(b.base_ns) * u128::from(b.packets) + u128::from(b.sum_ns);
        self.stamped += b.stamped;
        self.late_seq += b.late_seq;
    }
}

/// The generator's own counts, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenCounts {
    /// Runs the meter held back (the loop ran faster than the rate).
    pub held: u64,
    /// Runs the units skipped.
    pub skipped: u64,
    /// Meter slots given up because the generator was late.
    pub missed: u64,
    /// Runs sent a slot or more behind their time: the generator caught
    /// up after a stall (within its tolerance).
    pub behind: u64,
    /// Packets sent.
    pub sent: u64,
}

fn per_cpu_banks(map: &libbpf_rs::MapHandle, key: u32, what: &str) -> Result<Bank, Error> {
    let per_cpu = map
        .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(map_err(format!("reading the {what} counters")))?
        .unwrap_or_default();
    let mut out = Bank::default();
    for v in &per_cpu {
        if let Some(b) = from_bytes::<types::wl_load_bank>(v) {
            out.add(&b);
        }
    }
    Ok(out)
}

fn zero_per_cpu(
    map: &libbpf_rs::MapHandle,
    key: u32,
    size: usize,
    what: &str,
) -> Result<(), Error> {
    let cpus = libbpf_rs::num_possible_cpus().map_err(map_err("counting CPUs"))?;
    let zeros = vec![vec![0u8; size]; cpus];
    map.update_percpu(&key.to_ne_bytes(), &zeros, MapFlags::ANY)
        .map_err(map_err(format!("clearing the {what}")))
}

object::maps! {
    struct Maps { gen_conf, gen_head, gen_state, gen_threads, load_table, gen_banks, sink_conf, sink_banks, sink_hist, fake_clock, sample_ring, sample_lost, drop_count }
}

/// The tester's programs: one object for the generator and the sink (a
/// tester may use either or both), with the links it attached.
pub struct Tester {
    /// Dropped first: detached before the object goes.
    links: Vec<libbpf_rs::Link>,
    maps: Maps,
    /// Each stream's settings (None: not configured).
    conf: Vec<Option<GenConfig>>,
    /// The version bit every stream writes (§6.1: one for the tester).
    version: u32,
    obj: libbpf_rs::Object,
}

/// A stream's index, checked against the program's table.
fn stream_key(k: u32) -> Result<[u8; 4], Error> {
    if k >= STREAMS {
        return Err(Error::Config(format!(
            "stream {k}: the tester generates {STREAMS} streams at most"
        )));
    }
    Ok(k.to_ne_bytes())
}

impl Tester {
    /// Loads the programs; `test_clock` lets fixtures set the time.
    pub fn load(test_clock: bool) -> Result<Tester, Error> {
        let obj = object::load_with_rodata("load", OBJECT, |ro: &mut types::rodata| {
            ro.test_clock = test_clock as u8;
        })?;
        object::check_programs(&obj, &[GEN, SINK, PASS, RAW, DROP])?;
        Ok(Tester {
            links: Vec::new(),
            maps: Maps::find(&obj)?,
            conf: vec![None; STREAMS as usize],
            version: 0,
            obj,
        })
    }

    fn write_conf(&self, stream: u32) -> Result<(), Error> {
        let Some(c) = &self.conf[stream as usize] else {
            return Ok(());
        };
        let mut raw = types::wl_gen_conf {
            interval_ns: c.interval_ns,
            tolerance_ns: c.tolerance_ns,
            ifindex: c.ifindex,
            version: self.version,
            l3_off: c.l3_off,
            l4_off: c.l4_off,
            csum_off: c.csum_off,
            inner_csum_off: c.inner_csum_off,
            inner_l3_off: c.inner_l3_off,
            stamp_off: c.stamp_off,
            edits: c.edits.len() as u32,
            sample_every: c.sample_every,
            nsizes: c.sizes.len() as u32,
            ipv6: c.ipv6 as u32,
            tcp: c.tcp as u32,
            no_ip: c.no_ip as u32,
            ..Default::default()
        };
        raw.sizes[..c.sizes.len()].copy_from_slice(&c.sizes);
        for (u, &(pass, skip)) in raw.unit.iter_mut().zip(&c.units) {
            u.pass = pass;
            u.skip = skip;
        }
        for (r, e) in raw.edit.iter_mut().zip(&c.edits) {
            r.offset = e.offset;
            r.width = e.width;
            r.mode = match e.mode {
                EditMode::Step => types::wl_edit_mode::WL_EDIT_STEP,
                EditMode::Indirect => types::wl_edit_mode::WL_EDIT_INDIRECT,
                EditMode::Random => types::wl_edit_mode::WL_EDIT_RANDOM,
                EditMode::Ranged => types::wl_edit_mode::WL_EDIT_RANGED,
            }
            .0 as u8;
            r.carry_from = e.carry_from.map_or(0, |k| k + 1);
            r.rand_bits = e.rand_bits;
            r.table = e.table;
            r.lo = e.lo;
            r.hi = e.hi;
            r.step = e.step;
        }
        self.maps
            .gen_conf
            .update(&stream_key(stream)?, bytes_of(&raw), MapFlags::ANY)
            .map_err(map_err("configuring the generator"))
    }

    /// Sets stream `stream` up and starts it afresh: the meter, the units
    /// and the editor's values restart, its counters are cleared. It
    /// writes the version bit the others write.
    pub fn configure(&mut self, stream: u32, conf: &GenConfig) -> Result<(), Error> {
        check(conf)?;
        let key = stream_key(stream)?;
        self.conf[stream as usize] = Some(conf.clone());
        self.write_conf(stream)?;
        let mut head = types::wl_gen_head::default();
        for (i, w) in head.w.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            for (k, x) in b.iter_mut().enumerate() {
                *x = conf.template.get(8 * i + k).copied().unwrap_or(0);
            }
            *w = u64::from_ne_bytes(b);
        }
        self.maps
            .gen_head
            .update(&key, bytes_of(&head), MapFlags::ANY)
            .map_err(map_err("writing the template"))?;
        let cpus = libbpf_rs::num_possible_cpus().map_err(map_err("counting CPUs"))?;
        let fresh = types::wl_gen_state {
            // No value yet: the first packet gets the edit's first value.
            value: [u32::MAX; EDITS],
            ..Default::default()
        };
        let states = vec![bytes_of(&fresh).to_vec(); cpus];
        self.maps
            .gen_state
            .update_percpu(&key, &states, MapFlags::ANY)
            .map_err(map_err("resetting the generator"))?;
        for k in 0..3 {
            self.clear_gen_bank(stream, k)?;
        }
        Ok(())
    }

    /// Indirect step values, from entry `first` on.
    pub fn set_table(&self, first: usize, values: &[u32]) -> Result<(), Error> {
        if first + values.len() > TABLE {
            return Err(Error::Config(format!(
                "the editor's tables hold {TABLE} values, {} asked for",
                first + values.len()
            )));
        }
        for (i, v) in values.iter().enumerate() {
            self.maps
                .load_table
                .update(
                    &((first + i) as u32).to_ne_bytes(),
                    &v.to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(map_err("filling the editor's table"))?;
        }
        Ok(())
    }

    /// A new rate while the generator runs (Norma's steps and ramps): the
    /// meter's interval and the units change at its next packet; the
    /// meter's schedule, the units' positions and the editor's values go
    /// on from where they are.
    pub fn set_rate(
        &mut self,
        stream: u32,
        interval_ns: u64,
        tolerance_ns: u64,
        units: &[(u32, u32)],
    ) -> Result<(), Error> {
        stream_key(stream)?;
        let Some(mut c) = self.conf[stream as usize].clone() else {
            return Err(Error::Config(format!("stream {stream} is not configured")));
        };
        (c.interval_ns, c.tolerance_ns, c.units) = (interval_ns, tolerance_ns, units.to_vec());
        check(&c)?;
        self.conf[stream as usize] = Some(c);
        self.write_conf(stream)
    }

    /// The version bit every stream writes from now on (§6.1).
    pub fn set_version(&mut self, v: u32) -> Result<(), Error> {
        self.version = v & 1;
        for k in 0..STREAMS {
            self.write_conf(k)?;
        }
        Ok(())
    }

    /// A handle that generates stream `stream` (`GenHandle::generate`)
    /// from another thread, in the namespace of the tester port.
    pub fn generator(&self, stream: u32) -> Result<GenHandle, Error> {
        self.handle(GEN, stream)
    }

    /// The benchmark's baseline source: stream 0's frame sent on as it
    /// is to its device (`configure(0, ..)`'s `ifindex`), each live frame,
    /// with nothing the generator does per frame.
    pub fn raw_generator(&self) -> Result<GenHandle, Error> {
        self.handle(RAW, 0)
    }

    /// Attaches the bare sink (count and drop) to `ifindex`; the caller
    /// must be in the device's namespace.
    pub fn attach_drop(&mut self, ifindex: i32) -> Result<(), Error> {
        self.attach(DROP, ifindex)
    }

    /// Attaches program `prog` to `ifindex` as its XDP program, for as
    /// long as this value lives.
    fn attach(&mut self, prog: &str, ifindex: i32) -> Result<(), Error> {
        let link = object::program(&self.obj, prog)
            .attach_xdp(ifindex)
            .map_err(|source| Error::Attach { ifindex, source })?;
        self.links.push(link);
        Ok(())
    }

    /// Frames the bare sink has dropped, over CPUs.
    pub fn dropped(&self) -> Result<u64, Error> {
        object::per_cpu_sum(&self.maps.drop_count, 0, "reading the bare sink's count")
    }

    fn handle(&self, prog: &str, stream: u32) -> Result<GenHandle, Error> {
        stream_key(stream)?;
        use std::os::fd::AsFd;
        let fd = object::program(&self.obj, prog)
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::Config(format!("duplicating the generator's fd: {e}")))?;
        let state = object::map_handle(&self.obj, "gen_state")?;
        let threads = object::map_handle(&self.obj, "gen_threads")?;
        Ok(GenHandle {
            fd,
            state,
            threads,
            stream,
        })
    }
}

impl GenHandle {
    /// The meter's next slot (ns, CLOCK_MONOTONIC; 0: not started), the
    /// latest over CPUs: a generator at a low rate sleeps until it.
    pub fn next_slot_ns(&self) -> Result<u64, Error> {
        let per_cpu = self
            .state
            .lookup_percpu(&self.stream.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("reading the generator's state"))?
            .unwrap_or_default();
        Ok(per_cpu
            .iter()
            .filter_map(|v| from_bytes::<types::wl_gen_state>(v))
            .map(|s| s.tat)
            .max()
            .unwrap_or(0))
    }
}

impl Tester {
    /// Tests: runs stream `stream`'s generator once on `frame` (not
    /// live), as a thread of that stream; its verdict and the frame as it
    /// left.
    pub fn test_gen(&self, stream: u32, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let _as = ThreadStream::bind(&self.maps.gen_threads, stream)?;
        test_run(&self.obj, GEN, frame)
    }

    /// Tests: runs the sink once on `frame`; its verdict.
    pub fn test_sink(&self, frame: &[u8]) -> Result<u32, Error> {
        Ok(test_run(&self.obj, SINK, frame)?.0)
    }

    /// Tests: the programs' clock reads `ns` (0: the real clock).
    pub fn set_test_clock(&self, ns: u64) -> Result<(), Error> {
        self.maps
            .fake_clock
            .update(&0u32.to_ne_bytes(), &ns.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("setting the test clock"))
    }

    /// Stream `stream`'s generator's own counts.
    pub fn gen_counts(&self, stream: u32) -> Result<GenCounts, Error> {
        let per_cpu = self
            .maps
            .gen_state
            .lookup_percpu(&stream_key(stream)?, MapFlags::ANY)
            .map_err(map_err("reading the generator's state"))?
            .unwrap_or_default();
        let mut c = GenCounts::default();
        for v in &per_cpu {
            if let Some(s) = from_bytes::<types::wl_gen_state>(v) {
                c.held += s.held;
                c.skipped += s.skipped;
                c.missed += s.missed;
                c.behind += s.behind;
                c.sent += s.seq;
            }
        }
        Ok(c)
    }

    /// What stream `stream` sent with version `v` (0, 1; 2: all, naive).
    pub fn gen_bank(&self, stream: u32, v: u32) -> Result<Bank, Error> {
        stream_key(stream)?;
        per_cpu_banks(&self.maps.gen_banks, stream * 3 + v, "generator's")
    }

    pub fn clear_gen_bank(&self, stream: u32, v: u32) -> Result<(), Error> {
        stream_key(stream)?;
        zero_per_cpu(
            &self.maps.gen_banks,
            stream * 3 + v,
            std::mem::size_of::<types::wl_load_bank>(),
            "generator's counters",
        )
    }

    /// The sink counts the UDP or TCP packets to the port `m` names as
    /// stream `stream`'s, reading the stamp at its offset into their L4
    /// payload (None: no stamp). Streams measured at once go to
    /// different ports.
    pub fn configure_sink(
        &self,
        stream: u32,
        m: wirelab_load::template::SinkMatch,
        sample_every: u32,
    ) -> Result<(), Error> {
        let key = stream_key(stream)?;
        let raw = types::wl_sink_conf {
            port: m.port.to_be(),
            stamp_off: m.stamp_off.unwrap_or(0xffff),
            tcp: m.tcp as u32,
            sample_every,
        };
        self.maps
            .sink_conf
            .update(&key, bytes_of(&raw), MapFlags::ANY)
            .map_err(map_err("configuring the sink"))?;
        for v in 0..3 {
            self.clear_sink_bank(stream, v)?;
        }
        Ok(())
    }

    /// Takes every sampled frame waiting in the ring, in the ring's order.
    pub fn drain_samples(&self, mut f: impl FnMut(Sample)) -> Result<(), Error> {
        let got = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let sink = got.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&self.maps.sample_ring, move |d: &[u8]| {
            if let Some(r) = from_bytes::<types::wl_sample>(d) {
                let cap = (r.cap as usize).min(SAMPLE_CAP);
                sink.borrow_mut().push(Sample {
                    received: r.side == 1,
                    stream: r.stream,
                    seq: r.seq,
                    ts: r.ts,
                    len: r.len,
                    data: r.data[..cap].to_vec(),
                });
            }
            0
        })
        .map_err(map_err("reading the sample ring"))?;
        b.build()
            .and_then(|r| r.consume())
            .map_err(map_err("reading the sample ring"))?;
        for x in got.take() {
            f(x);
        }
        Ok(())
    }

    /// Samples the ring had no room for: (sent side, received side).
    pub fn samples_lost(&self) -> Result<(u64, u64), Error> {
        let read = |k: u32| -> Result<u64, Error> {
            let v = self
                .maps
                .sample_lost
                .lookup(&k.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("reading the samples lost"))?
                .unwrap_or_default();
            Ok(v.get(..8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))))
        };
        Ok((read(0)?, read(1)?))
    }

    /// Attaches the sink to `ifindex` as its XDP program (native: the
    /// device is a veth, whose peer then can redirect frames into it).
    /// The link is a file descriptor: it goes with this value or process.
    /// The caller must be in the device's namespace.
    pub fn attach_sink(&mut self, ifindex: i32) -> Result<(), Error> {
        self.attach(SINK, ifindex)
    }

    /// Attaches a program that passes everything to `ifindex`, the veth
    /// peer of the port the generator sends from: a veth takes redirected
    /// frames only while its peer runs NAPI, which an XDP program turns on.
    /// The caller must be in the device's namespace.
    pub fn attach_pass(&mut self, ifindex: i32) -> Result<(), Error> {
        self.attach(PASS, ifindex)
    }

    /// What arrived of stream `stream` with version `v` (0, 1; 2: all,
    /// naive).
    pub fn sink_bank(&self, stream: u32, v: u32) -> Result<Bank, Error> {
        stream_key(stream)?;
        per_cpu_banks(&self.maps.sink_banks, stream * 3 + v, "sink's")
    }

    /// Stream `stream`'s version `v` latency histogram, summed over CPUs
    /// (buckets as `wirelab_load::hist`).
    pub fn sink_hist(&self, stream: u32, v: u32) -> Result<Vec<u64>, Error> {
        stream_key(stream)?;
        let mut out = vec![0u64; HIST_BUCKETS];
        for (b, slot) in out.iter_mut().enumerate() {
            let key = (stream * 2 + v) * HIST_BUCKETS as u32 + b as u32;
            *slot =
                object::per_cpu_sum(&self.maps.sink_hist, key, "reading the latency histogram")?;
        }
        Ok(out)
    }

    /// Clears stream `stream`'s version `v` sink counters and histogram,
    /// for its next interval.
    pub fn clear_sink_bank(&self, stream: u32, v: u32) -> Result<(), Error> {
        stream_key(stream)?;
        zero_per_cpu(
            &self.maps.sink_banks,
            stream * 3 + v,
            std::mem::size_of::<types::wl_load_bank>(),
            "sink's counters",
        )?;
        if v < 2 {
            for b in 0..HIST_BUCKETS as u32 {
                zero_per_cpu(
                    &self.maps.sink_hist,
                    (stream * 2 + v) * HIST_BUCKETS as u32 + b,
                    8,
                    "histogram",
                )?;
            }
        }
        Ok(())
    }
}

/// One stream's generator, for the thread that drives it.
pub struct GenHandle {
    fd: std::os::fd::OwnedFd,
    state: libbpf_rs::MapHandle,
    threads: libbpf_rs::MapHandle,
    stream: u32,
}

/// The calling thread generates `stream` while this lives: the program
/// finds a run's stream by its thread ID (gen_threads).
struct ThreadStream<'a> {
    map: &'a libbpf_rs::MapHandle,
    tid: u32,
}

impl<'a> ThreadStream<'a> {
    fn bind(map: &'a libbpf_rs::MapHandle, stream: u32) -> Result<ThreadStream<'a>, Error> {
        let tid = nix::unistd::gettid().as_raw() as u32;
        map.update(&tid.to_ne_bytes(), &stream.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("naming the generating thread's stream"))?;
        Ok(ThreadStream { map, tid })
    }
}

impl Drop for ThreadStream<'_> {
    fn drop(&mut self) {
        let _ = self.map.delete(&self.tid.to_ne_bytes());
    }
}

impl GenHandle {
    /// Replicates `frame` as live frames until a signal interrupts the
    /// calling thread (the kernel checks between batches). They leave by
    /// the configured device; the caller must be in its namespace. One
    /// call for a whole run: every live-frame call costs a fixed wait in
    /// the kernel (about 20 ms here, asleep in its setup and teardown),
    /// during which the meter's slots would pass unsent.
    pub fn generate_until_signalled(&self, frame: &[u8]) -> Result<(), Error> {
        self.live(frame, u32::MAX)
    }

    /// Runs the generator `runs` times on `frame` as live frames, and
    /// returns: exactly `runs` frames leave when no meter or unit holds
    /// any back (a stateful test's clients open their connections so).
    pub fn generate(&self, frame: &[u8], runs: u32) -> Result<(), Error> {
        self.live(frame, runs)
    }

    fn live(&self, frame: &[u8], repeat: u32) -> Result<(), Error> {
        let _as = ThreadStream::bind(&self.threads, self.stream)?;
        // SAFETY: zeroed is a valid bpf_test_run_opts; the input slice
        // outlives the call; libbpf reads `sz` bytes of opts.
        let mut opts: libbpf_rs::libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        opts.data_in = frame.as_ptr().cast();
        opts.data_size_in = frame.len() as u32;
        opts.repeat = repeat as _;
        opts.flags = LIVE_FRAMES;
        opts.batch_size = BATCH;
        use std::os::fd::AsRawFd;
        // SAFETY: as above; the fd is the loaded program's.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(self.fd.as_raw_fd(), &mut opts)
        };
        let e = std::io::Error::last_os_error();
        if rc == 0 || e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(());
        }
        Err(Error::Map {
            what: "generating (BPF_PROG_RUN with live frames)".into(),
            source: libbpf_rs::Error::from(e),
        })
    }
}

fn test_run(obj: &libbpf_rs::Object, prog: &str, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
    // Room for a frame the program grows (a size mix's).
    let mut out = vec![0u8; frame.len().max(MAX_FRAME) + 256];
    let mut input = libbpf_rs::ProgramInput::default();
    input.data_in = Some(frame);
    input.data_out = Some(&mut out);
    let o = object::program(obj, prog)
        .test_run(input)
        .map_err(map_err("BPF_PROG_TEST_RUN"))?;
    let (rv, n) = (o.return_value, o.data.map_or(0, |d| d.len()));
    out.truncate(n);
    Ok((rv, out))
}

/// The program's limits on a configuration, said before it loads.
fn check(c: &GenConfig) -> Result<(), Error> {
    let bad = |m: String| Err(Error::Config(m));
    if c.template.len() < 60 || c.template.len() > MAX_FRAME {
        return bad(format!(
            "a template of {} bytes (60 to {MAX_FRAME})",
            c.template.len()
        ));
    }
    if c.sizes.len() > SIZES {
        return bad(format!(
            "a size mix of {} frames, the generator takes {SIZES}",
            c.sizes.len()
        ));
    }
    if let Some(z) = c
        .sizes
        .iter()
        .find(|&&z| z < 60 || usize::from(z) > c.template.len())
    {
        return bad(format!(
            "a {z}-byte frame of the size mix (60 to the template's {})",
            c.template.len()
        ));
    }
    if c.units.len() > UNITS {
        return bad(format!(
            "{} rate units, the generator has {UNITS}",
            c.units.len()
        ));
    }
    if let Some(u) = c.units.iter().position(|&(n, _)| n == 0) {
        return bad(format!("rate unit {u} passes no packet"));
    }
    if c.edits.len() > EDITS {
        return bad(format!(
            "{} edits, the generator has {EDITS}",
            c.edits.len()
        ));
    }
    for (i, e) in c.edits.iter().enumerate() {
        let end = usize::from(e.offset) + usize::from(e.width);
        if !matches!(e.width, 1 | 2 | 4) || end > MAX_FRAME {
            return bad(format!(
                "edit {i}: a {}-byte field at {}",
                e.width, e.offset
            ));
        }
        if e.width > 1 && e.offset % 2 == 1 {
            return bad(format!(
                "edit {i}: a {}-byte field at an odd offset",
                e.width
            ));
        }
        if e.carry_from.is_some_and(|k| usize::from(k) >= i) {
            return bad(format!(
                "edit {i}: cascaded from an edit that is not before it"
            ));
        }
        if matches!(
            e.mode,
            EditMode::Step | EditMode::Indirect | EditMode::Ranged
        ) && e.hi < e.lo
        {
            return bad(format!("edit {i}: its range ends before it starts"));
        }
    }
    // A frame without IP has nothing the checksum patches or the size
    // mix could fix.
    if c.no_ip
        && (c.l3_off != c.l4_off || c.csum_off != 0 || c.stamp_off != 0 || !c.sizes.is_empty())
    {
        return bad(
            "a frame without IP takes no checksum, stamp or size mix, and an empty IP header range"
                .into(),
        );
    }
    for (name, off) in [
        ("stamp", c.stamp_off),
        ("checksum", c.csum_off),
        ("inner checksum", c.inner_csum_off),
        ("inner IPv4 header", c.inner_l3_off),
    ] {
        if off % 2 == 1 || usize::from(off) + 16 > MAX_FRAME {
            return bad(format!("the {name} offset {off} is odd or past the frame"));
        }
    }
    Ok(())
}
