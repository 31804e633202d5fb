//! The run engine as a library: several runs in parallel threads of one
//! process give the same results as each alone, and leave nothing behind.
//! Needs root (namespaces, BPF); without it the test says so and skips.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use wirelab_lab::{RunOptions, RunOutput, Verdict};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Three specs of three kinds: a TCP drop recovered by fast retransmit,
/// a TCP CE mark echoed, a RoCE drop recovered by go-back-N.
const SPECS: [&str; 3] = [
    "specs/tcp/drop-5th-packet-recovered-by-fast-retransmit.yaml",
    "specs/tcp/ecn-mark-is-echoed-by-the-receiver.yaml",
    "specs/roce/write-drop-5th-packet-go-back-n.yaml",
];

/// What must not differ between two runs of one spec and seed: the
/// verdict, the events the switch applied (on which logical packets), the
/// retransmissions they caused, and the QPNs and PSNs the seed chose.
fn fingerprint(o: &RunOutput) -> String {
    let s = &o.summary;
    let mut f = format!("{} valid={}; ", s.verdict, s.integrity.valid);
    let a = serde_json::to_value(&s.analysis.analysis).unwrap();
    for c in a["connections"].as_array().unwrap() {
        for e in c["events"].as_array().unwrap() {
            f += &format!(
                "event {} {} conn {} packet {} iter {}; ",
                e["event_id"], e["event"], c["id"], e["packet"], e["iteration"]
            );
        }
        for r in c["retransmissions"].as_array().unwrap() {
            f += &format!(
                "retx conn {} packet {} #{} iter {} {}; ",
                c["id"], r["packet"], r["nth"], r["iteration"], r["recovery"]
            );
        }
    }
    for e in &s.events {
        f += &format!("armed {} at {} hits {}; ", e.id, e.armed_index, e.hits);
    }
    for m in &s.roce {
        f += &format!(
            "qp {:#x}->{:#x} ipsn {:#x}; ",
            m.requester_qpn, m.responder_qpn, m.ipsn
        );
    }
    f
}

fn run(spec: &str, out: &Path, run_id: &str) -> RunOutput {
    let spec = wirelab_spec::load(&repo().join(spec), wirelab_analyze::catalog()).unwrap();
    let opts = RunOptions {
        timeout: Duration::from_secs(60),
        abort: Arc::new(AtomicBool::new(false)),
        run_id: Some(run_id.into()),
        seed: Some(0x5eed),
        ..RunOptions::new(out)
    };
    wirelab_lab::run(&spec, None, &opts, &wirelab_lab::Quiet).unwrap()
}

fn namespaces_of(run_ids: &[String]) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| run_ids.iter().any(|r| n.starts_with(&format!("wl-{r}-"))))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn three_runs_in_parallel_threads_match_each_run_alone_and_leave_nothing() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: lab tests need root (network namespaces, BPF)");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let pid = std::process::id() & 0xfff;
    let ids = |k: &str| -> Vec<String> {
        (0..SPECS.len())
            .map(|i| format!("{k}{pid:03x}{i}"))
            .collect()
    };
    let (alone_ids, par_ids) = (ids("a"), ids("b"));
    let alone: Vec<String> = SPECS
        .iter()
        .zip(&alone_ids)
        .map(|(s, id)| fingerprint(&run(s, out.path(), id)))
        .collect();
    let together: Vec<(String, Verdict, PathBuf)> = std::thread::scope(|sc| {
        let hs: Vec<_> = SPECS
            .iter()
            .zip(&par_ids)
            .map(|(s, id)| {
                let out = out.path();
                sc.spawn(move || {
                    let o = run(s, out, id);
                    (fingerprint(&o), o.verdict, o.dir)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((spec, a), (t, verdict, dir)) in SPECS.iter().zip(&alone).zip(&together) {
        assert_eq!(*verdict, Verdict::Pass, "{spec}: {t}");
        assert_eq!(a, t, "{spec}: alone and in parallel differ");
        assert!(
            a.contains("armed 1") && !a.contains("hits 0;"),
            "{spec}: every event was applied: {a}"
        );
        // Each run has its own complete results folder.
        for f in ["summary.json", "facts.json", "trace.pcapng", "report.html"] {
            assert!(dir.join(f).exists(), "{}: no {f}", dir.display());
        }
    }
    assert!(
        alone[2].contains("qp "),
        "the RoCE run reports its QPs: {}",
        alone[2]
    );
    let all: Vec<String> = alone_ids.iter().chain(&par_ids).cloned().collect();
    assert_eq!(namespaces_of(&all), Vec::<String>::new(), "namespaces left");
}
