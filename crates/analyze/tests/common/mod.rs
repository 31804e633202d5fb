//! What the analyzer tests share.

/// Every golden trace folder under tests/golden/ (scripts/goldens.sh makes
/// all but the first, an older run kept without its run facts).
pub const GOLDENS: [&str; 6] = [
    "drop-5th-packet-twice",
    "fast-retransmit",
    "timeouts-back-off",
    "tail-loss-probe",
    "ecn",
    "incast",
];

/// The analysis options of a golden's run (from its plan.json); Linux
/// defaults for a golden kept without run facts.
pub fn options(name: &str) -> wirelab_analyze::Options {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    wirelab_analyze::results::options(&dir, 200_000_000)
}
