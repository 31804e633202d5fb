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

/// The analysis options of a golden's run (its rto_min, from plan.json);
/// Linux defaults for a golden kept without run facts.
pub fn options(name: &str) -> wirelab_analyze::Options {
    let plan = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
        .join("plan.json");
    let rto = std::fs::read(&plan).ok().and_then(|b| {
        let p: serde_json::Value = serde_json::from_slice(&b).ok()?;
        let r = p["hosts"][0]["stack"]["rto_min"].as_str()?;
        Some(r.parse::<wirelab_spec::Nanos>().unwrap().0)
    });
    wirelab_analyze::Options {
        min_rto_ns: rto.unwrap_or(200_000_000),
        ..Default::default()
    }
}
