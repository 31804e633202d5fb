//! `wirelab fuzz --ray`: a campaign whose runs are Ray tasks, against a
//! local Ray head this test starts (from the project's virtualenv, which
//! `make test` fills) and stops. Needs root, as every lab test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

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

fn lab_namespaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("wl-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Processes whose command line names `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                v.push(c);
            }
        }
    }
    v
}

/// A local Ray head (`ray start --head --block`), stopped on drop even when
/// the test fails: SIGTERM makes `ray start` stop every process it started.
struct Head {
    child: Child,
    temp: tempfile::TempDir,
    address: String,
}

impl Head {
    fn start(cpus: u32) -> Head {
        let ray = repo().join("target/py/bin/ray");
        assert!(
            ray.exists(),
            "{} is missing: `make test` installs ray (scripts/deps.sh)",
            ray.display()
        );
        // A free port: Ray's other ports are its own random ones.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let temp = tempfile::Builder::new()
            .prefix("wl-ray-")
            .tempdir()
            .unwrap();
        let mut child = Command::new(&ray)
            .args(["start", "--head", "--block", "--disable-usage-stats"])
            .args([
                "--include-dashboard=false",
                "--node-ip-address",
                "127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--num-cpus={cpus}"))
            .arg(format!("--temp-dir={}", temp.path().display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ray start runs");
        // `--block` says when the head is up ("Ray runtime started", on
        // stdout; warnings on stderr).
        let (tx, rx) = std::sync::mpsc::channel();
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        for from in [out, err] {
            let (tx, log) = (tx.clone(), said.clone());
            std::thread::spawn(move || {
                for l in BufReader::new(from).lines().map_while(Result::ok) {
                    if l.contains("Ray runtime started") {
                        let _ = tx.send(());
                    }
                    let mut s = log.lock().unwrap_or_else(|e| e.into_inner());
                    if s.len() < 20_000 {
                        *s += &l;
                        s.push('\n');
                    }
                }
            });
        }
        let head = Head {
            child,
            temp,
            address: format!("127.0.0.1:{port}"),
        };
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            panic!(
                "the Ray head did not start within a minute; it said:\n{}",
                said.lock().unwrap_or_else(|e| e.into_inner())
            );
        }
        head
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The slow-NACK quirk, as the local lab test finds it (its target), now
/// with every run a task on the cluster.
const TARGET: &str = "\
seed: SEED
device: slow-nack-reaction
space:
  connections: {min: 1, max: 2}
  message_size: {min: 4KB, max: 16KB}
  events:
    count: {min: 0, max: 2}
    actions: [drop, ecn]
    packet: {min: 1, max: 8}
objectives:
  - {kind: latency, finding: roce-retransmission-latency.nack-reaction, above: 200us, reference: true}
pool: {size: 4}
stop: {runs: 16}
shrink: {confirm: 3, max_runs: 12}
";

fn jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_campaign_runs_on_a_ray_cluster_finds_the_quirk_and_leaves_nothing() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: lab tests need root (network namespaces, BPF)");
        return;
    }
    let before = lab_namespaces();
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("slow-nack.yaml");
    let seed = repo().join("specs/fuzz/seeds/roce-write.yaml");
    std::fs::write(&target, TARGET.replace("SEED", &seed.display().to_string())).unwrap();
    let out = tmp.path().join("out");
    let (t, o) = (target.to_str().unwrap(), out.to_str().unwrap());

    // Where nothing listens: exit 2, the address named, no campaign folder.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("127.0.0.1:{port}");
    let r = wirelab(&["fuzz", t, "--ray", &nowhere, "--out", o]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--ray {nowhere}: nothing answers")),
        "{err}"
    );
    assert!(
        !out.exists(),
        "a campaign that never connected leaves no folder"
    );

    let head = Head::start(2);
    let r = wirelab(&[
        "fuzz",
        t,
        "--ray",
        &head.address,
        "--seed",
        "7",
        "--out",
        o,
        "--json",
    ]);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert_eq!(r.status.code(), Some(1), "an anomaly found: {err}");
    assert!(err.contains("Ray cluster: 1 node, 2 CPUs"), "{err}");
    let outcome: Value = serde_json::from_slice(&r.stdout).expect(&err);
    let a = &outcome["anomalies"][0];
    assert_eq!(
        a["objective"], "latency(roce-retransmission-latency.nack-reaction)",
        "{outcome}"
    );
    assert_eq!(
        (&a["confirmed"], &a["confirm"]),
        (&3.into(), &3.into()),
        "{a}"
    );
    assert!(Path::new(a["file"].as_str().unwrap()).exists());

    let dir = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("campaign.json")).unwrap()).unwrap();
    assert_eq!(
        meta["jobs"], 2,
        "as many labs at once as the cluster has CPUs"
    );
    // Every run was made by a task on the head's node, and is a real run.
    let runs = jsonl(&dir.join("runs.jsonl"));
    assert!(!runs.is_empty());
    for r in &runs {
        let obs = &r["observation"];
        assert!(obs["node"].as_str().is_some_and(|n| n.len() > 8), "{r}");
        assert!(
            ["PASS", "FAIL"].contains(&obs["verdict"].as_str().unwrap()),
            "{r}"
        );
    }
    // Runs without an anomaly were forgotten on the node that made them.
    let kept: Vec<_> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let quiet = runs
        .iter()
        .filter(|r| r["anomalies"] == serde_json::json!([]));
    for r in quiet {
        let d = r["observation"]["dir"].as_str().unwrap();
        let name = Path::new(d).file_name().unwrap().to_string_lossy();
        assert!(!kept.iter().any(|k| *k == name), "{d} was kept: {kept:?}");
    }

    // Ctrl-C while tasks run: each stops its run and removes its lab, and
    // the campaign exits 130.
    let long = tmp.path().join("interrupted");
    // Kept for the failure message: where a slow stop spent its minute.
    let log = tmp.path().join("interrupted.log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(["fuzz", t, "--ray", &head.address, "--device", "default"])
        .args([
            "--runs",
            "500",
            "--keep-going",
            "--out",
            long.to_str().unwrap(),
        ])
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let runs_made = || {
        std::fs::read_dir(&long)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map_or(0, |e| jsonl(&e.path().join("runs.jsonl")).len())
    };
    while runs_made() < 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(runs_made() >= 3, "the campaign got going");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > until {
            // What still ran: the Ray driver (its code is its argument),
            // runs, and what the campaign last said.
            let (driver, runs) = (
                processes_with("NodeAffinitySchedulingStrategy").len(),
                processes_with("fuzz-eval"),
            );
            let _ = c.kill();
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(15).collect();
            panic!(
                "the campaign did not stop within a minute of Ctrl-C: {driver} driver process(es) and {} run(s) left ({runs:?}); its stderr ended:\n{}",
                runs.len(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code, Some(130));
    assert!(runs_made() < 500);
    assert!(
        processes_with("fuzz-eval").is_empty(),
        "{:?}",
        processes_with("fuzz-eval")
    );
    assert_eq!(lab_namespaces(), before, "namespaces left after Ctrl-C");

    let session = head.temp.path().display().to_string();
    drop(head);
    assert_eq!(lab_namespaces(), before, "namespaces left behind");
    assert!(
        processes_with(&session).is_empty(),
        "the head's processes: {:?}",
        processes_with(&session)
    );
    assert!(
        processes_with("fuzz-eval").is_empty(),
        "{:?}",
        processes_with("fuzz-eval")
    );
}
