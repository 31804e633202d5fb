//! `wirelab bench analyze`: packets per second of the full TCP analyzer set
//! on a generated trace, against `tshark -2 -r trace -Y tcp.analysis.flags`
//! (tshark's two-pass TCP analysis) on the same file, as a ratio.
//!
//! The trace is what a capture at a sender gives: 8 connections interleaved,
//! data segments of 1448 bytes (frames snapped to 96 bytes, as a header
//! capture is), an ACK per two segments, and one segment in 500 lost after
//! the capture point: the receiver answers the following segments with
//! duplicate ACKs carrying SACK, and the sender retransmits after the third.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use etherparse::PacketBuilder;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

const SNAP: usize = 96;
const MSS: u32 = 1448;
const CONNS: u32 = 8;

struct Gen<W: Write> {
    w: PcapNgWriter<W>,
    ts: u64,
    n: u64,
}

impl<W: Write> Gen<W> {
    fn emit(
        &mut self,
        conn: u32,
        data: bool,
        seq: u32,
        ack: u32,
        len: u32,
        sack: Option<(u32, u32)>,
    ) -> Result<()> {
        let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        let (sp, dp) = (40000 + conn as u16, 5001);
        let builder = if data {
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(a, b, 64)
                .tcp(sp, dp, seq, 512)
        } else {
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
                .ipv4(b, a, 64)
                .tcp(dp, sp, 1, 512)
        };
        let builder = builder.ack(ack);
        let builder = match sack {
            Some((l, r)) => builder
                .options(&[
                    etherparse::TcpOptionElement::Noop,
                    etherparse::TcpOptionElement::Noop,
                    etherparse::TcpOptionElement::SelectiveAcknowledgement(
                        (l, r),
                        [None, None, None],
                    ),
                ])
                .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            None => builder,
        };
        let payload = vec![0u8; len as usize];
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut frame, &payload)?;
        let orig = frame.len() as u32;
        frame.truncate(SNAP);
        self.ts += 1_000;
        self.n += 1;
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: std::time::Duration::from_nanos(self.ts),
            original_len: orig,
            data: frame.into(),
            options: vec![],
        };
        self.w.write_pcapng_block(epb)?;
        Ok(())
    }
}

/// Writes about `packets` packets to `path`.
pub fn generate(path: &std::path::Path, packets: u64) -> Result<u64> {
    let f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = PcapNgWriter::new(f)?;
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: SNAP as u32,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    })?;
    let mut g = Gen {
        w,
        ts: 1_700_000_000_000_000_000,
        n: 0,
    };
    let isn = 1000u32;
    // Per connection: next segment number (segment k carries bytes from
    // isn + 1 + k*MSS).
    let mut next = vec![0u32; CONNS as usize];
    let seq = |k: u32| isn.wrapping_add(1).wrapping_add(k.wrapping_mul(MSS));
    while g.n < packets {
        for c in 0..CONNS {
            let k = next[c as usize];
            if k % 500 == 498 {
                // Segment k is lost after the capture point; k+1..k+3 arrive
                // out of order and each gets a duplicate ACK with SACK.
                g.emit(c, true, seq(k), 1, MSS, None)?;
                for j in 1..=3 {
                    g.emit(c, true, seq(k + j), 1, MSS, None)?;
                    g.emit(c, false, 0, seq(k), 0, Some((seq(k + 1), seq(k + j + 1))))?;
                }
                g.emit(c, true, seq(k), 1, MSS, None)?; // fast retransmit
                g.emit(c, false, 0, seq(k + 4), 0, None)?;
                next[c as usize] = k + 4;
            } else {
                g.emit(c, true, seq(k), 1, MSS, None)?;
                g.emit(c, true, seq(k + 1), 1, MSS, None)?;
                g.emit(c, false, 0, seq(k + 2), 0, None)?;
                next[c as usize] = k + 2;
            }
        }
    }
    // On disk before anything is timed: the kernel's write-back of a
    // just-written trace otherwise competes with the runs measured next
    // (on 2 cores: a median of 4.14 M packets/s unsynced, 4.76 synced).
    let mut f = g.w.into_inner();
    f.flush()?;
    f.get_ref().sync_all()?;
    Ok(g.n)
}

