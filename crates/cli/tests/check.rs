//! `wirelab check`: what `run` would refuse, refused without a lab (no
//! root needed).

use std::process::{Command, Output};

fn wirelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(args)
        .output()
        .expect("running wirelab")
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_shipped_spec_checks() {
    let mut specs: Vec<String> = Vec::new();
    for dir in std::fs::read_dir(repo().join("specs")).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "yaml") {
                specs.push(f.to_string_lossy().into_owned());
            }
        }
    }
    assert!(specs.len() > 10, "the specs folder: {specs:?}");
    let mut args = vec!["check"];
    args.extend(specs.iter().map(String::as_str));
    let o = wirelab(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Every shipped spec's flow tables deliver its connections' packets.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("warning"), "{out}");
}

/// ScalaCN §4.1 (a) before a run: an overlay whose remote decap rule has
/// another VNI leaves the packets encapsulated, and check says where.
#[test]
fn flow_tables_that_do_not_deliver_are_named_by_check() {
    let spec = repo().join("specs/scalacn/send-bandwidth-falls-with-remote-decap-masks.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let good = "{dst: 198.19.255.2, vni: 1002, action: decap";
    assert!(text.contains(good));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("wrong-vni.yaml");
    std::fs::write(
        &bad,
        text.replace(good, "{dst: 198.19.255.2, vni: 1003, action: decap"),
    )
    .unwrap();
    let o = wirelab(&["check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "warning: connection 1 requester to responder: left the switch \
             VXLAN-encapsulated (table 0 mask 0), which no host decapsulates"
        ) && !out.contains("responder to requester"),
        "{out}"
    );
}

/// A counter the kernel does not have would read as a delta of 0 and pass
/// `at_most: 0`: refused with its path and line, a close name offered.
#[test]
fn a_counter_no_run_reports_is_refused_with_its_line() {
    if !std::path::Path::new("/proc/thread-self/net/netstat").exists() {
        eprintln!("SKIPPED: no /proc/net here, counter names are not checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("typo.yaml");
    std::fs::write(
        &spec,
        "topology:\n  hosts: [{name: a}, {name: b}]\n\
         traffic:\n  connections:\n    - {from: a, to: b, message_size: 1KB}\n\
         expect:\n  - {counter: TcpExtTcpTimeouts, host: a, at_most: 0}\n",
    )
    .unwrap();
    let o = wirelab(&["check", spec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("expect[0].counter: this kernel has no counter `TcpExtTcpTimeouts`")
            && err.contains("did you mean TcpExtTCPTimeouts?")
            && err.contains("(line 7)"),
        "{err}"
    );
    // The real names, kernel and RoCE device alike, pass.
    std::fs::write(
        &spec,
        "topology:\n  hosts: [{name: a}, {name: b}]\n\
         traffic:\n  connections:\n    - {from: a, to: b, message_size: 1KB}\n\
         expect:\n  - {counter: TcpExtTCPTimeouts, host: a, at_most: 0}\n  \
         - {counter: TcpRetransSegs, host: a, at_most: 0}\n",
    )
    .unwrap();
    let o = wirelab(&["check", spec.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A fuzz target is checked as one (its seed spec too); a bad one exits 2
/// naming the YAML path and line, and `wirelab fuzz` refuses it the same
/// way before it needs root or makes a folder.
#[test]
fn fuzz_targets_are_checked_and_a_bad_one_names_its_line() {
    let t = repo().join("specs/fuzz/roce-find-counter-or-latency-anomalies.yaml");
    let o = wirelab(&["check", t.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok (fuzz target)"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let seed = repo().join("specs/fuzz/seeds/roce-write.yaml");
    std::fs::write(
        &bad,
        format!(
            "seed: {}\nspace:\n  messages: {{min: 4, max: 2}}\nobjectives:\n  - {{kind: counters}}\n",
            seed.display()
        ),
    )
    .unwrap();
    for args in [vec!["check"], vec!["fuzz", "--out"]] {
        let mut args = args;
        let out = dir.path().join("out");
        if args[0] == "fuzz" {
            args.push(out.to_str().unwrap());
        }
        args.push(bad.to_str().unwrap());
        let o = wirelab(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("space.messages: min 4 is above max 2 (line 3)"),
            "{err}"
        );
        assert!(!out.exists(), "a refused target leaves no campaign folder");
    }
}

#[test]
fn the_findings_list_needs_no_trace() {
    let o = wirelab(&["analyze", "--findings"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("roce-retransmission-latency.nack-reaction"),
        "{out}"
    );
    assert!(out.contains("flow.mct"), "{out}");
}

/// `wirelab model GRID --fit`: a grid made from a known Eq. 1 and Eq. 2
/// (ScalaCN Table 3, CX-7) gives them back, as JSON other tools read;
/// a grid with a bad value exits 2 naming its line.
#[test]
fn the_model_is_fitted_from_a_grid_folder_and_a_bad_grid_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("ql,qr,bandwidth,latency,device_latency\n");
    for i in 0..21 {
        for j in 0..21 {
            let (ql, qr) = (5.0 * f64::from(i), 5.0 * f64::from(j));
            let d = (ql + 33.53f64).powi(2) + (qr + 52.88f64).powi(2);
            let bw = 739.52 * (-d / (2.0 * 48.66f64 * 48.66)).exp() + 29.32;
            let lat = 0.036 * ql + 0.045 * qr + 2.57;
            // The device's own part of it: 40 and 20 ns a mask.
            let dev = 0.040 * ql + 0.020 * qr + 0.1;
            csv += &format!("{ql},{qr},{bw},{lat},{dev}\n");
        }
    }
    std::fs::write(dir.path().join("grid.csv"), csv).unwrap();
    let o = wirelab(&["model", dir.path().to_str().unwrap(), "--fit", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let near =
        |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-2 * want.abs();
    assert!(
        near(&r["bandwidth"]["u"], 739.52) && near(&r["bandwidth"]["m"], -33.53),
        "{r}"
    );
    assert!(near(&r["latency"]["b"], 0.045), "{r}");
    assert!(r["bandwidth_accuracy"].as_f64().unwrap() > 0.999, "{r}");
    let dev = &r["device_latency"];
    assert!(
        near(&dev["plane"]["a"], 0.040) && near(&dev["plane"]["b"], 0.020),
        "{r}"
    );
    assert!(dev["accuracy"].as_f64().unwrap() > 0.999, "{r}");
    let text = wirelab(&["model", dir.path().to_str().unwrap(), "--fit"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("device     LAT = a·Ql + b·Qr + c"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // Without the column, no device fit.
    let four = dir.path().join("four.csv");
    std::fs::write(
        &four,
        std::fs::read_to_string(dir.path().join("grid.csv"))
            .unwrap()
            .lines()
            .map(|l| l.rsplit_once(',').unwrap().0.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let o = wirelab(&["model", four.to_str().unwrap(), "--fit", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r.get("device_latency").is_none() && near(&r["latency"]["b"], 0.045),
        "{r}"
    );

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "ql,qr,bandwidth,latency\n0,0,-1,2\n").unwrap();
    let o = wirelab(&["model", bad.to_str().unwrap(), "--fit"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.csv, line 2: bandwidth and latencies must be positive"),
        "{err}"
    );
}

/// A hostile nesting (a million brackets) is refused by its depth before
/// any YAML library parses it, by every kind of file `check` reads:
/// serde_yaml's scanner took 30 s on 100,000 of them (ignoring Ctrl-C) and
/// over 10 minutes on a million. The child is killed after 60 s, so the
/// old behaviour fails here rather than only slowing the suite.
#[test]
fn a_hostile_nesting_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    let n = 1_000_000;
    std::fs::write(&deep, format!("a: {}{}\n", "[".repeat(n), "]".repeat(n))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(["check", deep.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().ok();
            panic!("`wirelab check` still parsing a million brackets after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("deep.yaml: nested deeper than 64 levels (line 1)"),
        "{err}"
    );
}
