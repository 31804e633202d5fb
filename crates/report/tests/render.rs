//! The reports of golden traces show what they must: the HTML page has its
//! plots with the marks of what happened, and the terminal summary names
//! each retransmission and analyzer verdict.

use std::path::Path;

use wirelab_analyze::report::{build, Report};
use wirelab_analyze::Options;
use wirelab_spec::AnalyzerName;

fn report(golden: &str) -> Report {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../analyze/tests/golden")
        .join(golden)
        .join("trace.pcapng");
    let t = wirelab_trace::read(&p).unwrap();
    build(
        golden,
        &t,
        Options::default(),
        None,
        &AnalyzerName::ALL,
        &[],
        &|_| {},
    )
}

#[test]
fn html_marks_drops_retransmissions_and_ce() {
    let h = wirelab_report::html::render(&report("drop-5th-packet-twice"));
    assert!(h.starts_with("<!doctype html>") && h.trim_end().ends_with("</html>"));
    assert!(!h.contains("<script"), "self-contained, no scripts");
    assert_eq!(
        h.matches("<svg").count(),
        3,
        "time–sequence, latency bars, RTT CDF"
    );
    assert!(h.contains("#FF0000"), "retransmissions in red");
    assert!(h.contains("Retransmission latency"));
    assert!(!h.contains("#FF8C00"), "no CE mark in this trace");
    let h = wirelab_report::html::render(&report("ecn"));
    assert!(h.contains("#FF8C00"), "the CE-marked packet");
    assert!(
        !h.contains("Retransmission latency"),
        "no loss, no latency section"
    );
}

#[test]
fn terminal_names_retransmissions_and_verdicts() {
    let t = wirelab_report::terminal::render(&report("drop-5th-packet-twice"), false);
    assert!(
        t.contains("retrans    conn 1 packet 5: 2x fast (rack) at #22"),
        "{t}"
    );
    assert!(
        t.contains("analyzer   loss-recovery           pass (8 checks)"),
        "{t}"
    );
    assert!(!t.contains("nack-generation"), "measurements only with -v");
    let v = wirelab_report::terminal::render(&report("drop-5th-packet-twice"), true);
    assert!(v.contains("nack-generation"), "{v}");
}