pub fn run(packets: u64, runs: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = match std::env::var_os("WIRELAB_BENCH_KEEP") {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.path().join("bench-analyze.pcapng"),
    };
    eprintln!("generating a {packets}-packet trace ...");
    let n = generate(&path, packets)?;
    let size = std::fs::metadata(&path)?.len();
    println!(
        "trace: {n} packets, {:.1} MB, 8 connections, 1 loss in 500 segments",
        size as f64 / 1e6
    );

    // 1. Reading alone: the file's bytes (from the page cache, as the
    //    analysis reads them), then its records through the reader.
    let started = Instant::now();
    std::io::copy(&mut std::fs::File::open(&path)?, &mut std::io::sink())?;
    let raw = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut r = wirelab_trace::Reader::new(std::fs::File::open(&path)?)
        .map_err(|(e, _)| anyhow::anyhow!("{e}"))?;
    while r.next().is_some() {}
    let read = started.elapsed().as_secs_f64();
    println!(
        "reading alone: the bytes {:.2}s ({:.0} MB/s); the records {:.2}s ({:.0} packets/s, one pass)",
        raw,
        size as f64 / 1e6 / raw,
        read,
        n as f64 / read
    );

    // 2. `wirelab analyze` as a user runs it: one streaming pass, every
    //    analyzer, in a process of its own (its peak RSS is its own), on
    //    one core, and with connections built on the other cores. The two
    //    take turns, run by run, so that a drift of this VM's speed (a
    //    quarter over minutes) or another process's load falls on both
    //    alike: a busy loop on one of two cores makes "all cores" the
    //    slower (260-299 ms against 187-203 here), and seven runs of one
    //    mode before seven of the other cannot tell that from the mode.
    let exe = std::env::current_exe().context("finding the wirelab binary")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let modes = [
        ("one core", 0),
        ("all cores", cores.saturating_sub(1).max(1)),
    ];
    // Per mode: times, peak RSS, retransmissions found.
    let mut got: Vec<(Vec<f64>, i64, usize)> = modes.iter().map(|_| (Vec::new(), 0, 0)).collect();
    for _ in 0..runs.max(1) {
        for ((_, threads), g) in modes.iter().zip(&mut got) {
            let (secs, peak, found) = analyze_once(&exe, &path, dir.path(), *threads)?;
            g.0.push(secs);
            g.1 = g.1.max(peak);
            g.2 = found;
        }
    }
    let mut ours = f64::MAX;
    let mut medians = Vec::new();
    for ((what, threads), (times, rss, rtx)) in modes.iter().zip(got) {
        let secs = crate::bench::median(times.clone());
        let (fastest, slowest) = times
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        ours = ours.min(secs);
        medians.push(secs);
        println!(
            "wirelab analyze, {what} (--threads {threads}, {cores} cores here): {secs:.3}s, {:.0} packets/s \
             (median of {} runs; {:.0}-{:.0}), peak RSS {:.0} MB ({:.2}x the file; {rtx} retransmissions found)",
            n as f64 / secs,
            times.len(),
            n as f64 / slowest,
            n as f64 / fastest,
            rss as f64 / 1e3,
            rss as f64 * 1e3 / size as f64
        );
    }
    println!(
        "all cores / one core: {:.2}x the speed (the two modes' runs interleaved)",
        medians[0] / medians[1]
    );

    // tshark's memory grows with the file (781 MB for 1M packets here), so
    // a multi-GB trace would exhaust the machine: it is compared on small
    // ones only.
    if n > TSHARK_MAX_PACKETS {
        println!(
            "tshark: skipped above {TSHARK_MAX_PACKETS} packets (its memory grows with the file); run --packets {TSHARK_MAX_PACKETS} for the comparison"
        );
        return Ok(());
    }
    eprintln!("running tshark -2 -Y tcp.analysis.flags (slow) ...");
    let started = Instant::now();
    let flags = dir.path().join("tshark-flags.txt");
    let (status, stderr, their_rss) = measured(
        std::process::Command::new("tshark")
            .args(["-2", "-r"])
            .arg(&path)
            .args([
                "-Y",
                "tcp.analysis.flags",
                "-T",
                "fields",
                "-e",
                "frame.number",
            ]),
        &flags,
    )
    .context("running tshark (make deps installs it)")?;
    let theirs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("tshark failed: {}", String::from_utf8_lossy(&stderr));
    }
    use std::io::BufRead;
    let flagged = std::io::BufReader::new(std::fs::File::open(&flags)?)
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.is_empty())
        .count();
    println!(
        "tshark -2 -Y tcp.analysis.flags: {theirs:.2}s, {:.0} packets/s, peak RSS {:.0} MB ({flagged} packets flagged)",
        n as f64 / theirs,
        their_rss as f64 / 1e3
    );
    println!(
        "ratio wirelab (fastest)/tshark: {:.1}x faster (goal: at least 10x); wirelab/reading alone: {:.2}x the time of one reading pass",
        theirs / ours,
        ours / read
    );
    Ok(())
}

