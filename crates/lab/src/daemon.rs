//! A DUT's or a real server's process in a lab namespace (haproxy,
//! nginx): started in the foreground by `ip netns exec` (which execs it,
//! so the child's pid is the daemon's), its output in a log file of the
//! run's DUT folder, stopped by a signal and then SIGKILL. The namespace's
//! removal kills whatever is left; `wirelab clean` removes the folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};

use crate::{During, Error};

pub struct Daemon {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
    /// What asks it to stop (haproxy: SIGUSR1, nginx: SIGQUIT, both a
    /// graceful stop).
    stop: Signal,
}

impl Daemon {
    /// Starts `prog args` in `ns` (on CPU `cpu` only, when given: taskset
    /// execs it too), its output to `log`, then waits up to 5 s for
    /// `ready` to hold.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        name: &'static str,
        ns: &str,
        cpu: Option<usize>,
        prog: &str,
        args: &[&str],
        log: &Path,
        stop: Signal,
        ready: impl Fn() -> bool,
    ) -> Result<Daemon, Error> {
        let out = std::fs::File::create(log).during(format!("creating {}", log.display()))?;
        let err = out
            .try_clone()
            .during(format!("creating {}", log.display()))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]);
        if let Some(c) = cpu {
            cmd.args(["taskset", "-c", &c.to_string()]);
        }
        let child = cmd
            .arg(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .during(format!("starting {name} (is it installed? `make deps`)"))?;
        let mut d = Daemon {
            name,
            child: Some(child),
            log: log.to_path_buf(),
            stop,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if ready() {
                return Ok(d);
            }
            if let Some(Ok(Some(status))) = d.child.as_mut().map(|c| c.try_wait()) {
                let log = std::fs::read_to_string(&d.log).unwrap_or_default();
                let why = format!("it exited ({status}): {}", log.trim());
                d.child = None;
                return Err(std::io::Error::other(why)).during(format!("starting {name}"));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other("not ready within 5 s"))
                    .during(format!("starting {name}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its graceful stop, then SIGKILL after 2 s; its log is complete
    /// when this returns.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = kill(nix::unistd::Pid::from_raw(c.id() as i32), self.stop);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("wirelab: {} did not stop within 2 s: killed", self.name);
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `names` in `dir` as (name, text), for the results folder (a file not
/// written is empty).
pub fn files(dir: &Path, names: &[&str]) -> Vec<(String, String)> {
    names
        .iter()
        .map(|f| {
            (
                f.to_string(),
                std::fs::read_to_string(dir.join(f)).unwrap_or_default(),
            )
        })
        .collect()
}

/// The run's DUT folder (`wirelab_netns::dut_dir`): the daemons' configs,
/// sockets and logs. Removed on drop, so declare it before the daemons
/// that use it (they stop first).
pub struct DutDir(pub PathBuf);

impl DutDir {
    pub fn create(run_id: &str) -> Result<DutDir, Error> {
        let dir = wirelab_netns::dut_dir(run_id);
        std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
        Ok(DutDir(dir))
    }
}

impl Drop for DutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
