//! A campaign's runs on a Ray cluster (`wirelab fuzz --ray ADDRESS`).
//!
//! A Python driver (`ray_driver.py`, embedded here) connects to the
//! cluster and turns each run into a Ray task that runs `wirelab
//! fuzz-eval` on its node: the same lab code as a local run, whose
//! observation comes back as JSON. The campaign itself (search, scoring,
//! shrinking, the folder) stays in this process; only the runs move.
//!
//! Each node needs wirelab at the same path as here, root, and the
//! campaign folder's path writable (a run's results folder stays on the
//! node that made it; `forget` removes it there).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use wirelab_spec::Spec;

use crate::campaign::{tidy_yaml, Runner};
use crate::score::Observation;

const DRIVER: &str = include_str!("ray_driver.py");

/// How to reach the cluster and run there.
pub struct RayOptions<'a> {
    /// `HOST:PORT` of the cluster's head (`ray start --head` prints it).
    pub address: &'a str,
    /// A Python with `ray` installed (the project's virtualenv).
    pub python: &'a Path,
    /// wirelab on every node.
    pub wirelab: &'a Path,
    /// Where runs' results folders go, on every node (absolute).
    pub out: &'a Path,
    /// A run's workload stops after this long.
    pub timeout: Duration,
    /// Set on Ctrl-C: every run in progress is cancelled.
    pub abort: Arc<AtomicBool>,
    /// How long joining the cluster may take.
    pub connect_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the Ray driver with {python}: {source}")]
    Spawn {
        python: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Connect(String),
}

type Waiting = Arc<Mutex<HashMap<u64, mpsc::Sender<Observation>>>>;

pub struct RayRunner {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    waiting: Waiting,
    next: AtomicU64,
    abort: Arc<AtomicBool>,
    cancelled: AtomicBool,
    /// Set when the driver's output ends.
    dead: Arc<AtomicBool>,
    /// The driver's last lines of stderr: why it stopped.
    stderr: Arc<Mutex<String>>,
    /// CPUs in the cluster when it connected (the default `--jobs`).
    pub cpus: u32,
    /// Nodes alive when it connected.
    pub nodes: u32,
}

#[derive(Deserialize)]
struct Ready {
    cpus: u32,
    nodes: u32,
}

#[derive(Deserialize)]
struct Reply {
    id: u64,
    obs: Observation,
}

