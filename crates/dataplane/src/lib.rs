//! The wirelab switch: one eBPF tc program (`bpf/switch.bpf.c`) whose stages a
//! plan turns on, opened from its bytes (src/object.rs), and typed wrappers
//! for its maps.
//!
//! Every struct shared with the kernel comes from the skeleton's `types`
//! module (generated from BTF by libbpf-cargo), never from a hand copy.

use std::os::fd::AsFd;
use std::sync::Mutex;

use libbpf_rs::{MapCore, MapFlags, PrintLevel, TcHookBuilder};

pub mod dctcp;
pub mod efsm;
pub mod ext;
pub mod load;
mod object;
pub mod recorder;
mod truth;

/// The switch's generated skeleton, used for its BTF types only (src/object.rs
/// says why it is not used to open the object).
pub mod eswitch;
mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/switch.skel.rs"));
}
use skel::types;
pub use skel::types::{wl_counters, wl_mirror_hdr};

/// The switch object as built (`bpf/switch.bpf.c`); a user discipline is
/// linked with these very bytes (src/ext.rs).
pub(crate) const SWITCH_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/switch.bpf.o"));

/// The pipeline's programs (`bpf/switch.bpf.c`).
const PROG_FORWARD_ONLY: &str = "wl_forward_only";
const PROG_FROM_DUT: &str = "wl_from_dut";

pub use wirelab_trace::{Action, Aqm};

// The limits are `enum wl_limits` in `wirelab.h`, read here from the
// skeleton's BTF-generated types: one definition, in C.
/// Largest snap length the program accepts (`WL_MAX_SNAP`).
pub const MAX_SNAP: u32 = types::wl_limits::WL_MAX_SNAP.0;
/// Entries of the ICRC table a MigReq edit uses (`WL_ICRC_SHIFTS`).
pub const ICRC_SHIFTS: usize = types::wl_limits::WL_ICRC_SHIFTS.0 as usize;
/// Maximum number of switch ports and connections.
pub const MAX_PORTS: u32 = types::wl_limits::WL_MAX_PORTS.0;
pub const MAX_CONNS: u32 = types::wl_limits::WL_MAX_CONNS.0;
/// `Config::bench_cut` for the capture floor: the least a switch that
/// captures every packet must do on this kernel (the clock, a ring
/// record, forwarding), against which the pipeline's own cost is seen.
pub const BENCH_FLOOR: u8 = types::wl_limits::WL_BENCH_FLOOR.0 as u8;
/// Virtual queues are numbered 1..=MAX_VQS (`WL_MAX_VQS`).
pub const MAX_VQS: u32 = types::wl_limits::WL_MAX_VQS.0;
/// A wire event's iteration key for an end (wirelab.h `WL_WIRE_ITER`):
/// `add_event(conn, n, wire_iter(responder), ..)` arms the n-th packet that
/// end sent, data or not.
pub const WIRE_ITER: u32 = types::wl_wire::WL_WIRE_ITER.0;

pub fn wire_iter(from_responder: bool) -> u32 {
    WIRE_ITER + from_responder as u32
}

/// A virtual queue's discipline (NetBump §4), in the switch's integer units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Discipline {
    /// Estimate the occupancy only.
    None,
    /// DCTCP: mark when the instantaneous queue exceeds `k_bytes` (§4.2).
    Dctcp { k_bytes: u64 },
    /// RED (Floyd & Jacobson 1993) on the EWMA of the queue (§4.1).
    Red {
        min_bytes: u64,
        max_bytes: u64,
        /// EWMA weight, 0 < w_q <= 1 (kept in 2^-16).
        w_q: f64,
        /// Mark probability at max_bytes, 0 < max_p <= 1 (kept in 2^-32).
        max_p: f64,
        /// Drop instead of mark between the thresholds.
        drop: bool,
    },
    /// The user's discipline (`ext`, `Switch::load_with`), with its
    /// numbers (`wl_ext_vq.param`).
    Extension { params: [u64; EXT_PARAMS] },
    /// An IEEE 802.1Qau congestion point (§4.3): sampled frames with
    /// Fb < 0 send a CNM back out of their ingress port.
    Qcn(wirelab_qcn::cp::CpParams),
}

/// How a run summary names a queue's discipline, with its settings.
impl std::fmt::Display for Discipline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p_one = wirelab_qcn::cp::P_ONE as f64;
        match self {
            Discipline::None => write!(f, "estimate only"),
            Discipline::Dctcp { k_bytes } => write!(f, "dctcp K {k_bytes}B"),
            Discipline::Red {
                min_bytes,
                max_bytes,
                w_q,
                max_p,
                drop,
            } => write!(
                f,
                "red {min_bytes}B..{max_bytes}B w_q {w_q} max_p {max_p} {}",
                if *drop { "drop" } else { "mark" }
            ),
            Discipline::Qcn(p) => write!(
                f,
                "qcn Q_eq {}B w {} fb_max {} p {:.3}..{:.3}",
                p.q_eq,
                p.w,
                p.fb_max,
                p.p_min as f64 / p_one,
                p.p_max as f64 / p_one
            ),
            Discipline::Extension { params } => write!(f, "extension {params:?}"),
        }
    }
}

/// Numbers a queue passes to a user discipline (`WL_EXT_PARAMS`).
pub const EXT_PARAMS: usize = types::wl_ext_limits::WL_EXT_PARAMS.0 as usize;

/// A virtual queue: its drain rate and discipline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VqConfig {
    /// Drain rate of the emulated port, bits per second.
    pub rate_bps: u64,
    /// The emulated port's buffer (0 = unbounded): a packet that would
    /// overflow it is one the port tail-drops, so it is not counted in the
    /// estimate (NetBump §3.1 on coupling the virtual and physical sizes).
    /// The switch still forwards it; the verdict is `overflow`.
    pub buffer_bytes: u64,
    pub discipline: Discipline,
}

/// A virtual queue's state and statistics as the switch has them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VqState {
    pub bytes: u64,
    pub last_ns: u64,
    /// The part of a byte drained but not yet taken off, in 1e-9 bytes.
    pub frac: u64,
    /// RED's average in bytes.
    pub avg_bytes: f64,
    /// RED's count since the last mark (-1 below min).
    pub count: i64,
    pub pkts: u64,
    pub marks: u64,
    pub drops: u64,
    pub unmarkable: u64,
    /// Updates made on another CPU than the one before: non-zero means the
    /// serial-pipeline assumption broke (see `Config::vaqm_lock`).
    pub cpu_moves: u64,
    /// Packets that found the buffer full (`VqConfig::buffer_bytes`).
    pub overflows: u64,
    /// QCN: frames sampled, and the quantised |Fb| of the last sample.
    pub samples: u64,
    pub last_qfb: u64,
    /// QCN: the queue at the last sample (Q_old).
    pub q_old: u64,
}

