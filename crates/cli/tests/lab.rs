//! Lab tests: real namespaces, the real switch, kernel TCP. They need root
//! (CI runs as root); without it each test says so and skips.
//!
//! Runs are serialised: they measure timing-sensitive recoveries on a
//! 2-core machine, and the cleanup checks look for *any* leftover.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

/// What every lab test starts with: root (or a skip that says why), the
/// lock that serialises runs, and a scratch folder removed afterwards.
fn lab_test() -> Option<(Serial, tempfile::TempDir)> {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: lab tests need root (network namespaces, BPF)");
        return None;
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Some((Serial(guard), tempfile::tempdir().unwrap()))
}

/// The serialising lock, and the cleanup of a failed test: a test that
/// panics part-way (a killed run, an assertion before its own cleanup)
/// must not leave namespaces that every later test's "nothing left"
/// check then blames on itself. `wirelab clean` removes only what dead
/// runs left, so it cannot touch a run another process owns.
struct Serial(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl Drop for Serial {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let o = wirelab(&["clean"]);
            eprintln!(
                "after the failure, wirelab clean: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn wirelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("wirelab runs")
}

struct Run {
    code: i32,
    summary: Value,
    stdout: String,
    stderr: String,
}

impl Run {
    /// What a failed assertion shows first: CI keeps only the head of a
    /// failing test's output, and the full summary is thousands of lines.
    fn why(&self) -> String {
        let s = &self.summary;
        let mut w = format!(
            "exit {} verdict {} error {}\n",
            self.code, s["verdict"], s["error"]
        );
        for e in s["expect"].as_array().into_iter().flatten() {
            w += &format!(
                "expect pass={} {} | {}\n",
                e["pass"], e["claim"], e["observed"]
            );
        }
        for c in s["analysis"]["connections"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for r in c["retransmissions"].as_array().into_iter().flatten() {
                w += &format!(
                    "retx conn {} packet {} #{} {} ({}) +{} ns\n",
                    c["id"], r["packet"], r["nth"], r["recovery"], r["reason"], r["since_loss_ns"]
                );
            }
        }
        w += &format!(
            "integrity reasons {}\nstderr:\n{}\nsummary:\n{}",
            s["integrity"]["reasons"], self.stderr, self.stdout
        );
        w
    }
}

fn run_spec(spec: &Path, out: &Path) -> Run {
    let o = wirelab(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let summary = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    Run {
        code: o.status.code().unwrap_or(-1),
        summary,
        stdout,
        stderr,
    }
}

fn lab_namespaces() -> BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("wl-"))
                .collect()
        })
        .unwrap_or_default()
}

fn switch_programs() -> usize {
    libbpf_rs::query::ProgInfoIter::default()
        .filter(|p| p.name.to_string_lossy() == "wl_switch")
        .count()
}

/// Nothing of any run remains: namespaces, registry entries, BPF programs.
fn assert_nothing_left(what: &str) {
    assert!(
        lab_namespaces().is_empty(),
        "{what}: namespaces left: {:?}",
        lab_namespaces()
    );
    let reg: Vec<_> = std::fs::read_dir("/run/wirelab")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(reg.is_empty(), "{what}: registry entries left: {reg:?}");
    // The kernel frees a program after an RCU grace period once its last
    // reference (the exited process, the deleted veth's tc hook) is gone.
    let t0 = Instant::now();
    while switch_programs() > 0 && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        switch_programs(),
        0,
        "{what}: a wl_switch BPF program is still loaded after 3s"
    );
}

fn example_specs() -> Vec<PathBuf> {
    specs_in("specs/tcp")
}

fn specs_in(dir: &str) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| seen.insert(p.canonicalize().unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_spec_passes_with_a_valid_trace_tshark_can_read() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let specs = example_specs();
    assert!(specs.len() >= 5, "the example specs are there: {specs:?}");
    for spec in specs {
        let r = run_spec(&spec, out.path());
        let name = spec.file_name().unwrap().to_string_lossy();
        assert_eq!(r.code, 0, "{name}: exit code\n{}", r.why());
        assert_eq!(r.summary["verdict"], "PASS", "{name}");
        assert_eq!(r.summary["integrity"]["valid"], true, "{name}");
        assert!(
            r.summary["expect"]
                .as_array()
                .is_some_and(|e| !e.is_empty()),
            "{name} has claims"
        );
        // Every event hit exactly one packet.
        for e in r.summary["events"].as_array().unwrap() {
            assert_eq!(e["hits"], 1, "{name}: event {} hits", e["id"]);
        }
        // The switch and the analyzer agree on every index and iteration.
        // The switch read when the sender's stack released each TCP
        // packet (its delivery time): the host's own delay is known, and
        // short on an idle lab.
        for c in r.summary["analysis"]["connections"].as_array().unwrap() {
            assert_eq!(
                c["iteration_mismatches"].as_array().unwrap().len(),
                0,
                "{name}"
            );
            let d = c["host_delay_max_ns"].as_u64().unwrap_or(0);
            assert!(d > 0 && d < 1_000_000_000, "{name}: host delay {d} ns");
        }
        let trace = PathBuf::from(r.summary["results"].as_str().unwrap()).join("trace.pcapng");
        let in_trace = r.summary["integrity"]["in_trace"].as_u64().unwrap();
        let t = Command::new("tshark")
            .args([
                "-r",
                trace.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "frame.number",
                "-e",
                "_ws.malformed",
            ])
            .output()
            .expect("tshark is installed (make deps)");
        assert!(
            t.status.success(),
            "{name}: tshark failed: {}",
            String::from_utf8_lossy(&t.stderr)
        );
        let text = String::from_utf8_lossy(&t.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u64, in_trace, "{name}: tshark packet count");
        assert!(
            lines
                .iter()
                .all(|l| l.split('\t').nth(1).unwrap_or("").is_empty()),
            "{name}: malformed packets"
        );
        // Comments carry our metadata where Wireshark shows them.
        let c = Command::new("tshark")
            .args([
                "-r",
                trace.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "frame.comment",
                "-c",
                "1",
            ])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&c.stdout).starts_with("wirelab seq=0 "),
            "{name}"
        );
        // The analyzers ran after the run: every verdict-giving analyzer
        // found nothing wrong with Linux, the counters were compared, and
        // the report files are there.
        let dir = trace.parent().unwrap();
        let a: Value =
            serde_json::from_slice(&std::fs::read(dir.join("analysis.json")).unwrap()).unwrap();
        assert_eq!(a["schema"], "wirelab.analysis/1", "{name}");
        for an in a["analyzers"].as_array().unwrap() {
            assert_ne!(an["verdict"], "violation", "{name}: {an}");
        }
        let counters = a["analyzers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "counters")
            .unwrap();
        assert_eq!(
            counters["verdict"], "pass",
            "{name}: kernel counters = trace"
        );
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(
            html.contains("<svg") && html.contains("Time–sequence"),
            "{name}"
        );
        // `wirelab analyze` on the results folder reaches the same verdicts.
        let o = wirelab(&["analyze", trace.to_str().unwrap(), "--json"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let b: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            b["analyzers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x["name"].clone(), x["verdict"].clone(), x["checks"].clone()))
                .collect::<Vec<_>>(),
            a["analyzers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x["name"].clone(), x["verdict"].clone(), x["checks"].clone()))
                .collect::<Vec<_>>(),
            "{name}"
        );
    }
    assert_nothing_left("after passing runs");
}

/// What must not change between runs of one spec: which logical packets the
/// events hit, and the retransmissions (packet, nth, iteration, recovery).
fn fingerprint(s: &Value) -> String {
    let mut f = String::new();
    for c in s["analysis"]["connections"].as_array().unwrap() {
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
    f
}

#[test]
fn the_same_spec_ten_times_injects_the_same_events_and_retransmissions() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/tcp/drop-5th-packet-twice-second-recovery-by-timeout.yaml");
    let mut prints = Vec::new();
    for i in 0..10 {
        let r = run_spec(&spec, out.path());
        assert_eq!(r.code, 0, "run {i}\n{}", r.why());
        prints.push(fingerprint(&r.summary));
    }
    assert!(
        prints[0].contains("event 1 \"drop\" conn 1 packet 5 iter 1"),
        "{}",
        prints[0]
    );
    assert!(
        prints[0].contains("event 2 \"drop\" conn 1 packet 5 iter 2"),
        "{}",
        prints[0]
    );
    assert!(
        prints[0].contains("retx conn 1 packet 5 #2 iter 3 \"timeout\""),
        "{}",
        prints[0]
    );
    for (i, p) in prints.iter().enumerate() {
        assert_eq!(p, &prints[0], "run {i} differs from run 0");
    }
    assert_nothing_left("after ten runs");
}

fn write_spec(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const TWO_HOSTS: &str =
    "topology:\n  hosts:\n    - name: a\n    - name: b\nstack:\n  congestion_control: cubic\n";

#[test]
fn an_overflowing_capture_ring_makes_the_run_invalid() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    // 4 KiB of ring holds 19 records; the dumper sleeps through the transfer.
    let spec = write_spec(
        dir.path(),
        "overflow.yaml",
        &format!("{TWO_HOSTS}traffic:\n  connections:\n    - {{from: a, to: b, message_size: 256KiB}}\ncapture:\n  ring_size: 4KiB\n  stall_dumper: 300ms\nexpect:\n  - {{connection: all, messages_completed: true}}\n"),
    );
    let r = run_spec(&spec, dir.path());
    assert_eq!(r.code, 3, "INVALID has its own exit code\n{}", r.why());
    assert_eq!(r.summary["verdict"], "INVALID");
    let reasons = r.summary["integrity"]["reasons"].to_string();
    assert!(reasons.contains("capture ring was full"), "{reasons}");
    assert!(
        reasons.contains("mirror sequence numbers missing"),
        "{reasons}"
    );
    // The expectation itself held: INVALID wins over PASS, never the reverse.
    assert_eq!(r.summary["expect"][0]["pass"], true);
    assert_nothing_left("after an INVALID run");
}

#[test]
fn a_failed_expectation_exits_1_and_cleans_up() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let spec = write_spec(
        dir.path(),
        "wrong-claim.yaml",
        &format!("{TWO_HOSTS}traffic:\n  connections:\n    - {{from: a, to: b, message_size: 64KiB}}\nevents:\n  - {{connection: 1, packet: 5, action: drop}}\nexpect:\n  - {{connection: 1, packet: 5, retransmitted: 1, recovery: [timeout]}}\n"),
    );
    let r = run_spec(&spec, dir.path());
    assert_eq!(r.code, 1, "{}", r.why());
    assert_eq!(r.summary["verdict"], "FAIL");
    assert_eq!(r.summary["expect"][0]["pass"], false);
    assert!(r.summary["expect"][0]["observed"]
        .as_str()
        .unwrap()
        .contains("fast ("));
    assert_nothing_left("after a failed expectation");
}

#[test]
fn bad_input_exits_2_names_the_line_and_creates_nothing() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let spec = write_spec(
        dir.path(),
        "bad.yaml",
        &format!("{TWO_HOSTS}traffic:\n  connections:\n    - {{from: a, to: b, message_size: 1KB}}\nevents:\n  - connection: 1\n    packet: 0\n    action: drop\n"),
    );
    let before = lab_namespaces();
    let o = wirelab(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.yaml: events[0].packet: must be >= 1, got 0 (line 12)"),
        "{err}"
    );
    assert_eq!(lab_namespaces(), before, "nothing created");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no results folder"
    );
}

/// Starts a run that lasts long enough to be interrupted (400 messages, every
/// packet dropped, so each one waits for timeouts) and returns once its lab
/// and switch are up.
fn start_long_run(dir: &Path, stderr: std::process::Stdio) -> std::process::Child {
    let spec = write_spec(
        dir,
        "long.yaml",
        &format!("{TWO_HOSTS}traffic:\n  connections:\n    - {{from: a, to: b, message_size: 10KB, messages: 400}}\nevents:\n  - {{connection: 1, packet: all, iteration: all, action: drop}}\n"),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while lab_namespaces().len() < 3 || switch_programs() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the lab never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn sigint_during_a_run_removes_everything() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let mut child = start_long_run(dir.path(), std::process::Stdio::piped());
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_nothing_left("after SIGINT");
}

#[test]
fn clean_removes_what_a_killed_run_left() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let mut child = start_long_run(dir.path(), std::process::Stdio::null());
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    assert_eq!(lab_namespaces().len(), 3, "a killed run leaves its lab");
    let o = wirelab(&["clean"]);
    assert!(o.status.success());
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("removed namespace wl-"), "{said}");
    assert_nothing_left("after wirelab clean");
}

