//! The `flowtables:` section: an RNIC eSwitch's flow tables as ScalaCN
//! (seed 001, Fig. 8) abstracts them, a stage of the switch pipeline.
//! Each table is an ordered list of masks (flow groups); a packet searches
//! them in order until one holds an entry for its masked fields, so every
//! mask before the matching one costs a lookup. `generate:` puts N masks
//! of M entries that the lab's traffic never matches at the head of table
//! 0: ScalaCN's masks "in front of" a flow's own (§3, S1-S2).

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Invalid, Nanos, Spec};

/// The switch's limits (stage_eswitch.h, `wl_limits`).
pub const MAX_TABLES: usize = 4;
pub const MAX_MASKS: usize = 256;
pub const MAX_ENTRIES: usize = 65536;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowTables {
    /// Masks searched first in a table (table 0 unless named), whose
    /// entries the lab's traffic never matches (their destinations are in
    /// 203.0.113.0/24). One, or a list (one per table).
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(with = "OneOrMany")]
    pub generate: Vec<Generate>,
    /// Other tenants' overlay (ScalaCN Fig. 1, §4.1): K VXLAN subnets of
    /// C containers, each subnet a local encap mask and a remote decap
    /// mask of its own shape, searched before the spec's own masks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<Overlay>,
    /// Tables 0, 1, ...; each a list of masks in search order.
    #[serde(default)]
    pub tables: Vec<Table>,
    /// How every table's masks are ordered while traffic runs (default:
    /// as written, an RNIC's insertion order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimise: Option<Optimise>,
    /// Which device holds the tables (default `eswitch`, the switch's own
    /// stage); `ovs`: Open vSwitch's userspace datapath in a namespace of
    /// its own between the switch's ports, the same tables as OpenFlow
    /// rules (ScalaCN's DUT 2).
    #[serde(default, skip_serializing_if = "is_default")]
    pub dut: Dut,
    /// The eSwitch's device profile, by name (`profiles/eswitch/`):
    /// `default`, or one with a quirk ScalaCN found (default: `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// A virtual switch that offloads flows into the eSwitch and ages
    /// them out (ScalaCN §2-3): the spec's own entries start in software
    /// and are installed when their flow's first packets reach the slow
    /// path. Without it every entry is installed before traffic starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
    /// Time each table's mask search in the eSwitch stage: the device's
    /// own latency in the summary (`search_ns_per_packet`) and in a
    /// sweep's grid. It costs two clock reads a table searched per packet
    /// (about 85 ns here), so it is off unless asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed: bool,
}

/// A virtual switch's flow offload (ScalaCN §2, Fig. 1; §3 S1, S4, S5).
/// The spec's own `tables:` entries are its software rules: a packet that
/// misses the eSwitch goes to the slow path, which forwards it within its
/// capacity and reports its flow; the virtual switch then installs the
/// rule that flow matches, and deletes an installed rule whose hit
/// counter has not moved for `idle` (its aging). Generated and overlay
/// entries stand for other tenants' flows: installed from the start, never
/// aged (their traffic is not the lab's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    /// How often the virtual switch looks at the slow path's flows and
    /// the installed rules' counters (default 2ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Nanos>,
    /// An installed rule whose counter has not moved this long is deleted
    /// (default 20ms; OVS's `max-idle` is 10 s, a lab run lasts a second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Nanos>,
    /// Packets per second the slow path forwards; past it, dropped
    /// (default 5000: ScalaCN S1, a flow back in software ran >18x slower).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_path_pps: Option<u32>,
    /// Packets the slow path queues in a burst beyond its rate (default
    /// 64: a flow's first packets wait in software rather than drop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_path_burst: Option<u32>,
}

impl Offload {
    pub const INTERVAL: Nanos = Nanos(2_000_000);
    pub const IDLE: Nanos = Nanos(20_000_000);
    pub const SLOW_PATH_PPS: u32 = 5000;
    pub const SLOW_PATH_BURST: u32 = 64;
}

/// ScalaCN S5: hit counters that the device refreshes late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LateCounters {
    /// Past this many entries in all tables, the counters are late.
    pub entries_over: u32,
    /// The counters a reader sees are a copy refreshed this often.
    pub refresh: Nanos,
}