/// Which of its two tracking slots a RoCE direction's data packets use
/// (wirelab.h `wl_flow.data_dir`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// The direction carries no message data (ACKs, read requests, CNPs).
    No,
    /// Data, numbered from `ipsn` in the connection's slot.
    First { ipsn: u32 },
    /// Data in the other direction of a QP whose verbs send data both ways
    /// (send + read): its own slot, so each direction's ITER compares with
    /// the last PSN sent the same way (Lumina §3.3).
    Second { ipsn: u32 },
}

fn state_slot(conn: u32, second: bool) -> u32 {
    if second {
        conn + MAX_CONNS + 1
    } else {
        conn
    }
}
/// First transmissions remembered per connection (`WL_SEG_WINDOW`): a
/// retransmission of an older packet is reported with index 0.
pub const SEG_WINDOW: u32 = types::wl_limits::WL_SEG_WINDOW.0;
/// Name of the program as the kernel lists it (`bpftool prog`).
pub const PROG_NAME: &str = "wl_switch";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("loading the switch program failed: {source}\n--- libbpf / verifier log ---\n{log}")]
    Load {
        source: libbpf_rs::Error,
        log: String,
    },
    #[error("{what}: {source}")]
    Map {
        what: String,
        source: libbpf_rs::Error,
    },
    #[error("attaching the switch to ifindex {ifindex}: {source}")]
    Attach {
        ifindex: i32,
        source: libbpf_rs::Error,
    },
    #[error("bad switch configuration: {0}")]
    Config(String),
}

/// The switch's number for each action (`enum wl_action`, from BTF): the
/// only place where the names (`wirelab_trace::Action`) meet the numbers.
const ACTIONS: [(Action, types::wl_action); 8] = [
    (Action::None, types::wl_action::WL_EV_NONE),
    (Action::Drop, types::wl_action::WL_EV_DROP),
    (Action::Ecn, types::wl_action::WL_EV_ECN),
    (Action::Corrupt, types::wl_action::WL_EV_CORRUPT),
    (Action::EcnNotEct, types::wl_action::WL_EV_ECN_NOT_ECT),
    (Action::MigReq(true), types::wl_action::WL_EV_MIGREQ_SET),
    (Action::MigReq(false), types::wl_action::WL_EV_MIGREQ_CLEAR),
    (Action::Reorder, types::wl_action::WL_EV_REORDER),
];

/// The vAQM verdicts (`enum wl_aqm_verdict`, from BTF).
const AQM_VERDICTS: [(Aqm, types::wl_aqm_verdict); 4] = [
    (Aqm::None, types::wl_aqm_verdict::WL_AQM_PASS),
    (Aqm::Mark, types::wl_aqm_verdict::WL_AQM_MARK),
    (Aqm::Drop, types::wl_aqm_verdict::WL_AQM_DROP),
    (Aqm::Overflow, types::wl_aqm_verdict::WL_AQM_OVERFLOW),
];

fn wl_action(a: Action) -> types::wl_action {
    ACTIONS
        .iter()
        .find(|(x, _)| *x == a)
        .map(|(_, n)| *n)
        .expect("ACTIONS names every Action")
}

impl wl_mirror_hdr {
    /// The event action the switch applied; `None` for a number this build
    /// does not know (a newer program).
    pub fn applied(&self) -> Option<Action> {
        ACTIONS
            .iter()
            .find(|(_, n)| *n == self.action)
            .map(|(a, _)| *a)
    }

    /// The vAQM stage's verdict; `None` for an unknown number.
    pub fn verdict(&self) -> Option<Aqm> {
        AQM_VERDICTS
            .iter()
            .find(|(_, n)| *n == self.aqm)
            .map(|(a, _)| *a)
    }
}

/// Settings fixed at load time (`const volatile` globals and map sizes).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Bytes of each packet kept in the trace.
    pub snap_len: u32,
    /// Size of the capture ring in bytes (a power of two, >= one page).
    pub ring_bytes: u32,
    /// Highest connection id the switch will track (sizes its tables).
    pub max_conn: u32,
    /// Put the vAQM stage in the pipeline (a spec with `vaqm:`). Without
    /// it the verifier removes the stage and forwarding pays nothing.
    pub vaqm: bool,
    /// Put the eSwitch stage (flow tables searched mask by mask, ScalaCN)
    /// in the pipeline; removed by the verifier without it.
    pub eswitch: bool,
    /// A device under test between the ports (Open vSwitch): every frame
    /// leaves by its ingress port's link to the DUT (`add_dut_link`), and
    /// what comes back goes to the host behind the DUT port it left by.
    pub dut: bool,
    /// Tests: take the pipeline's clock from `set_test_clock`.
    pub test_clock: bool,
    /// Serialize virtual-queue updates with a spin lock, for ports whose
    /// packets are not all processed on one CPU. The lab steers every
    /// port to one CPU and leaves it off (VqState::cpu_moves checks that).
    pub vaqm_lock: bool,
    /// Serialize connection tracking with each connection's spin lock, for
    /// ports whose packets are not all processed on one CPU. The lab steers
    /// every port to one CPU and turns it off (`ConnState::cpu_moves`
    /// checks that).
    pub track_lock: bool,
    /// Load the ground-truth probes (bpf/truth.bpf.c): qdisc tracepoints that
    /// sample a real queue next to its virtual queue (`watch_qdisc`).
    pub truth: bool,
    /// Call the extension hooks (wirelab_ext.h), which a user discipline
    /// defines (`Switch::load_with`). Needs `vaqm`; not with `vaqm_lock`.
    pub extension: bool,
    /// Benchmarks only: run the first `bench_cut` stages (`STAGES`), then
    /// forward as the forward-only baseline does; 0 = the whole pipeline;
    /// `BENCH_FLOOR`: the ingress stage, a capture record and forwarding
    /// only. `wirelab bench switch-overhead` and `stages` measure each
    /// stage's cost this way.
    pub bench_cut: u8,
    /// Benchmarks only: forward as the forward-only baseline does while
    /// `set_bench_forward(true)`, the whole pipeline otherwise.
    pub bench_alternate: bool,
    /// Ports (bit `p & 63` for port p) whose egress queues frames in this
    /// kernel (a bottleneck's tbf): frames to them leave as clones, which
    /// frees each from its sender's socket accounting as a real NIC's
    /// transmit completion does (bpf/stage_forward.h says why).
    pub release_ports: u64,
}

