//! Captures made by the tools users capture with, of a real transfer, read
//! by `wirelab analyze` as a user would run it (issue 19, item 4).
//!
//! Two namespaces joined by a veth; iperf3 sends 4 MB with CUBIC while
//! nftables drops every 40th data packet at the receiver, so Linux recovers
//! losses the way it does on any network. tcpdump (snap lengths 96 and 128,
//! full, `-i any`, nanosecond timestamps) and dumpcap (pcapng) capture it,
//! with offloads off (wire-sized frames) and on (the Linux default:
//! super-packets, and captures that drop under load). editcap and mergecap
//! then make the rest: format conversions, a clock step, a deleted segment.
//!
//! On every file: the packets read are capinfos' count, retransmissions
//! agree with tshark's flags (differences only those `tshark.rs` explains),
//! and Linux's normal behaviour yields no violation (exit 0).
//!
//! Needs root (namespaces, nftables); without it each test says so and
//! skips. Each test owns uniquely named namespaces, registered so that
//! `wirelab clean` removes them should the test be killed, and removed on
//! drop otherwise; every process is bounded in time by `timeout`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[path = "common/host_tools.rs"]
mod host_tools;
use host_tools::{root, tool, wait_for, Procs};

#[path = "../../analyze/tests/common/tshark.rs"]
mod tshark;

/// Every capture process stops by itself after this long.
const BOUND_S: &str = "60";

/// The test's scratch folder, kept (and named) when the test fails, so the
/// captures that failed can be looked at.
struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    fn new() -> Scratch {
        Scratch(Some(tempfile::tempdir().unwrap()))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().expect("present until drop").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(d) = self.0.take() {
                eprintln!("captures kept in {}", d.keep().display());
            }
        }
    }
}

/// A capture file and what made it.
struct Capture {
    what: String,
    path: PathBuf,
}