/// An eSwitch device profile: how the device departs from what its
/// control plane asks (ScalaCN §3-4). Profiles are data; the ones wirelab
/// ships live in `profiles/eswitch/*.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EsDevice {
    pub name: String,
    pub description: String,
    /// Where the behaviour was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_on: Option<String>,
    #[serde(default)]
    pub search_order: SearchOrder,
    /// Encapsulation contexts the device holds (ScalaCN S8): entries that
    /// encapsulate, counted in the order they are installed; past this
    /// many, the device drops what they match. None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encap_contexts: Option<u32>,
    /// ScalaCN S5: with many entries, the hit counters the control plane
    /// reads are refreshed late. None: they are current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_counters: Option<LateCounters>,
    /// ScalaCN S4: deleting an entry searches the table for what depends
    /// on it, taking this long per entry the device holds; the control
    /// plane waits for it. None: a deletion costs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_per_entry: Option<Nanos>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The device under test that holds the flow tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// The switch's eSwitch stage (masks searched in order).
    #[default]
    Eswitch,
    /// Open vSwitch's userspace datapath (`datapath_type=netdev`), from
    /// Debian's openvswitch-switch.
    Ovs,
}

/// In which order the device searches a table's masks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SearchOrder {
    /// The order the control plane sets.
    #[default]
    AsSet,
    /// The order the masks were added, whatever is set (ScalaCN S6).
    Insertion,
}

/// The eSwitch profiles wirelab ships, by name.
pub const DEVICES: &[(&str, &str)] = &[
    (
        "default",
        include_str!("../../../profiles/eswitch/default.yaml"),
    ),
    (
        "new-masks-last",
        include_str!("../../../profiles/eswitch/new-masks-last.yaml"),
    ),
    (
        "encap-context-limit",
        include_str!("../../../profiles/eswitch/encap-context-limit.yaml"),
    ),
    (
        "late-counters",
        include_str!("../../../profiles/eswitch/late-counters.yaml"),
    ),
    (
        "slow-deletion",
        include_str!("../../../profiles/eswitch/slow-deletion.yaml"),
    ),
];

/// A shipped eSwitch profile by name.
pub fn device(name: &str) -> Result<EsDevice, String> {
    let Some((_, text)) = DEVICES.iter().find(|d| d.0 == name) else {
        let names: Vec<&str> = DEVICES.iter().map(|d| d.0).collect();
        return Err(format!(
            "no eSwitch profile `{name}` (there are: {})",
            names.join(", ")
        ));
    };
    let d: EsDevice = serde_yaml::from_str(text).map_err(|e| format!("profile {name}: {e}"))?;
    Ok(d)
}

/// A search-order policy and its settings (ScalaCN §4.3). A setting the
/// policy does not use is ignored, so one spec compares the policies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Optimise {
    pub policy: OptPolicy,
    /// How often the control loop looks at the tables (default 1s: OVS
    /// re-sorts its subtables every second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Nanos>,
    /// `scalacn`: packets per mask (PM) are counted over this window
    /// (default 60s, as the paper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Nanos>,
    /// `scalacn`: a mask without a packet this long leaves the search
    /// (default 10min, as the paper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Nanos>,
    /// `scalacn`: flows the hyper mask holds before the least recently
    /// used is evicted (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_entries: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OptPolicy {
    /// Masks stay in the order they were added (an RNIC's default).
    Insertion,
    /// Open vSwitch dpcls: sorted by hits since the last sort, every interval.
    HitCount,
    /// ScalaCN: a hyper mask of activated flows, then masks by PM × LM.
    Scalacn,
}

impl Optimise {
    pub const INTERVAL: Nanos = Nanos(1_000_000_000);
    pub const WINDOW: Nanos = Nanos(60_000_000_000);
    pub const IDLE: Nanos = Nanos(600_000_000_000);
    pub const HYPER_ENTRIES: u32 = 1024;
}