/// The pipeline's stages in order (bpf/switch.bpf.c); `Config::bench_cut`
/// counts them.
pub const STAGES: [&str; 9] = [
    "ingress", "parse", "track", "events", "route", "eswitch", "vaqm", "mirror", "forward",
];

impl Default for Config {
    fn default() -> Self {
        Config {
            snap_len: 128,
            ring_bytes: 1 << 24,
            max_conn: 16,
            vaqm: false,
            eswitch: false,
            dut: false,
            test_clock: false,
            vaqm_lock: false,
            track_lock: true,
            truth: false,
            extension: false,
            bench_cut: 0,
            bench_alternate: false,
            release_ports: 0,
        }
    }
}

/// One direction of a TCP flow as the switch matches it. Addresses and ports
/// in host order here; converted to network order for the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    pub saddr: std::net::Ipv4Addr,
    pub daddr: std::net::Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

fn tcp_flow_key(key: FlowKey) -> types::wl_flow_key {
    types::wl_flow_key {
        saddr: u32::from_ne_bytes(key.saddr.octets()),
        daddr: u32::from_ne_bytes(key.daddr.octets()),
        sport: key.sport.to_be(),
        dport: key.dport.to_be(),
        proto: 6,
    }
}

/// Per-connection state of the data direction, read back after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnState {
    pub synced: bool,
    pub isn: u32,
    pub iter: u32,
    pub first_tx: u32,
    /// Updates from another CPU than the one before: non-zero means the
    /// one-CPU assumption broke (`Config::track_lock`).
    pub cpu_moves: u32,
}

/// Size of a record header in the capture ring.
pub const MIRROR_HDR_LEN: usize = std::mem::size_of::<wl_mirror_hdr>();

/// Views a plain kernel ABI struct as bytes (for map keys and values).
fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of the skeleton's `#[repr(C)]` plain-data types (Copy,
    // no pointers, explicit padding fields), so every byte is initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Reads a plain kernel ABI struct from bytes; `None` if too short.
fn from_bytes<T: Copy>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked above; T is plain data for which any bit
    // pattern is valid (integers only), and read_unaligned allows any alignment.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// One ground-truth sample (bpf/truth.bpf.c): a real qdisc's backlog right
/// after an enqueue or dequeue, and its virtual queue's estimate then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruthSample {
    /// The pipeline's clock (CLOCK_MONOTONIC), ns.
    pub ts_ns: u64,
    pub vq: u32,
    pub enqueue: bool,
    /// Bytes in the real queue.
    pub actual: u32,
    /// Packets in the real queue.
    pub qlen: u32,
    /// Bytes in the virtual queue.
    pub virt: u64,
    /// The packet enqueued or dequeued (skb->len, what the qdisc counts);
    /// the first one of a bulk dequeue.
    pub len: u32,
    /// Packets the event moved: 1, or more for a bulk dequeue.
    pub packets: u16,
}

/// Parses one ground-truth ring record.
pub fn parse_truth_sample(b: &[u8]) -> Option<TruthSample> {
    let s: truth::types::wl_truth_sample = from_bytes(b)?;
    Some(TruthSample {
        ts_ns: s.ts_ns,
        vq: s.vq,
        enqueue: s.kind == 1,
        actual: s.actual,
        qlen: s.qlen,
        virt: s.virt,
        len: s.len,
        packets: s.packets,
    })
}

/// Parses the header of one capture-ring record; the captured bytes follow it.
pub fn parse_mirror_record(b: &[u8]) -> Option<(wl_mirror_hdr, &[u8])> {
    let h: wl_mirror_hdr = from_bytes(b)?;
    let data = b.get(MIRROR_HDR_LEN..MIRROR_HDR_LEN + h.cap_len as usize)?;
    Some((h, data))
}

static LOAD_LOG: Mutex<String> = Mutex::new(String::new());
/// Serializes libbpf's (process-wide) print callback between loads.
static LOG_USER: Mutex<()> = Mutex::new(());

/// Runs `f` with libbpf's messages (info and up: the verifier's log, the
/// linker's complaints) collected; returns them with its result.
pub(crate) fn with_libbpf_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    let _one = LOG_USER.lock().unwrap_or_else(|e| e.into_inner());
    LOAD_LOG.lock().map(|mut l| l.clear()).ok();
    let prev = libbpf_rs::set_print(Some((PrintLevel::Info, capture_libbpf_log)));
    let r = f();
    libbpf_rs::set_print(prev);
    (r, LOAD_LOG.lock().map(|l| l.clone()).unwrap_or_default())
}

fn capture_libbpf_log(level: PrintLevel, msg: String) {
    if level != PrintLevel::Debug {
        if let Ok(mut l) = LOAD_LOG.lock() {
            l.push_str(&msg);
        }
    }
}

object::maps! {
    /// The switch's maps (bpf/*.h), each found by name when it loads.
    struct Maps {
        ports, ports_far, counters, flows, fwd, default_out, port_dev, conn_state,
        events, ev_filter, icrc_migreq, mirror_seq, ring, vqs, vq_of_port, vq_of_dst,
        fake_clock, es_masks, es_entries, es_order, es_mask_stats, es_stats, es_hist,
        es_hyper, es_learned, es_upcalls, dut_link, dut_back, held,
    }
}

/// A loaded switch pipeline. Attach it to each port inside the switch
/// namespace; detaching happens when the namespace (and its veths) goes.
pub struct Switch {
    config: Config,
    /// The ground-truth probes (bpf/truth.bpf.c), attached while the
    /// switch lives.
    truth: Option<truth::Truth>,
    maps: Maps,
    /// One writer of the eSwitch's search orders at a time (eswitch.rs).
    es_order_lock: Mutex<()>,
    /// Dropped before `obj`, which owns the mapping.
    bss: object::Section<types::bss>,
    obj: libbpf_rs::Object,
}

fn map_err(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |source| Error::Map { what, source }
}

impl Switch {
    /// Loads the program; the verifier log is part of the error on failure.
    pub fn load(config: Config) -> Result<Switch, Error> {
        Switch::load_with(config, None)
    }