/// A run killed while Open vSwitch runs in its DUT namespace: `wirelab
/// clean` stops the daemons with the namespaces and removes their folder.
#[test]
fn clean_stops_the_ovs_of_a_killed_run() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let spec = dir.path().join("long-ovs.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(repo().join("specs/scalacn/write-through-ovs-with-200-masks.yaml"))
            .unwrap()
            .replace(
                "messages: 4, message_size: 64KiB",
                "messages: 4000, message_size: 64KiB",
            ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ovs_running = || !ovs_vswitchds().is_empty();
    // Killed while ovs-vswitchd is still detaching, the daemon dies with
    // its waiting parent (OVS's fork_notify_startup exits when the pipe to
    // the parent breaks), and there is nothing left for clean to stop:
    // wait until the daemon is the only one and no longer wirelab's child.
    let detached = || {
        let d = ovs_vswitchds();
        d.len() == 1 && d[0].1 != child.id()
    };
    let t0 = Instant::now();
    while !detached() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(detached(), "the run started OVS: {:?}", ovs_vswitchds());
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    assert!(ovs_running(), "a killed run leaves OVS running");
    let o = wirelab(&["clean"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    no_ovs_left("after wirelab clean");
    assert_nothing_left("after wirelab clean of an OVS run");
}

/// The ovs-vswitchd processes of wirelab runs, as (pid, parent pid).
fn ovs_vswitchds() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.starts_with("ovs-vswitchd unix:/run/wirelab/dut-") {
            continue;
        }
        // The parent pid is the field after the command's closing paren.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        out.push((pid, ppid));
    }
    out
}

#[test]
fn two_runs_go_in_parallel() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let specs = [
        "specs/tcp/drop-5th-packet-recovered-by-fast-retransmit.yaml",
        "specs/tcp/ecn-mark-is-echoed-by-the-receiver.yaml",
    ];
    let children: Vec<_> = specs
        .iter()
        .map(|s| {
            Command::new(env!("CARGO_BIN_EXE_wirelab"))
                .args(["run", s, "--out", out.path().to_str().unwrap(), "--json"])
                .current_dir(repo())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut run_ids = BTreeSet::new();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let s: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(s["integrity"]["valid"], true);
        run_ids.insert(s["run_id"].as_str().unwrap().to_string());
    }
    assert_eq!(run_ids.len(), 2, "each run has its own names");
    assert_nothing_left("after parallel runs");
}

/// RoCEv2 through the lab: wirelab's transport in the host namespaces,
/// events by relative PSN, the RoCE analyzers and the device counters.
#[test]
fn roce_specs_recover_by_go_back_n_and_the_analyzers_measure_it() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/roce/write-drop-5th-packet-go-back-n.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let s = &r.summary;
    assert_eq!(s["verdict"], "PASS");
    assert_eq!(s["integrity"]["valid"], true);
    assert_eq!(s["events"][0]["hits"], 1);
    let analyzer = |name: &str| {
        s["analysis"]["analyzers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("analyzer {name}"))
    };
    let gbn = analyzer("roce-go-back-n");
    assert_eq!(gbn["verdict"], "pass");
    assert!(gbn["checks"].as_u64().unwrap() >= 20);
    let lat = analyzer("roce-retransmission-latency");
    let names: BTreeSet<&str> = lat["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert!(
        names.contains("nack-generation") && names.contains("nack-reaction"),
        "{names:?}"
    );
    assert_eq!(analyzer("roce-counters")["verdict"], "pass");
    // Device counters, dumped before and after like NIC counters.
    let dc = s["device_counters"].as_array().unwrap();
    let get = |host: &str, c: &str| {
        let d = dc.iter().find(|d| d["host"] == host).unwrap();
        d["after"][c].as_i64().unwrap() - d["before"][c].as_i64().unwrap()
    };
    assert_eq!(get("requester", "packet_seq_err"), 1);
    assert!(get("responder", "out_of_sequence") >= 1);
    assert_eq!(get("requester", "local_ack_timeout_err"), 0);
    // tshark's InfiniBand dissector reads the trace as RoCEv2: one NAK
    // (syndrome 0x60) for the dropped packet's PSN, no malformed packet.
    let trace = Path::new(s["results"].as_str().unwrap()).join("trace.pcapng");
    let t = Command::new("tshark")
        .args([
            "-r",
            trace.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "infiniband.aeth.syndrome",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .expect("tshark runs");
    let text = String::from_utf8_lossy(&t.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert!(
        rows.len() > 20 && rows.iter().all(|r| r.len() >= 3 && !r[0].is_empty()),
        "{text}"
    );
    assert!(
        rows.iter().all(|r| r.get(3).is_none_or(|m| m.is_empty())),
        "malformed: {text}"
    );
    let first_psn: u32 = rows[0][1].parse().unwrap();
    let naks: Vec<u32> = rows
        .iter()
        .filter(|r| r[2] == "96")
        .map(|r| r[1].parse().unwrap())
        .collect();
    assert_eq!(
        naks,
        vec![(first_psn + 4) & 0xff_ffff],
        "one NAK, for the 5th packet"
    );

    let spec = repo().join("specs/roce/read-drop-3rd-response-reissued.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let dc = r.summary["device_counters"].as_array().unwrap().clone();
    let d = dc.iter().find(|d| d["host"] == "requester").unwrap();
    assert_eq!(
        d["after"]["implied_nak_seq_err"].as_i64().unwrap()
            - d["before"]["implied_nak_seq_err"].as_i64().unwrap(),
        1
    );

    // Send and read combined on one QP: data both ways, each direction's
    // events addressed by PSN, the messages' verbs in turn.
    let spec = repo().join("specs/roce/send-read-combination-loses-a-packet-each-way.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let hits: Vec<i64> = r.summary["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["hits"].as_i64().unwrap())
        .collect();
    assert_eq!(hits, vec![1, 1]);
    let verbs: Vec<&str> = r.summary["workload"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["verb"].as_str().unwrap())
        .collect();
    assert_eq!(verbs, ["send", "read", "send", "read"]);
    assert_nothing_left("roce runs");
}

/// The ICRC of every packet of a whole-packet capture verifies with scapy's
/// `scapy.contrib.roce` (from PyPI, installed by scripts/deps.sh), an
/// implementation nobody here wrote, except the one the switch corrupted.
/// The run's trace and scapy's verdict on each frame's ICRC
/// (`scripts/icrc_check.py`: frame, opcode, PSN, ok|bad|truncated).
fn icrc_check(python: &Path, r: &Run) -> (PathBuf, String) {
    let trace = Path::new(r.summary["results"].as_str().unwrap()).join("trace.pcapng");
    let o = Command::new(python)
        .arg(repo().join("scripts/icrc_check.py"))
        .arg(&trace)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (trace, text)
}

#[test]
fn roce_icrcs_verify_with_scapy_except_the_corrupted_packet_and_after_an_edit() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let python = repo().join("target/py/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/deps.sh (make test) installs scapy there",
        python.display()
    );
    let spec = repo().join("specs/roce/write-corrupt-3rd-packet-only-icrc-catches-it.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    assert_eq!(r.summary["events"][0]["hits"], 1);
    let (_, text) = icrc_check(&python, &r);
    // frame, opcode, PSN, verdict
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    let packets = r.summary["integrity"]["in_trace"].as_u64().unwrap();
    assert_eq!(rows.len() as u64, packets, "every packet is RoCE: {text}");
    let first_psn: u32 = rows[0][2].parse().unwrap();
    let bad: Vec<(&str, u32)> = rows
        .iter()
        .filter(|r| r[3] != "ok")
        .map(|r| (r[3], r[2].parse().unwrap()))
        .collect();
    assert_eq!(
        bad,
        vec![("bad", (first_psn + 2) & 0xff_ffff)],
        "only the corrupted 3rd packet fails: {text}"
    );
    // The responder's device saw the same: one ICRC error, one NAK.
    let dc = r.summary["device_counters"].as_array().unwrap();
    let d = dc.iter().find(|d| d["host"] == "responder").unwrap();
    let delta = |c: &str| d["after"][c].as_i64().unwrap() - d["before"][c].as_i64().unwrap();
    assert_eq!(delta("rx_icrc_encapsulated"), 1);

    // The `edit` action sets MigReq and patches the ICRC: every packet
    // still verifies, and the edited QP's data packets carry MigReq = 1
    // while the other QP's keep the 0 its device sent.
    let spec = repo().join("specs/roce/write-sender-clears-migreq-switch-edit-sets-it.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let (trace, text) = icrc_check(&python, &r);
    assert!(text.lines().all(|l| l.ends_with(" ok")), "{text}");
    let t = wirelab_trace::read(&trace).unwrap();
    let (mut edited, mut cleared) = (0, 0);
    for p in &t.packets {
        let m = p.meta.as_ref().unwrap();
        let bth1 = p.data[14 + 20 + 8 + 1];
        if m.event == wirelab_trace::Action::MigReq(true) {
            assert_ne!(bth1 & 0x40, 0, "frame {}", p.frame);
            edited += 1;
        } else if m.conn == 2 && m.data_dir {
            assert_eq!(bth1 & 0x40, 0, "frame {}", p.frame);
            cleared += 1;
        }
    }
    assert_eq!(edited, r.summary["events"][0]["hits"].as_u64().unwrap());
    assert!(edited >= 32 && cleared >= 32, "{edited} {cleared}");
    assert_nothing_left("roce corrupt and edit runs");
}

/// ScalaCN's eSwitch as a switch stage: with 200 generated masks before a
/// QP's own, every packet of the write searches 201 masks and is forwarded
/// by its rule; with the generated masks alone, every packet searches 200,
/// misses, and the MAC table forwards it. Drop entries drop, after the
/// capture.
#[test]
fn scalacns_optimiser_beats_hit_count_ranking_on_a_tse_mix_and_insertion_order_beats_neither() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/tse-mix-equal-flows-one-mask-each.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let mut per = std::collections::BTreeMap::new();
    for policy in ["insertion", "hit-count", "scalacn"] {
        let p = out.path().join(format!("{policy}.yaml"));
        std::fs::write(
            &p,
            text.replace("policy: scalacn", &format!("policy: {policy}")),
        )
        .unwrap();
        let r = run_spec(&p, out.path());
        assert_eq!(r.code, 0, "{policy}: {}", r.why());
        per.insert(policy, r.summary["flowtables"].clone());
    }
    let mpp = |p: &str| per[p]["masks_per_packet"].as_f64().unwrap();
    // 24 flows of equal packets, flow k's mask at place 100 + k: every
    // packet searches 100 + 12.5 masks on average, and the order never moves.
    assert_eq!(mpp("insertion"), 112.5, "{}", per["insertion"]);
    assert_eq!(per["insertion"]["optimiser"]["reorders"], 0);
    // OVS's ranking puts the generated masks (no hits) last, but cannot
    // rank 24 masks hit equally: about half of them are still searched.
    let hc = mpp("hit-count");
    assert!(hc < 30.0 && hc > 8.0, "{}", per["hit-count"]);
    // ScalaCN: every flow activated into the hyper mask (no evictions at
    // 1024 entries); from then on, one search.
    let sc = &per["scalacn"];
    assert!(mpp("scalacn") < hc, "{sc}");
    assert_eq!(sc["optimiser"]["activations"], 24, "{sc}");
    assert_eq!(sc["optimiser"]["evictions"], 0, "{sc}");
    let hyper = sc["masks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["hyper"] == true)
        .unwrap_or_else(|| panic!("a hyper mask: {sc}"));
    assert_eq!(
        (hyper["mask"].as_u64(), hyper["entries"].as_u64()),
        (Some(124), Some(24))
    );
    let packets = sc["packets"].as_u64().unwrap();
    assert!(
        hyper["hits"].as_u64().unwrap() * 10 > packets * 8,
        "most packets hit the hyper mask: {hyper} of {packets}"
    );
    assert_eq!(
        sc["tables"][0]["order"][0], 124,
        "the hyper mask leads: {sc}"
    );
    // Idle masks (the 100 generated ones at least) left the search.
    assert!(
        sc["optimiser"]["masks_removed"].as_u64().unwrap() >= 100,
        "{sc}"
    );
    assert_nothing_left("flowtables-optimise");
}

#[test]
fn causal_testing_keeps_the_masks_that_slow_a_write() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/write-bandwidth-against-local-and-remote-masks.yaml");
    let target = out.path().join("target.yaml");
    // Masks every packet searches, against a dimension that cannot touch
    // the latency QP (the bandwidth QP starts 50 ms or more after it).
    // Up to 250 masks, a table's most, in both tables ([*]): 250 in one
    // table added about 19 µs to a write's ~100 µs here, and back-to-back
    // runs swing by ±15% (±20% on a loaded CI machine), so one table's
    // pairs degraded by 5-30% and a run kept 1 pair of 2. That noise is
    // removed is the next test's to show, with more pairs.
    std::fs::write(
        &target,
        format!(
            "spec: {}\nmeasure: latency\ndimensions:\n\
             - {{name: masks searched, path: 'flowtables.generate[*].masks', values: [0, 125, 250]}}\n\
             - {{name: bandwidth start, path: 'traffic.connections[1].start', values: [50ms, 60ms]}}\n\
             repeat: 3\n",
            spec.display()
        ),
    )
    .unwrap();
    let o = out.path().join("results");
    let r = wirelab(&[
        "causal",
        target.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--jobs",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let dir = std::fs::read_dir(&o)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("causal.json")).unwrap()).unwrap();
    let a = &report["analysis"];
    let dims = a["dimensions"].as_array().unwrap();
    // 250 masks a table, searched by every packet both ways: slower in both
    // permutations of the other dimension, kept, the largest effect.
    assert!(a["symptom"].as_f64().unwrap() >= 0.05, "{stdout}");
    assert_eq!(dims[0]["sensitivity"].as_array().unwrap().len(), 3);
    assert_eq!(
        (dims[0]["pairs"].as_u64(), dims[0]["kept"].as_bool()),
        (Some(2), Some(true)),
        "{stdout}"
    );
    assert_eq!(dims[1]["pairs"].as_u64(), Some(3), "{stdout}");
    // Each pair judged round by round: its two runs of each of 3 rounds.
    for e in dims[0]["evidence"].as_array().unwrap() {
        assert_eq!(e["rounds"].as_array().unwrap().len(), 3, "{e}");
    }
    assert_eq!(a["critical_path"][0], 0, "{stdout}");
    assert!(stdout.contains("critical path: masks searched"), "{stdout}");
    // Every run is kept, the warm-up's is not: the base, 2 + 1 steps and
    // the heaviest, then 2 + 3 pairs of two runs; 3 rounds.
    assert_eq!(std::fs::read_dir(dir.join("runs")).unwrap().count(), 45);
    assert_nothing_left("causal");
}

/// `wirelab causal TARGET --device DEVICE`, one lab at a time, into a
/// folder of its own under `out`: the report and what it printed.
fn causal_on_device(target: &Path, device: &str, out: &Path) -> (Value, String) {
    let o = out.join(device);
    let r = wirelab(&[
        "causal",
        target.to_str().unwrap(),
        "--device",
        device,
        "--out",
        o.to_str().unwrap(),
        "--jobs",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let dir = std::fs::read_dir(&o)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("causal.json")).unwrap()).unwrap();
    (report, stdout)
}

#[test]
fn causal_testing_names_the_planted_cause_of_a_device_without_being_told() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/write-bandwidth-against-local-and-remote-masks.yaml");
    let target = out.path().join("target.yaml");
    // One target for every device: tables ranked by hit count each
    // millisecond; masks added before the flow's own in both tables
    // (the signal doubled against the noise, as in the test above),
    // against two dimensions that cannot touch the latency QP. Five runs
    // a point: with three, the device that searches new masks last kept
    // its +50% cause in only 3 of 4 pairs in 2 of 5 runs (the latency QP
    // shares two cores with the switch and the bandwidth QP's device).
    std::fs::write(
        &target,
        format!(
            "spec: {}\nmeasure: latency\n\
             set: {{flowtables.optimise.policy: hit-count, flowtables.optimise.interval: 1ms}}\n\
             dimensions:\n\
             - {{name: masks added first, path: 'flowtables.generate[*].masks', values: [0, 250]}}\n\
             - {{name: bandwidth writes, path: 'traffic.connections[1].messages', values: [8, 32]}}\n\
             - {{name: bandwidth start, path: 'traffic.connections[1].start', values: [50ms, 60ms]}}\n\
             repeat: 5\n",
            spec.display()
        ),
    )
    .unwrap();
    let causal = |device: &str| causal_on_device(&target, device, out.path());
    // A device that follows its control plane: the flow's mask is ranked
    // first within a millisecond, so the masks before it cost nothing.
    let (report, stdout) = causal("default");
    assert_eq!(report["device"], "default");
    assert_eq!(
        report["analysis"]["critical_path"],
        serde_json::json!([]),
        "{stdout}"
    );
    // ScalaCN S6: new masks searched last whatever the ranking; the
    // tester names them, and only them.
    let (report, stdout) = causal("new-masks-last");
    let a = &report["analysis"];
    assert!(a["symptom"].as_f64().unwrap() >= 0.05, "{stdout}");
    // The planted cause leads the path. A decoy can join it behind when
    // every one of its pairs lands on the slow side by drift (seen once
    // in CI, 4 of 4 on a loaded machine); it cannot lead it.
    assert_eq!(a["critical_path"][0], 0, "{stdout}");
    assert!(
        stdout.contains("critical path: masks added first"),
        "{stdout}"
    );
    assert_nothing_left("causal-device");
}

/// ScalaCN S8 planted: a device with 1,024 encapsulation contexts under a
/// 100-subnet overlay. At 16 containers a subnet the overlay uses them up
/// before the write's own tunnel is installed, so its packets are dropped
/// and it delivers nothing; the causal tester, not told the profile, names
/// the containers per subnet and nothing else. On the default device the
/// same target drops nothing (entries per mask cost no search).
#[test]
fn causal_testing_finds_an_encap_context_limit_without_being_told() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let target = repo().join("specs/scalacn/find-what-drops-an-overlay-write.yaml");
    let causal = |device: &str| causal_on_device(&target, device, out.path());
    let (report, stdout) = causal("default");
    assert_eq!(report["failed_points"], 0, "{stdout}");
    let containers = &report["analysis"]["dimensions"][0];
    assert!(
        containers["effect"].as_f64().unwrap() < 0.5,
        "nothing dropped: {stdout}"
    );
    let (report, stdout) = causal("encap-context-limit");
    let a = &report["analysis"];
    assert!(
        report["failed_points"].as_u64().unwrap() > 0 && a["symptom"].as_f64().unwrap() >= 0.9,
        "the heaviest point delivers nothing: {stdout}"
    );
    // The planted cause leads the path. A decoy can join it behind when
    // every one of its pairs lands on the slow side by drift (seen once
    // in CI, 4 of 4 on a loaded machine); it cannot lead it.
    assert_eq!(a["critical_path"][0], 0, "{stdout}");
    assert!(
        stdout.contains("critical path: containers per subnet (-100%)"),
        "{stdout}"
    );
    assert_nothing_left("causal-encap");
}

#[test]
fn an_offloading_virtual_switch_installs_each_flow_and_ages_it_out() {
    // `default` follows its control plane: each direction of each write is
    // offloaded once, when its first packets reach the slow path; the
    // first write's two rules age out before the second write starts.
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/write-through-an-offloading-virtual-switch.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let ft = &r.summary["flowtables"];
    let o = &ft["offload"];
    assert_eq!(
        (o["offloads"].as_u64(), o["reoffloads"].as_u64()),
        (Some(4), Some(0)),
        "four rules, each offloaded once: {o}"
    );
    assert!(o["aged"].as_u64().unwrap() >= 2, "the first write's: {o}");
    assert_eq!(o["unmatched"], 0, "{o}");
    let slow = o["slow_path_packets"].as_u64().unwrap();
    assert!(
        slow > 0 && slow == ft["misses"].as_u64().unwrap() - o["slow_path_drops"].as_u64().unwrap(),
        "{ft}"
    );
    // The trace says what each packet searched, and which a table dropped.
    let trace = Path::new(r.summary["results"].as_str().unwrap()).join("trace.pcapng");
    let t = wirelab_trace::read(&trace).unwrap();
    let metas: Vec<_> = t.packets.iter().filter_map(|p| p.meta.as_ref()).collect();
    assert_eq!(metas.len() as u64, ft["packets"].as_u64().unwrap());
    assert!(
        metas.iter().all(|m| m.masks == 65),
        "64 generated masks and the flow's own"
    );
    assert_eq!(
        metas.iter().filter(|m| m.es_drop).count() as u64,
        o["slow_path_drops"].as_u64().unwrap()
    );
    assert_nothing_left("offload");
}

#[test]
fn causal_testing_finds_late_counters_and_slow_deletion_without_being_told() {
    // ScalaCN S5 -> S1 and S4: an offloading virtual switch ages this QP's
    // rules out of the eSwitch; each profile keeps them out longer when
    // other tenants fill the table, by a different mechanism. The target
    // is the same for both and is not told which quirk the device has.
    // (The `default` profile's "nothing kept" is in the README's figures;
    // running it here too would add a minute.)
    let Some((_g, out)) = lab_test() else {
        return;
    };
    // The shipped target, one round instead of two (its bandwidth is the
    // responder's bottleneck's, steady to 1% from run to run).
    let shipped = std::fs::read_to_string(
        repo().join("specs/scalacn/find-what-slows-an-offloaded-write.yaml"),
    )
    .unwrap();
    let one_round = shipped.replace("repeat: 2", "repeat: 1").replace(
        "spec: write-through-an-offloading-virtual-switch.yaml",
        &format!(
            "spec: {}",
            repo()
                .join("specs/scalacn/write-through-an-offloading-virtual-switch.yaml")
                .display()
        ),
    );
    assert_ne!(one_round, shipped);
    let target = write_spec(out.path(), "offloaded-write-target.yaml", &one_round);
    let heaviest_offload = |report: &Value| -> Vec<Value> {
        report["heaviest_runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let s =
                    std::fs::read_to_string(Path::new(d.as_str().unwrap()).join("summary.json"))
                        .unwrap();
                serde_json::from_str::<Value>(&s).unwrap()["flowtables"]["offload"].clone()
            })
            .collect()
    };
    for device in ["late-counters", "slow-deletion"] {
        let (report, stdout) = causal_on_device(&target, device, out.path());
        let a = &report["analysis"];
        assert!(a["symptom"].as_f64().unwrap() >= 0.05, "{device}: {stdout}");
        assert_eq!(a["critical_path"][0], 0, "{device}: {stdout}");
        assert!(
            stdout.contains("critical path: entries per mask ("),
            "{device}: {stdout}"
        );
        // The mechanism shows in the heaviest point's runs: rules offloaded
        // again and again (S1; 2 when each rule is aged once between the
        // writes), or the virtual switch waiting on deletions (S4).
        for o in heaviest_offload(&report) {
            match device {
                "late-counters" => assert!(o["reoffloads"].as_u64().unwrap() >= 5, "{o}"),
                _ => assert!(o["deleting_ms"].as_f64().unwrap() >= 30.0, "{o}"),
            }
        }
    }
    assert_nothing_left("causal-offload");
}

#[test]
fn flow_tables_make_every_packet_search_the_masks_before_its_own() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/write-searches-200-masks-before-its-own.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let ft = &r.summary["flowtables"];
    let packets = ft["packets"].as_u64().unwrap();
    assert!(packets > 64, "the write's packets and its ACKs: {ft}");
    assert_eq!(ft["masks_per_packet"], 201.0, "{ft}");
    assert_eq!(
        (ft["misses"].as_u64(), ft["drops"].as_u64()),
        (Some(0), Some(0))
    );
    let masks = ft["masks"].as_array().unwrap();
    assert_eq!(masks.len(), 201);
    let own = &masks[200];
    assert_eq!(
        (own["generated"].as_bool(), own["hits"].as_u64()),
        (Some(false), Some(packets))
    );
    assert!(masks[..200]
        .iter()
        .all(|m| m["lookups"].as_u64() == Some(packets) && m["hits"] == 0));

    // The terminal says it too.
    let t = wirelab(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&t.stdout);
    assert!(
        stdout.contains("flowtables 201.0 masks searched per packet (table 0 201.0)")
            && stdout.contains("device default, order insertion"),
        "{stdout}"
    );

    // The generated masks alone: all searched, no hit, forwarded anyway.
    let text = std::fs::read_to_string(&spec).unwrap();
    let cut = text.find("  tables:").unwrap();
    let end = text.find("expect:").unwrap();
    let alone = out.path().join("generated-only.yaml");
    std::fs::write(&alone, format!("{}{}", &text[..cut], &text[end..])).unwrap();
    let r = run_spec(&alone, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let ft = &r.summary["flowtables"];
    assert_eq!(ft["masks_per_packet"], 200.0, "{ft}");
    assert_eq!(ft["misses"], ft["packets"], "{ft}");

    // A rule that drops the responder's ACKs: the write cannot complete.
    let dropping = out.path().join("drop-acks.yaml");
    std::fs::write(
        &dropping,
        text.replace(
            "{dst: requester, proto: udp, action: forward, to: requester}",
            "{dst: requester, proto: udp, action: drop}",
        )
        .replace(
            "messages: 4, message_size: 64KiB",
            "messages: 1, message_size: 4KiB",
        ),
    )
    .unwrap();
    let r = run_spec(&dropping, out.path());
    assert_eq!(r.code, 1, "the write never completes: {}", r.why());
    let ft = &r.summary["flowtables"];
    assert!(ft["drops"].as_u64().unwrap() > 0, "{}", r.why());
    assert_nothing_left("flow tables");
}

/// ScalaCN's overlay in one switch: table 0 encapsulates (RFC 7348) and
/// searches table 1 with the outer headers, where 200 other tenants' masks
/// come before this tunnel's decap rule. Every packet is encapsulated and
/// decapsulated once, searches 1 + 201 masks, and the sends complete
/// checked byte for byte by the RoCE analyzers. A decap rule of another
/// VNI leaves the packets encapsulated: the sends never complete.
/// set_field in the eSwitch's tables as a source NAT: kernel TCP on both
/// ends verifies every checksum (the lab's offloads are off), so the write
/// completes only with the rewrites' checksums right; the trace shows the
/// rewritten packets, and the counters analyzer still gives each packet to
/// the host whose port it came in on.
#[test]
fn a_source_nat_in_the_flow_tables_carries_a_tcp_write() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/tcp-through-a-source-nat-in-the-flow-tables.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let ft = &r.summary["flowtables"];
    let packets = ft["packets"].as_u64().unwrap();
    assert!(packets > 40, "the write's packets and their ACKs: {ft}");
    assert_eq!(
        (
            ft["rewrites"].as_u64(),
            ft["rewrite_errors"].as_u64(),
            ft["misses"].as_u64()
        ),
        (Some(packets), Some(0), Some(0)),
        "every packet rewritten, one way or the other: {ft}"
    );
    let conns = r.summary["analysis"]["connections"].as_array().unwrap();
    let data = conns
        .iter()
        .find(|c| c["data_packets"].as_u64() > Some(40))
        .expect("the write's data direction");
    assert_eq!(
        data["data_src"][0], "198.18.0.3",
        "on the wire the data comes from the NAT's address: {data}"
    );
    assert_eq!(data["ports"][0], 1, "in on the requester's port: {data}");
    let counters = r.summary["analysis"]["analyzers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "counters")
        .unwrap();
    assert!(
        counters["checks"].as_u64() > Some(0) && counters["violations"] == 0,
        "{counters}"
    );

    // The same tables on Open vSwitch, compiled to mod_nw_src/mod_dl_dst
    // and the like: the write completes with no checksum error. (The
    // switch captures before the DUT there, so the trace shows the packets
    // before their rewrite, and the counters analyzer, giving a packet's
    // receiver by its destination address, disagrees: not asserted.)
    let text = std::fs::read_to_string(&spec).unwrap();
    let ovs = out.path().join("nat-on-ovs.yaml");
    std::fs::write(&ovs, text.replace("\n  tables:", "\n  dut: ovs\n  tables:")).unwrap();
    let r = run_spec(&ovs, out.path());
    assert!(r.summary["ovs"]["rules"].as_u64() > Some(0), "{}", r.why());
    let expect = r.summary["expect"].as_array().unwrap();
    assert_eq!(expect.len(), 4, "{}", r.why());
    for e in &expect[..3] {
        assert_eq!(e["pass"], true, "{e}");
    }
}

#[test]
fn an_overlay_encapsulates_and_decapsulates_every_packet_of_a_send() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/scalacn/send-bandwidth-falls-with-remote-decap-masks.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let ft = &r.summary["flowtables"];
    let packets = ft["packets"].as_u64().unwrap();
    assert!(packets > 64, "the sends' packets and their ACKs: {ft}");
    assert_eq!(
        (
            ft["encaps"].as_u64(),
            ft["decaps"].as_u64(),
            ft["tunnel_errors"].as_u64(),
            ft["misses"].as_u64()
        ),
        (Some(packets), Some(packets), Some(0), Some(0)),
        "{ft}"
    );
    let per_table: Vec<f64> = ft["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["masks_per_packet"].as_f64().unwrap())
        .collect();
    assert_eq!(per_table, [1.0, 201.0], "{ft}");
    assert!(
        r.summary["analysis"]["analyzers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "roce-go-back-n"
                && a["checks"].as_u64() > Some(0)
                && a["violations"] == 0),
        "{}",
        r.why()
    );

    let text = std::fs::read_to_string(&spec).unwrap();
    let wrong = out.path().join("wrong-vni.yaml");
    std::fs::write(
        &wrong,
        text.replace("vni: 1002, action: decap", "vni: 1003, action: decap")
            .replace(
                "messages: 4, message_size: 64KiB",
                "messages: 1, message_size: 4KiB",
            ),
    )
    .unwrap();
    let r = run_spec(&wrong, out.path());
    assert_eq!(r.code, 1, "the send never completes: {}", r.why());
    let ft = &r.summary["flowtables"];
    assert!(
        ft["encaps"].as_u64().unwrap() > ft["decaps"].as_u64().unwrap(),
        "{ft}"
    );

    // The overlay generator: 100 subnets' masks ahead of this tunnel's in
    // both tables, and the terminal line says what the tunnels did.
    let spec = repo().join("specs/scalacn/write-across-an-overlay-of-100-subnets.yaml");
    let t = wirelab(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&t.stdout);
    assert_eq!(t.status.code(), Some(0), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("flowtables "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let packets: u64 = line
        .split(", ")
        .find_map(|w| w.strip_suffix(" packets")?.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        packets > 64
            && stdout.contains("perftest   conn 1: 65536 B × 8: BW peak ")
            && line.contains("(table 0 101.0, table 1 101.0)")
            && line.contains(&format!(
                "{packets} encapsulated, {packets} decapsulated, 0 tunnel errors"
            )),
        "{line}"
    );
    assert_nothing_left("overlay");
}

/// No Open vSwitch daemon of any lab is left running.
fn no_ovs_left(what: &str) {
    let o = Command::new("pgrep")
        .args([
            "-a",
            "-f",
            "ovs-vswitchd unix:/run/wirelab|ovsdb-server /run/wirelab",
        ])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&o.stdout);
    assert!(left.trim().is_empty(), "{what}: OVS daemons left: {left}");
}

/// ScalaCN's two DUTs hold the same logical tables (issue 22: "a test
/// that both DUTs forward the same packets the same way"): a write through
/// 200 masks and its own forward rules completes on both; a rule that
/// drops the ACKs stops it on both, the eSwitch counting drops and OVS's
/// OpenFlow drop rule counting packets. OVS saw every packet the switch
/// captured, once; after each run no daemon, folder or namespace is left.
#[test]
fn both_duts_forward_the_same_packets_the_same_way() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let ovs_spec = repo().join("specs/scalacn/write-through-ovs-with-200-masks.yaml");
    let es_spec = repo().join("specs/scalacn/write-searches-200-masks-before-its-own.yaml");
    let ovs_text = std::fs::read_to_string(&ovs_spec).unwrap();
    assert_eq!(
        ovs_text
            .replace("  dut: ovs\n", "")
            .split("topology:")
            .nth(1),
        std::fs::read_to_string(&es_spec)
            .unwrap()
            .split("topology:")
            .nth(1),
        "the OVS spec is the eSwitch one with `dut: ovs`"
    );
    let es = run_spec(&es_spec, out.path());
    assert_eq!(es.code, 0, "{}", es.why());
    let r = run_spec(&ovs_spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let o = &r.summary["ovs"];
    let captured = r.summary["analysis"]["packets"].as_u64().unwrap();
    assert!(captured > 64, "{o}");
    assert_eq!(o["packets"].as_u64(), Some(captured), "{o}");
    assert_eq!(o["rules"].as_u64(), Some(4 * 200 + 2 + 1 + 2 + 1), "{o}");
    assert!(
        o["megaflows"].as_u64().unwrap() >= 2,
        "one each way at least: {o}"
    );
    let hits = o["emc_hits"].as_u64().unwrap()
        + o["smc_hits"].as_u64().unwrap()
        + o["megaflow_hits"].as_u64().unwrap()
        + o["upcalls"].as_u64().unwrap();
    assert_eq!(hits, captured, "every packet classified once: {o}");
    assert!(
        o["cpu_ns"].as_u64() > Some(0) && o["cpu_ns_per_packet"].as_f64() > Some(0.0),
        "ovs-vswitchd's CPU time was read: {o}"
    );
    let dir = PathBuf::from(r.summary["results"].as_str().unwrap());
    for f in o["files"].as_array().unwrap() {
        let f = dir.join(f.as_str().unwrap());
        assert!(std::fs::metadata(&f).unwrap().len() > 0, "{}", f.display());
    }
    assert!(
        r.summary["flowtables"].is_null(),
        "no eSwitch stage with OVS"
    );
    no_ovs_left("after a run through OVS");
    assert_nothing_left("after a run through OVS");

    // The ACKs dropped by the same rule on each DUT: no write completes.
    let drop = |text: &str| {
        text.replace(
            "{dst: requester, proto: udp, action: forward, to: requester}",
            "{dst: requester, proto: udp, action: drop}",
        )
        .replace(
            "messages: 4, message_size: 64KiB",
            "messages: 1, message_size: 4KiB",
        )
    };
    let es_drop = out.path().join("es-drop.yaml");
    std::fs::write(&es_drop, drop(&std::fs::read_to_string(&es_spec).unwrap())).unwrap();
    let ovs_drop = out.path().join("ovs-drop.yaml");
    std::fs::write(&ovs_drop, drop(&ovs_text)).unwrap();
    let e = run_spec(&es_drop, out.path());
    assert_eq!(e.code, 1, "{}", e.why());
    assert!(e.summary["flowtables"]["drops"].as_u64().unwrap() > 0);
    let r = run_spec(&ovs_drop, out.path());
    assert_eq!(r.code, 1, "{}", r.why());
    let dir = PathBuf::from(r.summary["results"].as_str().unwrap());
    let openflow = std::fs::read_to_string(dir.join("ovs-openflow.txt")).unwrap();
    let rule = openflow
        .lines()
        .find(|l| l.contains("nw_dst=198.18.0.1") && l.contains("actions=drop"))
        .unwrap_or_else(|| panic!("{openflow}"));
    assert!(
        !rule.contains("n_packets=0,"),
        "the drop rule dropped: {rule}"
    );
    no_ovs_left("after a dropping run through OVS");
    assert_nothing_left("after a dropping run through OVS");
}

#[test]
fn vxlan_across_an_overlay_goes_through_ovs_native_tunnels_as_through_the_eswitch() {
    // ScalaCN's overlay on both DUTs: the write is encapsulated by its
    // local rule, decapsulated by its remote rule, and completes; with its
    // remote rule dropping, it does not, on either.
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let ovs_spec = repo().join("specs/scalacn/write-across-an-overlay-through-ovs.yaml");
    let es_spec = repo().join("specs/scalacn/write-across-an-overlay-of-100-subnets.yaml");
    let ovs_text = std::fs::read_to_string(&ovs_spec).unwrap();
    let es_text = std::fs::read_to_string(&es_spec).unwrap();
    assert_eq!(
        ovs_text
            .replace("  dut: ovs\n", "")
            .split("topology:")
            .nth(1),
        es_text.split("topology:").nth(1),
        "the OVS spec is the eSwitch one with `dut: ovs`"
    );
    let e = run_spec(&es_spec, out.path());
    assert_eq!(e.code, 0, "{}", e.why());
    assert!(e.summary["flowtables"]["encaps"].as_u64().unwrap() > 0);
    let r = run_spec(&ovs_spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let dir = PathBuf::from(r.summary["results"].as_str().unwrap());
    // Each direction's packets were pushed and popped by OVS, and came back
    // into the remote table by the tunnel port.
    let megaflows = std::fs::read_to_string(dir.join("ovs-megaflows.txt")).unwrap();
    assert!(
        megaflows.contains("tnl_push(") && megaflows.contains("tunnel(tun_id=0x7d2"),
        "{megaflows}"
    );
    let openflow = std::fs::read_to_string(dir.join("ovs-openflow.txt")).unwrap();
    for vni in ["0x7d1", "0x7d2"] {
        let back = openflow
            .lines()
            .find(|l| {
                l.contains(&format!("tun_id={vni},"))
                    && l.contains("in_port=4789")
                    && l.contains("resubmit(,1)")
            })
            .unwrap_or_else(|| panic!("{openflow}"));
        assert!(!back.contains("n_packets=0,"), "{back}");
    }
    no_ovs_left("after a VXLAN run through OVS");
    assert_nothing_left("after a VXLAN run through OVS");

    // The responder's decap rule drops instead: no write completes.
    let drop = |text: &str| {
        text.replace(
            "{dst: 198.19.255.2, vni: 2002, action: decap, to: responder}",
            "{dst: 198.19.255.2, vni: 2002, action: drop}",
        )
        .replace(
            "messages: 8, message_size: 64KiB",
            "messages: 1, message_size: 4KiB",
        )
    };
    assert_ne!(drop(&ovs_text), ovs_text);
    for (name, text) in [("es-vxlan-drop", &es_text), ("ovs-vxlan-drop", &ovs_text)] {
        let f = out.path().join(format!("{name}.yaml"));
        std::fs::write(&f, drop(text)).unwrap();
        let r = run_spec(&f, out.path());
        assert_eq!(r.code, 1, "{name}: {}", r.why());
    }
    no_ovs_left("after a dropping VXLAN run through OVS");
    assert_nothing_left("after a dropping VXLAN run through OVS");
}

/// `wirelab sweep`: the spec once per point of the grid, each run's masks
/// per table measured; with two tables, ScalaCN's grid.csv that
/// `wirelab model` fits. A bad --vary exits 2 before any lab starts.
#[test]
fn a_sweep_runs_every_point_and_writes_the_grid() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = "specs/scalacn/write-bandwidth-against-local-and-remote-masks.yaml";
    let o = out.path().to_str().unwrap();
    let r = wirelab(&[
        "sweep",
        spec,
        "--vary",
        "flowtables.generate[9].masks=1",
        "--out",
        o,
    ]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("no item [9] there"), "{err}");
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing made"
    );

    let r = wirelab(&[
        "sweep",
        spec,
        "--vary",
        "flowtables.generate[0].masks=0,20",
        "--vary",
        "flowtables.generate[1].masks=5",
        "--out",
        o,
        "--jobs",
        "2",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{err}");
    let dir = std::fs::read_dir(out.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let rows: Vec<Value> = std::fs::read_to_string(dir.join("sweep.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    // Every packet searches the generated masks and its own one per table.
    assert_eq!(
        rows[0]["masks_per_packet"],
        serde_json::json!([1.0, 6.0]),
        "{}",
        rows[0]
    );
    assert_eq!(
        rows[1]["masks_per_packet"],
        serde_json::json!([21.0, 6.0]),
        "{}",
        rows[1]
    );
    for r in &rows {
        assert_eq!(r["verdict"], "PASS", "{r}");
        assert!(r["bandwidth_bps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["latency_ns"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["runs"], 1, "{r}");
        let summary: Value = serde_json::from_str(
            &std::fs::read_to_string(
                Path::new(r["results"][0].as_str().unwrap()).join("summary.json"),
            )
            .unwrap(),
        )
        .unwrap();
        // The bandwidth QP's `start: 20ms` holds its first write back (so
        // that the latency QP, 6-13 ms of writes here, runs alone; how
        // long it takes depends on the machine, so that is not asserted).
        // The device latency column is the median packet's search time
        // (the stage's histogram), near the mean of a run without stalls.
        let ft = &summary["flowtables"];
        let (p50, p99, mean) = (
            ft["search_ns_p50"].as_f64().unwrap(),
            ft["search_ns_p99"].as_f64().unwrap(),
            ft["search_ns_per_packet"].as_f64().unwrap(),
        );
        assert_eq!(r["device_latency_ns"].as_f64(), Some(p50), "{r}");
        assert_eq!(r["device_latency_mean_ns"].as_f64(), Some(mean), "{r}");
        assert!(p50 <= p99 && p50 > mean / 3.0 && p50 < mean * 3.0, "{ft}");
        for t in ft["tables"].as_array().unwrap() {
            assert!(t["search_ns_p50"].as_f64().unwrap() > 0.0, "{t}");
        }
        let w = summary["workload"].as_array().unwrap();
        let posted = |c: usize, m: usize| w[c]["messages"][m]["posted_ns"].as_u64().unwrap();
        // (The 20 ms count from the workload's start, a little before the
        // latency QP's first post.)
        assert!(
            posted(1, 0) >= posted(0, 0) + 19_000_000,
            "{} {}",
            w[0]["messages"][0],
            w[1]["messages"][0]
        );
    }
    let grid = std::fs::read_to_string(dir.join("grid.csv")).unwrap();
    let lines: Vec<&str> = grid.lines().collect();
    assert_eq!(lines[0], "ql,qr,bandwidth,latency,device_latency");
    assert!(
        lines[1].starts_with("1,6,") && lines[2].starts_with("21,6,"),
        "{grid}"
    );
    // The device's latency, timed in the stage: 20 masks more to search
    // per packet take longer (about 40 ns each here; 10 asserted).
    let dev = |l: &str| l.rsplit(',').next().unwrap().parse::<f64>().unwrap();
    assert!(dev(lines[2]) > dev(lines[1]) + 0.2, "{grid}");
    // What `wirelab model` reads (two points cannot fit five parameters).
    let m = wirelab(&["model", dir.to_str().unwrap()]);
    assert_eq!(m.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&m.stdout).contains("2 configurations"));
    assert_nothing_left("sweep");
}

/// Every spec under specs/roce/ (Lumina's experiments) passes its own
/// expectations with a valid trace, and leaves nothing behind.
#[test]
fn every_roce_spec_passes_its_expectations() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let specs = specs_in("specs/roce");
    assert!(specs.len() >= 10, "the RoCE specs are there: {specs:?}");
    for spec in specs {
        let r = run_spec(&spec, out.path());
        let name = spec.file_name().unwrap().to_string_lossy();
        assert_eq!(r.code, 0, "{name}\n{}", r.why());
        assert_eq!(r.summary["verdict"], "PASS", "{name}");
        assert_eq!(r.summary["integrity"]["valid"], true, "{name}");
        let claims = r.summary["expect"].as_array().unwrap();
        assert!(claims.len() >= 2, "{name}: claims {claims:?}");
        if name.contains("drop-position-sweep") {
            // The sweep's plot: one series per device and measurement.
            let dir = Path::new(r.summary["results"].as_str().unwrap());
            let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
            assert!(
                html.contains("loss latency against the lost packet"),
                "{name}"
            );
            assert!(
                html.contains("(default)") && html.contains("(slow-"),
                "{name}"
            );
        }
    }
    assert_nothing_left("roce specs");
}

/// NetBump's vAQM stage in the lab (seed 003 §4.2): a DCTCP virtual queue
/// for the port towards a real 100 Mbit/s bottleneck marks above K, the
/// senders back off, and every mark is in the trace with the queue's
/// estimate.
#[test]
fn vaqm_dctcp_marks_above_k_and_the_trace_shows_the_estimate() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    dctcp_marking_follows_k(
        &repo().join("specs/vaqm/dctcp-marks-above-k-on-a-virtual-100mbit-port.yaml"),
        out.path(),
    );
}

/// The extension API in the lab: DCTCP written as a user discipline in C
/// (specs/vaqm/ext/dctcp.c) marks exactly as the built-in one does.
#[test]
fn a_user_discipline_in_c_marks_above_k_like_the_built_in_dctcp() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/vaqm/a-user-discipline-in-c-marks-like-the-built-in-dctcp.yaml");
    let r = dctcp_marking_follows_k(&spec, out.path());
    let d = r.summary["vaqm"][0]["discipline"].as_str().unwrap();
    assert!(d.contains("extension dctcp.c [30000]"), "{d}");
}

/// A queue marking above K = 30 KB: every mark in the trace is above K
/// and every ECN-capable packet above K is marked; the receiver counted
/// the marks.
fn dctcp_marking_follows_k(spec: &Path, out: &Path) -> Run {
    let r = run_spec(spec, out);
    assert_eq!(r.code, 0, "{}", r.why());
    let q = &r.summary["vaqm"][0];
    let (pkts, marks, drops) = (
        q["packets"].as_u64().unwrap(),
        q["marks"].as_u64().unwrap(),
        q["drops"].as_u64().unwrap(),
    );
    assert!(pkts > 5000 && marks > 0 && marks < pkts, "{q}");
    assert_eq!(drops, 0, "DCTCP only marks");
    // The marks the receiver counted are the queue's.
    let ce = r.summary["counters"]["receiver"]["IpExtInCEPkts"]
        .as_u64()
        .unwrap();
    assert_eq!(ce, marks);
    // Each queued packet's record names the queue and its estimate; the
    // marked ones were above K = 30 KB.
    let trace = Path::new(r.summary["results"].as_str().unwrap()).join("trace.pcapng");
    let t = wirelab_trace::read(&trace).unwrap();
    let queued: Vec<_> = t
        .packets
        .iter()
        .filter(|p| p.meta.as_ref().is_some_and(|m| m.vq == 1))
        .collect();
    assert_eq!(queued.len() as u64, pkts);
    let (mut marked, mut above_unmarked) = (0u64, 0u64);
    for p in &queued {
        let m = p.meta.as_ref().unwrap();
        let ecn = p.data[15] & 3; // Ethernet, then the IPv4 TOS byte
        if m.aqm == wirelab_trace::Aqm::Mark {
            marked += 1;
            assert!(m.vq_bytes > 30_000 && ecn == 3, "{m:?}");
        } else if m.vq_bytes > 30_000 {
            // Above K and not marked: only a packet that cannot carry CE.
            assert_eq!(ecn, 0, "{m:?}");
            above_unmarked += 1;
        }
    }
    assert_eq!(marked, marks);
    assert_eq!(above_unmarked, q["unmarkable"].as_u64().unwrap());
    assert_nothing_left("vaqm run");
    r
}

/// The seed's experiments (NetBump Figs. 11-16) pass their expectations
/// and draw their plots.
#[test]
fn netbump_figure_specs_pass_their_expectations_and_plot() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    // Fig. 17 (QCN over UDP) has its own test.
    let figs: Vec<PathBuf> = specs_in("specs/vaqm")
        .into_iter()
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("fig") && !n.starts_with("fig17")
        })
        .collect();
    assert!(figs.len() >= 8, "{figs:?}");
    for spec in &figs {
        let name = spec.file_name().unwrap().to_string_lossy().into_owned();
        let r = run_spec(spec, out.path());
        assert_eq!(r.code, 0, "{}: {}", spec.display(), r.why());
        let html = std::fs::read_to_string(
            Path::new(r.summary["results"].as_str().unwrap()).join("report.html"),
        )
        .unwrap();
        // Figs. 11-13 replay distributed bumps (CDFs); 14-16 plot over time.
        let plots: &[&str] = match &name[..5] {
            "fig11" => &["vaqm.distributed-error:", "vaqm.real-queue:"],
            "fig12" | "fig13" => &["vaqm.distributed-truth-error:", "vaqm.real-queue:"],
            _ => &["flow.goodput:", "vaqm.real-queue:"],
        };
        for plot in plots {
            assert!(html.contains(plot), "{}: no {plot} plot", spec.display());
        }
        assert_nothing_left("a NetBump figure run");
    }
}

/// A discipline that does not compile fails before anything exists, with
/// clang's file:line; one the verifier refuses fails the run with the
/// verifier's words, after which nothing is left either.
#[test]
fn a_broken_user_discipline_exits_2_with_the_compilers_or_verifiers_message() {
    let Some((_g, dir)) = lab_test() else {
        return;
    };
    let ext = dir.path().join("ext");
    std::fs::create_dir(&ext).unwrap();
    let spec = write_spec(
        dir.path(),
        "mine.yaml",
        &format!(
            "{TWO_HOSTS}traffic:\n  connections:\n    - {{from: a, to: b, message_size: 1KB}}\n\
             vaqm:\n  extension: ext/mine.c\n  queues:\n    - {{port: b, rate: 100mbit, extension: [1]}}\n"
        ),
    );
    let out = dir.path().join("out");
    let run = || {
        wirelab(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let before = lab_namespaces();
    std::fs::write(
        ext.join("mine.c"),
        "#include \"wirelab_ext.h\"\nWL_PROCESS(skb, p, vq)\n{\n\treturn vq->nope;\n}\n",
    )
    .unwrap();
    let o = run();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("vaqm.extension") && err.contains("mine.c:4:"),
        "{err}"
    );
    assert_eq!(lab_namespaces(), before, "nothing created");
    assert!(!out.exists(), "no results folder");

    // Compiles, links, but reads past vq->param[] by a packet's port.
    std::fs::write(
        ext.join("mine.c"),
        "#include \"wirelab_ext.h\"\nWL_PROCESS(skb, p, vq) { return vq->param[p->dport]; }\n",
    )
    .unwrap();
    let o = run();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("verifier log") && err.contains("invalid access to memory"),
        "{err}"
    );
    assert_nothing_left("a refused discipline");
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no results: {left:?}");
}

/// NetBump §6.2.2 in the lab: the qdisc tracepoints record the real
/// 40 KB bottleneck queue next to the estimate, into queue-truth.csv, and
/// the `vaqm` analyzer compares them.
#[test]
fn vaqm_ground_truth_records_the_real_queue_next_to_the_estimate() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/vaqm/estimate-tracks-a-real-40kb-queue.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let dir = Path::new(r.summary["results"].as_str().unwrap());
    let truth =
        wirelab_analyze::truth::read_csv(&dir.join(wirelab_analyze::truth::TRUTH_FILE)).unwrap();
    let enq: Vec<_> = truth
        .iter()
        .filter(|p| p.event == wirelab_analyze::truth::TruthEvent::Enqueue)
        .collect();
    // Every packet the qdisc took in is sampled once when it enters and
    // once when it leaves; the queue never holds more than its limit, and
    // the estimate is capped at the same buffer.
    let deq: usize = truth
        .iter()
        .filter(|p| p.event == wirelab_analyze::truth::TruthEvent::Dequeue)
        .map(|p| usize::from(p.packets))
        .sum();
    assert!(
        enq.len() > 5000 && enq.len().abs_diff(deq) <= 30,
        "{} in, {deq} out",
        enq.len()
    );
    assert!(truth
        .iter()
        .all(|p| p.actual_bytes <= 40_000 && p.virtual_bytes <= 40_000));
    assert!(truth.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    // Data packets are whole frames; the queue really filled.
    assert!(enq.iter().filter(|p| p.packet_bytes == 1514).count() > 5000);
    assert!(truth.iter().any(|p| p.actual_bytes > 30_000));
    // The analysis saw the same samples.
    let a: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("analysis.json")).unwrap()).unwrap();
    let vaqm = a["analyzers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "vaqm")
        .unwrap();
    let err = vaqm["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "error")
        .unwrap();
    assert_eq!(
        err["distribution"]["count"].as_u64().unwrap(),
        truth.len() as u64
    );
    assert_nothing_left("vaqm ground truth run");
}

/// End hosts with wirelab's DCTCP (BPF struct_ops): the senders cut on the
/// virtual queue's marks without a loss, and the congestion control is
/// unregistered when the run ends.
#[test]
fn dctcp_end_hosts_back_off_on_marks_and_leave_no_congestion_control_behind() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/vaqm/dctcp-hosts-hold-the-real-queue-near-k.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let q = &r.summary["vaqm"][0];
    assert!(q["marks"].as_u64().unwrap() > 0, "{q}");
    // Skipped callbacks are counted for the user, even when there were none.
    assert!(r.summary["dctcp_repairs"].is_u64(), "{}", r.summary);
    assert_eq!(
        wirelab_dataplane::dctcp::registered_names(),
        Vec::<String>::new(),
        "wl_dctcp left registered"
    );
    assert_nothing_left("dctcp run");
}

/// The lab machines' kernel now and then does not run a congestion-control
/// callback, and a skipped ssthresh() hands TCP garbage
/// (`crates/dataplane/bpf/dctcp.bpf.c`). With every third ssthresh()
/// skipped on purpose, DCTCP still holds the queue near K without a burst:
/// the window is set only in its cong_control(), after the
/// threshold is repaired. Under the kernel's own PRR the same fault failed
/// the spec's queue claim in 10 runs of 10 (p50 98-131 KB, K = 30 KB).
#[test]
fn dctcp_holds_the_queue_when_the_kernel_skips_its_ssthresh() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/vaqm/dctcp-hosts-hold-the-real-queue-near-k.yaml");
    let o = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(["run", "--json", "--out"])
        .arg(out.path())
        .arg(&spec)
        .env(wirelab_dataplane::dctcp::SKIP_SSTHRESH_ENV, "3")
        .current_dir(repo())
        .output()
        .expect("wirelab runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let summary: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("no summary ({e}): {stderr}"));
    assert_eq!(o.status.code(), Some(0), "{stderr}\n{summary}");
    let repairs = summary["dctcp_repairs"].as_u64().unwrap_or(0);
    assert!(
        repairs >= 10,
        "{repairs} repairs: the fault was not injected"
    );
    // The bursts came with 2,500-3,000 retransmissions; a repaired run
    // has none, or (once in about nine make test runs of the spec before
    // the repair, cause unknown) a couple of hundred.
    let conns = summary["analysis"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 2, "{summary}");
    let retransmitted: u64 = conns
        .iter()
        .map(|c| c["data_packets"].as_u64().unwrap() - c["first_transmissions"].as_u64().unwrap())
        .sum();
    assert!(
        retransmitted < 500,
        "{retransmitted} retransmissions: {summary}"
    );
    assert_nothing_left("dctcp run with skipped ssthresh");
}

/// Two `wirelab run`s of a DCTCP spec at once (two users, or a run beside
/// a sweep): congestion controls are one kernel-wide list of names, and
/// each process registers its own. Under one shared name the second
/// registration failed ("failed to attach struct_ops: File exists", exit
/// 2), 7 of 50 runs of two concurrent loops of the Fig. 15 spec.
#[test]
fn two_processes_run_dctcp_at_once() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let spec = repo().join("specs/vaqm/dctcp-hosts-hold-the-real-queue-near-k.yaml");
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_wirelab"))
            .args(["run", "--json", "--out"])
            .arg(out.path())
            .arg(&spec)
            .current_dir(repo())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("wirelab runs")
    };
    let (a, b) = (start(), start());
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            !stderr.contains("registering DCTCP"),
            "exit {:?}: {stderr}",
            o.status.code()
        );
        // The run itself may fail its timing claims with two labs on two
        // cores; what must hold is that it ran on DCTCP.
        let summary: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("no summary ({e}): {stderr}"));
        assert!(
            summary["vaqm"][0]["marks"].as_u64().unwrap_or(0) > 0,
            "{stderr}"
        );
    }
    assert_eq!(
        wirelab_dataplane::dctcp::registered_names(),
        Vec::<String>::new(),
        "wl_dctcp left registered"
    );
    assert_nothing_left("two dctcp runs");
}

