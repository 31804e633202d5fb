//! `topology:`: the lab's hosts around the switch, and their kernel `stack:`
//! settings (also the spec-wide `stack:`).

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, holds_a_frame, roce, BitsPerSec, Bytes, Invalid, Nanos, Spec, Transport};

/// Largest number of hosts: switch ports in `wirelab.h` less one spare.
pub const MAX_HOSTS: usize = 62;

/// A socket buffer's bounds (`stack.rcvbuf`, `stack.sndbuf`).
pub const MIN_SOCKET_BUFFER: u64 = 2 << 10;
pub const MAX_SOCKET_BUFFER: u64 = 512 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// MTU of every lab link (bytes).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Hosts, each attached to its own switch port (a star around the switch).
    pub hosts: Vec<Host>,
}

fn default_mtu() -> u32 {
    1500
}

/// Most GIDs a host's RoCE device may have.
pub const MAX_GIDS: u32 = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Lower-case letters, digits and '-', at most 12 characters.
    pub name: String,
    /// Rate limit on the switch's egress port towards this host (a bottleneck).
    #[serde(default)]
    pub bottleneck: Option<BitsPerSec>,
    /// Buffer of that bottleneck queue.
    #[serde(default)]
    pub bottleneck_buffer: Option<Bytes>,
    /// Token-bucket depth of the bottleneck: how much it may send back to
    /// back after an idle spell. Default 1 ms at the rate (at least one
    /// frame); one frame makes the real queue drain like NetBump's leaky
    /// bucket, which its accuracy experiment needs (§6.2.2).
    #[serde(default)]
    pub bottleneck_burst: Option<Bytes>,
    /// RoCE: how many addresses (GIDs) the host's device answers on, 1..=8
    /// (Lumina's multiple GIDs per host). The k-th connection of a group
    /// uses GID k mod n of its requester and of its responder.
    #[serde(default)]
    pub gids: Option<u32>,
    #[serde(default)]
    pub stack: Option<Stack>,
}

/// What every wirelab DCTCP's kernel name starts with.
const DCTCP_PREFIX: &str = "wl_dctcp";

/// This process's DCTCP kernel name: `wl_dctcp_` and the process id in
/// base 36. Congestion controls are one kernel-wide list of names, and two
/// wirelab processes at once (two users; `wirelab run` beside a sweep)
/// each register their own: under one shared name the second
/// registration failed (EEXIST), or, skipped, the first process's exit
/// took the algorithm away from the second's runs. At most 15 characters
/// (TCP_CA_NAME_MAX, 16 with its NUL): a pid is below 2^22, five digits.
pub fn dctcp_kernel_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| dctcp_name_of(std::process::id()))
}

fn dctcp_name_of(mut pid: u32) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit(pid % 36, 36).expect("below 36"));
        pid /= 36;
        if pid == 0 {
            break;
        }
    }
    format!("{DCTCP_PREFIX}_{}", digits.iter().rev().collect::<String>())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    Reno,
    Cubic,
    Bbr,
    /// DCTCP (RFC 8257): wirelab's BPF struct_ops `wl_dctcp_<pid>`,
    /// registered while runs use it (this kernel has no tcp_dctcp).
    /// Negotiates ECN itself.
    Dctcp,
}

impl CongestionControl {
    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::Reno => "reno",
            CongestionControl::Cubic => "cubic",
            CongestionControl::Bbr => "bbr",
            CongestionControl::Dctcp => "dctcp",
        }
    }

    /// What a socket selects with TCP_CONGESTION.
    pub fn kernel_name(self) -> &'static str {
        match self {
            CongestionControl::Dctcp => dctcp_kernel_name(),
            other => other.name(),
        }
    }

    pub const ALL: [CongestionControl; 4] = [
        CongestionControl::Reno,
        CongestionControl::Cubic,
        CongestionControl::Bbr,
        CongestionControl::Dctcp,
    ];

    /// The one a socket (or the sysctl) names `kernel`, if a spec can ask
    /// for it (a record's `TCP_CONGESTION`, read from the kernel).
    pub fn from_kernel_name(kernel: &str) -> Option<CongestionControl> {
        if kernel
            .strip_prefix(DCTCP_PREFIX)
            .is_some_and(|pid| pid.is_empty() || pid.starts_with('_'))
        {
            // Any process's (a record made by another run), or the name
            // before it carried one.
            return Some(CongestionControl::Dctcp);
        }
        Self::ALL.into_iter().find(|c| c.kernel_name() == kernel)
    }
}

