//! The run's summary (`summary.json`, schema `wirelab.run/1`): what the
//! CLI prints and the lab tests read.

use std::collections::BTreeMap;

use serde::Serialize;
use wirelab_analyze::expect::Verdict;
use wirelab_analyze::report::Report;
use wirelab_analyze::Evidence;
use wirelab_capture::Integrity;
use wirelab_dataplane::{Discipline, Switch};
use wirelab_workload::ConnReport;

use crate::{During, Error};

#[derive(Debug, Serialize)]
pub struct HostSummary {
    pub name: String,
    pub ip: String,
    pub port: u32,
    pub namespace: String,
    pub congestion_control: String,
    pub bottleneck: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ConnSummary {
    pub id: u32,
    pub requester: String,
    pub responder: String,
    pub verb: String,
    pub messages: u32,
    pub message_size: u64,
    pub tx_depth: u32,
    /// Runtime metadata reported by the workload and the switch.
    pub data_mss: u32,
    pub data_isn: Option<u32>,
    /// Tracking-state updates from another CPU than the one before
    /// (`ConnState::cpu_moves`): non-zero means the switch's one-CPU
    /// assumption broke and the connection's indices may have raced.
    pub tracking_cpu_moves: u32,
}

#[derive(Debug, Serialize)]
pub struct EventSummary {
    pub id: u32,
    pub conn: u32,
    pub target: String,
    pub iteration: String,
    pub action: String,
    /// The switch's data packet index the event was armed at (0 = all).
    pub armed_index: u32,
    pub hits: u64,
    pub hit: Vec<Evidence>,
}

/// What the switch did with the packets `reorder` events held.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReorderSummary {
    pub held: u64,
    /// Sent right after the last packet that was to overtake them.
    pub released: u64,
    /// Not held (another of the same direction was held already: sent on
    /// in order), or lost when rebuilt.
    pub failed: u64,
    /// Still held when the run ended: fewer packets than `after` followed
    /// them, so their receiver never got them.
    pub never_released: u64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    /// Version of this document's layout.
    pub schema: &'static str,
    pub name: String,
    pub description: Option<String>,
    pub run_id: String,
    pub results: String,
    pub verdict: &'static str,
    pub duration_ms: u64,
    pub mtu: u32,
    pub hosts: Vec<HostSummary>,
    pub connections: Vec<ConnSummary>,
    pub events: Vec<EventSummary>,
    pub integrity: Integrity,
    pub analysis: Report,
    pub workload: Vec<ConnReport>,
    pub expect: Vec<Verdict>,
    pub counters: BTreeMap<String, BTreeMap<String, i64>>,
    /// RoCE: the QPNs and initial PSNs each connection used.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roce: Vec<wirelab_workload::roce::RoceMeta>,
    /// RoCE: each host's device counters before and after the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_counters: Vec<wirelab_workload::roce::DeviceCounters>,
    /// vAQM: each virtual queue as the switch left it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vaqm: Vec<VqSummary>,
    /// QCN: what each reaction point received and did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reaction_points: Vec<wirelab_workload::qcn::RpReport>,
    /// eSwitch (ScalaCN): how many masks packets searched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flowtables: Option<EsSummary>,
    /// Open vSwitch as the flow tables' device (`flowtables.dut: ovs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ovs: Option<crate::ovs::OvsSummary>,
    /// DETER's recording (`record:`): what was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<crate::record::RecordSummary>,
    /// `reorder` events: what the switch held and sent on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reorder: Option<ReorderSummary>,
    /// The switch program's kernel-measured cost over the run, when the
    /// kernel counted it (BPF_ENABLE_STATS held by the caller: benchmarks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_kernel: Option<KernelCost>,
    /// DCTCP hosts: windows wirelab's DCTCP repaired after the kernel
    /// skipped one of its callbacks during the run (a platform fault, see
    /// `crates/dataplane/bpf/dctcp.bpf.c`); counted over the process, so
    /// parallel runs share it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dctcp_repairs: Option<u64>,
    pub error: Option<String>,
}

/// Runs of a BPF program and the time the kernel measured in them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct KernelCost {
    pub runs: u64,
    pub ns: u64,
    pub ns_per_run: f64,
}

