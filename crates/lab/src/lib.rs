//! The run engine: one run's life cycle as a library call.
//!
//! `run` takes a validated spec and returns a typed `RunOutput`, printing
//! nothing. In order (Lumina §3.3–3.5, seed 000):
//!
//! 1. plan (pure; the seed of every random choice recorded in plan.json);
//! 2. lab up (namespaces, veths, qdiscs; torn down on every way out);
//! 3. the switch loaded with the stages the capabilities ask for, their
//!    tables filled, attached; capture started;
//! 4. the hand-off, through `wirelab_workload::Workload`: prepare -> arm the
//!    reported flows -> connect -> capabilities armed with the runtime
//!    metadata -> run;
//! 5. counters, capture drained, integrity, trace written;
//! 6. analysis of the file as written, expectations, verdict;
//! 7. the results folder (summary, facts, analysis, report, counters).
//!
//! Capabilities (`capability::Capability`) plug into steps 3–7; the engine
//! knows neither transports nor capabilities by name. Progress and
//! cancellation are passed in. Several runs may go at once in one process:
//! every name comes from the run id, and nothing is global.

pub mod bump;
pub mod capability;
mod daemon;
mod engine;
pub mod haproxy;
pub mod load;
pub mod nginx;
pub mod ovs;
pub mod record;
mod results;
pub mod stateful;
pub mod summary;
pub mod switch;
pub mod switch_dut;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use engine::{handoff, run};
pub use summary::{ConnSummary, EventSummary, HostSummary, Summary, VqSummary};

/// Why a run could not be carried out (a run that ran and failed its
/// expectations is not an error: see `Verdict`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Plan(#[from] wirelab_plan::Error),
    /// A step of the run failed; `what` names the step, the source says why.
    #[error("{what}")]
    Step {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The input is wrong in a way only the host could tell (a discipline
    /// the verifier refuses, an interface that does not exist).
    #[error("{0}")]
    BadInput(String),
    #[error("interrupted")]
    Interrupted,
}

/// `.during("what the run was doing")` on any error: the step's name
/// first, then its cause (`wirelab: bringing the lab up: ...`).
pub trait During<T> {
    fn during(self, what: impl Into<String>) -> Result<T, Error>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> During<T> for Result<T, E> {
    fn during(self, what: impl Into<String>) -> Result<T, Error> {
        self.map_err(|e| Error::Step {
            what: what.into(),
            source: Box::new(e),
        })
    }
}

/// How a run ended. Ordered: an interruption outranks an incomplete trace,
/// which outranks a failed claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Pass,
    Fail,
    Invalid,
    Interrupted,
}

impl Verdict {
    /// A run's verdict: an interruption first, then an incomplete trace
    /// (Lumina §3.5: never reported as passed), then any failed claim.
    pub fn of(interrupted: bool, valid: bool, failed: bool) -> Verdict {
        if interrupted {
            Verdict::Interrupted
        } else if !valid {
            Verdict::Invalid
        } else if failed {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    }
    /// As summary.json spells it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Invalid => "INVALID",
            Verdict::Interrupted => "INTERRUPTED",
        }
    }
}

/// The stages a run goes through, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    LabUp,
    SwitchArmed,
    Connected,
    WorkloadDone,
    TraceWritten,
    Analyzed,
}

/// Told of each stage as the run reaches it (from the run's own thread).
pub trait Progress: Sync {
    fn stage(&self, _run_id: &str, _stage: Stage) {}
}

/// Shows nothing.
pub struct Quiet;
impl Progress for Quiet {}

/// How to run.
#[derive(Clone)]
pub struct RunOptions {
    /// Where the results folder goes (`<out>/<name>-<run id>/`).
    pub out: PathBuf,
    /// The workload stops after this long.
    pub timeout: Duration,
    /// Set it to stop the run: the workload stops, the lab comes down, and
    /// the verdict is `Interrupted`.
    pub abort: Arc<AtomicBool>,
    /// A fixed run id (names of namespaces and the results folder); a new
    /// random one when `None`.
    pub run_id: Option<String>,
    /// The seed of every random choice; a new random one when `None`. The
    /// plan records it, so a run can be repeated exactly.
    pub seed: Option<u64>,
    /// The user allows settings that are the host's, not the lab's, for
    /// the run (a load test's `dut.neighbour_limit`: Linux's ARP table is
    /// one for every namespace); they are put back after.
    pub host_wide: bool,
}

