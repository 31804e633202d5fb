//! `wirelab load` (Norma, issue 20) as a user runs it: every shipped load
//! test passes against its DUT, and what the tester counted agrees with
//! what the DUT itself says it did (the firewall's connections and NAT
//! rule, the bottleneck's drops); a claim that does not hold exits 1; bad
//! input exits 2 before anything exists; Ctrl-C exits 130 with the
//! intervals measured so far kept. After each, no namespace of the run
//! remains.
//!
//! Needs root (namespaces, BPF), except the bad-input test. The tests of
//! this file run one at a time: the generator spins a core, and two at
//! once on two cores would starve each other's meters.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

// Only `root` of the shared helpers is used here.
#[allow(dead_code)]
#[path = "common/host_tools.rs"]
mod host_tools;
use host_tools::root;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn wirelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(args)
        .output()
        .unwrap()
}

/// `wirelab load --json`'s lines: the intervals, then the summary.
fn json_lines(o: &Output) -> (Vec<Value>, Value) {
    let mut v: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = v.pop().expect("a summary line");
    (v, summary)
}

/// No namespace of run `id` is left.
fn nothing_left(id: &str) {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&o.stdout);
    let prefix = format!("wl-{id}-");
    assert!(!list.contains(&prefix), "left behind: {list}");
}

