//! `wirelab bench record`: DETER's overheads (seed 004 §5.1-5.2) measured
//! on this machine, on a transfer with drops:
//!
//! - bytes recorded per packet, against tcpdump's headers-only capture
//!   (`-s 96`) of the same traffic at the same hosts, raw and compressed
//!   with zstd -19 (DETER's goal: 2.1-3.1% of the compressed pcap);
//! - the recorder programs' kernel time (BPF run-time statistics) against
//!   all the CPU time the machine spent during the transfer (/proc/stat),
//!   as DETER put its extra CPU time against the stack's own
//!   (0.094-1.49%).
//!
//! Hosts A and B on either side of a router R whose nftables rule drops
//! every 40th data packet; iperf3 sends `megabytes` from A to B with CUBIC,
//! three times a round (`round`), `rounds` rounds. Medians are printed,
//! with every round's figures.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

/// Every process stops by itself after this long.
const BOUND_S: &str = "120";

/// Runs `prog` to completion: its stdout, or an error with its stderr
/// (the benches that drive users' tools share it).
pub fn sh(prog: &str, args: &[&str]) -> Result<String> {
    let o = Command::new(prog)
        .args(args)
        .output()
        .with_context(|| format!("{prog} (make deps installs it)"))?;
    ensure!(
        o.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

type Path3 = wirelab_netns::Routed;

/// A, R, B (10.79.0.0/16) with the lossy rule in R; removed on drop.
fn path3(dir: &Path) -> Result<Path3> {
    let p = Path3::new(&format!("brec{}", std::process::id()), 79)?;
    let r = &p.r;
    let rules =
        "table inet lossy {\n chain forwarded {\n  type filter hook forward priority 0;\n  \
                 tcp dport 5201 meta length > 200 numgen inc mod 40 == 0 drop\n }\n}\n";
    let f = dir.join("lossy.nft");
    std::fs::write(&f, rules)?;
    sh(
        "ip",
        &[
            "netns",
            "exec",
            r,
            "nft",
            "-f",
            f.to_str().context("a UTF-8 path")?,
        ],
    )?;
    Ok(p)
}

/// The machine's CPU time so far (ns): /proc/stat's first line, every
/// state but idle and iowait, in USER_HZ ticks.
fn cpu_busy_ns() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat is empty")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    ensure!(f.len() >= 7, "/proc/stat: {line}");
    let busy = f[0] + f[1] + f[2] + f[5] + f[6];
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) } as u64;
    Ok(busy * 1_000_000_000 / hz.max(1))
}

/// This process's CPU time so far (ns, user and system): the recorder's
/// user space (draining the ring, assembling and writing the records),
/// and the bench's own thread driving iperf3 (measured apart, without the
/// recorder, and taken off); iperf3 is other processes.
fn own_cpu_ns() -> Result<u64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF)?;
    let ns =
        |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1_000;
    Ok(ns(u.user_time()) + ns(u.system_time()))
}

