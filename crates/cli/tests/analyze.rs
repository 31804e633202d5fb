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