/// The host's neighbour-table limits, gc_thresh1..3.
fn neigh_thresh() -> Vec<String> {
    (1..=3)
        .map(|k| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/neigh/default/gc_thresh{k}"))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect()
}

/// A neighbour limit is the host's: refused without `--host-wide` (exit
/// 2, the field and its line named, nothing started), and put back by
/// `wirelab clean` after a run that was killed while it held it.
#[test]
fn a_neighbour_limit_needs_consent_and_a_killed_run_s_is_put_back_by_clean() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let before = neigh_thresh();
    let spec = dir.path().join("limit.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(
            repo().join("specs/load/arp-learning-of-a-router-with-a-neighbour-table-limit.yaml"),
        )
        .unwrap()
        .replace("duration: 2s", "duration: 60s"),
    )
    .unwrap();
    let out = dir.path().join("results");
    let o = wirelab(&[
        "load",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("dut.neighbour_limit")
            && err.contains("--host-wide")
            && err.contains("(line 12)"),
        "{err}"
    );
    assert!(!out.exists(), "a refused run made its results folder");
    assert_eq!(neigh_thresh(), before);

    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(["load", spec.to_str().unwrap(), "--host-wide", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while neigh_thresh() == before && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let lowered = neigh_thresh();
    child.kill().unwrap(); // SIGKILL: no chance to put it back itself
    child.wait().unwrap();
    assert_ne!(lowered, before, "the run lowered the host's limit");
    assert_eq!(neigh_thresh(), lowered, "a killed run leaves its limit");
    let o = wirelab(&["clean"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        said.contains("put back the host setting a killed run had changed: net.ipv4.neigh.default.gc_thresh3="),
        "{said}"
    );
    assert_eq!(neigh_thresh(), before, "{said}");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn every_shipped_load_test_passes_and_agrees_with_its_dut() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = tempfile::tempdir().unwrap();
    let mut specs: Vec<PathBuf> = std::fs::read_dir(repo().join("specs/load"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 5, "{specs:?}");
    let mut stateful = Vec::new();
    for spec in &specs {
        let thresh_before = neigh_thresh();
        let o = wirelab(&[
            "load",
            spec.to_str().unwrap(),
            "--json",
            "--host-wide",
            "--out",
            out.path().to_str().unwrap(),
        ]);
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        // A host setting a spec changed is back as it was.
        assert_eq!(neigh_thresh(), thresh_before, "{name}");
        let show = || {
            format!(
                "{name}: {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        assert_eq!(o.status.code(), Some(0), "{}", show());
        let (intervals, s) = json_lines(&o);
        assert_eq!(s["verdict"], "PASS", "{}", show());
        nothing_left(s["run_id"].as_str().unwrap());
        if s["schema"] == "wirelab.load-stateful/1" {
            stateful_agrees_with_haproxy(&intervals, &s, &show());
            stateful.push((name.clone(), s.clone()));
            continue;
        }
        // Every frame is in exactly one interval, on both sides (§6.1): of
        // the run, or of each trial of a search.
        let oc = &s["outcome"];
        let dir = PathBuf::from(s["results"].as_str().unwrap());
        let sum = |side: &str, trial: &Value| -> u64 {
            intervals
                .iter()
                .filter(|i| i.get("trial").unwrap_or(&Value::Null) == trial)
                .map(|i| u(&i[side]["packets"]))
                .sum()
        };
        let searched = !s["search"].is_null() || !s["back_to_back"].is_null();
        // Frames the DUT lost over the whole run.
        let mut dut_lost = u(&oc["sent"]) - u(&oc["received"]);
        if !s["back_to_back"].is_null() {
            // RFC 2544 §26.4: per repeat, the burst found passed whole and
            // every longer one of that repeat lost frames.
            let trials: Vec<Value> =
                serde_json::from_slice(&std::fs::read(dir.join("trials.json")).unwrap()).unwrap();
            let found: Vec<u64> = s["back_to_back"]["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(u)
                .collect();
            assert!(!found.is_empty(), "{}", show());
            dut_lost = trials
                .iter()
                .map(|t| u(&t["sent"]) - u(&t["received"]))
                .sum();
            for t in &trials {
                assert_eq!(sum("sent", &t["trial"]), u(&t["sent"]), "{}", show());
                assert_eq!(
                    sum("received", &t["trial"]),
                    u(&t["received"]),
                    "{}",
                    show()
                );
                assert_eq!(u(&t["sent"]), u(&t["burst"]), "the whole burst left: {t}");
                let rep = u(&t["repeat"]) as usize;
                let best = found[rep - 1];
                assert_eq!(
                    t["pass"] == true,
                    u(&t["burst"]) <= best,
                    "{t} against {best}"
                );
            }
        } else if s["search"].is_null() {
            assert_eq!(sum("sent", &Value::Null), u(&oc["sent"]), "{}", show());
            assert_eq!(
                sum("received", &Value::Null),
                u(&oc["received"]),
                "{}",
                show()
            );
        } else {
            let trials: Vec<Value> =
                serde_json::from_slice(&std::fs::read(dir.join("trials.json")).unwrap()).unwrap();
            assert!(trials.len() >= 2, "{}", show());
            for t in &trials {
                assert_eq!(sum("sent", &t["trial"]), u(&t["sent"]), "{}", show());
                assert_eq!(
                    sum("received", &t["trial"]),
                    u(&t["received"]),
                    "{}",
                    show()
                );
                let pass = t["lost"] == 0 && t["tester_short"] == false;
                assert_eq!(t["pass"], pass, "{t}");
            }
            // The rate found passed, and every faster trial failed.
            let found = s["search"]["throughput_pps"].as_f64().unwrap();
            for t in &trials {
                let r = t["requested_pps"].as_f64().unwrap();
                assert_eq!(t["pass"] == true, r <= found, "{t} against {found}");
            }
        }
        assert!(u(&oc["sent"]) > 0, "{}", show());
        let lost = u(&oc["sent"]) - u(&oc["received"]);
        // Every frame that arrived was stamped and is in the run's
        // latency histogram once.
        let in_hist: u64 = oc["latency_buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| u(&b[1]))
            .sum();
        assert_eq!(in_hist, u(&oc["received"]), "{}", show());
        // The pcapng sample: every 1000th sequence number as sent (t0)
        // and as received (t1), readable by tshark; only a search's
        // trials restart the numbers.
        let o = Command::new("tshark")
            .args(["-r", dir.join("sample.pcapng").to_str().unwrap()])
            .args([
                "-T",
                "fields",
                "-e",
                "frame.interface_id",
                "-e",
                "frame.comment",
            ])
            .output()
            .expect("tshark (make deps installs it)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rows = String::from_utf8_lossy(&o.stdout).into_owned();
        let side = |i: &str| {
            rows.lines()
                .filter(|l| l.starts_with(&format!("{i}\t")))
                .count() as u64
        };
        // Several streams: each one's figures add up to the run's, in
        // every interval too, and each ran on a CPU of its own (while the
        // machine has enough).
        let all: Vec<Value> = oc["streams"].as_array().cloned().unwrap_or_default();
        // ARP streams are for the DUT: not measured, not in the totals.
        let spec_json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("spec.json")).unwrap()).unwrap();
        let arp: Vec<bool> = spec_json["streams"]
            .as_array()
            .map(|v| v.iter().map(|st| !st["arp"].is_null()).collect())
            .unwrap_or_default();
        let per: Vec<Value> = all
            .iter()
            .zip(&arp)
            .filter(|(_, &a)| !a)
            .map(|(x, _)| x.clone())
            .collect();
        if !all.is_empty() {
            assert_eq!(all.len(), arp.len(), "{}", show());
            if arp.iter().any(|&a| a) {
                let l = &s["learned"];
                match l.get("limit") {
                    // The router learned every address announced ...
                    None => assert_eq!(u(&l["learned"]), u(&l["announced"]), "{}", show()),
                    // ... or, its table limited, about as many as it
                    // holds (the host's entries idle for 5 s may be
                    // forced out to make room), the kernel refusing the
                    // rest.
                    Some(lim) => {
                        let (n, want) = (u(&l["learned"]), u(&lim["limit"]));
                        assert!(n >= want - want / 10 && n <= want + 4, "{}", show());
                        assert!(u(&lim["refused"]) > 0, "{}", show());
                        assert_eq!(
                            u(&lim["gc_thresh3"]),
                            u(&lim["host_entries_before"]) + want,
                            "{}",
                            show()
                        );
                        // The frames lost are those to the addresses it
                        // could not learn (the stream steps evenly over
                        // all of them): Linux counts them nowhere else.
                        let lost =
                            (u(&oc["sent"]) - u(&oc["received"])) as f64 / u(&oc["sent"]) as f64;
                        let unlearned = 1.0 - n as f64 / u(&l["announced"]) as f64;
                        assert!(
                            (lost - unlearned).abs() < 0.05,
                            "{lost} {unlearned}: {}",
                            show()
                        );
                    }
                }
                assert!(all
                    .iter()
                    .zip(&arp)
                    .all(|(x, &a)| !a || u(&x["received"]) == 0));
            }
            for side in ["sent", "received"] {
                assert_eq!(
                    per.iter().map(|x| u(&x[side])).sum::<u64>(),
                    u(&oc[side]),
                    "{}",
                    show()
                );
                for i in &intervals {
                    let parts: u64 = i["streams"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .zip(&arp)
                        .filter(|(_, &a)| !a)
                        .map(|(x, _)| u(&x[side]["packets"]))
                        .sum();
                    assert_eq!(parts, u(&i[side]["packets"]), "{i}");
                }
            }
            for x in &per {
                assert!(u(&x["received"]) > 0, "{}", show());
            }
            let cpus: std::collections::BTreeSet<u64> = all.iter().map(|x| u(&x["cpu"])).collect();
            let have = std::thread::available_parallelism().map_or(1, |n| n.get());
            assert_eq!(cpus.len(), all.len().min(have), "{}", show());
        }
        if !searched {
            let sent = u(&oc["sent"]);
            let spec_json: Value =
                serde_json::from_slice(&std::fs::read(dir.join("spec.json")).unwrap()).unwrap();
            let every = u(&spec_json["sample_every"]);
            // Each stream numbers its frames from 0.
            let expected = if per.is_empty() {
                (sent - 1) / every + 1
            } else {
                per.iter().map(|x| (u(&x["sent"]) - 1) / every + 1).sum()
            };
            // What the ring had no room for is counted, not lost silently.
            let dropped = u(&oc["samples_dropped"]);
            assert!(side("0") <= expected, "{}", show());
            assert!(side("0") + dropped >= expected, "{}", show());
            if lost == 0 {
                assert_eq!(side("0") + side("1") + dropped, 2 * expected, "{}", show());
            }
            for l in rows.lines().filter(|l| l.starts_with("1\t")) {
                let seq = l.split("seq=").nth(1).unwrap().split(' ').next().unwrap();
                assert!(
                    rows.contains(&format!("0\twirelab load seq={seq} sent")),
                    "{l}"
                );
            }
        }
        // A header stack beyond UDP, as tshark decodes the sample (its
        // own dissectors and checksum checks, not wirelab's): every frame
        // sent and received has the VNI, or the flags and a good TCP
        // checksum.
        let spec_json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("spec.json")).unwrap()).unwrap();
        let st = &spec_json["stream"];
        // The meter tolerates the catch-up asked for, or 64 slots or
        // 200 µs.
        let slots = (64 * u(&s["setup"]["rate"]["interval_ns"])).max(200_000);
        let asked = st["catch_up"].as_str().map_or(0, |c| {
            c.parse::<wirelab_spec::Nanos>()
                .unwrap_or_else(|e| panic!("{c}: {e}"))
                .0
        });
        assert_eq!(
            u(&s["setup"]["catch_up_ns"]),
            slots.max(asked),
            "{}",
            show()
        );
        let decoded = |fields: &[&str]| -> Vec<String> {
            let mut c = Command::new("tshark");
            c.args(["-r", dir.join("sample.pcapng").to_str().unwrap()])
                .args(["-o", "tcp.check_checksum:TRUE", "-T", "fields"]);
            for f in fields {
                c.args(["-e", f]);
            }
            let o = c.output().expect("tshark");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        };
        if let Some(vni) = st["vxlan"]["vni"].as_u64() {
            let rows = decoded(&["vxlan.vni", "udp.dstport"]);
            assert!(!rows.is_empty(), "{}", show());
            // The outer UDP to 4789, and the inner one to the stream's
            // port when the inner frame is UDP (TCP's is checked below).
            let ports = if st["l4"] == "tcp" {
                "4789".to_string()
            } else {
                format!("4789,{}", st["dport"])
            };
            for r in &rows {
                assert_eq!(r, &format!("{vni}\t{ports}"), "{}", show());
            }
        }
        if st["l4"] == "tcp" {
            let rows = decoded(&[
                "frame.number",
                "frame.interface_name",
                "tcp.flags",
                "tcp.checksum.status",
            ]);
            assert!(!rows.is_empty(), "{}", show());
            // PSH and ACK: 0x018; checksum status 1: good. A bad frame is
            // shown whole, with the side that sampled it and the frames
            // beside it (its twin from the other side), to tell the
            // generator's patch from a frame changed on its way.
            for r in &rows {
                if !r.ends_with("\t0x0018\t1") {
                    let n: u64 = r.split('\t').next().unwrap().parse().unwrap();
                    let o = Command::new("tshark")
                        .args(["-r", dir.join("sample.pcapng").to_str().unwrap()])
                        .args(["-o", "tcp.check_checksum:TRUE", "-x", "-V", "-Y"])
                        .arg(format!(
                            "frame.number >= {} && frame.number <= {}",
                            n.saturating_sub(1),
                            n + 1
                        ))
                        .output()
                        .expect("tshark");
                    panic!(
                        "frame {r}:\n{}\n{}",
                        String::from_utf8_lossy(&o.stdout),
                        show()
                    );
                }
            }
        }
        let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
        // Rate, latency CDF and histogram; and the burst pattern when
        // every frame's arrival was kept.
        let shaped = !s["burst_shape"].is_null();
        assert_eq!(
            page.matches("<svg").count(),
            3 + shaped as usize,
            "{}",
            show()
        );
        if shaped {
            // Norma Fig. 11 as asked: a burst every period, within 5%
            // on average (the gaps inside a burst are the generator's
            // batches: see README).
            let b = &s["burst_shape"]["received"];
            let asked = b["requested_period_ns"].as_f64().unwrap();
            let mean = b["periods"]["mean"].as_f64().unwrap();
            assert!((mean - asked).abs() < 0.05 * asked, "{b}");
            assert!(u(&b["gaps"]["count"]) > 0, "{b}");
        }
        assert!(intervals.iter().all(|i| i["lost"].as_i64().unwrap() >= 0));
        // The results folder holds the same intervals, and the DUT's own
        // statistics.
        let kept = std::fs::read_to_string(dir.join("intervals.jsonl")).unwrap();
        assert_eq!(kept.lines().count(), intervals.len(), "{}", show());
        let dut = |f: &str| std::fs::read_to_string(dir.join("dut").join(f)).unwrap();
        assert!(dut("links.txt").contains("d1"), "{}", show());
        match s["setup"]["dut"].as_str().unwrap() {
            "switch" => {
                // The switch's capture is complete and holds every frame
                // the tester counted through it, as tshark reads it.
                let i = &s["switch"]["integrity"];
                assert_eq!(i["valid"], true, "{}", show());
                assert!(u(&i["in_trace"]) >= u(&oc["sent"]), "{}", show());
                let o = Command::new("tshark")
                    .args([
                        "-r",
                        s["switch"]["trace"].as_str().unwrap(),
                        "-T",
                        "fields",
                        "-e",
                        "frame.number",
                    ])
                    .output()
                    .expect("tshark");
                let frames = String::from_utf8_lossy(&o.stdout).lines().count() as u64;
                assert_eq!(frames, u(&i["in_trace"]), "{}", show());
            }
            "nat" => {
                // One connection per source port the editor stepped
                // through (and one for the learning frame), each
                // translated once by the masquerade rule.
                let flows = u(&oc["sent"]).min(1000);
                let ct: u64 = dut("conntrack_count.txt").trim().parse().unwrap();
                assert_eq!(ct, flows + 1, "{}", show());
                let nft = dut("nftables.txt");
                let masq = nft.lines().find(|l| l.contains("masquerade")).unwrap();
                assert!(masq.contains(&format!("packets {flows} ")), "{masq}");
            }
            // (A neighbour table's limit loses frames too; checked above.)
            "router" if dut_lost > 0 && s["learned"].get("limit").is_none() => {
                // What the versions counted lost is what the bottleneck
                // says it dropped, frame for frame (over every trial of a
                // back-to-back search).
                let q = dut("qdiscs.txt");
                let tbf = q
                    .split("qdisc ")
                    .find(|b| b.starts_with("tbf"))
                    .unwrap_or_else(|| panic!("no tbf: {q}"));
                let dropped: u64 = tbf
                    .split("dropped ")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no drop count: {tbf}"));
                assert_eq!(dropped, dut_lost, "{}", show());
            }
            _ => {}
        }
    }
    // Norma Fig. 7's shape: short flows are bound by connection setup,
    // long ones by bandwidth.
    let get = |n: &str| {
        let (_, s) = stateful
            .iter()
            .find(|(name, _)| name.contains(n))
            .unwrap_or_else(|| panic!("no shipped spec of {n}"));
        let o = &s["outcome"];
        (
            o["connections_per_second"].as_f64().unwrap(),
            o["goodput_bps"].as_f64().unwrap(),
        )
    };
    let (short_cps, short_bps) = get("short-flows");
    let (long_cps, long_bps) = get("long-flows");
    assert!(
        short_cps > 10.0 * long_cps,
        "{short_cps} vs {long_cps} connections/s"
    );
    assert!(
        long_bps > 10.0 * short_bps,
        "{long_bps} vs {short_bps} bit/s"
    );
}

/// A stateful test through haproxy: every exchange it started ended (the
/// drain), the intervals add up to the run, and what the EFSMs counted is
/// what haproxy counted, request for request; haproxy is gone.
fn stateful_agrees_with_haproxy(intervals: &[Value], s: &Value, show: &str) {
    let o = &s["outcome"];
    let total: u64 = intervals.iter().map(|i| u(&i["connections"])).sum();
    assert_eq!(total, u(&o["connections"]), "{show}");
    assert!(u(&o["transactions"]) > 0, "{show}");
    assert_eq!(o["drained"], true, "{show}");
    assert_eq!(u(&o["resets"]), 0, "{show}");
    for side in ["clients", "servers"] {
        if o[side].is_null() {
            // Real servers (nginx): no EFSM of ours on that side.
            let dir = PathBuf::from(s["results"].as_str().unwrap());
            let conf = std::fs::read_to_string(dir.join("servers/nginx.conf")).unwrap();
            assert!(conf.contains("listen 198.18.2.2:8083"), "{conf}");
            continue;
        }
        assert_eq!(u(&o[side]["active_at_end"]), 0, "{show}");
        assert_eq!(u(&o[side]["unmatched"]), 0, "{show}");
        assert_eq!(u(&o[side]["table_full"]), 0, "{show}");
    }
    // The client's transitions.
    let t = |side: &str, name: &str| -> u64 {
        o[side]["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x[0] == name)
            .map(|x| u(&x[1]))
            .sum()
    };
    let opened = t("clients", "syn-sent -> requested (data)");
    let next = t("clients", "requested -> requested (next-message)");
    let h = &o["haproxy"];
    // haproxy's sessions are the clients' connections; its requests, and
    // its backend's sessions and 2xx, the clients' requests (the first on
    // each connection, then each next one kept alive).
    assert_eq!(u(&h["frontend_sessions"]), opened, "{show}");
    assert_eq!(u(&h["efsm_requests_sent"]), opened + next, "{show}");
    assert_eq!(
        u(&h["frontend_requests"]),
        u(&h["efsm_requests_sent"]),
        "{show}"
    );
    assert_eq!(
        u(&h["backend_sessions"]),
        u(&h["efsm_transactions"]),
        "{show}"
    );
    assert_eq!(u(&h["backend_2xx"]), u(&h["efsm_transactions"]), "{show}");
    assert_eq!(u(&h["efsm_transactions"]), u(&o["transactions"]), "{show}");
    assert_eq!(
        u(&o["transactions"]),
        opened + next,
        "every request answered whole: {show}"
    );
    // Every connection closed once: by the server (its FIN first), or by
    // the client after its last response arrived whole (as wrk closes).
    let by_server = t("clients", "requested -> closing (fin)");
    let by_us = t("clients", "requested -> fin-wait (fin)");
    assert_eq!(by_server + by_us, opened, "{show}");
    // A close crossing the server's ends cleanly: no packet of an ended
    // connection arrives to be reset.
    assert_eq!(t("clients", "syn-sent -> syn-sent (rst)"), 0, "{show}");
    let per = u(&s["requests_per_connection"]);
    if per == 1 {
        assert_eq!(next, 0, "one request each: {show}");
    } else {
        // Each connection the client closed sent all its requests, but
        // for those the drain cut short (at most one per slot).
        let cut = u(&s["connections_kept"]);
        assert!(
            next >= (per - 1) * by_us.saturating_sub(cut),
            "{next} next requests for {by_us} closes of {per} requests: {show}"
        );
        assert!(next > 0, "{show}");
    }
    let dir = PathBuf::from(s["results"].as_str().unwrap());
    let cfg = std::fs::read_to_string(dir.join("dut/haproxy.cfg")).unwrap();
    assert!(cfg.contains("server s3 198.18.2.2:8083"), "{cfg}");
    assert!(std::fs::read_to_string(dir.join("dut/haproxy-stats.csv"))
        .unwrap()
        .contains("FRONTEND"));
    let id = s["run_id"].as_str().unwrap();
    let o = Command::new("pgrep")
        .args(["-f", &format!("dut-{id}/haproxy.cfg")])
        .output()
        .unwrap();
    assert!(
        o.stdout.is_empty(),
        "haproxy left running: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// A load test of `kind` for `secs`, with extra `expect:` lines.
fn spec_text(kind: &str, duration: &str, expect: &str) -> String {
    format!(
        "dut: {{kind: {kind}}}\nduration: {duration}\ninterval: 250ms\nstream:\n  size: 64\n  pps: 20000\nexpect:\n{expect}"
    )
}

#[test]
fn a_claim_that_does_not_hold_exits_1_and_says_which() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("too-fast.yaml");
    std::fs::write(
        &spec,
        spec_text(
            "bridge",
            "1s",
            "  - {metric: lost, at_most: 0}\n  - {metric: latency_max, at_most: 1ns}\n",
        ),
    )
    .unwrap();
    let o = wirelab(&[
        "load",
        spec.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL latency_max at most 1ns"), "{text}");
    assert!(text.contains("ok   lost at most 0"), "{text}");
    // One line per interval, as iperf3 -i prints them.
    assert!(
        text.lines().filter(|l| l.contains(" s  ")).count() >= 3,
        "{text}"
    );
    let folder = text
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap();
    let s: Value =
        serde_json::from_slice(&std::fs::read(Path::new(folder).join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["verdict"], "FAIL");
    nothing_left(s["run_id"].as_str().unwrap());
}

#[test]
fn bad_input_exits_2_names_the_field_and_line_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    for (text, field, line) in [
        (
            spec_text("router", "1s", "").replace("pps: 20000", "pps: 20000000"),
            "stream.pps",
            6,
        ),
        (
            spec_text("router", "1s", "").replace("size: 64", "size: 9000"),
            "stream.size",
            5,
        ),
        (
            spec_text("router", "1s", "  - {metric: latency_p99, at_most: 5}\n"),
            "expect[0].at_most",
            8,
        ),
    ] {
        let spec = dir.path().join("bad.yaml");
        std::fs::write(&spec, &text).unwrap();
        for cmd in ["load", "check"] {
            let mut args = vec![cmd, spec.to_str().unwrap()];
            if cmd == "load" {
                args.extend(["--out", out.to_str().unwrap()]);
            }
            let o = wirelab(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
            assert!(
                err.contains(field) && err.contains(&format!("(line {line})")),
                "{cmd}: {err}"
            );
        }
        assert!(!out.exists(), "a results folder for bad input");
    }
}

/// A 60 s stream through a router, written in `dir`, and where its
/// results go: long enough to be stopped on purpose.
fn long_run(dir: &Path) -> (PathBuf, PathBuf) {
    let spec = dir.join("long.yaml");
    std::fs::write(
        &spec,
        spec_text("router", "60s", "  - {metric: lost, at_most: 0}\n"),
    )
    .unwrap();
    (spec, dir.join("results"))
}

#[test]
fn ctrl_c_stops_a_load_test_with_130_keeping_what_it_measured() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (spec, out) = long_run(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args([
            "load",
            spec.to_str().unwrap(),
            "--json",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed if the test fails before it ends by itself.
    struct Kill(Option<std::process::Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let pid = child.id() as i32;
    let watched = Kill(Some(child));
    // Until the first intervals are measured.
    let t0 = Instant::now();
    let jsonl = || -> Option<PathBuf> {
        let d = std::fs::read_dir(&out).ok()?.next()?.ok()?.path();
        Some(d.join("intervals.jsonl"))
    };
    while jsonl()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map_or(true, |t| t.lines().count() < 2)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no interval measured"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut watched = watched;
    child = watched.0.take().unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        asked.elapsed()
    );
    let (intervals, s) = json_lines(&o);
    assert_eq!(s["verdict"], "INTERRUPTED");
    assert!(intervals.len() >= 2);
    let kept = std::fs::read_to_string(jsonl().unwrap()).unwrap();
    assert_eq!(kept.lines().count(), intervals.len());
    nothing_left(s["run_id"].as_str().unwrap());
}

#[test]
fn a_reader_that_goes_away_ends_the_run_and_leaves_nothing() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (spec, out) = long_run(dir.path());
    // As `wirelab load long.yaml | head -4`: the reader takes the first
    // interval's line and leaves while the stream runs. The next report
    // cannot be written; before, the run then waited for ever on a
    // generator spinning a core.
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args([
            "load",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Vec<String> = (0..4).map(|_| lines.next().unwrap().unwrap()).collect();
        assert!(first[0].starts_with("long:"), "{first:?}");
        assert!(first[3].contains(" s "), "an interval: {first:?}");
    }
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running 20 s after its reader left");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status}");
    let run = std::fs::read_dir(&out)
        .unwrap()
        .next()
        .expect("the run's folder")
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    nothing_left(run.rsplit('-').next().unwrap());
}

/// Norma §8's ARP learning, with the router's one switch: ARP replies
/// nobody asked for teach a Linux router its neighbours only with
/// `arp_accept` on. The measured stream goes to the receiver itself, so
/// nothing makes the router ask for the announced addresses (an address
/// it asks for it learns from any reply, `arp_accept` or not: the
/// shipped spec, whose stream goes to them).
#[test]
fn arp_replies_teach_a_router_its_neighbours_only_with_arp_accept() {
    if !root("wirelab load") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    for accept in [true, false] {
        let spec = dir.path().join(format!("arp-{accept}.yaml"));
        std::fs::write(
            &spec,
            format!(
                "dut: {{kind: router, arp_accept: {accept}}}
duration: 1s
interval: 250ms
streams:
  - {{arp: {{from: 198.18.2.100, count: 32}}, port: rx, size: 64, pps: 4000}}
  - {{size: 64, pps: 5000}}
"
            ),
        )
        .unwrap();
        let o = wirelab(&[
            "load",
            spec.to_str().unwrap(),
            "--json",
            "--out",
            dir.path().to_str().unwrap(),
        ]);
        let show = format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(0), "{show}");
        let (intervals, s) = json_lines(&o);
        nothing_left(s["run_id"].as_str().unwrap());
        let l = &s["learned"];
        assert_eq!(u(&l["announced"]), 32, "{show}");
        let want = if accept { 32 } else { 0 };
        assert_eq!(u(&l["learned"]), want, "arp_accept {accept}: {show}");
        // The ARP stream was sent and left out of the totals; the UDP
        // stream arrived whole.
        let per = s["outcome"]["streams"].as_array().unwrap();
        assert!(u(&per[0]["sent"]) > 3000, "{show}");
        assert_eq!(u(&per[0]["received"]), 0, "{show}");
        assert_eq!(u(&s["outcome"]["sent"]), u(&per[1]["sent"]), "{show}");
        assert_eq!(
            u(&s["outcome"]["received"]),
            u(&s["outcome"]["sent"]),
            "{show}"
        );
        // The router's table as the results folder keeps it.
        let dirp = PathBuf::from(s["results"].as_str().unwrap());
        let neigh = std::fs::read_to_string(dirp.join("dut/neighbours.txt")).unwrap();
        assert_eq!(
            neigh.contains("198.18.2.100 dev d1 lladdr"),
            accept,
            "{neigh}"
        );
        assert!(!intervals.is_empty());
    }
}
