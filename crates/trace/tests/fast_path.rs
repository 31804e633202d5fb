//! The IPv4 + TCP fast path reads every packet of real captures exactly as
//! the general path does (the parse_packet fuzz target checks the same on
//! any bytes), and it is the path most packets take.

use std::path::Path;

#[test]
fn the_fast_path_reads_real_captures_as_the_general_path_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../analyze/tests");
    let mut files: Vec<_> = std::fs::read_dir(root.join("golden"))
        .unwrap()
        .map(|e| e.unwrap().path().join("trace.pcapng"))
        .collect();
    files.push(root.join("captures/super-packet-lost-resent-in-pieces.pcap"));
    let (mut fast, mut all) = (0usize, 0usize);
    for f in &files {
        let t = wirelab_trace::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for p in &t.packets {
            all += 1;
            // Whole, and cut at every snap length a capture might use.
            for snap in [p.data.len(), 96, 64, 54, 40, 20] {
                let frame = &p.data[..snap.min(p.data.len())];
                let took = wirelab_trace::fuzzing::same_both_ways(p.link, frame);
                if snap == p.data.len() && took {
                    fast += 1;
                }
            }
        }
    }
    assert!(all > 1000, "{all} packets");
    // Everything but the RoCE (UDP) packets of the golden traces.
    assert!(fast * 10 > all * 6, "fast path taken for {fast} of {all}");
}