    /// Loads the pipeline linked with a user discipline (`ext::build`;
    /// `config.extension` must be set), or the built-in one. A discipline
    /// the verifier rejects fails the whole load: nothing stays loaded.
    pub fn load_with(config: Config, ext: Option<&ext::Extension>) -> Result<Switch, Error> {
        if config.extension != ext.is_some() {
            return Err(Error::Config(if config.extension {
                "Config::extension without a discipline to link".into()
            } else {
                "a discipline needs Config::extension".into()
            }));
        }
        if config.snap_len == 0 || config.snap_len > MAX_SNAP {
            return Err(Error::Config(format!(
                "snap length {} is outside 1..={MAX_SNAP}",
                config.snap_len
            )));
        }
        if config.max_conn == 0 || config.max_conn > MAX_CONNS {
            return Err(Error::Config(format!(
                "{} connections; the switch tracks 1..={MAX_CONNS}",
                config.max_conn
            )));
        }
        if config.extension && (!config.vaqm || config.vaqm_lock) {
            // The hooks are calls, and the verifier allows no call while a
            // BPF spin lock is held.
            return Err(Error::Config(
                "a user discipline needs the vAQM stage, without its lock".into(),
            ));
        }
        if !config.ring_bytes.is_power_of_two() || config.ring_bytes < 4096 {
            return Err(Error::Config(format!(
                "capture ring of {} bytes must be a power of two >= 4096",
                config.ring_bytes
            )));
        }
        let bytes = ext.map_or(SWITCH_OBJECT, |e| e.object.as_slice());
        let (res, log) = with_libbpf_log(|| open_and_load(bytes, config));
        let obj = res.map_err(|e| match e {
            Error::Load { source, .. } => Error::Load { source, log },
            e => e,
        })?;
        object::check_programs(&obj, &[PROG_NAME, PROG_FORWARD_ONLY, PROG_FROM_DUT])?;
        let truth = if config.truth {
            Some(truth::Truth::load(&obj, config.test_clock)?)
        } else {
            None
        };
        Ok(Switch {
            config,
            truth,
            maps: Maps::find(&obj)?,
            es_order_lock: Mutex::new(()),
            bss: object::Section::of(&obj, ".bss")?,
            obj,
        })
    }

    fn prog(&self, forward_only: bool) -> libbpf_rs::ProgramMut<'_> {
        object::program(
            &self.obj,
            if forward_only {
                PROG_FORWARD_ONLY
            } else {
                PROG_NAME
            },
        )
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Attaches the pipeline at tc ingress of `ifindex`. The caller must be in
    /// the network namespace that owns the device.
    pub fn attach_ingress(&self, ifindex: i32) -> Result<(), Error> {
        self.attach(ifindex, false)
    }

    /// Attaches the forward-only baseline program instead (benchmarks).
    pub fn attach_forward_only(&self, ifindex: i32) -> Result<(), Error> {
        self.attach(ifindex, true)
    }

    /// Attaches the return path from a device under test at tc ingress of
    /// `ifindex` (a link `add_dut_link` named). In the switch's namespace.
    pub fn attach_from_dut(&self, ifindex: i32) -> Result<(), Error> {
        self.attach_prog(ifindex, object::program(&self.obj, PROG_FROM_DUT))
    }