/// Host stack settings. Every field is optional so that a host can override
/// just one; resolved values are in the plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stack {
    /// Set on every socket (TCP_CONGESTION): this kernel defaults to bbr, so
    /// wirelab always sets it. Default: cubic.
    #[serde(default)]
    pub congestion_control: Option<CongestionControl>,
    /// net.ipv4.tcp_ecn (RFC 3168 negotiation). Default: false.
    #[serde(default)]
    pub ecn: Option<bool>,
    /// net.ipv4.tcp_sack. Default: true.
    #[serde(default)]
    pub sack: Option<bool>,
    /// net.ipv4.tcp_timestamps. Default: true.
    #[serde(default)]
    pub timestamps: Option<bool>,
    /// TCP timestamps in microseconds rather than milliseconds (the lab
    /// route's feature `tcp_usec_ts`, Linux 6.7; RFC 7323 §5.4 allows any
    /// tick from 1 µs to 1 s), as datacenter hosts use them. With them a
    /// sender without SACK can tell, from the echoed timestamp (RFC 4015,
    /// Eifel), that a segment it retransmitted within the millisecond was
    /// only reordered, and widens its duplicate-ACK threshold (DETER
    /// §5.2). Needs `timestamps`. Default: false.
    #[serde(default)]
    pub usec_timestamps: Option<bool>,
    /// Route option `rto_min` on the host's lab route.
    #[serde(default)]
    pub rto_min: Option<Nanos>,
    /// Route option `quickack` on the host's lab route.
    #[serde(default)]
    pub quickack: Option<bool>,
    /// SO_RCVBUF on the host's sockets, set before connect(2) and
    /// listen(2) as an application sets it, so the window scale follows
    /// it (the kernel keeps twice the value, socket(7); wirelab forces it
    /// past net.core.rmem_max). Default: the kernel's autotuning.
    #[serde(default)]
    pub rcvbuf: Option<Bytes>,
    /// SO_SNDBUF likewise. Default: the kernel's autotuning.
    #[serde(default)]
    pub sndbuf: Option<Bytes>,
    /// TCP_NODELAY on the host's sockets. Default: true (a message is
    /// written whole, and Nagle's algorithm would hold its last segment
    /// behind an unacknowledged one).
    #[serde(default)]
    pub nodelay: Option<bool>,
    /// Further sysctls (names under net.ipv4. or net.core.) set in the host namespace.
    #[serde(default)]
    pub sysctls: BTreeMap<String, String>,
    /// The host's RoCE device (Lumina's `roce-parameters`), for `transport: roce`.
    #[serde(default)]
    pub roce: Option<RoceStack>,
}

/// A host's RoCE device settings; every field optional so a host can
/// override one. Defaults: profile `default`, DCQCN RP and NP on,
/// min_time_between_cnps 4us, no adaptive retransmission, no slow restart,
/// line rate 10gbit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoceStack {
    /// A built-in device profile (`profiles/roce/`) or a path to a YAML file.
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub dcqcn_rp: Option<bool>,
    #[serde(default)]
    pub dcqcn_np: Option<bool>,
    #[serde(default)]
    pub min_time_between_cnps: Option<Nanos>,
    #[serde(default)]
    pub adaptive_retransmission: Option<bool>,
    #[serde(default)]
    pub slow_restart: Option<bool>,
    /// The rate data is paced at when DCQCN is not limiting it.
    #[serde(default)]
    pub line_rate: Option<BitsPerSec>,
}

