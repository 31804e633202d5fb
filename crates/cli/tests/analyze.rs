//! `wirelab analyze` on captures made elsewhere (issue 19): a snapped pcap
//! reads whole; a file cut short is never a pass (exit 3), and says so
//! first.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../analyze/tests/golden/fast-retransmit/trace.pcapng")
}

fn wirelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .args(args)
        .output()
        .expect("wirelab runs")
}

/// The golden as a classic pcap at snap length 96 (editcap, from tshark's
/// packages).
fn snapped_pcap(dir: &Path) -> PathBuf {
    let out = dir.join("snapped.pcap");
    let st = Command::new("editcap")
        .args(["-F", "pcap", "-s", "96"])
        .arg(golden())
        .arg(&out)
        .status()
        .expect("editcap (`make deps` installs tshark's tools)");
    assert!(st.success());
    out
}

#[test]
fn a_snapped_pcap_reads_whole_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let f = snapped_pcap(dir.path());
    let o = wirelab(&["analyze", f.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("(80 packets)"), "{stdout}");
    assert!(!stdout.contains("truncated"), "{stdout}");
}

#[test]
fn a_capture_cut_short_exits_3_and_says_so_first() {
    let dir = tempfile::tempdir().unwrap();
    let f = snapped_pcap(dir.path());
    let bytes = std::fs::read(&f).unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let o = wirelab(&["analyze", cut.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("  truncated  read 79 packets, up to byte")
            && first.contains("the file ends inside it"),
        "{stdout}"
    );
}

/// A classic pcap of data segments of one connection, as bytes (24-byte
/// file header, 16-byte record headers): `n` segments from `from` on.
fn pcap_bytes(from: u32, n: u32, header: bool) -> Vec<u8> {
    let mut frame = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40000, 5001, 1, 65535)
        .ack(1)
        .write(&mut frame, &[0u8; 16])
        .unwrap();
    let mut out = Vec::new();
    if header {
        for v in [0xa1b2_c3d4u32.to_le_bytes(), [2, 0, 4, 0], [0; 4], [0; 4]] {
            out.extend_from_slice(&v);
        }
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
    }
    for i in from..from + n {
        // The TCP sequence number moves on; the IP header stays as built.
        frame[38..42].copy_from_slice(&(1 + i * 16).to_be_bytes());
        let len = frame.len() as u32;
        for v in [1_700_000_000 + i / 1_000_000, i % 1_000_000, len, len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&frame);
    }
    out
}

/// Ctrl-C during a long analysis stops it with exit 130 (issue 19), not a
/// verdict on the part read: an analysis holds nothing to clean up. The
/// capture comes through a FIFO that this test keeps open, so the
/// analysis is still under way however fast it reads (a file of 1.5 M
/// packets once took long enough; it no longer does).
#[test]
fn ctrl_c_stops_an_analysis_with_130() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("capture.pcap");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirelab"))
        .arg("analyze")
        .arg(&fifo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Opening blocks until the analysis opens its end; 100,000 packets
    // (7 MB, far beyond a pipe's buffer) are all written only once it has
    // read most of them: it is in its reading loop.
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(&pcap_bytes(0, 100_000, true)).unwrap();
    w.flush().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // Bounded: a process still running after 10 s is a failure, and is
    // killed (dropping `w` would let it finish with a verdict instead).
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the analysis ran on 10 s after Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(w);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
}