    /// Host port `port` reaches the DUT by `dut_ifindex`, and what the DUT
    /// sends back by that link goes out of `host_ifindex` (the port's own
    /// device). Needs `Config::dut`.
    pub fn add_dut_link(
        &self,
        port: u32,
        dut_ifindex: u32,
        host_ifindex: u32,
    ) -> Result<(), Error> {
        if port == 0 || port > MAX_PORTS {
            return Err(Error::Config(format!(
                "port {port}: the switch has ports 1..={MAX_PORTS}"
            )));
        }
        self.maps
            .dut_link
            .update(
                &port.to_ne_bytes(),
                &dut_ifindex.to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(map_err(format!("linking port {port} to the DUT")))?;
        self.maps
            .dut_back
            .update(
                &dut_ifindex.to_ne_bytes(),
                &host_ifindex.to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(map_err(format!("linking the DUT back to port {port}")))
    }

    fn attach(&self, ifindex: i32, forward_only: bool) -> Result<(), Error> {
        self.attach_prog(ifindex, self.prog(forward_only))
    }

    fn attach_prog(&self, ifindex: i32, prog: libbpf_rs::ProgramMut<'_>) -> Result<(), Error> {
        object::attach_tc_ingress(&prog, ifindex)
    }

    pub fn add_port(&self, ifindex: u32, port: u32) -> Result<(), Error> {
        if port == 0 || port > MAX_PORTS {
            return Err(Error::Config(format!(
                "port {port}: the switch has ports 1..={MAX_PORTS}"
            )));
        }
        let v = types::wl_port { port };
        let near = ifindex < types::wl_limits::WL_NEAR_IFINDEX.0;
        if near {
            &self.maps.ports
        } else {
            &self.maps.ports_far
        }
        .update(&ifindex.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
        .map_err(map_err(format!("adding port {port} (ifindex {ifindex})")))?;
        // For a user discipline's forward() (port -> device).
        let d = types::wl_fwd { ifindex, port };
        self.maps
            .port_dev
            .update(&port.to_ne_bytes(), bytes_of(&d), MapFlags::ANY)
            .map_err(map_err(format!("adding port {port} (ifindex {ifindex})")))
    }

    /// Frames arriving on switch port `from` whose destination MAC has no
    /// `add_fwd` entry leave through `ifindex` (switch port `port`): a
    /// bump's two sides forward to each other.
    pub fn set_default_out(&self, from: u32, ifindex: u32, port: u32) -> Result<(), Error> {
        let v = types::wl_fwd { ifindex, port };
        self.maps
            .default_out
            .update(&from.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
            .map_err(map_err(format!("forwarding port {from} to port {port}")))
    }

    /// Removes the pipeline from tc ingress of `ifindex` (and the clsact
    /// qdisc too with `remove_qdisc`, when the caller created it). The
    /// caller must be in the device's namespace.
    pub fn detach(&self, ifindex: i32, remove_qdisc: bool) -> Result<(), Error> {
        let prog = self.prog(false);
        let mut hook = TcHookBuilder::new(prog.as_fd())
            .ifindex(ifindex)
            .handle(1)
            .priority(1)
            .hook(libbpf_rs::TC_INGRESS);
        let r = hook.detach();
        let r = if remove_qdisc {
            r.and(
                TcHookBuilder::new(prog.as_fd())
                    .ifindex(ifindex)
                    .hook(libbpf_rs::TC_INGRESS | libbpf_rs::TC_EGRESS)
                    .destroy(),
            )
        } else {
            r
        };
        r.map_err(|source| Error::Attach { ifindex, source })
    }

    /// Static forwarding entry: frames to `mac` leave through `ifindex`.
    pub fn add_fwd(&self, mac: [u8; 6], ifindex: u32, port: u32) -> Result<(), Error> {
        let mut k = [0u8; 8];
        k[..6].copy_from_slice(&mac);
        let v = types::wl_fwd { ifindex, port };
        self.maps
            .fwd
            .update(&k, bytes_of(&v), MapFlags::ANY)
            .map_err(map_err(format!("adding forwarding entry for port {port}")))
    }

    /// Where the switch sends a TCP flow's packets, as its route stage
    /// learned it from the MAC table (ifindex, port): None before the
    /// flow's first routed packet, or for a flow not armed.
    pub fn flow_egress(&self, key: FlowKey) -> Option<(u32, u32)> {
        let v = self
            .maps
            .flows
            .lookup(bytes_of(&tcp_flow_key(key)), MapFlags::ANY)
            .ok()??;
        let f: types::wl_flow = from_bytes(&v)?;
        (f.route_key != 0).then_some((f.out_ifindex, f.out_port))
    }

    /// One direction of a TCP connection; `from_responder`: its packets
    /// are the responder's (wire events count each end's packets).
    pub fn add_flow(
        &self,
        key: FlowKey,
        conn: u32,
        data_dir: bool,
        from_responder: bool,
    ) -> Result<(), Error> {
        self.insert_flow(
            tcp_flow_key(key),
            conn,
            data_dir as u32,
            from_responder as u32,
        )
    }

    /// Arms one direction of a RoCEv2 connection: packets from `saddr` to
    /// `daddr` for queue pair `dqpn` (wirelab.h `wl_flow_key`). A direction
    /// that carries message data is tracked from `Track::ipsn`, the PSN of
    /// its first data packet, which the workload reports before traffic
    /// starts (Lumina §3.3 hand-off).
    pub fn add_roce_flow(
        &self,
        saddr: std::net::Ipv4Addr,
        daddr: std::net::Ipv4Addr,
        dqpn: u32,
        conn: u32,
        track: Track,
    ) -> Result<(), Error> {
        let k = types::wl_flow_key {
            saddr: u32::from_ne_bytes(saddr.octets()),
            daddr: u32::from_ne_bytes(daddr.octets()),
            sport: 0,
            dport: 0,
            proto: 17 | (dqpn & 0xff_ffff) << 8,
        };
        let (data_dir, ipsn) = match track {
            Track::No => (0, None),
            Track::First { ipsn } => (1, Some(ipsn)),
            Track::Second { ipsn } => (2, Some(ipsn)),
        };
        if let Some(ipsn) = ipsn {
            let st = types::wl_conn_state {
                synced: 1,
                isn: ipsn & 0xff_ffff,
                iter: 1,
                roce: 1,
                ..Default::default()
            };
            let slot = state_slot(conn, data_dir == 2);
            self.maps
                .conn_state
                .update(&slot.to_ne_bytes(), bytes_of(&st), MapFlags::ANY)
                .map_err(map_err(format!("arming RoCE connection {conn}")))?;
        }
        self.insert_flow(k, conn, data_dir, 0)
    }

    fn insert_flow(
        &self,
        k: types::wl_flow_key,
        conn: u32,
        data_dir: u32,
        side: u32,
    ) -> Result<(), Error> {
        // Its egress (out_ifindex, out_port) is learned by the route stage.
        let v = types::wl_flow {
            conn,
            data_dir,
            side,
            ..Default::default()
        };
        self.maps
            .flows
            .update(bytes_of(&k), bytes_of(&v), MapFlags::ANY)
            .map_err(map_err(format!("adding connection {conn}")))
    }

    /// Fills the table MigReq edits patch the ICRC from: `deltas[k]` is what
    /// flipping MigReq changes in the ICRC of a packet with k covered bytes
    /// after the BTH byte that holds it (wirelab_roce computes it; this
    /// crate stays free of protocol code). Needed before an edit is armed.
    pub fn set_icrc_migreq_table(&self, deltas: &[u32]) -> Result<(), Error> {
        if deltas.len() != ICRC_SHIFTS {
            return Err(Error::Config(format!(
                "the MigReq ICRC table has {ICRC_SHIFTS} entries, got {}",
                deltas.len()
            )));
        }
        let keys: Vec<u8> = (0..ICRC_SHIFTS as u32).flat_map(u32::to_ne_bytes).collect();
        let values: Vec<u8> = deltas.iter().flat_map(|d| d.to_ne_bytes()).collect();
        self.maps
            .icrc_migreq
            .update_batch(
                &keys,
                &values,
                ICRC_SHIFTS as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .map_err(map_err("filling the MigReq ICRC table".to_string()))
    }

    /// Arms an event. `index`/`iter` 0 are the wildcards (`packet: all`,
    /// any iteration); `iter` = [`wire_iter`] makes `index` the n-th packet
    /// one end sent (a wire event).
    pub fn add_event(
        &self,
        conn: u32,
        index: u32,
        iter: u32,
        action: Action,
        id: u32,
    ) -> Result<(), Error> {
        self.add_event_held(conn, index, iter, action, id, 0)
    }

    /// [`add_event`](Switch::add_event) with how many later packets a
    /// `reorder` event lets overtake its packet (`after`; 0 for the other
    /// actions).
    pub fn add_event_held(
        &self,
        conn: u32,
        index: u32,
        iter: u32,
        action: Action,
        id: u32,
        after: u32,
    ) -> Result<(), Error> {
        if (action == Action::Reorder) != (after > 0) {
            return Err(Error::Config(format!(
                "event {id}: a reorder event, and only one, lets packets overtake its own ({after} for {})",
                action.name()
            )));
        }
        let k = types::wl_event_key { conn, index, iter };
        let v = types::wl_event {
            action: wl_action(action),
            id,
            hits: 0,
            after,
            pad: 0,
        };
        let what =
            format!("arming event {id} (connection {conn}, packet {index}, iteration {iter})");
        self.maps
            .events
            .update(bytes_of(&k), bytes_of(&v), MapFlags::NO_EXIST)
            .map_err(map_err(what.clone()))?;
        // The key shape and its iteration go into the connection's filter
        // (wirelab.h wl_ev_filter) after the entry exists, so the switch
        // never skips a live event.
        let wire = iter >= WIRE_ITER;
        let shape = match (index, iter) {
            _ if wire => types::wl_evk::WL_EVK_WIRE,
            (0, 0) => types::wl_evk::WL_EVK_ALL_ALL,
            (0, _) => types::wl_evk::WL_EVK_ALL_PKTS,
            (_, 0) => types::wl_evk::WL_EVK_ANY_ITER,
            _ => types::wl_evk::WL_EVK_EXACT,
        }
        .0;
        let key = conn.to_ne_bytes();
        let mut f: types::wl_ev_filter = self
            .maps
            .ev_filter
            .lookup(&key, MapFlags::ANY)
            .map_err(map_err(what.clone()))?
            .and_then(|b| from_bytes(&b))
            .unwrap_or_default();
        if iter != 0 && !wire {
            if f.iter_lo == 0 || iter < f.iter_lo {
                f.iter_lo = iter;
            }
            f.iter_hi = f.iter_hi.max(iter);
        }
        f.shapes |= shape;
        self.maps
            .ev_filter
            .update(&key, bytes_of(&f), MapFlags::ANY)
            .map_err(map_err(what))
    }

    /// How many packets event `(conn, index, iter)` hit so far.
    pub fn event_hits(&self, conn: u32, index: u32, iter: u32) -> Result<u64, Error> {
        let k = types::wl_event_key { conn, index, iter };
        let v = self
            .maps
            .events
            .lookup(bytes_of(&k), MapFlags::ANY)
            .map_err(map_err("reading the event table"))?;
        Ok(v.and_then(|b| from_bytes::<types::wl_event>(&b))
            .map_or(0, |e| e.hits))
    }

    /// Configures virtual queue `id` (1..=MAX_VQS) and resets its state.
    pub fn set_vq(&self, id: u32, cfg: &VqConfig) -> Result<(), Error> {
        if id == 0 || id > MAX_VQS {
            return Err(Error::Config(format!(
                "virtual queue {id}: the switch has queues 1..={MAX_VQS}"
            )));
        }
        let rate_bytes = cfg.rate_bps / 8;
        let mut v = types::wl_vq {
            rate_Bps: rate_bytes,
            buffer: cfg.buffer_bytes,
            // The BPF side computes gap × rate + frac (< 1e9) in 64 bits.
            max_gap_ns: (u64::MAX - 1_000_000_000)
                .checked_div(rate_bytes)
                .unwrap_or(u64::MAX),
            ..Default::default()
        };
        match cfg.discipline {
            Discipline::None => v.discipline = types::wl_aqm::WL_AQM_NONE,
            Discipline::Dctcp { k_bytes } => {
                v.discipline = types::wl_aqm::WL_AQM_DCTCP;
                v.k_bytes = k_bytes;
            }
            Discipline::Red {
                min_bytes,
                max_bytes,
                w_q,
                max_p,
                drop,
            } => {
                if !(min_bytes < max_bytes
                    && w_q > 0.0
                    && w_q <= 1.0
                    && max_p > 0.0
                    && max_p <= 1.0)
                {
                    return Err(Error::Config(format!(
                        "virtual queue {id}: RED needs min < max, 0 < w_q <= 1 and 0 < max_p <= 1"
                    )));
                }
                v.discipline = types::wl_aqm::WL_AQM_RED;
                v.min_th = min_bytes;
                v.max_th = max_bytes;
                v.w_q = (w_q * 65536.0).round().max(1.0) as u64;
                v.max_p = (max_p * 4294967296.0).round() as u64;
                v.red_drop = drop as u32;
                v.count = -1;
                // Any non-zero xorshift seed; fixed per queue so a run's
                // marks repeat for the same arrivals.
                v.rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(id);
            }
            Discipline::Qcn(p) => {
                if p.q_eq == 0
                    || p.fb_max == 0
                    || p.fb_max > 63
                    || p.p_min > p.p_max
                    || p.p_max > wirelab_qcn::cp::P_ONE
                {
                    return Err(Error::Config(format!(
                        "virtual queue {id}: QCN needs q_eq > 0, 1 <= fb_max <= 63 \
                         (6 bits) and p_min <= p_max <= 1"
                    )));
                }
                v.discipline = types::wl_aqm::WL_AQM_QCN;
                v.q_eq = p.q_eq;
                v.qcn_w = p.w;
                v.fb_max = p.fb_max;
                v.fb_range = p.fb_range();
                v.p_min = p.p_min;
                v.p_max = p.p_max;
                v.rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(id);
            }
            Discipline::Extension { params } => {
                if !self.config.extension {
                    return Err(Error::Config(format!(
                        "virtual queue {id}: a user discipline needs Config::extension"
                    )));
                }
                v.discipline = types::wl_aqm::WL_AQM_EXT;
                v.ext.param = params;
            }
        }
        v.ext.id = id;
        v.ext.rate_Bps = rate_bytes;
        v.ext.buffer = cfg.buffer_bytes;
        self.maps
            .vqs
            .update(&id.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
            .map_err(map_err(format!("configuring virtual queue {id}")))
    }

    /// The default classifier: packets leaving through switch port `port`
    /// go to virtual queue `id` (NetBump §3.1).
    pub fn vq_for_port(&self, port: u32, id: u32) -> Result<(), Error> {
        self.maps
            .vq_of_port
            .update(&port.to_ne_bytes(), &id.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("classifying port {port} to queue {id}")))
    }

    /// The user's classifier: packets to `dst` go to queue `id`, whatever
    /// their port.
    pub fn vq_for_dst(&self, dst: std::net::Ipv4Addr, id: u32) -> Result<(), Error> {
        let k = u32::from_ne_bytes(dst.octets());
        self.maps
            .vq_of_dst
            .update(&k.to_ne_bytes(), &id.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("classifying {dst} to queue {id}")))?;
        // Turn the destination lookup on (vq_dst_used, stage_vaqm.h).
        // SAFETY (the closure): a field address inside the section.
        self.bss
            .write(|b| unsafe { std::ptr::addr_of_mut!((*b).vq_dst_used) }, 1);
        Ok(())
    }

    pub fn vq_state(&self, id: u32) -> Result<VqState, Error> {
        let v = self
            .maps
            .vqs
            .lookup(&id.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("reading virtual queue {id}")))?;
        let q: types::wl_vq = v.and_then(|b| from_bytes(&b)).unwrap_or_default();
        Ok(VqState {
            bytes: q.bytes,
            last_ns: q.last_ns,
            frac: q.frac,
            avg_bytes: q.avg as f64 / 65536.0,
            count: q.count,
            pkts: q.pkts,
            marks: q.marks,
            drops: q.drops,
            unmarkable: q.unmarkable,
            cpu_moves: q.cpu_moves,
            overflows: q.overflows,
            samples: q.samples,
            last_qfb: q.last_qfb,
            q_old: q.q_old,
        })
    }

    /// Tests (`Config::test_clock`): the pipeline's clock reads `ns` until
    /// set again (0 = the real clock).
    pub fn set_test_clock(&self, ns: u64) -> Result<(), Error> {
        self.maps
            .fake_clock
            .update(&0u32.to_ne_bytes(), &ns.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("setting the test clock"))
    }

    /// The tracking state of a connection's (first) data direction.
    pub fn conn_state(&self, conn: u32) -> Result<ConnState, Error> {
        self.state_at(conn, false)
    }

    /// The tracking state of the second data direction of a RoCE QP that
    /// carries data both ways (`Track::Second`).
    pub fn second_conn_state(&self, conn: u32) -> Result<ConnState, Error> {
        self.state_at(conn, true)
    }

    fn state_at(&self, conn: u32, second: bool) -> Result<ConnState, Error> {
        let slot = state_slot(conn, second);
        let v = self
            .maps
            .conn_state
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("reading state of connection {conn}")))?;
        let s: types::wl_conn_state = v.and_then(|b| from_bytes(&b)).unwrap_or_default();
        Ok(ConnState {
            synced: s.synced != 0,
            isn: s.isn,
            iter: s.iter,
            first_tx: s.first_tx,
            cpu_moves: s.cpu_moves,
        })
    }

    /// Counters of one port, summed over CPUs.
    pub fn counters(&self, port: u32) -> Result<wl_counters, Error> {
        let per_cpu = self
            .maps
            .counters
            .lookup_percpu(&port.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("reading counters of port {port}")))?
            .unwrap_or_default();
        let mut t = wl_counters::default();
        for b in per_cpu {
            if let Some(c) = from_bytes::<wl_counters>(&b) {
                t.rx_pkts += c.rx_pkts;
                t.rx_bytes += c.rx_bytes;
                t.tx_pkts += c.tx_pkts;
                t.tx_bytes += c.tx_bytes;
                t.mirrored += c.mirrored;
                t.mirror_lost += c.mirror_lost;
                t.event_drops += c.event_drops;
                t.no_route += c.no_route;
                t.aqm_drops += c.aqm_drops;
                t.aqm_marks += c.aqm_marks;
                t.cnm_sent += c.cnm_sent;
                t.cnm_failed += c.cnm_failed;
                t.es_drops += c.es_drops;
                t.held += c.held;
                t.released += c.released;
                t.hold_failed += c.hold_failed;
            }
        }
        Ok(t)
    }

