//! A spec resolved into everything the lab needs: namespace and interface
//! names, addresses, MACs, ports, connections with their 5-tuples, events in
//! the switch's terms. Pure: the same spec and run id give the same plan.

pub mod openflow;
pub mod reach;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Serialize;
use wirelab_spec::{
    BitsPerSec, Bytes, CongestionControl, Expect, IndexOrAll, Nanos, Spec, Transport, Verb, Verbs,
};

/// Every namespace wirelab creates starts with this, so `wirelab clean`
/// can find leftovers of killed runs.
pub const NS_PREFIX: &str = "wl-";

/// Lab addresses come from 198.18.0.0/15, the block RFC 2544 reserves for
/// benchmarking interconnect devices: it never routes anywhere real, and it
/// exists only inside the lab's namespaces.
pub fn host_ip(port: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, port as u8)
}
/// The lab subnet, 198.18.0.0/16 (RFC 2544 benchmarking space): a host's
/// first address is 198.18.0.<port>, its further GIDs 198.18.<g>.<port>.
pub const PREFIX_LEN: u8 = 16;

/// GID `g` (0 = the host's lab address) of the host on `port`.
pub fn gid_ip(port: u32, g: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, g as u8, port as u8)
}

/// Locally administered unicast MAC (IEEE 802: bit 1 of the first octet).
pub fn host_mac(port: u32) -> [u8; 6] {
    [0x02, 0x77, 0x6c, 0x00, 0x00, port as u8]
}

/// Requester source port of connection `id`; fixed so that the switch is
/// armed with the full 5-tuple before the SYN leaves (Lumina §3.3 hand-off).
pub fn source_port(id: u32) -> u16 {
    40000 + id as u16
}
/// The responder's listening port.
pub const SERVICE_PORT: u16 = 5001;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub run_id: String,
    /// Every random choice of the run is drawn from this (see `plan`).
    pub seed: u64,
    pub switch_ns: String,
    /// The namespace of a device under test between the switch's ports
    /// (`flowtables.dut: ovs`), linked to each host port by `dut_ifnames`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dut_ns: Option<String>,
    pub mtu: u32,
    pub hosts: Vec<HostPlan>,
    pub conns: Vec<ConnPlan>,
    pub events: Vec<EventPlan>,
    pub barrier: bool,
    pub snap_len: u32,
    pub ring_bytes: u64,
    pub capture_stall: Nanos,
    pub expect: Vec<Expect>,
    /// The switch's virtual queues (vAQM), numbered from 1.
    pub vaqm: Vec<VqPlan>,
    /// The user discipline linked into the switch (`vaqm.extension`).
    pub vaqm_extension: Option<std::path::PathBuf>,
    /// QCN reaction points: hosts whose sending is rate-limited by the
    /// CNMs they receive (`vaqm.reaction_point`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reaction_points: Vec<RpPlan>,
    /// The eSwitch's flow tables (ScalaCN), when the spec has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flowtables: Option<EsPlan>,
    /// DETER's recording of every host (`record:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<wirelab_spec::record::Record>,
}

/// The eSwitch's tables: table -> masks in search order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EsPlan {
    pub tables: Vec<Vec<EsMaskPlan>>,
    /// How every table's masks are ordered while traffic runs; with
    /// ScalaCN's, each table's hyper mask takes the id after its masks.
    pub optimise: wirelab_flowopt::Policy,
    /// The device's profile (`flowtables.device`).
    pub device: wirelab_spec::flowtables::EsDevice,
    /// Which device holds the tables.
    pub dut: wirelab_spec::flowtables::Dut,
    /// A virtual switch offloading the spec's own entries (`offload:`).
    pub offload: Option<OffloadPlan>,
    /// Each table's search timed in the stage (`timed:`).
    pub timed: bool,
}

/// `flowtables.offload`, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OffloadPlan {
    pub interval_ns: u64,
    pub idle_ns: u64,
    pub slow_path_pps: u32,
    pub slow_path_burst: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EsMaskPlan {
    pub fields: wirelab_spec::flowtables::MaskFields,
    pub entries: Vec<EsEntryPlan>,
    /// From `generate:` (never matched by the lab's traffic).
    pub generated: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EsEntryPlan {
    pub src: Option<Ipv4Addr>,
    pub dst: Option<Ipv4Addr>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub proto: Option<u8>,
    pub vni: Option<u32>,
    pub action: EsActionPlan,
    /// Fields rewritten before the action.
    pub set: EsSetPlan,
}

/// What an entry rewrites (spec `set:`), host names resolved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EsSetPlan {
    pub dmac: Option<[u8; 6]>,
    pub smac: Option<[u8; 6]>,
    pub src: Option<Ipv4Addr>,
    pub dst: Option<Ipv4Addr>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
}

