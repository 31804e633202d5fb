//! RoCE device profiles: what a NIC does where the specification leaves
//! room or where Lumina (§6) found real NICs departing from it. Profiles
//! are data, so a user can describe the NIC they have; the ones wirelab
//! ships live in `profiles/roce/*.yaml`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Nanos, SpecError};

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
}

fn yes() -> bool {
    true
}

fn validate(p: &Profile) -> Result<(), (String, String)> {
    for (i, c) in p.frozen_counters.iter().enumerate() {
        if !COUNTERS.contains(&c.as_str()) {
            return Err((
                format!("frozen_counters[{i}]"),
                format!("unknown counter `{c}`; known: {}", COUNTERS.join(", ")),
            ));
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

/// The profiles wirelab ships, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "default",
        include_str!("../../../profiles/roce/default.yaml"),
    ),
    (
        "slow-nack-reaction",
        include_str!("../../../profiles/roce/slow-nack-reaction.yaml"),
    ),
    (
        "slow-read-nack",
        include_str!("../../../profiles/roce/slow-read-nack.yaml"),
    ),
    (
        "cnp-hidden-interval",
        include_str!("../../../profiles/roce/cnp-hidden-interval.yaml"),
    ),
    (
        "cnp-per-ip",
        include_str!("../../../profiles/roce/cnp-per-ip.yaml"),
    ),
    (
        "cnp-per-port",
        include_str!("../../../profiles/roce/cnp-per-port.yaml"),
    ),
    (
        "cnp-sent-not-counted",
        include_str!("../../../profiles/roce/cnp-sent-not-counted.yaml"),
    ),
    (
        "implied-nak-not-counted",
        include_str!("../../../profiles/roce/implied-nak-not-counted.yaml"),
    ),
    (
        "clears-migreq",
        include_str!("../../../profiles/roce/clears-migreq.yaml"),
    ),
    (
        "adaptive-retransmission",
        include_str!("../../../profiles/roce/adaptive-retransmission.yaml"),
    ),
];

pub fn parse_profile(text: &str) -> Result<Profile, SpecError> {
    crate::parse_yaml(text, validate)
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("unknown RoCE profile `{0}`: give a file path or one of {1}")]
    Unknown(String, String),
    #[error("cannot read RoCE profile {0}: {1}")]
    Read(String, std::io::Error),
    #[error("RoCE profile {0}: {1}")]
    Invalid(String, SpecError),
}

/// Whether `name_or_path` names a profile: a built-in one, or a file (anything
/// with a `/` or ending in `.yaml`; read only when the run loads it).
pub fn is_profile_ref(name_or_path: &str) -> bool {
    BUILTIN.iter().any(|(n, _)| *n == name_or_path) || is_path(name_or_path)
}

fn is_path(p: &str) -> bool {
    p.contains('/') || p.ends_with(".yaml")
}

/// A built-in profile by name, or a YAML file by path.
pub fn load_profile(name_or_path: &str) -> Result<Profile, ProfileError> {
    if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return parse_profile(text).map_err(|e| ProfileError::Invalid(name_or_path.into(), e));
    }
    if is_path(name_or_path) {
        let text = std::fs::read_to_string(name_or_path)
            .map_err(|e| ProfileError::Read(name_or_path.into(), e))?;
        return parse_profile(&text).map_err(|e| ProfileError::Invalid(name_or_path.into(), e));
    }
    let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
    Err(ProfileError::Unknown(name_or_path.into(), names.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_parses_and_names_itself() {
        for (name, text) in BUILTIN {
            let p = parse_profile(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&p.name, name);
        }
    }

    #[test]
    fn bad_profiles_name_the_field_and_line() {
        let e = parse_profile("name: x\ndescription: y\nfrozen_counters: [np_cnp_sent, bogus]\n")
            .unwrap_err();
        assert_eq!(e.path, "frozen_counters[1]");
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("unknown counter `bogus`"), "{e}");
        let e = parse_profile("name: x\ndescription: y\nnack_reaction: 5\n").unwrap_err();
        assert_eq!(e.path, "nack_reaction");
        assert!(e.message.contains("needs a unit"), "{e}");
        let e = parse_profile("name: x\ndescription: y\ncnp_scope: nic\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        let e = load_profile("cx9").unwrap_err();
        assert!(e.to_string().contains("slow-nack-reaction"), "{e}");
    }
}
