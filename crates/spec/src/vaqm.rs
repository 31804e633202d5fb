//! The `vaqm:` section: NetBump's virtual queues in the switch pipeline
//! (seed 003 §3.1, §4). Each queue emulates one downstream port: packets
//! are classified to it, its occupancy is estimated from its drain rate,
//! and its discipline marks or drops as that port would.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, BitsPerSec, Bytes, Invalid, Nanos, Spec};

/// The switch's virtual queues (`WL_MAX_VQS`).
pub const MAX_QUEUES: usize = 64;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Vaqm {
    /// A discipline of your own: a C file against wirelab_ext.h (NetBump's
    /// Table 1 hooks), relative to this spec. wirelab compiles it with
    /// clang and links it into the switch; queues with `extension:` run it.
    #[serde(default)]
    pub extension: Option<std::path::PathBuf>,
    /// Virtual queues, numbered from 1 in this order.
    pub queues: Vec<VQueue>,
    /// QCN reaction points (NetBump §4.3): the listed hosts' links into the
    /// switch receive the CNMs of `qcn` queues and limit the host's sending
    /// rate (fast recovery, additive increase). Without it CNMs are sent
    /// and traced, but nobody reacts.
    #[serde(default)]
    pub reaction_point: Option<ReactionPoint>,
}

/// Most delays or batch sizes one distributed queue compares.
pub const MAX_DISTRIBUTED_VARIANTS: usize = 8;

/// Bumps sharing one downstream queue (NetBump §3.2.2, Fig. 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Distributed {
    /// Each bump: the hosts whose packets into this queue it forwards
    /// itself. An empty list is a bump that sees none of them and knows
    /// the queue only from its neighbours' updates (NetBump Fig. 12).
    pub bumps: Vec<Vec<String>>,
    /// Update delays to compare, from sending to arrival (default [0]).
    #[serde(default)]
    pub delays: Vec<Nanos>,
    /// Packets per update to compare (1 = an update per packet; default [1]).
    #[serde(default)]
    pub batches: Vec<u32>,
}

/// An 802.1Qau congestion point on a virtual queue (NetBump §4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Qcn {
    /// Equilibrium queue Q_eq (802.1Qau: 20% of the buffer).
    pub q_eq: Bytes,
    /// Weight of the queue's growth in Fb = -(Q_off + w Q_delta)
    /// (802.1Qau: 2; NetBump §6.3.3 used 1).
    #[serde(default = "default_qcn_w")]
    pub w: u32,
    /// The quantised |Fb| that halves a reaction point's rate, at most 63
    /// (6 bits; NetBump §6.3.3 used 32).
    #[serde(default = "default_fb_max")]
    pub fb_max: u32,
    /// Chance a frame is sampled when there is no congestion (1%).
    #[serde(default = "default_p_min")]
    pub p_min: f64,
    /// Chance at |Fb| >= fb_max (10%; NetBump §6.3.3 used 20%).
    #[serde(default = "default_p_max")]
    pub p_max: f64,
}

fn default_qcn_w() -> u32 {
    2
}
fn default_fb_max() -> u32 {
    63
}
fn default_p_min() -> f64 {
    0.01
}
fn default_p_max() -> f64 {
    0.10
}

/// Where QCN's reaction point runs and how it recovers (802.1Qau RP,
/// byte-counter model as NetBump §6.3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReactionPoint {
    /// Hosts whose sending the reaction point limits.
    pub hosts: Vec<String>,
    /// The rate before any CNM, and the most it recovers to. Default 1gbit.
    #[serde(default)]
    pub line_rate: Option<BitsPerSec>,
    /// Never limited below this. Default 1mbit.
    #[serde(default)]
    pub min_rate: Option<BitsPerSec>,
    /// Additive increase per cycle (802.1Qau: 5mbit; NetBump: 1.5mbit).
    #[serde(default)]
    pub r_ai: Option<BitsPerSec>,
    /// Frames per fast-recovery cycle (default 100; NetBump §6.3.3: 600).
    #[serde(default)]
    pub fr_cycle_frames: Option<u32>,
    /// Frames per additive-increase cycle (default 100).
    #[serde(default)]
    pub ai_cycle_frames: Option<u32>,
    /// Fast-recovery cycles before additive increase (default 5).
    #[serde(default)]
    pub fr_cycles: Option<u32>,
}

/// Numbers a queue hands its `extension` discipline (`vq->param[]`).
pub const MAX_EXTENSION_PARAMS: usize = 8;