impl RayRunner {
    /// Starts the driver and waits until it has joined the cluster.
    pub fn connect(o: &RayOptions) -> Result<RayRunner, Error> {
        let mut cmd = Command::new(o.python);
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between
        // fork and exec. The driver dies with this process (a kill -9 here
        // must not leave it holding the cluster's tasks).
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd
            .arg("-u")
            .arg("-c")
            .arg(DRIVER)
            .arg(o.address)
            .arg(o.wirelab)
            .arg(o.out)
            .arg(o.timeout.as_secs().max(1).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| Error::Spawn {
                python: o.python.display().to_string(),
                source,
            })?;
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            // Kept short: Ray logs freely, and only the end says why.
            let (mut from, tail) = (child.stderr.take().expect("piped"), stderr.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut t = tail.lock().expect("not poisoned");
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if t.len() > 8192 {
                        let cut = t.len() - 4096;
                        let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                        t.drain(..cut);
                    }
                }
            });
        }
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        // ray.init waits for ever on an address where something listens but
        // no cluster answers: bounded here.
        let (tx, rx) = mpsc::channel();
        let first = std::thread::spawn(move || {
            let _ = tx.send(lines.next());
            lines
        });
        let ready: Ready = match rx.recv_timeout(o.connect_timeout) {
            Ok(Some(Ok(l))) => serde_json::from_str(&l)
                .map_err(|e| Error::Connect(format!("the Ray driver said {l:?}: {e}")))?,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Connect(format!(
                    "no Ray cluster answered at {} within {}",
                    o.address,
                    humantime::format_duration(o.connect_timeout)
                )));
            }
            _ => {
                let _ = child.wait();
                // The reader thread has the last of stderr once the pipe closes.
                std::thread::sleep(Duration::from_millis(100));
                let why = last_lines(&stderr.lock().expect("not poisoned"));
                return Err(Error::Connect(if why.is_empty() {
                    format!("the Ray driver for {} exited at start", o.address)
                } else {
                    why
                }));
            }
        };
        if ready.cpus == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Connect(format!(
                "the Ray cluster at {} has no CPUs to run labs on",
                o.address
            )));
        }
        let lines = first.join().expect("the reader does not panic");
        let waiting: Waiting = Arc::default();
        let dead = Arc::new(AtomicBool::new(false));
        {
            let (waiting, dead) = (waiting.clone(), dead.clone());
            std::thread::spawn(move || {
                for l in lines.map_while(Result::ok) {
                    let Ok(r) = serde_json::from_str::<Reply>(&l) else {
                        continue;
                    };
                    if let Some(tx) = waiting.lock().expect("not poisoned").remove(&r.id) {
                        let _ = tx.send(r.obs);
                    }
                }
                // The driver is gone: whoever still waits learns it from the
                // closed channel.
                let mut w = waiting.lock().expect("not poisoned");
                dead.store(true, Ordering::SeqCst);
                w.clear();
            });
        }
        Ok(RayRunner {
            stdin: Mutex::new(child.stdin.take()),
            child: Mutex::new(child),
            waiting,
            next: AtomicU64::new(0),
            abort: o.abort.clone(),
            cancelled: AtomicBool::new(false),
            dead,
            stderr,
            cpus: ready.cpus,
            nodes: ready.nodes,
        })
    }

    fn send(&self, msg: &serde_json::Value) -> bool {
        let mut g = self.stdin.lock().expect("not poisoned");
        let Some(w) = g.as_mut() else {
            return false;
        };
        writeln!(w, "{msg}").and_then(|_| w.flush()).is_ok()
    }

    fn gone(&self) -> Observation {
        let why = last_lines(&self.stderr.lock().expect("not poisoned"));
        Observation::failed(format!(
            "the Ray driver stopped{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ))
    }
}

impl Runner for RayRunner {
    fn run(&self, spec: &Spec, label: &str, seed: u64) -> Observation {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        {
            // Under the lock the reader takes when the driver goes, so a
            // run is either seen off by it or refused here.
            let mut w = self.waiting.lock().expect("not poisoned");
            if self.dead.load(Ordering::SeqCst) {
                return self.gone();
            }
            w.insert(id, tx);
        }
        let req = serde_json::json!({
            "id": id, "spec": tidy_yaml(spec), "label": label, "seed": seed,
        });
        if !self.send(&req) {
            self.waiting.lock().expect("not poisoned").remove(&id);
            return self.gone();
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(o) => return o,
                Err(mpsc::RecvTimeoutError::Disconnected) => return self.gone(),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The first caller to see Ctrl-C cancels every task; each
                    // stops its lab and comes back INTERRUPTED.
                    if self.abort.load(Ordering::SeqCst)
                        && !self.cancelled.swap(true, Ordering::SeqCst)
                    {
                        self.send(&serde_json::json!({"cancel": true}));
                    }
                }
            }
        }
    }

    fn forget(&self, o: &Observation) {
        match (&o.dir, &o.node) {
            (Some(d), Some(n)) => {
                self.send(&serde_json::json!({"forget": d, "node": n}));
            }
            (Some(d), None) => {
                let _ = std::fs::remove_dir_all(d);
            }
            _ => {}
        }
    }
}

impl Drop for RayRunner {
    /// Closes the driver's input: it lets running tasks finish (each
    /// removes its lab), disconnects and exits. Bounded: a driver that does
    /// not exit within a minute is killed.
    fn drop(&mut self) {
        self.stdin.lock().expect("not poisoned").take();
        let mut child = self.child.lock().expect("not poisoned");
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The last few non-empty lines of the driver's stderr.
fn last_lines(s: &str) -> String {
    let v: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(3)..].join(" / ")
}

/// A Python with `ray`: `$WIRELAB_PYTHON`, else the project's virtualenv
/// beside the binary (`target/py`, where `make` installs it), else
/// `python3`.
pub fn default_python() -> PathBuf {
    if let Some(p) = std::env::var_os("WIRELAB_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("py/bin/python")));
    match venv {
        Some(v) if v.exists() => v,
        _ => PathBuf::from("python3"),
    }
}