impl EsSetPlan {
    pub fn is_empty(&self) -> bool {
        *self == EsSetPlan::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EsActionPlan {
    Count,
    /// Out of the port of `Plan::hosts[host]`.
    Forward {
        host: usize,
    },
    Drop,
    Goto(u32),
    /// VXLAN-encapsulate from the switch's VTEP
    /// (`wirelab_spec::flowtables::LOCAL_VTEP`) to `remote`, then go on.
    Encap {
        vni: u32,
        remote: Ipv4Addr,
        next: EsNext,
    },
    /// Strip the outer headers; out of the port of `Plan::hosts[host]`.
    Decap {
        host: usize,
    },
}

/// Where an encapsulated packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EsNext {
    /// Searched in this table with the outer headers as its key.
    Table(u32),
    /// Out of the port of `Plan::hosts[host]`, encapsulated.
    Host(usize),
}

/// A QCN reaction point on a host's link into the switch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpPlan {
    /// Index into `Plan::hosts`.
    pub host: usize,
    pub params: wirelab_qcn::rp::RpParams,
}

/// One virtual queue, resolved to switch ports and addresses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VqPlan {
    pub id: u32,
    /// Switch port whose egress traffic the queue holds, and its host.
    pub port: Option<(u32, String)>,
    /// Addresses classified to the queue whatever their port.
    pub destinations: Vec<Ipv4Addr>,
    pub rate: BitsPerSec,
    pub buffer: Option<Bytes>,
    pub dctcp: Option<wirelab_spec::vaqm::Dctcp>,
    pub red: Option<wirelab_spec::vaqm::Red>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qcn: Option<wirelab_spec::vaqm::Qcn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<wirelab_spec::vaqm::Distributed>,
    /// The user discipline's numbers (`vq->param[]`), when it runs here.
    pub extension: Option<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostPlan {
    pub name: String,
    pub ns: String,
    /// Switch port number (1-based); also the last octet of IP and MAC.
    pub port: u32,
    pub ip: Ipv4Addr,
    /// Every address the host's RoCE device answers on (its GIDs); the
    /// first is `ip`.
    pub gids: Vec<Ipv4Addr>,
    pub mac: [u8; 6],
    /// The host's interface, inside its namespace.
    pub ifname: String,
    /// The switch's interface towards the host, inside the switch namespace.
    pub switch_ifname: String,
    pub bottleneck: Option<Bottleneck>,
    pub stack: StackPlan,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bottleneck {
    pub rate: BitsPerSec,
    pub buffer: Bytes,
    /// Token-bucket depth (tbf `burst`).
    pub burst: Bytes,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackPlan {
    pub congestion_control: CongestionControl,
    pub ecn: bool,
    pub sack: bool,
    pub timestamps: bool,
    /// The lab route's `tcp_usec_ts` feature.
    pub usec_timestamps: bool,
    pub rto_min: Option<Nanos>,
    pub quickack: bool,
    /// SO_RCVBUF and SO_SNDBUF on its sockets (None: autotuned).
    pub rcvbuf: Option<Bytes>,
    pub sndbuf: Option<Bytes>,
    pub nodelay: bool,
    pub sysctls: BTreeMap<String, String>,
    pub roce: RocePlan,
}

impl StackPlan {
    /// The sysctls to write in the host's namespace, in a stable order.
    pub fn all_sysctls(&self) -> Vec<(String, String)> {
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        let mut v = vec![
            ("net.ipv4.tcp_ecn".to_string(), b(self.ecn)),
            ("net.ipv4.tcp_sack".to_string(), b(self.sack)),
            ("net.ipv4.tcp_timestamps".to_string(), b(self.timestamps)),
            // Metrics cached from an earlier connection to the same peer
            // (ssthresh, RTT) would make run N+1 differ from run N.
            ("net.ipv4.tcp_no_metrics_save".to_string(), "1".to_string()),
        ];
        v.extend(self.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())));
        v
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnPlan {
    /// 1-based, as events and expectations name it.
    pub id: u32,
    /// Host indices into `Plan::hosts`.
    pub requester: usize,
    pub responder: usize,
    /// The requester's and the responder's address for this connection
    /// (a GID of each for RoCE; the lab address for TCP).
    pub requester_ip: Ipv4Addr,
    pub responder_ip: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    /// Message k (0-based) uses `verb.of(k)`.
    pub verb: Verbs,
    pub messages: u32,
    pub message_size: Bytes,
    pub tx_depth: u32,
    pub transport: Transport,
    /// RoCE settings of this connection's QPs.
    pub roce: Option<RoceConnPlan>,
    /// When the requester posts its first message, after the workload
    /// starts (`start` + k × `stagger` for the group's k-th connection).
    pub start: Nanos,
    /// UDP: the sending rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<BitsPerSec>,
    /// TCP: how fast the responder's application reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_rate: Option<BitsPerSec>,
    /// TCP: the records whose socket calls this connection repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<wirelab_spec::ReplayCalls>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RoceConnPlan {
    pub mtu: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    /// UDP source port of the requester's and the responder's QP.
    pub requester_sport: u16,
    pub responder_sport: u16,
}

/// A host's RoCE device, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RocePlan {
    pub profile: String,
    pub dcqcn_rp: bool,
    pub dcqcn_np: bool,
    pub min_time_between_cnps: Nanos,
    pub adaptive_retransmission: bool,
    pub slow_restart: bool,
    pub line_rate: BitsPerSec,
}

impl ConnPlan {
    /// The verb of every message of a TCP connection (a combination is
    /// RoCE only, spec validation).
    pub fn tcp_verb(&self) -> Verb {
        self.verb.of(0)
    }
    /// The requester's direction carries message data (send, write).
    pub fn requester_sends_data(&self) -> bool {
        self.verb.requester_sends_data()
    }
    /// The responder's direction carries message data (read responses).
    pub fn responder_sends_data(&self) -> bool {
        self.verb.responder_sends_data()
    }
}

/// Which data packets an event addresses, before runtime metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    All,
    Index(u32),
    /// Packet `packet` of message `message` (both 1-based); resolved with the
    /// MSS the data sender's socket reports at run time.
    InMessage {
        message: u32,
        packet: u32,
    },
    /// The `packet`-th TCP packet (1-based, data or not, SYN and RST not
    /// counted) that end `by` sent: DETER's logical packet.
    Sent {
        by: wirelab_spec::Side,
        packet: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventPlan {
    /// 1-based position in the spec.
    pub id: u32,
    pub conn: u32,
    pub target: Target,
    /// 0 = any iteration.
    pub iteration: u32,
    pub action: wirelab_spec::Action,
    /// With `Action::Edit`: what it rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<wirelab_spec::Edit>,
    /// With `Action::Reorder`: how many later packets overtake it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u32>,
}

impl EventPlan {
    /// The switch's data packet index for this event given the data sender's
    /// MSS; 0 is the `all` wildcard. Messages start on a segment boundary
    /// because message-relative events require tx_depth 1 (spec validation):
    /// the next message is written only after the previous one completed.
    pub fn resolve_index(&self, conn: &ConnPlan, mss: u32) -> u32 {
        match self.target {
            Target::All => 0,
            Target::Index(i) | Target::Sent { packet: i, .. } => i,
            Target::InMessage { message, packet } => {
                let per_msg = conn.message_size.0.div_ceil(mss.max(1) as u64) as u32;
                message.saturating_sub(1) * per_msg + packet
            }
        }
    }
}

/// Why a spec could not be planned. `wirelab_spec::parse` and `load` rule
/// all of these out; a library caller that builds a `Spec` by hand gets
/// this error instead of a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{path}: no host named `{name}` in topology.hosts (was the spec validated?)")]
    UnknownHost { path: String, name: String },
    #[error("topology.hosts: {0} hosts; the lab numbers switch ports 1..=250")]
    TooManyHosts(usize),
}

/// Resolves a validated spec. `run_id` makes every name unique so that runs
/// can go in parallel (a short lowercase hex string); `seed` is where every
/// random choice of the run comes from (QPNs, initial PSNs), recorded in the
/// plan so that a run can be repeated exactly.
pub fn plan(spec: &Spec, run_id: &str, seed: u64) -> Result<Plan, Error> {
    if spec.topology.hosts.len() > 250 {
        return Err(Error::TooManyHosts(spec.topology.hosts.len()));
    }
    let name = spec.name.clone().unwrap_or_else(|| "spec".to_string());
    let defaults = &spec.stack;
    let hosts: Vec<HostPlan> = spec
        .topology
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = i as u32 + 1;
            let own = h.stack.clone().unwrap_or_default();
            let mut sysctls = defaults.sysctls.clone();
            sysctls.extend(own.sysctls.clone());
            let stack = StackPlan {
                congestion_control: own
                    .congestion_control
                    .or(defaults.congestion_control)
                    .unwrap_or(CongestionControl::Cubic),
                ecn: own.ecn.or(defaults.ecn).unwrap_or(false),
                sack: own.sack.or(defaults.sack).unwrap_or(true),
                timestamps: own.timestamps.or(defaults.timestamps).unwrap_or(true),
                usec_timestamps: own
                    .usec_timestamps
                    .or(defaults.usec_timestamps)
                    .unwrap_or(false),
                rto_min: own.rto_min.or(defaults.rto_min),
                quickack: own.quickack.or(defaults.quickack).unwrap_or(false),
                rcvbuf: own.rcvbuf.or(defaults.rcvbuf),
                sndbuf: own.sndbuf.or(defaults.sndbuf),
                nodelay: own.nodelay.or(defaults.nodelay).unwrap_or(true),
                sysctls,
                roce: {
                    let d = defaults.roce.clone().unwrap_or_default();
                    let o = own.roce.clone().unwrap_or_default();
                    RocePlan {
                        profile: o.profile.or(d.profile).unwrap_or_else(|| "default".into()),
                        dcqcn_rp: o.dcqcn_rp.or(d.dcqcn_rp).unwrap_or(true),
                        dcqcn_np: o.dcqcn_np.or(d.dcqcn_np).unwrap_or(true),
                        min_time_between_cnps: o
                            .min_time_between_cnps
                            .or(d.min_time_between_cnps)
                            .unwrap_or(Nanos(4_000)),
                        adaptive_retransmission: o
                            .adaptive_retransmission
                            .or(d.adaptive_retransmission)
                            .unwrap_or(false),
                        slow_restart: o.slow_restart.or(d.slow_restart).unwrap_or(false),
                        line_rate: o
                            .line_rate
                            .or(d.line_rate)
                            .unwrap_or(BitsPerSec(10_000_000_000)),
                    }
                },
            };
            HostPlan {
                name: h.name.clone(),
                ns: format!("{NS_PREFIX}{run_id}-{}", h.name),
                port,
                ip: host_ip(port),
                gids: (0..h.gids.unwrap_or(1)).map(|g| gid_ip(port, g)).collect(),
                mac: host_mac(port),
                ifname: "eth0".to_string(),
                switch_ifname: format!("p{port}"),
                bottleneck: h.bottleneck.map(|rate| Bottleneck {
                    rate,
                    // Default buffer: 100 full-size frames.
                    buffer: h
                        .bottleneck_buffer
                        .unwrap_or(Bytes(100 * u64::from(spec.topology.mtu + 14))),
                    // tbf needs at least one frame; by default 1 ms at the
                    // rate, which keeps a high rate from being held back by
                    // the timer granularity.
                    burst: h.bottleneck_burst.unwrap_or(Bytes(
                        (u64::from(spec.topology.mtu) + 14).max(rate.0 / 8 / 1000),
                    )),
                }),
                stack,
            }
        })
        .collect();
    let host_index = |n: &str, path: String| {
        hosts
            .iter()
            .position(|h| h.name == n)
            .ok_or_else(|| Error::UnknownHost {
                path,
                name: n.to_string(),
            })
    };
    let mut conns = Vec::new();
    for (gi, g) in spec.traffic.connections.iter().enumerate() {
        let at = |f: &str| format!("traffic.connections[{gi}].{f}");
        let (rq, rs) = (
            host_index(&g.from, at("from"))?,
            host_index(&g.to, at("to"))?,
        );
        for k in 0..g.count.0 as usize {
            let id = conns.len() as u32 + 1;
            let gid = |h: usize| hosts[h].gids[k % hosts[h].gids.len()];
            conns.push(ConnPlan {
                id,
                requester: rq,
                responder: rs,
                requester_ip: gid(rq),
                responder_ip: gid(rs),
                sport: source_port(id),
                dport: SERVICE_PORT,
                verb: g.verb.clone(),
                messages: g.messages.0,
                message_size: g.message_size,
                tx_depth: g.tx_depth.0,
                transport: spec.traffic.transport,
                roce: (spec.traffic.transport == Transport::Roce).then(|| RoceConnPlan {
                    mtu: g.mtu.unwrap_or(1024),
                    timeout: g.min_retransmit_timeout.unwrap_or(14),
                    retry_cnt: g.max_retransmit_retry.unwrap_or(7),
                    // Per-QP source ports give ECMP entropy, as RNICs do (Annex A17.5).
                    requester_sport: 49152 + 2 * id as u16,
                    responder_sport: 49153 + 2 * id as u16,
                }),
                start: Nanos(g.start.map_or(0, |s| s.0) + k as u64 * g.stagger.map_or(0, |s| s.0)),
                rate: g.rate,
                read_rate: g.read_rate,
                replay: g.replay.clone(),
            });
        }
    }
    let events = spec
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| EventPlan {
            id: i as u32 + 1,
            conn: e.connection.0,
            target: match (e.packet, e.message, e.sent_by) {
                (IndexOrAll::One(p), _, Some(by)) => Target::Sent { by, packet: p.0 },
                (IndexOrAll::All, _, _) => Target::All,
                (IndexOrAll::One(p), None, None) => Target::Index(p.0),
                (IndexOrAll::One(p), Some(m), None) => Target::InMessage {
                    message: m.0,
                    packet: p.0,
                },
            },
            // A wire event counts every transmission: any iteration.
            iteration: match e.iteration {
                _ if e.sent_by.is_some() => 0,
                IndexOrAll::All => 0,
                IndexOrAll::One(i) => i.0,
            },
            action: e.action,
            edit: e.edit,
            after: e.after,
        })
        .collect();
    let vaqm = spec
        .vaqm
        .iter()
        .flat_map(|v| v.queues.iter())
        .enumerate()
        .map(|(i, q)| {
            let host = |n: &str, f: &str| {
                host_index(n, format!("vaqm.queues[{i}].{f}")).map(|h| &hosts[h])
            };
            Ok(VqPlan {
                id: i as u32 + 1,
                port: match q.port.as_deref() {
                    Some(p) => Some((host(p, "port")?.port, p.to_string())),
                    None => None,
                },
                destinations: q
                    .destinations
                    .iter()
                    .map(|d| Ok(host(d, "destinations")?.ip))
                    .collect::<Result<_, Error>>()?,
                rate: q.rate,
                buffer: q.buffer,
                dctcp: q.dctcp.clone(),
                red: q.red.clone(),
                qcn: q.qcn.clone(),
                distributed: q.distributed.clone(),
                extension: q.extension.clone(),
            })
        })
        .collect::<Result<_, Error>>()?;
    let reaction_points = spec
        .vaqm
        .iter()
        .filter_map(|v| Some((v, v.reaction_point.as_ref()?)))
        .flat_map(|(v, rp)| {
            // G_d = 1 / (2 fb_max): the first QCN queue's quantisation
            // (validation made sure there is one).
            let fb_max = v
                .queues
                .iter()
                .find_map(|q| q.qcn.as_ref())
                .map_or(63, |q| q.fb_max);
            let d =
                wirelab_qcn::rp::RpParams::standard(rp.line_rate.map_or(1_000_000_000, |r| r.0));
            let params = wirelab_qcn::rp::RpParams {
                line_rate: d.line_rate,
                min_rate: rp.min_rate.map_or(d.min_rate, |r| r.0),
                fb_max: u64::from(fb_max),
                r_ai: rp.r_ai.map_or(d.r_ai, |r| r.0),
                fr_cycle_frames: rp.fr_cycle_frames.map_or(d.fr_cycle_frames, u64::from),
                ai_cycle_frames: rp.ai_cycle_frames.map_or(d.ai_cycle_frames, u64::from),
                fr_cycles: rp.fr_cycles.unwrap_or(d.fr_cycles),
            };
            rp.hosts.iter().map(move |h| {
                Ok(RpPlan {
                    host: host_index(h, "vaqm.reaction_point.hosts".into())?,
                    params,
                })
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(Plan {
        name,
        run_id: run_id.to_string(),
        seed,
        switch_ns: format!("{NS_PREFIX}{run_id}-switch"),
        dut_ns: spec
            .flowtables
            .as_ref()
            .filter(|f| f.dut == wirelab_spec::flowtables::Dut::Ovs)
            .map(|_| format!("{NS_PREFIX}{run_id}-dut")),
        mtu: spec.topology.mtu,
        conns,
        events,
        barrier: spec.traffic.barrier,
        snap_len: spec.capture.snap_len,
        ring_bytes: spec.capture.ring_size.0,
        capture_stall: spec.capture.stall_dumper.unwrap_or_default(),
        expect: spec.expect.clone(),
        vaqm,
        vaqm_extension: spec.vaqm.as_ref().and_then(|v| v.extension.clone()),
        reaction_points,
        flowtables: spec.flowtables.as_ref().map(|f| flowtables(f, &hosts)),
        record: spec.record.clone(),
        hosts,
    })
}

/// Generated mask i's shape: destination prefixes 8..=32, source prefixes
/// 0/8/16/24/32, with and without the destination port, then the source
/// port; 500 distinct (a table holds 256).
fn shape(i: u32) -> wirelab_spec::flowtables::MaskFields {
    wirelab_spec::flowtables::MaskFields {
        dst: 8 + (i % 25) as u8,
        src: [0, 8, 16, 24, 32][((i / 25) % 5) as usize],
        dport: (i / 125) % 2 == 1,
        proto: true,
        sport: (i / 250) % 2 == 1,
        vni: false,
    }
}

/// Generated entry j: addresses in 203.0.113.0/24 (TEST-NET-3, RFC 5737).
/// No lab address (198.18/15) shares their first five bits, so under any
/// prefix of 8 or more no lab packet, plain or encapsulated, matches them.
fn elsewhere(j: u32) -> EsEntryPlan {
    EsEntryPlan {
        src: Some(Ipv4Addr::new(203, 0, 113, j as u8)),
        dst: Some(Ipv4Addr::new(203, 0, 113, j as u8)),
        sport: Some(20_000 + j as u16),
        dport: Some(10_000 + j as u16),
        proto: Some(17),
        vni: None,
        action: EsActionPlan::Count,
        set: EsSetPlan::default(),
    }
}

/// The eSwitch's tables with host names resolved; generated masks (and the
/// overlay's) first in their table.
fn flowtables(ft: &wirelab_spec::flowtables::FlowTables, hosts: &[HostPlan]) -> EsPlan {
    use wirelab_spec::flowtables::{proto_number, EntryAction, MaskFields};
    let host = |n: &str| hosts.iter().position(|h| h.name == n);
    let addr = |v: &Option<String>| {
        v.as_deref()
            .map(|v| host(v).map_or_else(|| v.parse().expect("validated"), |i| hosts[i].ip))
    };
    let mac = |v: &Option<String>| {
        v.as_deref().map(|v| {
            host(v).map_or_else(
                || wirelab_spec::flowtables::parse_mac(v).expect("validated"),
                |i| hosts[i].mac,
            )
        })
    };
    let to = |e: &wirelab_spec::flowtables::Entry| {
        host(e.to.as_deref().expect("validated")).expect("validated")
    };
    let mut tables: Vec<Vec<EsMaskPlan>> = vec![Vec::new(); ft.tables.len().max(1)];
    for g in &ft.generate {
        for i in 0..g.masks {
            let entries = (0..g.entries)
                .map(|j| EsEntryPlan {
                    action: EsActionPlan::Drop,
                    ..elsewhere(j)
                })
                .collect();
            tables[g.table as usize].push(EsMaskPlan {
                fields: shape(i),
                entries,
                generated: true,
            });
        }
    }
    if let Some(o) = &ft.overlay {
        use wirelab_spec::flowtables::Overlay;
        // Subnet k's remote (decap) rules: outer source prefixes 0..=32
        // and outer destination prefixes of 32, 24, ... bits, so each
        // subnet's shape is its own; UDP 4789 and the VNI always compared.
        const OUTER_DST: [u8; 8] = [32, 24, 16, 28, 20, 12, 30, 26];
        for k in 0..o.subnets {
            let vni = Overlay::vni(k);
            let local = (0..o.containers)
                .map(|j| EsEntryPlan {
                    action: EsActionPlan::Encap {
                        vni,
                        // The container's host's VTEP: a lab address
                        // (198.19.254.0/24), never a host's.
                        remote: Ipv4Addr::new(198, 19, 254, 1 + (j % 250) as u8),
                        next: EsNext::Table(o.remote),
                    },
                    ..elsewhere(j)
                })
                .collect();
            tables[o.local as usize].push(EsMaskPlan {
                fields: shape(k),
                entries: local,
                generated: true,
            });
            let remote = (0..o.containers)
                .map(|j| EsEntryPlan {
                    dport: Some(4789),
                    vni: Some(vni),
                    action: EsActionPlan::Decap { host: 0 },
                    ..elsewhere(j)
                })
                .collect();
            tables[o.remote as usize].push(EsMaskPlan {
                fields: MaskFields {
                    src: (k % 33) as u8,
                    dst: OUTER_DST[((k / 33) % 8) as usize],
                    dport: true,
                    proto: true,
                    vni: true,
                    sport: false,
                },
                entries: remote,
                generated: true,
            });
        }
    }
    for (t, table) in ft.tables.iter().enumerate() {
        for m in &table.masks {
            let entries = m
                .entries
                .iter()
                .map(|e| EsEntryPlan {
                    src: addr(&e.src),
                    dst: addr(&e.dst),
                    sport: e.sport,
                    dport: e.dport,
                    proto: e.proto.as_deref().and_then(proto_number),
                    vni: e.vni,
                    set: e
                        .set
                        .as_ref()
                        .map_or_else(EsSetPlan::default, |w| EsSetPlan {
                            dmac: mac(&w.dmac),
                            smac: mac(&w.smac),
                            src: addr(&w.src),
                            dst: addr(&w.dst),
                            sport: w.sport,
                            dport: w.dport,
                        }),
                    action: match e.action {
                        EntryAction::Count => EsActionPlan::Count,
                        EntryAction::Drop => EsActionPlan::Drop,
                        EntryAction::Forward => EsActionPlan::Forward { host: to(e) },
                        EntryAction::Goto => EsActionPlan::Goto(e.table.expect("validated")),
                        EntryAction::Decap => EsActionPlan::Decap { host: to(e) },
                        EntryAction::Encap => {
                            let tunnel = e.encap.as_ref().expect("validated");
                            EsActionPlan::Encap {
                                vni: tunnel.vni,
                                remote: tunnel.remote,
                                next: match e.table {
                                    Some(t) => EsNext::Table(t),
                                    None => EsNext::Host(to(e)),
                                },
                            }
                        }
                    },
                })
                .collect();
            tables[t].push(EsMaskPlan {
                fields: m.fields,
                entries,
                generated: false,
            });
        }
    }
    use wirelab_spec::flowtables::{OptPolicy, Optimise};
    let optimise = match &ft.optimise {
        None => wirelab_flowopt::Policy::Insertion,
        Some(o) => {
            let interval_ns = o.interval.unwrap_or(Optimise::INTERVAL).0;
            match o.policy {
                OptPolicy::Insertion => wirelab_flowopt::Policy::Insertion,
                OptPolicy::HitCount => wirelab_flowopt::Policy::HitCount { interval_ns },
                OptPolicy::Scalacn => wirelab_flowopt::Policy::Scalacn {
                    interval_ns,
                    window_ns: o.window.unwrap_or(Optimise::WINDOW).0,
                    idle_ns: o.idle.unwrap_or(Optimise::IDLE).0,
                    hyper_entries: o.hyper_entries.unwrap_or(Optimise::HYPER_ENTRIES) as usize,
                },
            }
        }
    };
    let device = wirelab_spec::flowtables::device(ft.device.as_deref().unwrap_or("default"))
        .expect("validated");
    use wirelab_spec::flowtables::Offload;
    let offload = ft.offload.as_ref().map(|o| OffloadPlan {
        interval_ns: o.interval.unwrap_or(Offload::INTERVAL).0,
        idle_ns: o.idle.unwrap_or(Offload::IDLE).0,
        slow_path_pps: o.slow_path_pps.unwrap_or(Offload::SLOW_PATH_PPS),
        slow_path_burst: o.slow_path_burst.unwrap_or(Offload::SLOW_PATH_BURST),
    });
    EsPlan {
        tables,
        optimise,
        device,
        dut: ft.dut,
        offload,
        timed: ft.timed,
    }
}

/// The link between host port `port` and the DUT: its device in the
/// switch namespace, and in the DUT's (where it is the DUT's port `port`).
pub fn dut_ifnames(port: u32) -> (String, String) {
    (format!("d{port}"), format!("o{port}"))
}