/// The largest trace tshark is run on (see above).
const TSHARK_MAX_PACKETS: u64 = 3_000_000;

/// One `wirelab analyze --json` of `path` in its own process: its wall
/// time (s), peak RSS (KB) and the retransmissions it found; an error
/// unless it found some and no violation.
fn analyze_once(
    exe: &std::path::Path,
    path: &std::path::Path,
    dir: &std::path::Path,
    threads: usize,
) -> Result<(f64, i64, usize)> {
    let started = Instant::now();
    let json = dir.join(format!("analysis-{threads}.json"));
    let (status, stderr, rss) = measured(
        std::process::Command::new(exe)
            .args(["analyze", "--json", "--threads", &threads.to_string()])
            .arg(path),
        &json,
    )
    .context("running wirelab analyze")?;
    let secs = started.elapsed().as_secs_f64();
    // Read as a stream into the two fields needed: this process stays
    // small (see `measured`).
    #[derive(serde::Deserialize)]
    struct Conn {
        retransmissions: Vec<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Report {
        connections: Vec<Conn>,
    }
    let report: Report =
        serde_json::from_reader(std::io::BufReader::new(std::fs::File::open(&json)?))
            .with_context(|| format!("wirelab analyze: {}", String::from_utf8_lossy(&stderr)))?;
    std::fs::remove_file(&json)?;
    let rtx: usize = report
        .connections
        .iter()
        .map(|c| c.retransmissions.len())
        .sum();
    if status.code() != Some(0) || rtx == 0 {
        bail!(
            "the generated trace should have retransmissions and no violations ({rtx} retransmissions, exit {:?})",
            status.code()
        );
    }
    Ok((secs, rss, rtx))
}

/// Runs `cmd` to its end, its standard output into `stdout`, and returns
/// its exit status, its standard error and its own peak resident set in KB
/// (wait4(2)'s rusage of that child; Linux reports ru_maxrss in KB).
///
/// Linux also counts in a child's ru_maxrss the peak resident set of the
/// process that spawned it (exec records the old address space's
/// high-water mark), so this process must stay small while it measures:
/// output goes to a file and is read back as a stream, never held. (Held,
/// a 10 GB capture's 247 MB report made the next child's figure 1509 MB
/// instead of its own 444 MB.)
fn measured(
    cmd: &mut std::process::Command,
    stdout: &std::path::Path,
) -> Result<(std::process::ExitStatus, Vec<u8>, i64)> {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::fs::File::create(stdout)?)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut err = child.stderr.take().expect("piped");
    let stderr = std::thread::spawn(move || {
        let mut b = Vec::new();
        err.read_to_end(&mut b).map(|_| b)
    });
    let mut status = 0;
    // SAFETY: rusage is plain data the call fills; the pid is our child's,
    // reaped here (std's Child is not waited on afterwards).
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as nix::libc::pid_t;
    let r = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        bail!("waiting for the child: {}", std::io::Error::last_os_error());
    }
    Ok((
        std::os::unix::process::ExitStatusExt::from_raw(status),
        stderr.join().expect("reader thread")?,
        usage.ru_maxrss,
    ))
}