/// One virtual queue: what it holds, how fast it drains, its discipline.
/// Without `dctcp` or `red` it only estimates (and the trace shows it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VQueue {
    /// Packets the switch sends towards this host (its egress port; the
    /// default classifier, NetBump §3.1).
    #[serde(default)]
    pub port: Option<String>,
    /// Packets to these hosts, whatever their port (a user classifier;
    /// takes precedence over `port`).
    #[serde(default)]
    pub destinations: Vec<String>,
    /// The emulated port's drain rate.
    pub rate: BitsPerSec,
    /// The emulated port's buffer, when known: packets that would not fit
    /// are the ones it tail-drops, so they are left out of the estimate
    /// (NetBump §3.1). Unbounded when absent.
    #[serde(default)]
    pub buffer: Option<Bytes>,
    /// DCTCP marking on the instantaneous queue (NetBump §4.2).
    #[serde(default)]
    pub dctcp: Option<Dctcp>,
    /// RED on the average queue (NetBump §4.1, Floyd & Jacobson 1993).
    #[serde(default)]
    pub red: Option<Red>,
    /// Distributed NetBump (§3.2.2): bumps that each see part of this
    /// queue's traffic and exchange (length, port) updates; the `vaqm`
    /// analyzer replays the run through them and reports each bump's
    /// estimate against the in-sync one and the real queue (Figs. 11-13).
    #[serde(default)]
    pub distributed: Option<Distributed>,
    /// An 802.1Qau congestion point: sampled frames with Fb < 0 send a
    /// CNM back to their source (NetBump §4.3). Packets pass unmarked.
    #[serde(default)]
    pub qcn: Option<Qcn>,
    /// Run `vaqm.extension` on this queue, with these numbers as its
    /// `vq->param[0..]` (at most 8; their meaning is the discipline's).
    #[serde(default)]
    pub extension: Option<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dctcp {
    /// Marking threshold K: CE on ECN-capable packets while the queue is
    /// above it (a Not-ECT packet passes unmarked, as a DCTCP switch
    /// queues it; Alizadeh et al. §3.1).
    pub k: Bytes,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Red {
    pub min: Bytes,
    pub max: Bytes,
    /// EWMA weight of the average, 0 < w_q <= 1 (NetBump used 0.1).
    #[serde(default = "default_w_q")]
    pub w_q: f64,
    /// Probability at `max`, 0 < max_p <= 1.
    pub max_p: f64,
    /// What happens between the thresholds; above `max` RED always drops.
    #[serde(default)]
    pub action: RedAction,
}

fn default_w_q() -> f64 {
    0.1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RedAction {
    #[default]
    Mark,
    Drop,
}

pub(crate) fn validate(s: &Spec) -> Result<(), Invalid> {
    let Some(v) = &s.vaqm else {
        return Ok(());
    };
    let host = |name: &str| s.topology.hosts.iter().any(|h| h.name == name);
    validate_queues(v, &host, "host", s.topology.mtu)
}

/// The section's own checks, for ports and hosts named `host` (a lab's
/// hosts, or `wirelab bump`'s two interfaces) on links of `mtu`.
pub(crate) fn validate_queues(
    v: &Vaqm,
    host: &dyn Fn(&str) -> bool,
    kind: &str,
    mtu: u32,
) -> Result<(), Invalid> {
    if v.queues.is_empty() {
        return err("vaqm.queues", "no queues; remove `vaqm` or add a queue");
    }
    if v.queues.len() > MAX_QUEUES {
        return err(
            "vaqm.queues",
            format!("at most {MAX_QUEUES} queues, got {}", v.queues.len()),
        );
    }
    let mut ports = std::collections::BTreeSet::new();
    let mut dests = std::collections::BTreeSet::new();
    for (i, q) in v.queues.iter().enumerate() {
        let at = format!("vaqm.queues[{i}]");
        if q.port.is_none() && q.destinations.is_empty() {
            return err(
                at,
                "a queue needs `port` (a host: the switch port towards it) or `destinations`",
            );
        }
        if let Some(p) = &q.port {
            if !host(p) {
                return err(format!("{at}.port"), format!("no {kind} named `{p}`"));
            }
            if !ports.insert(p.clone()) {
                return err(
                    format!("{at}.port"),
                    format!("the port towards `{p}` already has a queue"),
                );
            }
        }
        for (j, d) in q.destinations.iter().enumerate() {
            if !host(d) {
                return err(
                    format!("{at}.destinations[{j}]"),
                    format!("no {kind} named `{d}`"),
                );
            }
            if !dests.insert(d.clone()) {
                return err(
                    format!("{at}.destinations[{j}]"),
                    format!("`{d}` is already classified to another queue"),
                );
            }
        }
        if q.rate.0 < 8_000 {
            return err(
                format!("{at}.rate"),
                format!("a drain rate of at least 8kbit, got {}", q.rate),
            );
        }
        if let Some(b) = q.buffer {
            crate::frame_fits(mtu, b, format!("{at}.buffer"))?;
        }
        if [
            q.dctcp.is_some(),
            q.red.is_some(),
            q.qcn.is_some(),
            q.extension.is_some(),
        ]
        .iter()
        .filter(|d| **d)
        .count()
            > 1
        {
            return err(
                at,
                "one discipline per queue: `dctcp`, `red`, `qcn` or `extension`",
            );
        }
        if let Some(d) = &q.distributed {
            let at = format!("{at}.distributed");
            if d.bumps.len() < 2 {
                return err(
                    format!("{at}.bumps"),
                    "at least two bumps share a queue (a list of hosts each; [] sees none)",
                );
            }
            let mut seen = std::collections::BTreeSet::new();
            for (b, hosts) in d.bumps.iter().enumerate() {
                for (j, h) in hosts.iter().enumerate() {
                    if !host(h) {
                        return err(
                            format!("{at}.bumps[{b}][{j}]"),
                            format!("no {kind} named `{h}`"),
                        );
                    }
                    if !seen.insert(h.clone()) {
                        return err(
                            format!("{at}.bumps[{b}][{j}]"),
                            format!("`{h}` is already forwarded by another bump"),
                        );
                    }
                }
            }
            for (f, n) in [("delays", d.delays.len()), ("batches", d.batches.len())] {
                if n > MAX_DISTRIBUTED_VARIANTS {
                    return err(
                        format!("{at}.{f}"),
                        format!("at most {MAX_DISTRIBUTED_VARIANTS} values, got {n}"),
                    );
                }
            }
            for (j, t) in d.delays.iter().enumerate() {
                if t.0 > 1_000_000_000 {
                    return err(format!("{at}.delays[{j}]"), format!("at most 1s, got {t}"));
                }
            }
            for (j, b) in d.batches.iter().enumerate() {
                if !(1..=1024).contains(b) {
                    return err(
                        format!("{at}.batches[{j}]"),
                        format!("must be 1..1024, got {b}"),
                    );
                }
            }
        }
        if let Some(c) = &q.qcn {
            if c.q_eq.0 == 0 {
                return err(format!("{at}.qcn.q_eq"), "must be above 0");
            }
            if !(1..=63).contains(&c.fb_max) {
                return err(
                    format!("{at}.qcn.fb_max"),
                    format!("must be 1..63 (QntzFb is 6 bits), got {}", c.fb_max),
                );
            }
            if c.w > 64 {
                return err(format!("{at}.qcn.w"), format!("must be 0..64, got {}", c.w));
            }
            for (f, p) in [("p_min", c.p_min), ("p_max", c.p_max)] {
                if !(0.0..=1.0).contains(&p) {
                    return err(
                        format!("{at}.qcn.{f}"),
                        format!("must be in [0, 1], got {p}"),
                    );
                }
            }
            if c.p_min > c.p_max {
                return err(
                    format!("{at}.qcn.p_max"),
                    format!("must be at least p_min ({} < {})", c.p_max, c.p_min),
                );
            }
        }
        if let Some(p) = &q.extension {
            if v.extension.is_none() {
                return err(
                    format!("{at}.extension"),
                    "no discipline to run: name its C file in `vaqm.extension`",
                );
            }
            if p.len() > MAX_EXTENSION_PARAMS {
                return err(
                    format!("{at}.extension"),
                    format!(
                        "at most {MAX_EXTENSION_PARAMS} numbers (vq->param[]), got {}",
                        p.len()
                    ),
                );
            }
        }
        if let Some(d) = &q.dctcp {
            if d.k.0 == 0 {
                return err(format!("{at}.dctcp.k"), "must be above 0");
            }
        }
        if let Some(r) = &q.red {
            if r.min.0 >= r.max.0 {
                return err(
                    format!("{at}.red.max"),
                    format!("must be above min ({} >= {})", r.min, r.max),
                );
            }
            if !(r.w_q > 0.0 && r.w_q <= 1.0) {
                return err(
                    format!("{at}.red.w_q"),
                    format!("must be in (0, 1], got {}", r.w_q),
                );
            }
            if !(r.max_p > 0.0 && r.max_p <= 1.0) {
                return err(
                    format!("{at}.red.max_p"),
                    format!("must be in (0, 1], got {}", r.max_p),
                );
            }
        }
    }
    if let Some(rp) = &v.reaction_point {
        if !v.queues.iter().any(|q| q.qcn.is_some()) {
            return err(
                "vaqm.reaction_point",
                "no queue sends CNMs: give a queue `qcn:`",
            );
        }
        if rp.hosts.is_empty() {
            return err("vaqm.reaction_point.hosts", "name at least one host");
        }
        for (j, h) in rp.hosts.iter().enumerate() {
            if !host(h) {
                return err(
                    format!("vaqm.reaction_point.hosts[{j}]"),
                    format!("no {kind} named `{h}`"),
                );
            }
        }
        let line = rp.line_rate.map_or(1_000_000_000, |r| r.0);
        let min = rp.min_rate.map_or(1_000_000, |r| r.0);
        if min == 0 || min > line {
            return err(
                "vaqm.reaction_point.min_rate",
                format!("must be above 0 and at most line_rate ({line} bit/s), got {min} bit/s"),
            );
        }
        for (f, n) in [
            ("fr_cycle_frames", rp.fr_cycle_frames),
            ("ai_cycle_frames", rp.ai_cycle_frames),
        ] {
            if n == Some(0) {
                return err(format!("vaqm.reaction_point.{f}"), "must be at least 1");
            }
        }
    }
    Ok(())
}