/// `generate:` as written: one generator, or a list.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the schema's shape; `one_or_many` reads it
enum OneOrMany {
    One(Generate),
    Many(Vec<Generate>),
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Generate>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(g) => vec![g],
        OneOrMany::Many(v) => v,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Generate {
    /// The table whose search they head.
    #[serde(default)]
    pub table: u32,
    /// How many masks (0: none, as a sweep's first point).
    pub masks: u32,
    /// Entries in each.
    #[serde(default = "one")]
    pub entries: u32,
}

fn one() -> u32 {
    1
}

/// ScalaCN's overlay container network (seed 001 Fig. 1 and §4.1: "k is
/// the number of subnets and n is the average number of containers in
/// each subnet"), as other tenants' rules in the eSwitch. Subnet k has its
/// own VNI and its own prefix lengths, so its rules take a mask of their
/// own in each table (§4.3: "a host could have different lengths of IPv4
/// subnet masks"): in `local`, one entry per container that
/// VXLAN-encapsulates towards the container's host and searches `remote`;
/// in `remote`, one entry per container that decapsulates by outer
/// addresses, UDP port 4789 and VNI. None of them matches the lab's
/// traffic (their addresses are in 203.0.113.0/24).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// K: subnets (0: none, as a sweep's first point).
    pub subnets: u32,
    /// C: containers per subnet (entries per mask).
    #[serde(default = "one")]
    pub containers: u32,
    /// The local (egress, encap) table (default 0).
    #[serde(default)]
    pub local: u32,
    /// The remote (ingress, decap) table (default 1).
    #[serde(default = "one")]
    pub remote: u32,
}

impl Overlay {
    /// Subnet k's VNI.
    pub fn vni(k: u32) -> u32 {
        0x01_0000 + k
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub masks: Vec<Mask>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mask {
    /// The fields this mask compares; none: every packet.
    #[serde(default, rename = "match")]
    pub fields: MaskFields,
    #[serde(default)]
    pub entries: Vec<Entry>,
}

/// Which bits a mask compares: address prefixes and whole fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaskFields {
    /// The source address's first N bits (0..=32).
    #[serde(default)]
    pub src: u8,
    /// The destination address's first N bits (0..=32).
    #[serde(default)]
    pub dst: u8,
    #[serde(default)]
    pub sport: bool,
    #[serde(default)]
    pub dport: bool,
    #[serde(default)]
    pub proto: bool,
    /// A VXLAN packet's VNI (a remote decap rule's match).
    #[serde(default)]
    pub vni: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// A host's name (its address) or an IPv4 address.
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub dst: Option<String>,
    #[serde(default)]
    pub sport: Option<u16>,
    #[serde(default)]
    pub dport: Option<u16>,
    /// `tcp`, `udp` or an IP protocol number.
    #[serde(default)]
    pub proto: Option<String>,
    /// A VXLAN packet's VNI.
    #[serde(default)]
    pub vni: Option<u32>,
    pub action: EntryAction,
    /// `forward`, `decap` (and `encap` sent on encapsulated): the host
    /// whose port the packet leaves by.
    #[serde(default)]
    pub to: Option<String>,
    /// `goto` (and `encap` searched on): the table searched next.
    #[serde(default)]
    pub table: Option<u32>,
    /// `encap`: the VXLAN tunnel (RFC 7348).
    #[serde(default)]
    pub encap: Option<Encap>,
    /// Header fields rewritten before the action (OpenFlow's set_field):
    /// a later table matches the rewritten packet.
    #[serde(default)]
    pub set: Option<SetFields>,
}

/// What an entry rewrites (OpenFlow's set_field, ovs-actions(7); an RNIC's
/// modify-header action), in the packet as it matched: after an
/// encapsulation, its outer headers. Checksums are patched. A port is
/// rewritten on TCP and UDP packets only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetFields {
    /// A host's name (its MAC) or a MAC address, `02:00:00:00:00:01`.
    #[serde(default)]
    pub dmac: Option<String>,
    #[serde(default)]
    pub smac: Option<String>,
    /// A host's name (its address) or a lab IPv4 address (198.18.0.0/15).
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub dst: Option<String>,
    #[serde(default)]
    pub sport: Option<u16>,
    #[serde(default)]
    pub dport: Option<u16>,
}

/// A MAC address written `xx:xx:xx:xx:xx:xx`.
pub fn parse_mac(v: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = v.split(':');
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The lab's address range, 198.18.0.0/15 (RFC 2544's benchmarking
/// block): the only addresses a table may write into a packet.
pub fn is_lab_addr(a: std::net::Ipv4Addr) -> bool {
    matches!(a.octets(), [198, 18 | 19, ..])
}

/// A VXLAN encapsulation: the VNI and the remote VTEP's address. The
/// local VTEP is the switch's own (`LOCAL_VTEP`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Encap {
    /// 24 bits.
    pub vni: u32,
    /// The remote VTEP's IPv4 address (it stays inside the lab: a remote
    /// decap rule in another table takes the packet back out).
    pub remote: std::net::Ipv4Addr,
}