impl RunOptions {
    pub fn new(out: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            out: out.into(),
            timeout: Duration::from_secs(60),
            abort: Arc::new(AtomicBool::new(false)),
            run_id: None,
            seed: None,
            host_wide: false,
        }
    }
    fn check_abort(&self) -> Result<(), Error> {
        if self.abort.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        Ok(())
    }
}

/// What a run produced.
pub struct RunOutput {
    pub summary: Summary,
    /// The facts the analysis used (also in the results folder).
    pub facts: wirelab_analyze::RunFacts,
    pub verdict: Verdict,
    /// The results folder.
    pub dir: PathBuf,
}

/// A short random run id (lowercase hex).
/// What a spec is checked against on this host: the analyzers and their
/// findings, and the counter names a run reports: the running kernel's
/// (nstat's, from the calling thread's namespace; every namespace has the
/// same names) and the RoCE device's. `expect: counter:` with a name no run
/// reports is refused before a lab exists, not read as an unchanged 0.
/// Read once per process.
pub fn catalog() -> &'static wirelab_spec::Catalog {
    static CATALOG: std::sync::OnceLock<wirelab_spec::Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| wirelab_spec::Catalog {
        // Without /proc/net (not Linux, a sandbox) the names stay unchecked.
        counters: wirelab_netns::counters::read_current().ok().map(|c| {
            c.into_keys()
                .chain(
                    wirelab_roce::profile::COUNTERS
                        .iter()
                        .map(|n| n.to_string()),
                )
                .collect()
        }),
        ..wirelab_analyze::catalog().clone()
    })
}

pub fn new_run_id() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Compiles the spec's own vAQM discipline (`vaqm.extension`) so that it
/// can be linked with the switch, before anything touches the host: a
/// discipline that does not compile fails with clang's file:line
/// diagnostics.
pub fn build_extension(
    spec: &wirelab_spec::Spec,
) -> Result<Option<wirelab_dataplane::ext::Extension>, Error> {
    let Some(src) = spec.vaqm.as_ref().and_then(|v| v.extension.as_ref()) else {
        return Ok(None);
    };
    let work = tempfile::tempdir().during("creating a directory to build the discipline in")?;
    wirelab_dataplane::ext::build(src, work.path())
        .map(Some)
        .map_err(|e| Error::BadInput(format!("vaqm.extension: {e}")))
}

/// Registers wirelab's DCTCP (struct_ops) when a host of the plan uses it:
/// this process's, shared by its runs, and gone when the last of them
/// drops the guard (`wirelab_dataplane::dctcp`).
pub fn dctcp_for(
    plan: &wirelab_plan::Plan,
) -> Result<Option<std::sync::Arc<wirelab_dataplane::dctcp::Dctcp>>, Error> {
    use wirelab_spec::CongestionControl;
    if !plan
        .hosts
        .iter()
        .any(|h| h.stack.congestion_control == CongestionControl::Dctcp)
    {
        return Ok(None);
    }
    wirelab_dataplane::dctcp::Dctcp::shared()
        .map(Some)
        .during("registering DCTCP (struct_ops)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_ranks_interruption_then_integrity_then_claims() {
        assert_eq!(Verdict::of(true, false, true), Verdict::Interrupted);
        assert_eq!(Verdict::of(false, false, true), Verdict::Invalid);
        assert_eq!(Verdict::of(false, true, true), Verdict::Fail);
        assert_eq!(Verdict::of(false, true, false), Verdict::Pass);
        assert!(Verdict::Interrupted > Verdict::Invalid && Verdict::Invalid > Verdict::Fail);
    }

    #[test]
    fn a_step_error_names_the_step_then_the_cause() {
        let e: Result<(), _> = Err(std::io::Error::other("no such device"));
        let e = e.during("bringing the lab up").unwrap_err();
        assert_eq!(e.to_string(), "bringing the lab up");
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert_eq!(cause, "no such device");
    }
}
