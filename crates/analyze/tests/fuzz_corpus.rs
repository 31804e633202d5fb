//! The committed fuzz corpus (fuzz/corpus/, seeds plus what `make fuzz`
//! found worth keeping) through the fuzz targets' bodies, on stable: every
//! input is read and analyzed without a panic.

use std::path::Path;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn read_trace_corpus() {
    let v = inputs("read_trace");
    assert!(v.len() >= 4);
    for data in &v {
        wirelab_analyze::fuzzing::read_and_analyze(data);
    }
    // Every prefix of a real trace: damage at every offset is a finding.
    let whole = v.iter().max_by_key(|d| d.len()).unwrap();
    for cut in (0..whole.len()).step_by(7) {
        wirelab_analyze::fuzzing::read_and_analyze(&whole[..cut]);
    }
}

#[test]
fn parse_packet_corpus() {
    let v = inputs("parse_packet");
    assert!(v.len() >= 6);
    for data in &v {
        for cut in 0..=data.len() {
            wirelab_trace::fuzzing::parse_any(&data[..cut]);
        }
    }
}