fn validate_roce_stack(r: &RoceStack, at: &str) -> Result<(), Invalid> {
    if let Some(p) = &r.profile {
        if !roce::is_profile_ref(p) {
            let names: Vec<&str> = roce::BUILTIN.iter().map(|(n, _)| *n).collect();
            return err(
                format!("{at}.profile"),
                format!(
                    "unknown profile `{p}`: give a path to a YAML file or one of {}",
                    names.join(", ")
                ),
            );
        }
    }
    if let Some(l) = r.line_rate {
        if l.0 < 1_000_000 {
            return err(
                format!("{at}.line_rate"),
                format!("must be at least 1mbit, got {l}"),
            );
        }
    }
    Ok(())
}

/// A host's stack over the spec's `stack:` defaults (`defaults`), or the
/// defaults themselves (None).
fn validate_stack(s: &Stack, defaults: Option<&Stack>, at: &str) -> Result<(), Invalid> {
    let timestamps = s.timestamps.or(defaults.and_then(|d| d.timestamps));
    let usec = s
        .usec_timestamps
        .or(defaults.and_then(|d| d.usec_timestamps));
    if usec == Some(true) && timestamps == Some(false) {
        return err(
            format!("{at}.usec_timestamps"),
            "microsecond timestamps need `timestamps: true` (they change the timestamp option's unit, RFC 7323 §5.4)",
        );
    }
    if let Some(r) = &s.roce {
        validate_roce_stack(r, &format!("{at}.roce"))?;
    }
    if let Some(r) = s.rto_min {
        // The kernel keeps rto_min in jiffies (ip-route(8)); below 1ms it
        // rounds to nothing useful, above 120s it exceeds TCP_RTO_MAX.
        if r.0 < 1_000_000 || r.0 > 120_000_000_000 {
            return err(
                format!("{at}.rto_min"),
                format!("must be between 1ms and 120s, got {r}"),
            );
        }
    }
    for (name, b) in [("rcvbuf", s.rcvbuf), ("sndbuf", s.sndbuf)] {
        // The kernel keeps an int of twice the value; below its minimum
        // (SOCK_MIN_RCVBUF, about 2 KB) it rounds up.
        if let Some(b) = b.filter(|b| !(MIN_SOCKET_BUFFER..=MAX_SOCKET_BUFFER).contains(&b.0)) {
            return err(
                format!("{at}.{name}"),
                format!("must be between 2KiB and 512MiB, got {b}"),
            );
        }
    }
    for (k, v) in &s.sysctls {
        if !(k.starts_with("net.ipv4.") || k.starts_with("net.core.")) {
            return err(
                format!("{at}.sysctls.{k}"),
                "only net.ipv4.* and net.core.* sysctls are namespaced; others would change the host",
            );
        }
        if k.contains("..") || k.contains('/') || v.contains('\n') {
            return err(
                format!("{at}.sysctls.{k}"),
                "malformed sysctl name or value",
            );
        }
    }
    Ok(())
}