/// The eSwitch stage's counters as the run left them.
#[derive(Debug, Serialize)]
pub struct EsSummary {
    /// Packets that entered the first table.
    pub packets: u64,
    /// Masks searched, over all packets and tables.
    pub masks_searched: u64,
    /// Per packet, on average: ScalaCN's cost driver, OVS's "subtable
    /// lookups/hit".
    pub masks_per_packet: f64,
    /// Per packet, on average, the nanoseconds its mask searches took over
    /// every table, measured in the stage around each search: the
    /// device's latency (ScalaCN's LAT, Eq. 2), free of the end hosts'
    /// wake-ups that make most of a message's completion time, though not
    /// of the machine's own speed (runs of one point differ by up to ±15%
    /// on the project's VM). Only with `flowtables.timed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_per_packet: Option<f64>,
    /// The median and 99th percentile of the same per-packet time (a
    /// histogram in the stage, interpolated within its 1.6% buckets): the
    /// median as perftest reports t_typical, which ScalaCN's LAT is; the
    /// sweep's device latency. Only with `flowtables.timed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_p99: Option<f64>,
    /// Packets no table matched (left to the MAC table).
    pub misses: u64,
    pub drops: u64,
    /// Packets cut after the longest chain of tables.
    pub loops: u64,
    /// VXLAN encapsulations and decapsulations (RFC 7348).
    pub encaps: u64,
    pub decaps: u64,
    /// Encapsulations or decapsulations that failed: the packet was
    /// dropped (a decap of a packet that is not VXLAN, say).
    pub tunnel_errors: u64,
    /// Packets an entry rewrote (set_field), and rewrites that could not
    /// be made (an address on a packet that is not IPv4): dropped.
    pub rewrites: u64,
    pub rewrite_errors: u64,
    /// Encap entries the device profile installed past its encapsulation
    /// contexts, as drops (ScalaCN S8; the causal tester is not told).
    pub encaps_over_contexts: u64,
    /// What the offloading virtual switch did (`flowtables.offload`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<EsOffloadSummary>,
    /// Per table: packets that searched it, and masks per packet there
    /// (ScalaCN's Q_l for a local egress table, Q_r for a remote ingress one).
    pub tables: Vec<EsTableSummary>,
    /// Every mask, by table and id.
    pub masks: Vec<EsMaskSummary>,
    /// The eSwitch's device profile (`flowtables.device`).
    pub device: String,
    /// What the search-order policy did (`flowtables.optimise`), over
    /// every table.
    pub optimiser: EsOptimiserSummary,
}

/// ScalaCN §3's flow-state symptoms, counted: flows offloaded again after
/// aging (S1), packets software forwarded or dropped, and the time the
/// virtual switch waited on deletions (S4).
#[derive(Debug, Serialize)]
pub struct EsOffloadSummary {
    #[serde(flatten)]
    pub tally: wirelab_flowopt::offload::OffloadTally,
    /// Rules installed at the end.
    pub installed: usize,
    /// Misses the slow path forwarded, and misses past its capacity.
    pub slow_path_packets: u64,
    pub slow_path_drops: u64,
    pub deleting_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct EsOptimiserSummary {
    #[serde(flatten)]
    pub policy: wirelab_flowopt::Policy,
    #[serde(flatten)]
    pub tally: wirelab_flowopt::Tally,
}

#[derive(Debug, Serialize)]
pub struct EsTableSummary {
    pub table: u32,
    pub packets: u64,
    pub masks_per_packet: f64,
    /// Per packet that searched the table, the nanoseconds the search took
    /// (with `flowtables.timed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_per_packet: Option<f64>,
    /// Its median and 99th percentile per search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_ns_p99: Option<f64>,
    /// The search order the run ended with (mask ids).
    pub order: Vec<u16>,
}

#[derive(Debug, Serialize)]
pub struct EsMaskSummary {
    pub table: u32,
    pub mask: u32,
    pub generated: bool,
    /// ScalaCN's hyper mask: its entries are the activated flows.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hyper: bool,
    pub entries: usize,
    pub lookups: u64,
    pub hits: u64,
}

#[derive(Debug, Serialize)]
pub struct VqSummary {
    pub id: u32,
    /// The host whose switch port the queue emulates.
    pub port: Option<String>,
    pub destinations: Vec<String>,
    pub rate: String,
    pub discipline: String,
    pub packets: u64,
    pub marks: u64,
    pub drops: u64,
    /// Marks that fell on Not-ECT packets: RED dropped them, DCTCP let
    /// them pass unmarked.
    pub unmarkable: u64,
    pub bytes_at_end: u64,
    /// Updates from a different CPU than the one before (should be 0: the
    /// lab runs the switch on one CPU and the stage takes no lock).
    pub cpu_moves: u64,
    /// Packets that found the emulated buffer full (left out of the estimate).
    pub overflows: u64,
    /// QCN: frames the congestion point sampled (the CNMs it sent are the
    /// trace's `cnm=` packets, and each reaction point's count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qcn_samples: Option<u64>,
}

impl VqSummary {
    /// Queue `q` as the switch left it; `ext` names the user discipline's
    /// file, if the queue runs one.
    pub fn of(q: &wirelab_plan::VqPlan, switch: &Switch, ext: &str) -> Result<VqSummary, Error> {
        let st = switch
            .vq_state(q.id)
            .during(format!("reading virtual queue {}", q.id))?;
        let discipline = match crate::switch::vq_config(q).discipline {
            // The file and the numbers as the spec gave them.
            Discipline::Extension { .. } => format!(
                "extension {ext} {:?}",
                q.extension.as_deref().unwrap_or_default()
            ),
            d => d.to_string(),
        };
        Ok(VqSummary {
            id: q.id,
            port: q.port.as_ref().map(|p| p.1.clone()),
            destinations: q.destinations.iter().map(|d| d.to_string()).collect(),
            rate: q.rate.to_string(),
            discipline,
            packets: st.pkts,
            marks: st.marks,
            drops: st.drops,
            unmarkable: st.unmarkable,
            bytes_at_end: st.bytes,
            cpu_moves: st.cpu_moves,
            overflows: st.overflows,
            qcn_samples: q.qcn.as_ref().map(|_| st.samples),
        })
    }
}
