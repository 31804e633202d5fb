//! The local runner: each spec in a lab of its own, through the run
//! library (several at once in one process; `wirelab_lab` names
//! everything after the run id).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use wirelab_spec::Spec;

use crate::campaign::Runner;
use crate::score::Observation;

pub struct LabRunner {
    /// Where the runs' results folders go.
    pub out: PathBuf,
    /// A run's workload stops after this long.
    pub timeout: Duration,
    /// Set to stop every run in progress.
    pub abort: Arc<AtomicBool>,
}

impl Runner for LabRunner {
    fn run(&self, spec: &Spec, _label: &str, seed: u64) -> Observation {
        let ext = match wirelab_lab::build_extension(spec) {
            Ok(e) => e,
            Err(e) => return Observation::failed(chain(&e)),
        };
        let opts = wirelab_lab::RunOptions {
            timeout: self.timeout,
            abort: self.abort.clone(),
            seed: Some(seed),
            ..wirelab_lab::RunOptions::new(&self.out)
        };
        match wirelab_lab::run(spec, ext.as_ref(), &opts, &wirelab_lab::Quiet) {
            Ok(out) => Observation::of_run(&out, spec),
            Err(wirelab_lab::Error::Interrupted) => Observation {
                verdict: "INTERRUPTED".into(),
                ..Default::default()
            },
            Err(e) => Observation::failed(chain(&e)),
        }
    }
}

/// An error with its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