    /// Mirror sequence numbers handed out so far.
    pub fn mirror_seq(&self) -> Result<u64, Error> {
        let v = self
            .maps
            .mirror_seq
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("reading the mirror sequence number"))?;
        Ok(v.and_then(|b| from_bytes::<u64>(&b)).unwrap_or(0))
    }

    /// The capture ring, for the dumper.
    pub fn ring(&self) -> &dyn MapCore {
        &self.maps.ring
    }

    /// Samples the real qdisc at the root of device `ifindex` in the network
    /// namespace with inode `netns` after each enqueue and dequeue, next to
    /// virtual queue `vq` (needs `Config::truth`).
    pub fn watch_qdisc(&self, netns: u32, ifindex: u32, vq: u32) -> Result<(), Error> {
        if !self.config.truth {
            return Err(Error::Config(
                "watching a qdisc needs the ground-truth probes (Config::truth)".into(),
            ));
        }
        self.truth()?.watch(netns, ifindex, vq)
    }

    fn truth(&self) -> Result<&truth::Truth, Error> {
        self.truth.as_ref().ok_or_else(|| {
            Error::Config("the ground-truth probes were not loaded (Config::truth)".into())
        })
    }

    /// An owned handle on the ground-truth ring (`TruthSample` records).
    pub fn truth_ring_handle(&self) -> Result<libbpf_rs::MapHandle, Error> {
        self.truth()?.ring_handle()
    }

    /// Ground-truth samples the ring had no room for.
    pub fn truth_lost(&self) -> Result<u64, Error> {
        Ok(self.truth()?.lost())
    }

    /// An owned handle (a dup'ed fd) on the capture ring, which another
    /// thread can drain while this switch stays where it is.
    pub fn ring_handle(&self) -> Result<libbpf_rs::MapHandle, Error> {
        libbpf_rs::MapHandle::try_from(&self.maps.ring).map_err(map_err("duplicating the ring fd"))
    }

    /// Frames `reorder` events hold now: at the end of a run, those whose
    /// overtaking packets never all came (never delivered).
    pub fn held_frames(&self) -> usize {
        self.maps.held.keys().count()
    }

    /// Mean in-kernel run time (ns) of the pipeline (or the forward-only
    /// baseline) on `packet`, from BPF_PROG_TEST_RUN's repeat loop.
    pub fn time_per_run(
        &self,
        packet: &[u8],
        repeat: u32,
        forward_only: bool,
    ) -> Result<u64, Error> {
        let mut input = libbpf_rs::ProgramInput::default();
        input.data_in = Some(packet);
        input.repeat = repeat;
        let o = self
            .prog(forward_only)
            .test_run(input)
            .map_err(map_err("BPF_PROG_TEST_RUN"))?;
        Ok(o.duration.as_nanos() as u64)
    }

    /// Reads and discards every record waiting in the capture ring (a
    /// benchmark's repeat loop fills it; a full ring would make the mirror
    /// stage take its cheaper "lost" path). Returns how many there were.
    pub fn discard_ring(&self) -> Result<usize, Error> {
        let n = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let seen = n.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&self.maps.ring, move |_: &[u8]| {
            seen.set(seen.get() + 1);
            0
        })
        .map_err(map_err("reading the capture ring"))?;
        b.build()
            .and_then(|r| r.consume())
            .map_err(map_err("reading the capture ring"))?;
        Ok(n.get())
    }

    /// Runs the program once on `packet` through `BPF_PROG_TEST_RUN`, as if it
    /// arrived on the device `ifindex` (1 = loopback, which test runs use).
    /// Returns the tc verdict and the packet as the program left it.
    pub fn test_run(&self, packet: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let mut out = vec![0u8; packet.len() + 256];
        let mut input = libbpf_rs::ProgramInput::default();
        input.data_in = Some(packet);
        input.data_out = Some(&mut out);
        let o = self
            .prog(false)
            .test_run(input)
            .map_err(map_err("BPF_PROG_TEST_RUN"))?;
        let ret = o.return_value;
        let len = o.data.map_or(0, |d| d.len());
        out.truncate(len);
        Ok((ret, out))
    }
}

