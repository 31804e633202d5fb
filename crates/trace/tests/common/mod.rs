//! Helpers the trace tests share: the golden capture, the Wireshark tools.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../analyze/tests/golden/fast-retransmit/trace.pcapng")
}

/// Runs one of Wireshark's tools (from tshark's packages), its stdout.
pub fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name} (from tshark's packages; `make deps`): {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Packets in a file as Wireshark counts them.
pub fn capinfos(path: &Path) -> usize {
    let out = tool(
        "capinfos",
        &["-T", "-r", "-c", "-M", path.to_str().unwrap()],
    );
    out.trim().rsplit('\t').next().unwrap().parse().unwrap()
}
