//! Bodies of the fuzz targets (fuzz/fuzz_targets/), here so the stable test
//! suite runs the committed corpus through exactly the same code
//! (crates/analyze/tests/fuzz_corpus.rs).

/// Reads `data` as a trace file and runs every analyzer and the terminal
/// report over it. Must never panic.
pub fn read_and_analyze(data: &[u8]) {
    if let Ok(t) = wirelab_trace::read_bytes(data) {
        let r = crate::report::build(
            "fuzz",
            &t,
            crate::Options::default(),
            None,
            &crate::catalog().names(),
            &[],
            &|_| {},
        );
        let _ = serde_json::to_string(&r).expect("a report serializes");
    }
}