fn open_and_load(bytes: &[u8], config: Config) -> Result<libbpf_rs::Object, Error> {
    let load = |source| Error::Load {
        source,
        log: String::new(),
    };
    let mut open = object::open("switch", bytes).map_err(load)?;
    object::edit_section(&mut open, ".rodata", |ro: &mut types::rodata| {
        ro.snap_len = config.snap_len;
        ro.snap_room = config.snap_len.next_power_of_two();
        ro.wake_bytes = u64::from(config.ring_bytes / 4);
        ro.vaqm_on = config.vaqm as u8;
        ro.test_clock = config.test_clock as u8;
        ro.vaqm_lock = config.vaqm_lock as u8;
        ro.track_lock = config.track_lock as u8;
        ro.vaqm_ext = config.extension as u8;
        ro.bench_cut = config.bench_cut;
        ro.bench_alternate = config.bench_alternate as u8;
        ro.release_ports = config.release_ports;
        ro.eswitch_on = config.eswitch as u8;
        ro.dut_on = config.dut as u8;
    })?;
    object::open_map(&mut open, "ring")?
        .set_max_entries(config.ring_bytes)
        .map_err(load)?;
    object::open_map(&mut open, "seg_start")?
        .set_max_entries((config.max_conn + 1) * SEG_WINDOW)
        .map_err(load)?;
    open.load().map_err(load)
}

