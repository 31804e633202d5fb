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