/// The local VTEP's address in encapsulations: inside the lab's
/// benchmarking range (RFC 2544), outside any host's or GID's address.
pub const LOCAL_VTEP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(198, 19, 255, 254);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EntryAction {
    /// Count it; the switch's MAC table forwards it.
    Count,
    Forward,
    Drop,
    Goto,
    /// VXLAN-encapsulate (`encap:`), then search `table:` with the outer
    /// headers, or leave by `to:`'s port encapsulated.
    Encap,
    /// Strip a VXLAN packet's outer headers, then leave by `to:`'s port.
    Decap,
}

/// An entry's protocol: `tcp`, `udp` or a number.
pub fn proto_number(p: &str) -> Option<u8> {
    match p {
        "tcp" => Some(6),
        "udp" => Some(17),
        n => n.parse().ok(),
    }
}

fn validate_set(
    set: &SetFields,
    at: &str,
    action: EntryAction,
    hosts: &BTreeSet<&str>,
) -> Result<(), Invalid> {
    let at = format!("{at}.set");
    if *set == SetFields::default() {
        return err(
            at,
            "set: name a field to rewrite (dmac, smac, src, dst, sport, dport)",
        );
    }
    match action {
        EntryAction::Drop => return err(at, "a dropped packet is not rewritten"),
        EntryAction::Decap => return err(
            at,
            "it would rewrite the outer headers decap strips; rewrite in a table after the decap",
        ),
        _ => {}
    }
    for (name, v) in [("dmac", &set.dmac), ("smac", &set.smac)] {
        if let Some(v) = v {
            if !hosts.contains(v.as_str()) && parse_mac(v).is_none() {
                return err(
                    format!("{at}.{name}"),
                    format!("`{v}` is neither a host nor a MAC address (xx:xx:xx:xx:xx:xx)"),
                );
            }
        }
    }
    for (name, v) in [("src", &set.src), ("dst", &set.dst)] {
        if let Some(v) = v {
            if hosts.contains(v.as_str()) {
                continue;
            }
            match v.parse::<std::net::Ipv4Addr>() {
                Ok(a) if is_lab_addr(a) => {}
                Ok(a) => {
                    return err(
                        format!("{at}.{name}"),
                        format!("{a}: a rewritten address is a lab address, in 198.18.0.0/15"),
                    )
                }
                Err(_) => {
                    return err(
                        format!("{at}.{name}"),
                        format!("`{v}` is neither a host nor an IPv4 address"),
                    )
                }
            }
        }
    }
    Ok(())
}

fn validate_optimise(o: &Optimise) -> Result<(), Invalid> {
    let at = "flowtables.optimise";
    // Settings another policy does not use are kept, not refused: one spec
    // is swept across the policies (`--vary flowtables.optimise.policy=...`).
    let interval = o.interval.unwrap_or(Optimise::INTERVAL);
    // The control loop reads every mask's counters each time: below a
    // millisecond it would compete with the traffic it measures.
    if interval.0 < 1_000_000 {
        return err(format!("{at}.interval"), "at least 1ms");
    }
    if o.window.is_some_and(|w| w < interval) {
        return err(format!("{at}.window"), "at least one interval");
    }
    if o.idle.is_some_and(|w| w < interval) {
        return err(format!("{at}.idle"), "at least one interval");
    }
    if o.hyper_entries == Some(0) {
        return err(format!("{at}.hyper_entries"), "at least 1");
    }
    Ok(())
}