/// Kernel-measured run time of the wirelab programs while this guard lives
/// (BPF_ENABLE_STATS: scoped to the fd, so nothing host-wide stays changed).
pub struct RunTimeStats {
    _fd: std::os::fd::OwnedFd,
}

impl RunTimeStats {
    pub fn enable() -> Result<RunTimeStats, Error> {
        // SAFETY: a plain syscall wrapper; it returns a new fd or a negative errno.
        let fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        if fd < 0 {
            return Err(Error::Config(format!(
                "BPF_ENABLE_STATS failed: {}",
                std::io::Error::from_raw_os_error(-fd)
            )));
        }
        // SAFETY: fd was just returned to us and is owned by nobody else.
        Ok(RunTimeStats {
            _fd: unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) },
        })
    }
}

impl Switch {
    /// (runs, total ns) of a program of this switch as the kernel counted
    /// them; counts only while a `RunTimeStats` guard is alive.
    pub fn prog_stats(&self, forward_only: bool) -> (u64, u64) {
        object::prog_info(&self.prog(forward_only)).map_or((0, 0), |p| (p.run_cnt, p.run_time_ns))
    }

    /// Benchmarks (`Config::bench_alternate`): forward every frame as the
    /// forward-only baseline does (true), or run the whole pipeline.
    pub fn set_bench_forward(&self, forward: bool) {
        // SAFETY (the closure): a field address inside the section.
        self.bss.write(
            |b| unsafe { std::ptr::addr_of_mut!((*b).bench_forward_now) },
            u32::from(forward),
        );
    }

    /// Instructions the verifier walked to accept the pipeline (struct
    /// bpf_prog_info's `verified_insns`, Linux 5.16): its share of the
    /// 1,000,000 the verifier allows, and what every run's start pays.
    pub fn verified_insns(&self) -> Result<u32, Error> {
        object::prog_info(&self.prog(false))
            .map(|p| p.verified_insns)
            .ok_or_else(|| Error::Config("BPF_OBJ_GET_INFO_BY_FD on the switch failed".into()))
    }
}

/// tc verdicts (`linux/pkt_cls.h`).
pub mod verdict {
    pub const OK: u32 = 0;
    pub const SHOT: u32 = 2;
    pub const REDIRECT: u32 = 7;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables are the one place names meet the BTF numbers: each name
    /// once, each number once, so a new action cannot be half-added.
    #[test]
    fn every_action_and_verdict_has_its_own_switch_number() {
        for a in Action::ALL {
            assert_eq!(ACTIONS.iter().filter(|(x, _)| *x == a).count(), 1, "{a}");
        }
        for (i, (_, n)) in ACTIONS.iter().enumerate() {
            assert!(!ACTIONS[..i].iter().any(|(_, m)| m == n), "{n:?} twice");
        }
        for a in Aqm::ALL {
            assert_eq!(
                AQM_VERDICTS.iter().filter(|(x, _)| *x == a).count(),
                1,
                "{a}"
            );
        }
        for (i, (_, n)) in AQM_VERDICTS.iter().enumerate() {
            assert!(
                !AQM_VERDICTS[..i].iter().any(|(_, m)| m == n),
                "{n:?} twice"
            );
        }
        let h = wl_mirror_hdr {
            action: types::wl_action::WL_EV_MIGREQ_CLEAR,
            aqm: types::wl_aqm_verdict::WL_AQM_OVERFLOW,
            ..Default::default()
        };
        assert_eq!(h.applied(), Some(Action::MigReq(false)));
        assert_eq!(h.verdict(), Some(Aqm::Overflow));
        let unknown = wl_mirror_hdr {
            action: types::wl_action(99),
            ..Default::default()
        };
        assert_eq!(unknown.applied(), None);
    }

    /// The summary's words for each discipline (summary.json `discipline`).
    #[test]
    fn disciplines_name_themselves_with_their_settings() {
        assert_eq!(Discipline::None.to_string(), "estimate only");
        assert_eq!(
            Discipline::Dctcp { k_bytes: 30000 }.to_string(),
            "dctcp K 30000B"
        );
        let red = Discipline::Red {
            min_bytes: 30000,
            max_bytes: 90000,
            w_q: 0.002,
            max_p: 0.1,
            drop: true,
        };
        assert_eq!(
            red.to_string(),
            "red 30000B..90000B w_q 0.002 max_p 0.1 drop"
        );
    }
}