/// NetBump Fig. 17: QCN pushes three unresponsive UDP senders back
/// upstream. The switch's CNMs (one per `cnm=` packet in the trace) all
/// reach the reaction points, which cut and shape their hosts; without
/// QCN the same senders keep the real buffer full. Both leave nothing.
#[test]
fn qcn_reaction_points_shape_udp_senders_and_the_baseline_fills_the_buffer() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let qcn = run_spec(
        &repo().join("specs/vaqm/fig17-qcn-pushes-three-udp-flows-back-upstream.yaml"),
        out.path(),
    );
    assert_eq!(qcn.code, 0, "{}", qcn.why());
    let dir = PathBuf::from(qcn.summary["results"].as_str().unwrap());
    // Every packet that caused a CNM, from the trace as written.
    let trace = wirelab_trace::read(&dir.join("trace.pcapng")).unwrap();
    let sent = trace
        .packets
        .iter()
        .filter(|p| p.meta.as_ref().is_some_and(|m| m.cnm > 0))
        .count() as u64;
    let rps = qcn.summary["reaction_points"].as_array().unwrap();
    assert_eq!(rps.len(), 3);
    let received: u64 = rps.iter().map(|r| r["cnms"].as_u64().unwrap()).sum();
    assert!(sent >= 10, "{sent} CNMs");
    assert_eq!(received, sent, "every CNM reached a reaction point");
    for r in rps {
        assert!(r["cnms"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["bad_cnms"], 0, "{r}");
        assert_eq!(r["tc_errors"], "", "{r}");
        // Cut below the line rate at least once.
        assert!(r["min_rate_bps"].as_u64().unwrap() < 100_000_000, "{r}");
    }
    // The rate log has every change, and the report plots it.
    let log = std::fs::read_to_string(dir.join("qcn-rp.csv")).unwrap();
    let changes: u64 = rps
        .iter()
        .map(|r| r["rate_changes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        log.lines().count() as u64,
        changes + 1,
        "header + one line per change"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for plot in ["vaqm.send-rate:", "vaqm.rp-rate:", "vaqm.real-queue:"] {
        assert!(html.contains(plot), "no {plot} plot");
    }
    assert_nothing_left("a QCN run");

    let base = run_spec(
        &repo().join("specs/vaqm/fig17-udp-flows-without-qcn-baseline.yaml"),
        out.path(),
    );
    assert_eq!(base.code, 0, "{}", base.why());
    // Two thirds of the offered load cannot fit: the receiver got about a
    // third of what the senders sent (each flow's share varies).
    let (mut tx, mut rx) = (0, 0);
    for w in base.summary["workload"].as_array().unwrap() {
        tx += w["udp"]["datagrams_sent"].as_u64().unwrap();
        rx += w["udp"]["datagrams_received"].as_u64().unwrap();
    }
    assert!(rx * 2 < tx, "received {rx} of {tx} datagrams");
    assert_nothing_left("the QCN baseline");
}

/// Three namespaces made by hand, as a user's own set-up would be: a
/// sender, a bump host with two interfaces and a receiver (lab addresses,
/// ECN on). Deleted on drop, also when the test fails.
struct HandMadeLab {
    prefix: String,
}

impl HandMadeLab {
    fn new(tag: &str) -> HandMadeLab {
        let prefix = format!("wlbt{}{tag}", std::process::id());
        let g = HandMadeLab { prefix };
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().unwrap();
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        for n in ["l", "m", "r"] {
            ip(&["netns", "add", &g.ns(n)]);
            ip(&["-n", &g.ns(n), "link", "set", "lo", "up"]);
        }
        ip(&[
            "-n",
            &g.ns("l"),
            "link",
            "add",
            "name",
            "veth-a",
            "type",
            "veth",
            "peer",
            "name",
            "bump-a",
            "netns",
            &g.ns("m"),
        ]);
        ip(&[
            "-n",
            &g.ns("r"),
            "link",
            "add",
            "name",
            "veth-b",
            "type",
            "veth",
            "peer",
            "name",
            "bump-b",
            "netns",
            &g.ns("m"),
        ]);
        ip(&[
            "-n",
            &g.ns("l"),
            "addr",
            "add",
            "198.18.9.1/24",
            "dev",
            "veth-a",
        ]);
        ip(&[
            "-n",
            &g.ns("r"),
            "addr",
            "add",
            "198.18.9.2/24",
            "dev",
            "veth-b",
        ]);
        for (n, d) in [
            ("l", "veth-a"),
            ("r", "veth-b"),
            ("m", "bump-a"),
            ("m", "bump-b"),
        ] {
            ip(&["-n", &g.ns(n), "link", "set", d, "up"]);
        }
        for n in ["l", "r"] {
            wirelab_netns::in_netns(&g.ns(n), || {
                wirelab_netns::write_sysctl("net.ipv4.tcp_ecn", "1")
            })
            .unwrap()
            .unwrap();
        }
        g
    }

    fn ns(&self, n: &str) -> String {
        format!("{}{n}", self.prefix)
    }

    fn bump_attached(&self) -> bool {
        let o = Command::new("tc")
            .args([
                "-n",
                &self.ns("m"),
                "filter",
                "show",
                "dev",
                "bump-a",
                "ingress",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).contains("wl_switch")
    }

    fn clsact_left(&self) -> bool {
        ["bump-a", "bump-b"].iter().any(|d| {
            let o = Command::new("tc")
                .args(["-n", &self.ns("m"), "qdisc", "show", "dev", d])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).contains("clsact")
        })
    }

    /// A bounded TCP transfer (8 MiB) from the sender to the receiver.
    fn transfer(&self) -> u64 {
        use std::io::{Read, Write};
        let l = wirelab_netns::in_netns(&self.ns("r"), || {
            std::net::TcpListener::bind("198.18.9.2:5201")
        })
        .unwrap()
        .unwrap();
        let rx = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut n = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return n,
                    Ok(k) => n += k as u64,
                }
            }
        });
        let mut c = wirelab_netns::in_netns(&self.ns("l"), || {
            std::net::TcpStream::connect_timeout(
                &"198.18.9.2:5201".parse().unwrap(),
                Duration::from_secs(5),
            )
        })
        .unwrap()
        .unwrap();
        c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let chunk = vec![0x5au8; 1 << 16];
        for _ in 0..128 {
            c.write_all(&chunk).unwrap();
        }
        drop(c);
        rx.join().unwrap()
    }
}