/// iperf3 from A to B, `mb` megabytes over `parallel` connections.
fn transfer(p: &Path3, mb: u32, parallel: u32, dir: &Path) -> Result<()> {
    let log = dir.join("iperf3-server.log");
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &p.b,
            "timeout",
            BOUND_S,
            "iperf3",
            "-s",
            "-1",
            "-B",
            &p.b_addr,
            "--forceflush",
        ])
        .stdout(std::fs::File::create(&log)?)
        .stderr(Stdio::null())
        .spawn()?;
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&log)?.contains("Server listening") {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = server.kill();
            bail!("iperf3's server did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = format!("{mb}M");
    let streams = parallel.max(1).to_string();
    let r = sh(
        "ip",
        &[
            "netns", "exec", &p.a, "timeout", BOUND_S, "iperf3", "-c", &p.b_addr, "-n", &n, "-C",
            "cubic", "-P", &streams,
        ],
    );
    let _ = server.wait();
    r.map(|_| ())
}

struct Round {
    packets: u64,
    records: u64,
    pcap: u64,
    pcap_zstd: u64,
    kernel_ns: u64,
    runs: u64,
    cpu_ns: u64,
    cpu_base_ns: u64,
    /// The recorder's user space, from its programs loaded to its last
    /// record written (`own_cpu_ns`).
    user_ns: u64,
    /// Events missing from the two recorded transfers' records (the
    /// ring full, a connection not followed, a probe not run again on a
    /// CPU where it was running: `HostRecorder::stop`).
    lost: u64,
    /// (program, runs, kernel ns) during the recorded-alone transfer.
    by_program: Vec<(&'static str, u64, u64)>,
}

fn recorder(p: &Path3, out: std::path::PathBuf) -> Result<wirelab_lab::record::HostRecorder> {
    let opts = wirelab_lab::record::RecordOptions {
        out,
        th_ns: wirelab_deter::sample::DEFAULT_TH_NS,
        idle_ns: 2_000_000_000,
    };
    Ok(wirelab_lab::record::HostRecorder::start(
        &[p.a.clone(), p.b.clone()],
        opts,
    )?)
}

/// Runs `f` (a transfer) on a thread of its own while the recorder is
/// read every 100 ms, as `wirelab record` and a run do: its ring holds
/// about 14,500 events between two reads, and a 64 MB transfer makes
/// twice that (earlier benches read it only at the end, and measured
/// records that had lost events).
fn polled(
    rec: &mut wirelab_lab::record::HostRecorder,
    f: impl FnOnce() -> Result<()> + Send,
) -> Result<()> {
    std::thread::scope(|s| {
        let h = s.spawn(f);
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            rec.poll(wirelab_lab::record::monotonic_ns())?;
        }
        h.join()
            .map_err(|_| anyhow::anyhow!("the transfer's thread panicked"))?
    })
}

/// tcpdump -s 96 on A's and B's interfaces until `f` returns; the files'
/// sizes raw and compressed with zstd -19, and their packets.
fn captured(p: &Path3, dir: &Path, f: impl FnOnce() -> Result<()>) -> Result<(u64, u64, u64)> {
    let mut dumps = Vec::new();
    for (ns, dev) in [(&p.a, "va"), (&p.b, "vb")] {
        let file = dir.join(format!("{dev}.pcap"));
        let log = dir.join(format!("{dev}.log"));
        let c = Command::new("ip")
            .args([
                "netns", "exec", ns, "timeout", "-s", "INT", BOUND_S, "tcpdump", "-n", "-s", "96",
                "-i", dev, "-w",
            ])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        dumps.push((c, file));
        let t0 = std::time::Instant::now();
        while !std::fs::read_to_string(&log)?.contains("listening on") {
            ensure!(
                t0.elapsed() < Duration::from_secs(10),
                "tcpdump did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let done = f();
    // tcpdump writes in blocks, flushed at the latest after 1 s.
    std::thread::sleep(Duration::from_millis(1500));
    let (mut raw, mut zst, mut packets) = (0, 0, 0);
    for (mut c, file) in dumps {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let _ = c.wait();
        if done.is_ok() {
            let bytes = std::fs::read(&file)?;
            raw += bytes.len() as u64;
            zst += zstd::encode_all(&bytes[..], 19)?.len() as u64;
            packets += wirelab_trace::read(&file)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .packets
                .len() as u64;
        }
    }
    done.map(|()| (raw, zst, packets))
}

/// Three transfers on one path: recorded and captured (the bytes),
/// recorded alone (the recorder's share of the CPU time), and neither
/// (the CPU time's baseline). tcpdump would add its own CPU time, so the
/// CPU is measured without it.
fn round(mb: u32, parallel: u32, abort: &AtomicBool) -> Result<Round> {
    let mut dir = tempfile::Builder::new()
        .prefix("wirelab-bench-record")
        .tempdir()?;
    // WIRELAB_BENCH_KEEP=1 keeps the round's records and captures.
    if std::env::var_os("WIRELAB_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
    let p = path3(dir.path())?;
    let mut rec = recorder(&p, dir.path().join("rec"))?;
    let (pcap, pcap_zstd, packets) = captured(&p, dir.path(), || {
        polled(&mut rec, || transfer(&p, mb, parallel, dir.path()))
    })?;
    let (_, records, lost) = rec.stop()?;
    ensure!(!abort.load(Ordering::SeqCst), "interrupted");

    let mut rec = recorder(&p, dir.path().join("rec2"))?;
    // After the programs are loaded (the verifier's time is once per
    // recorder, not per packet).
    let own0 = own_cpu_ns()?;
    let cpu0 = cpu_busy_ns()?;
    let by0 = rec.kernel_time();
    polled(&mut rec, || transfer(&p, mb, parallel, dir.path()))?;
    let by1 = rec.kernel_time();
    let by_program: Vec<(&'static str, u64, u64)> = by1
        .iter()
        .map(|&(n, r, t)| {
            let (r0, t0) = by0.iter().find(|p| p.0 == n).map_or((0, 0), |p| (p.1, p.2));
            (n, r - r0, t - t0)
        })
        .collect();
    let runs: u64 = by_program.iter().map(|p| p.1).sum();
    let kernel_ns: u64 = by_program.iter().map(|p| p.2).sum();
    let cpu1 = cpu_busy_ns()?;
    // Every record written (all idle an hour from now), then counted: the
    // programs' unloading in `stop` is once per recorder, like the load.
    rec.poll(wirelab_lab::record::monotonic_ns() + 3_600_000_000_000)?;
    let user_ns = own_cpu_ns()?.saturating_sub(own0);
    let (_, _, lost2) = rec.stop()?;
    ensure!(!abort.load(Ordering::SeqCst), "interrupted");

    let base0 = cpu_busy_ns()?;
    let own_base0 = own_cpu_ns()?;
    transfer(&p, mb, parallel, dir.path())?;
    let own_base = own_cpu_ns()?.saturating_sub(own_base0);
    let base1 = cpu_busy_ns()?;
    ensure!(!abort.load(Ordering::SeqCst), "interrupted");
    Ok(Round {
        packets,
        records,
        pcap,
        pcap_zstd,
        kernel_ns,
        runs,
        by_program,
        cpu_ns: cpu1.saturating_sub(cpu0),
        cpu_base_ns: base1.saturating_sub(base0),
        // What the bench's own thread spends driving a transfer (spawning
        // iperf3) is in both.
        user_ns: user_ns.saturating_sub(own_base),
        lost: lost + lost2,
    })
}

pub fn run(abort: &AtomicBool, rounds: usize, megabytes: u32, parallel: u32) -> Result<()> {
    let _stats = wirelab_dataplane::RunTimeStats::enable()?;
    println!(
        "wirelab bench record: iperf3 {megabytes} MB A -> B over {parallel} connection(s) through a router dropping every 40th data packet; \
         A and B recorded (th 5 us) and captured by tcpdump -s 96; {rounds} rounds"
    );
    let bar = indicatif::ProgressBar::new(rounds as u64);
    let mut got = Vec::new();
    for _ in 0..rounds.max(1) {
        got.push(round(megabytes, parallel, abort)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!(
        "{:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>13} {:>5}",
        "packets",
        "records B",
        "B/packet",
        "pcap B/p",
        "zstd B/p",
        "rec/zstd",
        "ns/run",
        "CPU share",
        "user share",
        "CPU/baseline",
        "lost"
    );
    for r in &got {
        let per = |b: u64| b as f64 / r.packets.max(1) as f64;
        println!(
            "{:>8} {:>10} {:>9.2} {:>9.1} {:>9.2} {:>8.1}% {:>8.0} {:>9.3}% {:>9.3}% {:>13.3} {:>5}",
            r.packets,
            r.records,
            per(r.records),
            per(r.pcap),
            per(r.pcap_zstd),
            100.0 * r.records as f64 / r.pcap_zstd.max(1) as f64,
            r.kernel_ns as f64 / r.runs.max(1) as f64,
            100.0 * r.kernel_ns as f64 / r.cpu_ns.max(1) as f64,
            100.0 * r.user_ns as f64 / r.cpu_ns.max(1) as f64,
            r.cpu_ns as f64 / r.cpu_base_ns.max(1) as f64,
            r.lost,
        );
    }
    let m = |f: &dyn Fn(&Round) -> f64| crate::bench::median(got.iter().map(f).collect());
    println!(
        "median: records {:.1}% of the zstd -19 pcap (DETER: 2.1-3.1%), {:.2} bytes per packet; \
         the recorder's kernel time {:.3}% of the machine's CPU time during the transfer (DETER: 0.094-1.49%), \
         {:.0} ns per program run; its user space (ring, records) {:.3}%; the machine's CPU time \
         recorded / not recorded {:.3} (noisy: the kernel time is the precise figure)",
        m(&|r| 100.0 * r.records as f64 / r.pcap_zstd.max(1) as f64),
        m(&|r| r.records as f64 / r.packets.max(1) as f64),
        m(&|r| 100.0 * r.kernel_ns as f64 / r.cpu_ns.max(1) as f64),
        m(&|r| r.kernel_ns as f64 / r.runs.max(1) as f64),
        m(&|r| 100.0 * r.user_ns as f64 / r.cpu_ns.max(1) as f64),
        m(&|r| r.cpu_ns as f64 / r.cpu_base_ns.max(1) as f64),
    );
    // Where the kernel time goes (medians over the rounds): which
    // program to make cheaper.
    println!(
        "{:>18} {:>13} {:>8} {:>10}",
        "program", "runs/packet", "ns/run", "CPU share"
    );
    for (i, (name, _, _)) in got[0].by_program.iter().enumerate() {
        let of = |r: &Round| r.by_program.get(i).map_or((0, 0), |p| (p.1, p.2));
        println!(
            "{:>18} {:>13.3} {:>8.0} {:>9.3}%",
            name,
            m(&|r| of(r).0 as f64 / r.packets.max(1) as f64),
            m(&|r| of(r).1 as f64 / of(r).0.max(1) as f64),
            m(&|r| 100.0 * of(r).1 as f64 / r.cpu_ns.max(1) as f64),
        );
    }
    Ok(())
}
