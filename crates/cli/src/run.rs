//! `wirelab run`: load every spec first, then run each through the run
//! engine (`wirelab-lab`), print its summary, and map the verdicts to an
//! exit code.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use wirelab_lab::{RunOptions, Verdict};

use crate::code;

pub fn require_root() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("this needs root (network namespaces and BPF); run it with sudo");
    }
    Ok(())
}

/// The exit code of a verdict (README, "Exit codes").
pub fn exit_code(v: Verdict) -> u8 {
    match v {
        Verdict::Pass => code::OK,
        Verdict::Fail => code::EXPECT_FAILED,
        Verdict::Invalid => code::INVALID,
        Verdict::Interrupted => code::INTERRUPTED,
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Spec files (YAML).
    #[arg(required = true)]
    pub specs: Vec<PathBuf>,
    /// Where results folders go.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Stop a run whose workload has not finished after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// The seed of the run's random choices (QPNs, initial PSNs); each
    /// run's plan.json records the one it used, so a run can be
    /// repeated exactly. Random when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Show every retransmission and message.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Loads every spec (and builds each one's discipline) before the first
/// run: a typo in the third file should not surface after two labs ran.
fn load_all(
    specs: &[PathBuf],
) -> std::result::Result<
    Vec<(
        wirelab_spec::Spec,
        Option<wirelab_dataplane::ext::Extension>,
    )>,
    String,
> {
    let mut loaded = Vec::new();
    for p in specs {
        let spec = wirelab_spec::load(p, wirelab_lab::catalog()).map_err(|e| e.to_string())?;
        let ext = wirelab_lab::build_extension(&spec)
            .map_err(|e| format!("{}: {:#}", p.display(), anyhow::Error::from(e)))?;
        loaded.push((spec, ext));
    }
    Ok(loaded)
}

pub fn run(args: Args, abort: &Arc<AtomicBool>) -> Result<u8> {
    let loaded = match load_all(&args.specs) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    require_root()?;
    let mut worst = code::OK;
    for (spec, ext) in loaded {
        if abort.load(Ordering::SeqCst) {
            return Ok(code::INTERRUPTED);
        }
        let opts = RunOptions {
            timeout: Duration::from_secs(args.timeout),
            abort: abort.clone(),
            seed: args.seed,
            ..RunOptions::new(&args.out)
        };
        let out = match wirelab_lab::run(&spec, ext.as_ref(), &opts, &wirelab_lab::Quiet) {
            Ok(o) => o,
            Err(e @ wirelab_lab::Error::BadInput(_)) => {
                eprintln!("wirelab: {:#}", anyhow::Error::from(e));
                return Ok(code::ERROR);
            }
            Err(e) => return Err(e.into()),
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&out.summary)?);
        } else {
            crate::summary::print(&out.summary, args.verbose);
        }
        let c = exit_code(out.verdict);
        worst = worst.max(c);
        if c == code::INTERRUPTED {
            return Ok(code::INTERRUPTED);
        }
    }
    Ok(worst)
}