/// VXLAN on Open vSwitch goes through its native tunnels, which pop what
/// they push before the table an encap entry names sees it
/// (`wirelab_plan::openflow`): what the eSwitch does with an encapsulated
/// packet that OVS cannot is refused, with where.
fn validate_ovs_tunnels(ft: &FlowTables) -> Result<(), Invalid> {
    let tunneled: BTreeSet<u32> = ft
        .tables
        .iter()
        .flat_map(|t| &t.masks)
        .flat_map(|m| &m.entries)
        .filter(|e| e.action == EntryAction::Encap)
        .filter_map(|e| e.table)
        .chain(
            ft.overlay
                .as_ref()
                .filter(|o| o.subnets > 0)
                .map(|o| o.remote),
        )
        .collect();
    let ovs = "not with `dut: ovs`: OVS pops the tunnel before the next table, so";
    for (t, table) in ft.tables.iter().enumerate() {
        let popped = tunneled.contains(&(t as u32));
        if popped && t == 0 {
            return err(
                "flowtables.tables[0]",
                format!("{ovs} the table hosts' packets enter cannot be one an encap searches"),
            );
        }
        for (m, mask) in table.masks.iter().enumerate() {
            for (e, entry) in mask.entries.iter().enumerate() {
                let at = format!("flowtables.tables[{t}].masks[{m}].entries[{e}]");
                if entry.action == EntryAction::Encap && entry.to.is_some() {
                    return err(
                        format!("{at}.to"),
                        format!("{ovs} an encapsulated packet cannot leave by a host's port; search a table with `table:`"),
                    );
                }
                if entry.action == EntryAction::Goto
                    && entry.table.is_some_and(|n| tunneled.contains(&n))
                {
                    return err(
                        format!("{at}.table"),
                        format!("{ovs} a goto cannot search a table that encap entries search"),
                    );
                }
                if popped && !matches!(entry.action, EntryAction::Decap | EntryAction::Drop) {
                    return err(
                        format!("{at}.action"),
                        format!("{ovs} a table that encap entries search holds `decap` and `drop` entries only"),
                    );
                }
                if popped && entry.set.is_some() {
                    return err(
                        format!("{at}.set"),
                        format!("{ovs} a table that encap entries search rewrites nothing"),
                    );
                }
                if !popped && entry.action == EntryAction::Decap {
                    return err(
                        format!("{at}.action"),
                        format!("{ovs} it decapsulates only what it encapsulated: `decap` belongs in a table that encap entries search"),
                    );
                }
            }
        }
    }
    Ok(())
}

fn validate_offload(o: &Offload) -> Result<(), Invalid> {
    let at = "flowtables.offload";
    let interval = o.interval.unwrap_or(Offload::INTERVAL);
    // As `optimise`: each look reads every installed rule's counter.
    if interval.0 < 1_000_000 {
        return err(format!("{at}.interval"), "at least 1ms");
    }
    if o.idle.is_some_and(|w| w < interval) {
        return err(format!("{at}.idle"), "at least one interval");
    }
    if o.slow_path_burst == Some(0) {
        return err(format!("{at}.slow_path_burst"), "at least 1");
    }
    if o.slow_path_pps == Some(0) {
        return err(
            format!("{at}.slow_path_pps"),
            "at least 1 (a slow path that forwards nothing never lets a flow start)",
        );
    }
    Ok(())
}

