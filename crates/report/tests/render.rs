//! The reports of golden traces show what they must: the HTML page has its
//! plots with the marks of what happened, and the terminal summary names
//! each retransmission and analyzer verdict.

use std::path::Path;

use wirelab_analyze::report::{build, Report};
use wirelab_analyze::Options;

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
        &wirelab_analyze::catalog().names(),
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
        4,
        "time–sequence, latency bars, RTT CDF, goodput over time"
    );
    assert!(h.contains("flow.goodput: Goodput per connection"));
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

#[test]
fn html_plots_roce_loss_latency_against_relative_psn_per_device() {
    use wirelab_analyze::{AnalyzerReport, Finding};
    use wirelab_spec::Unit;
    let mut r = report("ecn");
    assert!(!wirelab_report::html::render(&r).contains("relative PSN"));
    let m = |name, dev: &str, k: u32, us: f64| {
        Finding::measurement(
            "roce-retransmission-latency",
            name,
            us * 1e3,
            Unit::Nanos,
            String::new(),
        )
        .conn(1)
        .packet(16 * (k - 1) + k)
        .in_message(k)
        .device(Some(dev.into()))
    };
    let mut findings = Vec::new();
    for k in 1..=3 {
        findings.push(m("nack-generation", "b (default)", k, 20.0));
        findings.push(m("nack-reaction", "a (default)", k, 30.0));
        findings.push(m("nack-reaction", "c (slow-nack-reaction)", k, 500.0));
    }
    r.analyzers.push(AnalyzerReport {
        name: "roce-retransmission-latency",
        about: "",
        checks: 0,
        violations: 0,
        verdict: "measured",
        findings,
    });
    let h = wirelab_report::html::render(&r);
    assert!(
        h.contains("RoCE: loss latency against the lost packet"),
        "the section"
    );
    for label in [
        "nack-generation, b (default)",
        "nack-reaction, a (default)",
        "nack-reaction, c (slow-nack-reaction)",
    ] {
        assert!(h.contains(label), "legend names {label}");
    }
    // Three devices, three markers each: circles for generation, crosses
    // (two strokes) for reaction.
    let sweep = &h[h.find("RoCE: loss latency").unwrap()..];
    let sweep = &sweep[..sweep.find("</svg>").unwrap()];
    assert_eq!(sweep.matches("<circle").count(), 3, "{sweep}");
}