/// Runs the transfer between two fresh namespaces with offloads `on` or
/// off, capturing it with every tool form; returns the files.
fn transfer(tag: &str, offloads: bool, dir: &Path) -> Vec<Capture> {
    let id = format!("captures-{}-{tag}", std::process::id());
    let (a, b) = (
        format!("wl-cap{}{tag}a", std::process::id()),
        format!("wl-cap{}{tag}b", std::process::id()),
    );
    let ns = wirelab_netns::Namespaces::new(&id, &[a.clone(), b.clone()]).unwrap();
    let ip = |args: &[&str]| tool("ip", args);
    ip(&[
        "link", "add", "name", "va", "netns", &a, "type", "veth", "peer", "name", "vb", "netns", &b,
    ]);
    ip(&["-n", &a, "addr", "add", "10.77.0.1/24", "dev", "va"]);
    ip(&["-n", &b, "addr", "add", "10.77.0.2/24", "dev", "vb"]);
    for (n, dev) in [(&a, "va"), (&b, "vb")] {
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&["-n", n, "link", "set", dev, "up"]);
        let onoff = if offloads { "on" } else { "off" };
        tool(
            "ip",
            &[
                "netns", "exec", n, "ethtool", "-K", dev, "tso", onoff, "gso", onoff, "gro", onoff,
            ],
        );
    }
    // Every 40th data packet (by length: not the handshake or ACKs) dropped
    // on arrival, after the receiver's capture point and before TCP.
    let rules = "table inet lossy {\n chain inbound {\n  type filter hook input priority 0;\n  \
                 tcp dport 5201 meta length > 200 numgen inc mod 40 == 0 drop\n }\n}\n";
    std::fs::write(dir.join("lossy.nft"), rules).unwrap();
    tool(
        "ip",
        &[
            "netns",
            "exec",
            &b,
            "nft",
            "-f",
            dir.join("lossy.nft").to_str().unwrap(),
        ],
    );

    let mut procs = Procs::default();
    let mut caps = Vec::new();
    let spawn = |procs: &mut Procs, n: &str, name: &str, cmd: &[&str]| -> PathBuf {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new("ip")
            .args(["netns", "exec", n, "timeout", "-s", "INT", BOUND_S])
            .args(cmd)
            .stdout(std::fs::File::create(dir.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        procs.0.push(child);
        log
    };
    let forms: [(&str, &str, &[&str]); 5] = [
        ("s96.pcap", "tcpdump -s 96", &["-i", "va", "-s", "96"]),
        ("s128.pcap", "tcpdump -s 128", &["-i", "va", "-s", "128"]),
        ("full.pcap", "tcpdump", &["-i", "va"]),
        ("any.pcap", "tcpdump -i any (SLL2)", &["-i", "any"]),
        (
            "nano.pcap",
            "tcpdump --time-stamp-precision=nano",
            &["-i", "va", "--time-stamp-precision=nano"],
        ),
    ];
    for (file, what, args) in forms {
        let path = dir.join(file);
        let mut cmd = vec!["tcpdump", "-n", "-w", path.to_str().unwrap()];
        cmd.extend_from_slice(args);
        let log = spawn(&mut procs, &a, file, &cmd);
        wait_for(&log, "listening on");
        caps.push(Capture {
            what: what.to_string(),
            path,
        });
    }
    // The receiver's side, in pcapng.
    let path = dir.join("dumpcap.pcapng");
    let log = spawn(
        &mut procs,
        &b,
        "dumpcap",
        &["dumpcap", "-q", "-i", "vb", "-w", path.to_str().unwrap()],
    );
    wait_for(&log, "Capturing on");
    caps.push(Capture {
        what: "dumpcap (pcapng, receiver side)".into(),
        path,
    });

    let server = spawn(
        &mut procs,
        &b,
        "iperf3-server",
        &["iperf3", "-s", "-1", "-B", "10.77.0.2", "--forceflush"],
    );
    wait_for(&server.with_extension("out"), "Server listening");
    tool(
        "ip",
        &[
            "netns",
            "exec",
            &a,
            "timeout",
            BOUND_S,
            "iperf3",
            "-c",
            "10.77.0.2",
            "-n",
            "4M",
            "-C",
            "cubic",
            "--connect-timeout",
            "5000",
        ],
    );
    // tcpdump hands packets over in blocks, flushed at the latest after
    // its 1 s buffer timeout: stopping sooner would lose the last ones.
    std::thread::sleep(Duration::from_millis(1500));
    for c in &procs.0 {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
    }
    for c in &mut procs.0 {
        let _ = c.wait();
    }
    drop(procs);
    drop(ns);
    caps
}

/// `capinfos`' packet count.
fn capinfos(path: &Path) -> u64 {
    let o = tool("capinfos", &["-c", "-M", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .find_map(|l| l.split("Number of packets:").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("capinfos said {text}"))
}

/// `wirelab analyze --json`: exit code and report.
fn analyze(path: &Path) -> (i32, Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(["analyze", "--json", path.to_str().unwrap()])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: no JSON ({e}): {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), report)
}

/// The per-file checks every capture must pass; returns the report.
fn healthy(c: &Capture, agreement: &mut tshark::Agreement) -> Value {
    let (code, r) = analyze(&c.path);
    let findings: Vec<&Value> = r["analyzers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["violations"].as_u64() != Some(0))
        .collect();
    assert!(
        code == 0 && findings.is_empty(),
        "{}: exit {code}, violations on healthy Linux TCP: {findings:#?}\n{}",
        c.what,
        around_first_violation(&c.path, &findings)
    );
    assert_eq!(
        r["packets"].as_u64().unwrap(),
        capinfos(&c.path),
        "{}: packets read against capinfos",
        c.what
    );
    let opts = wirelab_analyze::Options::for_hosts(std::iter::empty(), None);
    tshark::compare(&c.path, opts, agreement).expect("tshark (make deps installs it)");
    r
}

/// The frames before and just after the first violation's evidence, as
/// tshark decodes them: a CI machine keeps no capture, so the failure
/// message carries what is needed to tell the analyzer's error from the
/// stack's.
fn around_first_violation(path: &Path, analyzers: &[&Value]) -> String {
    let Some(frame) = analyzers
        .iter()
        .flat_map(|a| a["findings"].as_array().into_iter().flatten())
        .filter(|f| f["kind"] == "violation")
        .flat_map(|f| f["evidence"].as_array().into_iter().flatten())
        .filter_map(|e| e["frame"].as_u64())
        .max()
    else {
        return String::new();
    };
    let filter = format!(
        "frame.number >= {} && frame.number <= {}",
        frame.saturating_sub(30),
        frame + 5
    );
    let o = Command::new("tshark")
        .args(["-r", path.to_str().unwrap(), "-Y", &filter, "-T", "fields"])
        .args([
            "-e",
            "frame.number",
            "-e",
            "frame.time_relative",
            "-e",
            "ip.src",
            "-e",
            "ip.id",
            "-e",
            "tcp.seq",
            "-e",
            "tcp.nxtseq",
            "-e",
            "tcp.ack",
            "-e",
            "tcp.options.sack_le",
            "-e",
            "tcp.options.sack_re",
        ])
        .output();
    match o {
        Ok(o) => format!(
            "frames around it (number, time, source, IP-ID, seq, next seq, ack, SACK left, SACK right):\n{}",
            String::from_utf8_lossy(&o.stdout)
        ),
        Err(e) => format!("(tshark: {e})"),
    }
}

fn connections(r: &Value) -> &Vec<Value> {
    r["connections"].as_array().unwrap()
}

/// The data connection: the one that carried the 4 MB (iperf3 also opens
/// a control connection).
fn bulk(r: &Value) -> &Value {
    connections(r)
        .iter()
        .max_by_key(|c| c["data_packets"].as_u64())
        .expect("a connection")
}

#[test]
fn captures_with_offloads_off_read_whole_and_pass() {
    if !root("capturing a real transfer (network namespaces)") {
        return;
    }
    let dir = Scratch::new();
    let caps = transfer("off", false, dir.path());
    let mut agreement = tshark::Agreement::default();
    for c in &caps {
        let r = healthy(c, &mut agreement);
        let b = bulk(&r);
        assert!(
            b["retransmissions"].as_array().unwrap().len() >= 20,
            "{}: the drops were recovered by retransmissions: {}",
            c.what,
            b["retransmissions"]
        );
        assert_eq!(b["super_packets"], 0, "{}: offloads were off", c.what);
    }

    // editcap conversions: pcapng to microsecond pcap, pcap to pcapng.
    // libpcap 1.10's `-i any` writes Linux cooked v2 (SLL2) headers.
    let any = tool(
        "capinfos",
        &["-E", dir.path().join("any.pcap").to_str().unwrap()],
    );
    assert!(
        String::from_utf8_lossy(&any.stdout).contains("Linux cooked-mode capture v2"),
        "{}",
        String::from_utf8_lossy(&any.stdout)
    );
    let full = dir.path().join("full.pcap");
    let dump = dir.path().join("dumpcap.pcapng");
    let mut made = Vec::new();
    for (from, format, name) in [
        (&dump, "pcap", "dumpcap-as.pcap"),
        (&full, "pcapng", "full-as.pcapng"),
        (&full, "nsecpcap", "full-as-nsec.pcap"),
    ] {
        let to = dir.path().join(name);
        tool(
            "editcap",
            &["-F", format, from.to_str().unwrap(), to.to_str().unwrap()],
        );
        made.push(Capture {
            what: format!("editcap -F {format}"),
            path: to,
        });
    }

    // A clock step: the second half of the capture stepped back 500 us
    // (as an NTP step or two files merged end to end do), split where two
    // frames are less than 100 us apart, so the step is clearly backwards.
    let trace = wirelab_trace::read(&full).unwrap();
    let n = trace.packets.len();
    let half = (n / 2..n - 1)
        .find(|&i| trace.packets[i + 1].ts_ns - trace.packets[i].ts_ns < 100_000)
        .expect("two close frames");
    let step_back = 500_000 - (trace.packets[half + 1].ts_ns - trace.packets[half].ts_ns);
    let head = dir.path().join("head.pcap");
    let tail = dir.path().join("tail.pcap");
    let stepped = dir.path().join("tail-stepped.pcap");
    let merged = dir.path().join("merged-with-clock-step.pcap");
    let p = |x: &PathBuf| x.to_str().unwrap().to_string();
    // editcap numbers frames from 1: frames 1..=half+1 are packets[..=half].
    tool(
        "editcap",
        &["-r", &p(&full), &p(&head), &format!("1-{}", half + 1)],
    );
    tool(
        "editcap",
        &["-r", &p(&full), &p(&tail), &format!("{}-{n}", half + 2)],
    );
    tool("editcap", &["-t", "-0.0005", &p(&tail), &p(&stepped)]);
    tool(
        "mergecap",
        &["-a", "-w", &p(&merged), &p(&head), &p(&stepped)],
    );

    for c in &made {
        healthy(c, &mut agreement);
    }
    let r = healthy(
        &Capture {
            what: "mergecap -a with a 500us clock step".into(),
            path: merged.clone(),
        },
        &mut agreement,
    );
    let back = &r["clock_back"];
    // The largest step back is this one (those of several CPUs are a few
    // microseconds), at the frame where the second file starts.
    assert!(
        back["max_ns"].as_u64() == Some(step_back),
        "the step of {step_back}ns at frame {} is reported: {back}",
        half + 2
    );

    // One data segment deleted, as when a capture drops it: the ACKs prove
    // the receiver had it, so it is a capture gap, not a violation.
    let opts = wirelab_analyze::Options::for_hosts(std::iter::empty(), None);
    let a = wirelab_analyze::analyze_keeping_segs(&trace, opts);
    let conn = a
        .connections
        .iter()
        .max_by_key(|c| c.segs.len())
        .expect("a connection");
    // A first transmission from the middle, sent once only.
    let seg = conn
        .segs
        .iter()
        .skip(conn.segs.len() / 2)
        .find(|s| {
            s.data
                && s.first
                && s.tcp.payload_len > 0
                && conn
                    .segs
                    .iter()
                    .filter(|o| o.data && o.tcp.seq == s.tcp.seq)
                    .count()
                    == 1
        })
        .expect("a segment sent once");
    let frame = s_frame(&trace, seg.at.frame);
    let deleted = dir.path().join("one-segment-deleted.pcap");
    tool("editcap", &[&p(&full), &p(&deleted), &frame.to_string()]);
    let r = healthy(
        &Capture {
            what: format!("editcap deleting frame {frame}"),
            path: deleted,
        },
        &mut agreement,
    );
    let isn = bulk(&r)["isn"].as_u64().unwrap();
    let rel = u64::from(seg.tcp.seq.wrapping_sub(isn as u32));
    let gaps = bulk(&r)["capture_gaps"].as_array().unwrap().clone();
    assert!(
        gaps.iter().any(|g| g["from"].as_u64() <= Some(rel)
            && g["to"].as_u64() >= Some(rel + u64::from(seg.tcp.payload_len))),
        "the deleted segment (relative seq {rel}, frame {frame}) is named as a capture gap: {gaps:?}"
    );

    eprintln!("tshark agreement: {agreement}");
    // Every difference is one `tshark.rs` explains (`compare` panics on any
    // other). With a loss every 40 packets, retransmissions are 1 in 20 of
    // the data direction, and tshark calls most of them out-of-order
    // (its 3ms heuristic), so the share is lower than on the goldens.
    assert!(agreement.total > 20_000, "{agreement:?}");
    assert!(agreement.share() >= 0.97, "{agreement:?}");
}

/// The file's frame number of the model's evidence frame.
fn s_frame(trace: &wirelab_trace::Trace, at: u64) -> u64 {
    trace.packets[at as usize - 1].frame
}

#[test]
fn captures_with_offloads_on_name_the_super_packets_and_pass() {
    if !root("capturing a real transfer (network namespaces)") {
        return;
    }
    let dir = Scratch::new();
    let caps = transfer("on", true, dir.path());
    let mut agreement = tshark::Agreement::default();
    for c in &caps {
        let r = healthy(c, &mut agreement);
        assert!(
            bulk(&r)["super_packets"].as_u64().unwrap() > 0,
            "{}: offloads were on, so super-packets are seen and named",
            c.what
        );
    }
    eprintln!("tshark agreement: {agreement}");
    // Every difference is explained (`compare` panics otherwise). How many
    // there are is left to chance: a lost super-packet is resent in many
    // wire-sized pieces, each a RACK retransmission tshark calls a plain
    // one, and the packets are few (87-99.6% agreement over 9 runs here).
    assert!(agreement.total > 500, "{agreement:?}");
}