pub(crate) fn validate(s: &Spec, hosts: &BTreeSet<&str>) -> Result<(), Invalid> {
    let Some(ft) = &s.flowtables else {
        return Ok(());
    };
    if ft.tables.is_empty() && ft.generate.is_empty() && ft.overlay.is_none() {
        return err("flowtables", "no tables and nothing to generate");
    }
    if ft.tables.len() > MAX_TABLES {
        return err(
            "flowtables.tables",
            format!("{} tables: the switch has {MAX_TABLES}", ft.tables.len()),
        );
    }
    let tables = ft.tables.len().max(1);
    let mut generated = vec![0usize; tables];
    let mut entries = 0usize;
    for (i, g) in ft.generate.iter().enumerate() {
        let at = format!("flowtables.generate[{i}]");
        if g.table as usize >= tables {
            return err(
                format!("{at}.table"),
                format!("no table {} (tables 0..{tables})", g.table),
            );
        }
        if g.entries == 0 {
            return err(format!("{at}.entries"), "at least 1");
        }
        // Each generated entry is a distinct address in 203.0.113.0/24.
        if g.entries > 256 {
            return err(format!("{at}.entries"), "at most 256 per mask");
        }
        generated[g.table as usize] += g.masks as usize;
        entries += (g.masks * g.entries) as usize;
    }
    if let Some(o) = &ft.overlay {
        let at = "flowtables.overlay";
        for (name, t) in [("local", o.local), ("remote", o.remote)] {
            if t as usize >= tables {
                return err(
                    format!("{at}.{name}"),
                    format!("no table {t} (tables 0..{tables}): list it under `tables:`"),
                );
            }
        }
        if o.local == o.remote {
            return err(
                format!("{at}.remote"),
                "the remote table is another than the local one",
            );
        }
        if o.containers == 0 || o.containers > 256 {
            return err(format!("{at}.containers"), "1..=256 (entries per mask)");
        }
        generated[o.local as usize] += o.subnets as usize;
        generated[o.remote as usize] += o.subnets as usize;
        entries += 2 * (o.subnets * o.containers) as usize;
    }
    // ScalaCN's hyper mask takes one more id in every table.
    let hyper = usize::from(
        ft.optimise
            .as_ref()
            .is_some_and(|o| o.policy == OptPolicy::Scalacn),
    );
    for (t, &n) in generated.iter().enumerate() {
        let own = ft.tables.get(t).map_or(0, |x| x.masks.len()) + hyper;
        if n + own > MAX_MASKS {
            return err(
                if ft.tables.is_empty() {
                    "flowtables.generate".to_string()
                } else {
                    format!("flowtables.tables[{t}].masks")
                },
                format!(
                    "{} masks (generated ones{} included): a table holds {MAX_MASKS}",
                    n + own,
                    if hyper == 1 {
                        " and the hyper mask"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    let is_addr = |v: &str| hosts.contains(v) || v.parse::<std::net::Ipv4Addr>().is_ok();
    for (t, table) in ft.tables.iter().enumerate() {
        for (m, mask) in table.masks.iter().enumerate() {
            let at = format!("flowtables.tables[{t}].masks[{m}]");
            let f = &mask.fields;
            if f.src > 32 || f.dst > 32 {
                return err(format!("{at}.match"), "a prefix is 0..=32 bits");
            }
            for (e, entry) in mask.entries.iter().enumerate() {
                let at = format!("{at}.entries[{e}]");
                // An entry that sets a field its mask does not compare would
                // silently match more than it says.
                let unused = [
                    ("src", entry.src.is_some() && f.src == 0),
                    ("dst", entry.dst.is_some() && f.dst == 0),
                    ("sport", entry.sport.is_some() && !f.sport),
                    ("dport", entry.dport.is_some() && !f.dport),
                    ("proto", entry.proto.is_some() && !f.proto),
                    ("vni", entry.vni.is_some() && !f.vni),
                ];
                if let Some((name, _)) = unused.iter().find(|u| u.1) {
                    return err(
                        format!("{at}.{name}"),
                        format!("the mask does not compare `{name}`: add it to the mask's match"),
                    );
                }
                for (name, v) in [("src", &entry.src), ("dst", &entry.dst)] {
                    if let Some(v) = v {
                        if !is_addr(v) {
                            return err(
                                format!("{at}.{name}"),
                                format!("`{v}` is neither a host nor an IPv4 address"),
                            );
                        }
                    }
                }
                if let Some(p) = &entry.proto {
                    if proto_number(p).is_none() {
                        return err(format!("{at}.proto"), format!("`{p}`: tcp, udp or 0..=255"));
                    }
                }
                if entry.vni.is_some_and(|v| v >= 1 << 24) {
                    return err(format!("{at}.vni"), "a VNI is 24 bits");
                }
                if let Some(h) = &entry.to {
                    if !hosts.contains(h.as_str()) {
                        return err(format!("{at}.to"), format!("no host `{h}`"));
                    }
                }
                if let Some(n) = entry.table {
                    if n as usize >= ft.tables.len() {
                        return err(
                            format!("{at}.table"),
                            format!("no table {n} (tables 0..{})", ft.tables.len()),
                        );
                    }
                }
                use EntryAction as A;
                let (to, table) = (entry.to.is_some(), entry.table.is_some());
                match entry.action {
                    A::Forward | A::Decap if !to => {
                        return err(format!("{at}.to"), "name the host it leaves by (`to:`)")
                    }
                    A::Goto if !table => {
                        return err(format!("{at}.table"), "goto: name the table")
                    }
                    A::Encap if to == table => {
                        return err(
                            format!("{at}"),
                            "encap: either `table:` (searched with the outer headers) or `to:` (sent encapsulated)",
                        )
                    }
                    A::Encap if entry.encap.is_none() => {
                        return err(format!("{at}.encap"), "encap: the tunnel (`encap: {vni, remote}`)")
                    }
                    _ => {}
                }
                if to && !matches!(entry.action, A::Forward | A::Decap | A::Encap) {
                    return err(
                        format!("{at}.to"),
                        "only `forward`, `decap` and `encap` go to a host",
                    );
                }
                if table && !matches!(entry.action, A::Goto | A::Encap) {
                    return err(
                        format!("{at}.table"),
                        "only `goto` and `encap` name a table",
                    );
                }
                if let Some(e) = &entry.encap {
                    if entry.action != A::Encap {
                        return err(format!("{at}.encap"), "only `encap` has a tunnel");
                    }
                    if e.vni >= 1 << 24 {
                        return err(format!("{at}.encap.vni"), "a VNI is 24 bits");
                    }
                    // Lab addresses only: an encapsulated packet that no
                    // decap rule takes still never leaves the lab, but its
                    // outer address stays one of the lab's own.
                    if !is_lab_addr(e.remote) {
                        return err(
                            format!("{at}.encap.remote"),
                            format!(
                                "{}: a remote VTEP is a lab address, in 198.18.0.0/15",
                                e.remote
                            ),
                        );
                    }
                }
                if let Some(set) = &entry.set {
                    validate_set(set, &at, entry.action, hosts)?;
                }
            }
            entries += mask.entries.len();
        }
    }
    if let Some(d) = &ft.device {
        device(d).map_err(|m| ("flowtables.device".to_string(), m))?;
    }
    if ft.dut == Dut::Ovs {
        // What the eSwitch stage does and OVS's OpenFlow tables would do
        // otherwise, refused rather than approximated.
        let why = if ft.device.is_some() {
            Some(("flowtables.device", "an eSwitch profile; OVS is itself"))
        } else if ft.offload.is_some() {
            Some((
                "flowtables.offload",
                "an offloading virtual switch in front of the eSwitch; OVS has its own upcalls",
            ))
        } else if ft.optimise.is_some() {
            Some((
                "flowtables.optimise",
                "a search-order policy for the eSwitch; OVS ranks its own subtables",
            ))
        } else {
            None
        };
        if let Some((at, what)) = why {
            return err(at, format!("{what}: not with `dut: ovs`"));
        }
        validate_ovs_tunnels(ft)?;
    }
    if let Some(o) = &ft.offload {
        validate_offload(o)?;
        if ft.optimise.is_some() {
            return err(
                "flowtables.offload",
                "not with `optimise` yet: one control loop orders the masks or offloads flows",
            );
        }
    }
    if let Some(o) = &ft.optimise {
        validate_optimise(o)?;
        if o.policy == OptPolicy::Scalacn {
            entries += o.hyper_entries.unwrap_or(Optimise::HYPER_ENTRIES) as usize;
        }
    }
    if entries > MAX_ENTRIES {
        return err(
            "flowtables",
            format!("{entries} entries: the switch holds {MAX_ENTRIES}"),
        );
    }
    // ScalaCN §4.1(a): a chain of gotos that comes back is a loop the
    // switch would cut after WL_ES_MAX_CHAIN tables; refuse it here.
    let next = |t: usize| -> Vec<usize> {
        let mut v: Vec<usize> = ft.tables[t]
            .masks
            .iter()
            .flat_map(|m| &m.entries)
            .filter_map(|e| e.table)
            .map(|n| n as usize)
            .collect();
        // The overlay's encap entries search its remote table.
        v.extend(
            ft.overlay
                .as_ref()
                .filter(|o| o.subnets > 0 && o.local as usize == t)
                .map(|o| o.remote as usize),
        );
        v.sort_unstable();
        v.dedup();
        v
    };
    fn visit(
        t: usize,
        next: &dyn Fn(usize) -> Vec<usize>,
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        if path.contains(&t) {
            path.push(t);
            return Some(path.clone());
        }
        path.push(t);
        for n in next(t) {
            if let Some(l) = visit(n, next, path) {
                return Some(l);
            }
        }
        path.pop();
        None
    }
    for t in 0..ft.tables.len() {
        if let Some(l) = visit(t, &next, &mut Vec::new()) {
            let l: Vec<String> = l.iter().map(|t| t.to_string()).collect();
            return err(
                "flowtables.tables",
                format!("tables {} form a loop", l.join(" -> ")),
            );
        }
    }
    Ok(())
}