/// Checks `topology:` and every `stack:`; returns the host names, which
/// later sections refer to.
pub(crate) fn validate(s: &Spec) -> Result<BTreeSet<&str>, Invalid> {
    let t = &s.topology;
    if !(576..=9000).contains(&t.mtu) {
        return err(
            "topology.mtu",
            format!("must be between 576 and 9000, got {}", t.mtu),
        );
    }
    if t.hosts.len() < 2 {
        return err(
            "topology.hosts",
            format!("needs at least 2 hosts, got {}", t.hosts.len()),
        );
    }
    if t.hosts.len() > MAX_HOSTS {
        return err(
            "topology.hosts",
            format!("at most {MAX_HOSTS} hosts, got {}", t.hosts.len()),
        );
    }
    let mut names = BTreeSet::new();
    for (i, h) in t.hosts.iter().enumerate() {
        if h.name == "switch" {
            return err(
                format!("topology.hosts[{i}].name"),
                "`switch` is the switch's own name",
            );
        }
        let ok = !h.name.is_empty()
            && h.name.len() <= 12
            && h.name.starts_with(|c: char| c.is_ascii_lowercase())
            && h.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return err(
                format!("topology.hosts[{i}].name"),
                format!(
                    "`{}` must be 1-12 of a-z, 0-9, '-' starting with a letter",
                    h.name
                ),
            );
        }
        if !names.insert(h.name.as_str()) {
            return err(
                format!("topology.hosts[{i}].name"),
                format!("duplicate host `{}`", h.name),
            );
        }
        if let Some(r) = h.bottleneck {
            if r.0 < 64_000 {
                return err(
                    format!("topology.hosts[{i}].bottleneck"),
                    format!("{r} is below 64kbit"),
                );
            }
        }
        if h.bottleneck_buffer.is_some() && h.bottleneck.is_none() {
            return err(
                format!("topology.hosts[{i}].bottleneck_buffer"),
                "needs `bottleneck`",
            );
        }
        if let Some(b) = h.bottleneck_burst {
            if h.bottleneck.is_none() {
                return err(
                    format!("topology.hosts[{i}].bottleneck_burst"),
                    "needs `bottleneck`",
                );
            }
            holds_a_frame(s, b, format!("topology.hosts[{i}].bottleneck_burst"))?;
        }
        if let Some(n) = h.gids {
            if !(1..=MAX_GIDS).contains(&n) {
                return err(
                    format!("topology.hosts[{i}].gids"),
                    format!("must be between 1 and {MAX_GIDS}, got {n}"),
                );
            }
            if n > 1 && s.traffic.transport != Transport::Roce {
                return err(
                    format!("topology.hosts[{i}].gids"),
                    "GIDs are RoCE device addresses: needs `traffic.transport: roce`",
                );
            }
        }
        if let Some(st) = &h.stack {
            validate_stack(st, Some(&s.stack), &format!("topology.hosts[{i}].stack"))?;
        }
    }
    validate_stack(&s.stack, None, "stack")?;
    Ok(names)
}

#[cfg(test)]
mod cc_tests {
    use super::CongestionControl;

    #[test]
    fn a_kernel_name_maps_back_to_what_a_spec_asks_for() {
        // wirelab's DCTCP runs as wl_dctcp_<pid>: a record of it, made by
        // any process, replays as dctcp.
        for name in ["wl_dctcp", "wl_dctcp_1z4", super::dctcp_kernel_name()] {
            assert_eq!(
                CongestionControl::from_kernel_name(name),
                Some(CongestionControl::Dctcp),
                "{name}"
            );
        }
        assert_eq!(CongestionControl::from_kernel_name("wl_dctcpx"), None);
        assert_eq!(
            CongestionControl::from_kernel_name("bbr"),
            Some(CongestionControl::Bbr)
        );
        assert_eq!(CongestionControl::from_kernel_name("dctcp"), None);
        assert_eq!(CongestionControl::from_kernel_name("htcp"), None);
    }

    #[test]
    fn this_processs_dctcp_name_fits_the_kernels_limit_and_is_its_own() {
        let name = super::dctcp_kernel_name();
        // TCP_CA_NAME_MAX is 16 with the NUL.
        assert!(name.len() <= 15, "{name}");
        let pid = name.strip_prefix("wl_dctcp_").expect("the prefix");
        assert_eq!(u32::from_str_radix(pid, 36).unwrap(), std::process::id());
        // The largest pid Linux hands out (PID_MAX_LIMIT, 2^22) fits too.
        assert_eq!(super::dctcp_name_of(1 << 22), "wl_dctcp_2hwcg");
        assert_eq!(super::dctcp_name_of(0), "wl_dctcp_0");
    }
}
