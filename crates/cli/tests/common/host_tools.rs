//! What the tests that drive users' own tools in namespaces they make
//! (tcpdump, iperf3, nft: `captures.rs`, `record.rs`) share: running a
//! tool to completion, children killed on drop, waiting for a tool to say
//! it is ready.

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Whether the test can run: namespaces need root. Otherwise it says why
/// (`needs`) and the test skips.
pub fn root(needs: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    eprintln!("SKIPPED: {needs} needs root");
    false
}

/// Runs `prog` to completion; panics with its stderr if it fails.
pub fn tool(prog: &str, args: &[&str]) -> Output {
    let o = Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{prog} (make deps installs it): {e}"));
    assert!(
        o.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Children killed (and reaped) on drop, so a failing test leaves none.
#[derive(Default)]
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until `file` contains `what` (a tool saying it is ready).
pub fn wait_for(file: &Path, what: &str) {
    let t0 = Instant::now();
    while !std::fs::read_to_string(file)
        .unwrap_or_default()
        .contains(what)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{} never said {what:?}: {}",
            file.display(),
            std::fs::read_to_string(file).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