impl Drop for HandMadeLab {
    fn drop(&mut self) {
        for n in ["l", "m", "r"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .output();
        }
    }
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `wirelab bump` inline between two interfaces of a namespace it did not
/// make: the traffic crosses it, the DCTCP queue marks, the trace is
/// complete, and the interfaces are left as they were. Bad input exits 2
/// with nothing attached; a bump killed with SIGKILL is detached by
/// `wirelab clean`.
#[test]
fn bump_runs_inline_between_existing_interfaces_and_leaves_them_as_found() {
    let Some((_g, out)) = lab_test() else {
        return;
    };
    let lab = HandMadeLab::new("a");
    let cfg = out.path().join("bump.yaml");
    std::fs::write(
        &cfg,
        "vaqm:\n  queues:\n    - {port: bump-b, rate: 50mbit, dctcp: {k: 20KB}}\nanalyzers: [vaqm, flow]\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_wirelab");
    let bump = |extra: &[&str]| {
        let mut c = Command::new(bin);
        c.args(["bump", &lab.ns("m"), "bump-a", "bump-b", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(out.path())
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let child = bump(&["--duration", "4", "--json"]).spawn().unwrap();
    wait_for("the bump to attach", || lab.bump_attached());
    let moved = lab.transfer();
    assert_eq!(moved, 8 << 20);
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let s: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let violations: Vec<String> = s["analysis"]["analyzers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["findings"].as_array().into_iter().flatten())
        .filter(|f| f["kind"] == "violation")
        .map(|f| format!("{}.{}: {}", f["analyzer"], f["name"], f["message"]))
        .collect();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stderr}{violations:#?}\n{}",
        s["integrity"]
    );
    assert_eq!(s["verdict"], "PASS", "{}", s["integrity"]);
    let integ = &s["integrity"];
    assert_eq!(integ["valid"], true, "{integ}");
    // The transfer's data and its ACKs both crossed the bump (as GSO
    // super-packets: the bump leaves the interfaces' offloads as they are).
    for p in integ["ports"].as_array().unwrap() {
        assert!(p["switch_rx"].as_u64().unwrap() > 50, "{integ}");
    }
    let q = &s["vaqm"][0];
    assert!(
        q["marks"].as_u64().unwrap() > 0,
        "ECN data above K is marked: {q}"
    );
    let results = PathBuf::from(s["results"].as_str().unwrap());
    let trace = wirelab_trace::read(&results.join("trace.pcapng")).unwrap();
    assert_eq!(
        trace.packets.len() as u64,
        integ["in_trace"].as_u64().unwrap()
    );
    assert!(results.join("report.html").exists());
    assert!(
        !lab.bump_attached() && !lab.clsact_left(),
        "the bump detached"
    );
    let left: Vec<_> = std::fs::read_dir("/run/wirelab")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "registry entries left: {left:?}");

    // Bad input: a queue on an interface the bump does not sit on.
    std::fs::write(&cfg, "vaqm:\n  queues:\n    - {port: eth7, rate: 50mbit}\n").unwrap();
    let o = bump(&["--duration", "1"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("vaqm.queues[0].port: no interface named `eth7` (line 3)"),
        "{e}"
    );
    assert!(!lab.bump_attached() && !lab.clsact_left());

    // Killed: `wirelab clean` detaches what it left.
    std::fs::write(
        &cfg,
        "vaqm:\n  queues:\n    - {port: bump-b, rate: 50mbit}\n",
    )
    .unwrap();
    let mut child = bump(&["--duration", "60"]).spawn().unwrap();
    wait_for("the bump to attach", || lab.bump_attached());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lab.bump_attached(), "SIGKILL leaves the program attached");
    let o = wirelab(&["clean"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("detached a killed bump from"), "{said}");
    assert!(!lab.bump_attached() && !lab.clsact_left(), "{said}");
}

/// `record:` in a spec (issue 21): both hosts recorded by the run engine.
/// The switch drops the 5th data packet and its fast retransmission; the
/// responder's record finds exactly those two from the requester's IP-ID
/// gaps, and the requester's holds its retransmissions, the timeout that
/// recovered the second loss (the move to Loss), and its socket calls.
/// The records a run with `record:` wrote, as `wirelab record --read
/// --json` shows them: the requester's and the responder's of the busiest
/// connection.
fn requester_and_responder_records(summary: &Value) -> (Value, Value) {
    let dir = PathBuf::from(summary["results"].as_str().unwrap()).join("record");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|h| std::fs::read_dir(h.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deter"))
        .collect();
    let mut args = vec!["record", "--json", "--read"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let o = wirelab(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let records: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |name: &str| -> Value {
        let ns = summary["hosts"]
            .as_array()
            .and_then(|h| h.iter().find(|h| h["name"] == name))
            .and_then(|h| h["namespace"].as_str())
            .unwrap_or_else(|| panic!("host {name} in {}", summary["hosts"]));
        records
            .iter()
            .filter(|x| x["host"] == ns)
            .max_by_key(|x| x["arrived"].as_u64().unwrap() + x["sent"].as_u64().unwrap())
            .unwrap_or_else(|| panic!("a record at {ns}: {records:#?}"))
            .clone()
    };
    (at("requester"), at("responder"))
}

/// Wire events (`sent_by`) drop a packet by its place in its end's series,
/// and the other end's record finds the loss at that same place: the
/// address a DETER replay re-applies drops at (issue 21).
#[test]
fn a_wire_event_drops_the_packet_the_record_finds_lost() {
    let Some((_g, out)) = lab_test() else { return };
    let spec = repo().join("specs/deter/drop-each-end-s-packet-by-its-place-in-its-series.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let events = r.summary["events"].as_array().unwrap();
    for e in events {
        assert_eq!(e["hits"], 1, "each end's packet once: {e}");
        assert_eq!(
            e["hit"].as_array().map(Vec::len),
            Some(1),
            "in the trace: {e}"
        );
    }
    let (a, b) = requester_and_responder_records(&r.summary);
    assert_eq!(
        b["lost_packets"],
        serde_json::json!([3]),
        "the requester's 3rd: {b}"
    );
    assert_eq!(
        a["lost_packets"],
        serde_json::json!([2]),
        "the responder's 2nd: {a}"
    );
    assert_nothing_left("after a run with wire events");
}

/// `wirelab diagnose DIR --json`'s causes of its one slow connection, as
/// "kind: text".
fn diagnosed(dir: &Path) -> Vec<String> {
    let o = wirelab(&["diagnose", dir.to_str().unwrap(), "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let slow = v["slow"].as_array().unwrap();
    assert_eq!(slow.len(), 1, "{v}");
    slow[0]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["kind"].as_str().unwrap(),
                c["text"].as_str().unwrap()
            )
        })
        .collect()
}

/// DETER §5.1's slow reader: the responder reads at 20 Mbit/s from a
/// 64 KB receive buffer. `wirelab diagnose` names the zero window on the
/// run; the records carry the responder's tcp_rmem (a setting that differs
/// from the kernel's), so a replay, whose reads follow the recorded ones,
/// closes the window too and is diagnosed the same. Without the recorded
/// setting the replay's buffer would be the default's and never fill.
#[test]
fn a_slow_reader_is_diagnosed_as_a_zero_window_on_the_run_and_on_its_replay() {
    let Some((_g, out)) = lab_test() else { return };
    let zero_window = |dir: &Path| -> Vec<String> {
        diagnosed(dir)
            .into_iter()
            .filter(|c| c.starts_with("zero-window:"))
            .collect()
    };
    let spec = repo().join("specs/deter/a-slow-reader-closes-the-receive-window.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let results = PathBuf::from(r.summary["results"].as_str().unwrap());
    let on_run = zero_window(&results);
    assert_eq!(on_run.len(), 1, "{on_run:?}");
    // The host folder is named after its namespace.
    let responder = std::fs::read_dir(results.join("record"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with("responder"))
        .expect("the responder's records");
    let settings: Value =
        serde_json::from_slice(&std::fs::read(responder.path().join("settings.json")).unwrap())
            .unwrap();
    assert_eq!(
        settings["tcp_settings_changed"]["net.ipv4.tcp_rmem"], "4096 65536 65536",
        "{settings}"
    );
    let o = wirelab(&[
        "replay",
        results.join("record").to_str().unwrap(),
        "--out",
        out.path().join("replays").to_str().unwrap(),
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["summary"]["verdict"], "PASS", "{stdout}");
    let replayed = PathBuf::from(v["summary"]["results"].as_str().unwrap());
    let spec_text = std::fs::read_to_string(replayed.join("spec.yaml")).unwrap_or_default();
    let on_replay = zero_window(&replayed);
    assert_eq!(on_replay.len(), 1, "{on_replay:?}\n{spec_text}");
    assert_nothing_left("after a slow reader's replay");
}

/// DETER's replay (issue 21 item 3): a recorded connection, replayed in a
/// lab of its own with its calls and the network's actions re-applied, for
/// a fast retransmission with an ACK drop, a drop twice whose second loss
/// only a timeout repairs, a tail drop a probe repairs, and DETER §2.1's
/// second timeout behind a delayed ACK. Every one of 10
/// replays re-applies the same actions to the same packets and retransmits
/// as the recording did. The client's TCP headers are identical in at
/// least 8 of 10 (measured: nearly all); the server's ACKs follow its
/// softirq and socket-lock timing, so how many it sends changes with the
/// machine's load (identical both ways in 87-93% of replays on an idle
/// machine, none of a tail drop's recorded idle and replayed under
/// `make test`'s load). `wirelab diagnose` names the same causes
/// (DETER's, seed 004 §5.3) on the run and on a replay of it.
#[test]
fn a_replay_repeats_each_recorded_connection_packet_for_packet() {
    let Some((_g, out)) = lab_test() else { return };
    let kinds = |causes: &[String]| -> Vec<String> {
        causes
            .iter()
            .map(|c| c.split(':').next().unwrap().to_string())
            .collect()
    };
    for (name, actions, causes) in [
        (
            "drop-each-end-s-packet-by-its-place-in-its-series",
            2,
            &["fast-retransmit"][..],
        ),
        (
            "record-a-drop-twice-and-its-timeout",
            2,
            &["fast-retransmit", "timeout"][..],
        ),
        (
            "a-tail-drop-is-repaired-by-a-loss-probe",
            1,
            &["tail-loss-probe"][..],
        ),
        (
            "too-few-duplicate-acks-leave-a-loss-to-the-timeout",
            1,
            &["timeout"][..],
        ),
        (
            "out-of-order-data-no-longer-grows-the-window-without-sack",
            1,
            &["fast-retransmit"][..],
        ),
        (
            "a-reordered-packet-is-replayed-in-its-place",
            1,
            &["fast-retransmit"][..],
        ),
        (
            "short-flow-rto-and-delayed-ack",
            1,
            &["timeout", "timeout"][..],
        ),
        (
            "a-reordering-raises-the-duplicate-ack-threshold-and-fast-retransmit-comes-late",
            2,
            &["fast-retransmit", "late-fast-retransmit"][..],
        ),
    ] {
        let spec = repo().join(format!("specs/deter/{name}.yaml"));
        let r = run_spec(&spec, out.path());
        assert_eq!(r.code, 0, "{}", r.why());
        let results = PathBuf::from(r.summary["results"].as_str().unwrap());
        let recorded_causes = diagnosed(&results);
        assert_eq!(
            kinds(&recorded_causes),
            causes,
            "{name}: {recorded_causes:#?}"
        );
        if name.contains("too-few") {
            // DETER §5.3 root cause 1, as diagnose words it.
            assert!(
                recorded_causes[0].contains("(2 of DupThresh 3"),
                "{recorded_causes:#?}"
            );
        }
        if name.contains("reordered") {
            // The switch held it, the receiver got it after three others,
            // and Linux's RACK resent it: spurious, as its DSACK says.
            assert!(
                recorded_causes[0].contains("(reorder); it was reordered, not lost")
                    && recorded_causes[0].contains("DSACK"),
                "{recorded_causes:#?}"
            );
        }
        if name.contains("delayed-ack") {
            // DETER §2.1: the second timeout is the receiver's delayed ACK
            // of the first retransmission, which arrived.
            assert!(
                recorded_causes[0].contains("a tail loss")
                    && recorded_causes[1].contains("(DETER §2.1)"),
                "{recorded_causes:#?}"
            );
        }
        if name.contains("twice") {
            assert!(
                recorded_causes[1].contains("was dropped too"),
                "{recorded_causes:#?}"
            );
        }
        if name.contains("comes-late") {
            // DETER §5.2: the record holds the threshold the kernel resent
            // at, the capture the wait past the 3rd duplicate ACK (the
            // bottleneck spaces them), and the spurious retransmission of
            // packet 2 that widened the threshold to the 10-packet hole.
            assert!(
                recorded_causes[1].contains("the sender's kernel resent it on duplicate ACK 10, its threshold tcp_reordering 10")
                    && recorded_causes[1].contains("base round trips of")
                    && recorded_causes[1].contains("packet 2's fast retransmit")
                    && recorded_causes[1].contains("closed a hole of 10 packets"),
                "{recorded_causes:#?}"
            );
            // `record --read` shows the threshold the client resent with.
            let client = std::fs::read_dir(results.join("record"))
                .unwrap()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().ends_with("-client"))
                .unwrap()
                .path();
            let file = std::fs::read_dir(&client)
                .unwrap()
                .flatten()
                .find(|e| e.path().extension().is_some_and(|x| x == "deter"));
            let o = wirelab(&[
                "record",
                "--read",
                file.unwrap().path().to_str().unwrap(),
                "--json",
            ]);
            let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(
                (&shown["retransmits"], &shown["reordering_max"]),
                (&2.into(), &10.into()),
                "{shown}"
            );
        }
        let records = results.join("record");
        let replays = out.path().join(format!("replays-{name}"));
        let (mut same_diagnosis, mut diagnosis_differs) = (0, Vec::new());
        let (mut identical, mut client_identical) = (0, 0);
        let mut retransmissions_differ = Vec::new();
        let mut records_disagree = Vec::new();
        for round in 1..=10 {
            let o = wirelab(&[
                "replay",
                records.to_str().unwrap(),
                "--out",
                replays.to_str().unwrap(),
                "--json",
            ]);
            let stdout = String::from_utf8_lossy(&o.stdout);
            let why = format!(
                "{name} round {round}: {stdout}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
            assert_eq!(v["summary"]["verdict"], "PASS", "{why}");
            if name.contains("out-of-order") {
                // The server's application set SO_RCVBUF (10 MiB): the
                // record holds it, and the replay's server sets it again.
                let text = std::fs::read_to_string(v["spec"].as_str().unwrap()).unwrap();
                let server = text
                    .lines()
                    .skip_while(|l| !l.contains("name: server"))
                    .nth(1)
                    .unwrap_or_default();
                assert!(server.contains("rcvbuf: 10485760"), "{text}");
            }
            if name.contains("comes-late") {
                // The lab route's microsecond timestamps are in the
                // record's settings, and the replay sets them again:
                // without them the spurious retransmission is not seen as
                // one, and the threshold stays 3.
                let text = std::fs::read_to_string(v["spec"].as_str().unwrap()).unwrap();
                assert_eq!(text.matches("usec_timestamps: true").count(), 2, "{text}");
            }
            let this_replay = PathBuf::from(v["summary"]["results"].as_str().unwrap());
            let f = &v["fidelity"];
            assert_eq!(
                f["recorded_actions"].as_array().map(Vec::len),
                Some(actions),
                "{why}"
            );
            assert_eq!(f["recorded_actions"], f["replayed_actions"], "{why}");
            assert!(
                f["recorded_retransmissions"][0].as_u64() >= Some(1),
                "{why}"
            );
            // The same retransmissions, as the captures count them, in
            // most replays (measured: 9 or
            // 10 of 10 on an idle machine, 7 of 10 in a clean-clone CI
            // run; the bound is below): in `make test`'s load the reordered spec's replayed
            // receiver sometimes answers its burst with fewer ACKs (its
            // socket busy copying to the reader, the segments coalesced
            // in the backlog: TcpExtTCPBacklogCoalesce 2-3 in the
            // replays that differ), a kernel decision the record does not
            // hold, so the sender's spurious fast retransmit comes in the
            // recording and not in the replay (recorded [1, 0], replayed
            // [0, 0]). A replay that re-applied nothing, or the wrong
            // packet, retransmits differently every time. DETER's goal
            // is 95% of connections exact.
            // A record that misses a kernel event its capture shows (CI
            // saw the replay's client record without the loss probe its
            // capture and TcpRetransSegs had, 1 replay in 10) is named,
            // and the captures decide; it must stay rare.
            if let Some(d) = f["records_disagree"].as_array() {
                records_disagree.push(format!("{why}: {d:?}"));
            }
            let h = &f["headers"];
            assert!(h["replayed_retransmissions"].is_array(), "{why}");
            if h["recorded_retransmissions"] == h["replayed_retransmissions"] {
                // Diagnosed as the recording was? The same count can hide
                // another recovery: a clean-clone CI replay of the
                // no-SACK spec timed out (207 ms) where the recording
                // retransmitted fast, its headers the same.
                let replayed = diagnosed(&this_replay);
                if kinds(&replayed) == causes {
                    same_diagnosis += 1;
                } else {
                    diagnosis_differs.push(format!("{why}: {replayed:#?}"));
                }
            } else {
                retransmissions_differ.push(why.clone());
            }
            // The client's send times, from both records' samples.
            let t: Vec<u64> = (0..3)
                .map(|i| {
                    f["send_time_differences_ns"]["client"][i]
                        .as_u64()
                        .expect(&why)
                })
                .collect();
            assert!(t[0] <= t[1] && t[1] <= t[2], "p50 <= p99 <= max: {why}");
            // Exit 0 exactly when the headers matched both ways too.
            let same = h["client_differs"].is_null() && h["server_differs"].is_null();
            // The fidelity alone first: CI logs cut a long message's middle.
            assert_eq!(f["same"], same, "{name} round {round}: {f}\n{why}");
            assert_eq!(o.status.code(), Some(if same { 0 } else { 1 }), "{why}");
            client_identical += usize::from(h["client_differs"].is_null());
            identical += usize::from(same);
        }
        // The reordered spec's replays under load differ with the
        // receiver's backlog (above) in the retransmission and so in the
        // client's headers: 6 of 10 for it (CI measured 7); 8 of 10 for
        // the others, which measure 10 of 10.
        let least = if name.contains("reordered") { 6 } else { 8 };
        assert!(
            retransmissions_differ.len() <= 10 - least,
            "{name}: retransmissions differ in {} of 10 replays:\n{}",
            retransmissions_differ.len(),
            retransmissions_differ.join("\n")
        );
        assert!(
            records_disagree.len() <= 10 - least,
            "{name}: records disagree with their captures in {} of 10 replays:\n{}",
            records_disagree.len(),
            records_disagree.join("\n")
        );
        // The client's (the sender's) headers, which the diagnosis reads;
        // the server's ACKs also follow the machine's load (see above).
        assert!(
            client_identical >= least,
            "{name}: the client's headers identical in {client_identical} of 10 replays ({identical} both ways)"
        );
        eprintln!("{name}: headers identical in {identical} of 10 replays both ways, {client_identical} client -> server");
        // The replays that retransmitted as recorded are diagnosed as it
        // was, in as many replays as retransmit the same (`least`).
        assert!(
            same_diagnosis >= least,
            "{name}: diagnosed as recorded ({causes:?}) in {same_diagnosis} of 10 replays:\n{}",
            diagnosis_differs.join("\n")
        );
    }
    // Bad input: a damaged record names its byte offset; one end alone is
    // not a replay.
    let dir = out.path().join("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let cut = [&wirelab_deter::record::MAGIC[..], b"\x05\x00"].concat();
    std::fs::write(dir.join("x.deter"), cut).unwrap();
    let refused = |p: &Path| -> String {
        let o = wirelab(&[
            "replay",
            p.to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = refused(&dir);
    assert!(err.contains("x.deter: at byte 10: cut short"), "{err}");
    std::fs::remove_file(dir.join("x.deter")).unwrap();
    let one = std::fs::read_dir(out.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("drop-each-end"))
        .expect("the first run's results")
        .path()
        .join("record");
    let host = std::fs::read_dir(&one)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let err = refused(&host);
    assert!(err.contains("a replay needs one from each end"), "{err}");
    assert_nothing_left("after replays");
}

#[test]
fn a_recorded_run_keeps_each_hosts_view_of_its_connection() {
    let Some((_g, out)) = lab_test() else { return };
    let spec = repo().join("specs/deter/record-a-drop-twice-and-its-timeout.yaml");
    let r = run_spec(&spec, out.path());
    assert_eq!(r.code, 0, "{}", r.why());
    let rec = &r.summary["record"];
    assert!(rec["records"].as_u64() >= Some(2), "{rec}");
    assert_eq!(rec["incomplete"], 0, "{rec}");
    let (a, b) = requester_and_responder_records(&r.summary);
    assert_eq!(b["lost"], 2, "the two drops, from IP-ID gaps: {b}");
    assert_eq!(a["lost"], 0, "no ACK dropped: {a}");
    assert!(a["retransmits"].as_u64() >= Some(2), "{a}");
    assert!(a["timeouts"].as_u64() >= Some(1), "the second loss: {a}");
    assert!(a["bytes_sent"].as_u64() >= Some(14480), "{a}");
    assert!(b["bytes_received"].as_u64() >= Some(14480), "{b}");
    assert_nothing_left("after a recorded run");
}
