//! RoCE device profiles: what a NIC does where the specification leaves
//! room or where Lumina (§6) found real NICs departing from it. Profiles
//! are data, so a user can describe the NIC they have. The types belong to
//! the transport (`wirelab_roce::profile`); this module reads them from
//! YAML, and the ones wirelab ships live in `profiles/roce/*.yaml`.

pub use wirelab_roce::profile::{validate, Adaptive, CnpScope, Profile, SharedSlowPath, COUNTERS};

use crate::SpecError;

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
    (
        "noisy-neighbour",
        include_str!("../../../profiles/roce/noisy-neighbour.yaml"),
    ),
];

pub fn parse_profile(text: &str) -> Result<Profile, SpecError> {
    crate::parse_yaml(text, validate)
}

/// Largest profile file read: real ones are a few hundred bytes.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A profile file's text: a regular file (not a directory, not a device
/// such as /dev/zero, which would never end), of bounded size.
fn read_bounded(path: &str) -> Result<String, ProfileError> {
    let io = |e| ProfileError::Read(path.into(), e);
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(ProfileError::NotAFile(path.into()));
    }
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::TooLarge(path.into(), meta.len()));
    }
    std::fs::read_to_string(path).map_err(io)
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("RoCE profile {0} is not a regular file")]
    NotAFile(String),
    #[error("RoCE profile {0} has {1} bytes; a profile is at most 1 MiB")]
    TooLarge(String, u64),
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

/// A profile named by its file rather than a built-in name.
pub fn is_path(p: &str) -> bool {
    p.contains('/') || p.ends_with(".yaml")
}

/// A built-in profile by name, or a YAML file by path.
pub fn load_profile(name_or_path: &str) -> Result<Profile, ProfileError> {
    if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return parse_profile(text).map_err(|e| ProfileError::Invalid(name_or_path.into(), e));
    }
    if is_path(name_or_path) {
        let text = read_bounded(name_or_path)?;
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
