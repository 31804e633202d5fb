//! Cross-check against a tool nobody here wrote: on every golden trace,
//! wirelab's per-packet classification (retransmission, fast retransmission,
//! duplicate ACK) against tshark's `tcp.analysis.*` flags. They must agree on
//! at least 99% of packets, and every difference must be one of the
//! systematic differences explained in `common/tshark.rs`.

use std::path::Path;

mod common;

use common::tshark::{compare, Agreement};

#[test]
fn tshark_agrees_on_99_percent_of_packets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut a = Agreement::default();
    for g in common::GOLDENS {
        let path = root.join(g).join("trace.pcapng");
        if compare(&path, common::options(g), &mut a).is_none() {
            eprintln!("SKIPPED: tshark is not installed (make deps installs it)");
            return;
        }
    }
    eprintln!("tshark agreement: {a}");
    assert!(
        a.total > 1000,
        "enough packets to mean something: {}",
        a.total
    );
    assert!(a.share() >= 0.99, "{}/{}", a.agree, a.total);
}
