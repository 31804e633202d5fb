//! A RoCE device profile: what a NIC does where the specification leaves
//! room or where Lumina (§6) found real NICs departing from it. The type is
//! serde, so a profile is data; reading it from YAML (with the field's line
//! in errors) is the spec crate's job (`wirelab_spec::roce::load_profile`),
//! which keeps this transport core free of any YAML dependency.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wirelab_units::Nanos;

/// Which CE-marked packets share one CNP rate limiter at the notification
/// point. Lumina §6.3 found all three on real NICs: CX4 Lx per destination
/// IP, E810 per QP, CX5 and CX6 Dx per NIC port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CnpScope {
    /// The DCQCN paper's NP: at most one CNP per interval for each flow (QP).
    #[default]
    Qp,
    Ip,
    Port,
}

impl CnpScope {
    pub fn name(self) -> &'static str {
        match self {
            CnpScope::Qp => "qp",
            CnpScope::Ip => "ip",
            CnpScope::Port => "port",
        }
    }
}

/// Counter names a device keeps, as NVIDIA's `hw_counters` and Lumina §4
/// name them.
pub const COUNTERS: &[&str] = &[
    "tx_roce_packets",
    "rx_roce_packets",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "implied_nak_seq_err",
    "rnr_nak_retry_err",
    "out_of_buffer",
    "duplicate_request",
    "rx_read_requests",
    "rx_write_requests",
    "rx_send_requests",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_icrc_encapsulated",
    "req_cqe_error",
    "roce_adp_retrans",
    "roce_slow_restart",
    "rx_discards_phy",
];

/// What adaptive retransmission does when a host turns it on (Lumina §6.3:
/// NVIDIA NICs "do not follow the IB specification" there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Adaptive {
    /// Successive retransmission timeouts of a QP; the last one repeats.
    pub timeouts: Vec<Nanos>,
    /// Retries beyond the configured retry count.
    #[serde(default)]
    pub extra_retries: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Where this behaviour was seen (e.g. "Lumina §6.1, CX4 Lx").
    #[serde(default)]
    pub seen_on: Option<String>,
    /// Responder: time from an out-of-sequence request to its NAK (write/send).
    #[serde(default)]
    pub nack_generation: Nanos,
    /// Requester: time from a gap in read responses to the re-issued read.
    #[serde(default)]
    pub read_nack_generation: Nanos,
    /// Requester: time from a NAK to the first retransmission.
    #[serde(default)]
    pub nack_reaction: Nanos,
    /// A floor under `min_time_between_cnps` the NIC does not expose.
    #[serde(default)]
    pub cnp_hidden_interval: Nanos,
    #[serde(default)]
    pub cnp_scope: CnpScope,
    /// Counters that never move.
    #[serde(default)]
    pub frozen_counters: Vec<String>,
    /// The MigReq bit of every packet sent; IBTA §9.2.4 says 1.
    #[serde(default = "yes")]
    pub migreq: bool,
    /// Used only when the host enables adaptive retransmission; absent =
    /// the device follows the configured timeout and retry count anyway.
    #[serde(default)]
    pub adaptive_retransmission: Option<Adaptive>,
    /// A slow path QPs share (Lumina §6.2.2, the "noisy neighbour"); absent
    /// = every QP recovers on its own.
    #[serde(default)]
    pub shared_slow_path: Option<SharedSlowPath>,
}

/// Lumina §6.2.2 (CX4 Lx): with enough read QPs recovering lost responses
/// at once, the requester's receive pipeline stalls and discards what
/// arrives, for every QP (`rx_discards_phy` grew by 107 with 12 of 36 QPs
/// dropping); innocent QPs then lose tail packets and time out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedSlowPath {
    /// Read recoveries (implied NAKs not yet answered) open at once that
    /// stall the pipeline.
    pub recoveries: u32,
    /// How long each stall discards arriving packets.
    pub stall: Nanos,
}

fn yes() -> bool {
    true
}

/// Checks a parsed profile; an error is the field's path and what is wrong
/// with it, for the YAML reader to place on a line.
pub fn validate(p: &Profile) -> Result<(), (String, String)> {
    for (i, c) in p.frozen_counters.iter().enumerate() {
        if !COUNTERS.contains(&c.as_str()) {
            return Err((
                format!("frozen_counters[{i}]"),
                format!("unknown counter `{c}`; known: {}", COUNTERS.join(", ")),
            ));
        }
    }
    if let Some(sp) = &p.shared_slow_path {
        if sp.recoveries < 2 {
            return Err((
                "shared_slow_path.recoveries".into(),
                "at least 2: one QP's recovery is its own slow path".into(),
            ));
        }
        if sp.stall.0 == 0 {
            return Err(("shared_slow_path.stall".into(), "must be positive".into()));
        }
    }
    if let Some(a) = &p.adaptive_retransmission {
        if a.timeouts.is_empty() {
            return Err((
                "adaptive_retransmission.timeouts".into(),
                "needs at least one timeout".into(),
            ));
        }
        if let Some(i) = a.timeouts.iter().position(|t| t.0 == 0) {
            return Err((
                format!("adaptive_retransmission.timeouts[{i}]"),
                "must be positive".into(),
            ));
        }
    }
    Ok(())
}
