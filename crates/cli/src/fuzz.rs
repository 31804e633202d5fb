//! `wirelab fuzz`: a campaign of Lumina's genetic fuzzer (`wirelab-fuzz`)
//! over local labs, with a progress bar and a summary.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use wirelab_fuzz::campaign::{self, Settings, Stats, Stopped};
use wirelab_fuzz::{Mode, Record};

use crate::code;

#[derive(clap::Args)]
pub struct Args {
    /// The target file (YAML): seed spec, search space, objectives, stop.
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    pub target: Option<PathBuf>,
    /// Continue the campaign in this folder where it stopped.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Stop after this many runs (the target's `stop.runs` otherwise).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Stop after this long, e.g. `20m` (the target's `stop.time` otherwise).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub time: Option<Duration>,
    /// Labs at once (default: one per core).
    #[arg(long)]
    pub jobs: Option<u32>,
    /// The campaign's seed: with the same seed and the same run results,
    /// the same specs. Random when absent; campaign.json records it.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Every host's RoCE device profile: the device under test.
    #[arg(long)]
    pub device: Option<String>,
    /// Uniform random search over the same space instead of Algorithm 1.
    #[arg(long)]
    pub random: bool,
    /// Go on after the first anomaly (the target's `stop.anomaly` otherwise).
    #[arg(long)]
    pub keep_going: bool,
    /// Where the campaign folder goes.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Stop a run whose workload has not finished after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Keep every run's results folder (by default only the anomalies').
    #[arg(long)]
    pub keep_runs: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the campaign's runs as tasks on this Ray cluster (`HOST:PORT`
    /// of its head) instead of local labs; --jobs defaults to the
    /// cluster's CPUs. Every node needs wirelab at this binary's path, and
    /// root. The driver's Python is $WIRELAB_PYTHON, or the project's
    /// virtualenv (`make` installs ray there).
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
}

#[derive(clap::Args)]
pub struct EvalArgs {
    #[arg(long)]
    pub label: String,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

/// `wirelab fuzz-eval`: one run of a campaign made elsewhere (a Ray task),
/// by the same runner as a local campaign's.
pub fn eval(args: EvalArgs, abort: &Arc<AtomicBool>) -> Result<u8> {
    use std::io::Read;
    use wirelab_fuzz::Runner;
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the spec from stdin")?;
    let spec = wirelab_spec::parse(&text, wirelab_lab::catalog())
        .map_err(|e| anyhow::anyhow!("the spec on stdin: {e}"))?;
    crate::run::require_root()?;
    let runner = wirelab_fuzz::lab::LabRunner {
        out: args.out,
        timeout: Duration::from_secs(args.timeout),
        abort: abort.clone(),
    };
    let obs = runner.run(&spec, &args.label, args.seed);
    println!("{}", serde_json::to_string(&obs)?);
    Ok(code::OK)
}

/// A progress bar: runs, runs per minute, best score, anomalies.
struct Bar(indicatif::ProgressBar);

impl campaign::Watch for Bar {
    fn ran(&self, r: &Record, s: &Stats) {
        let per_min = s.runs as f64 * 60_000.0 / s.elapsed_ms.max(1) as f64;
        self.0.set_position(s.runs);
        self.0.set_message(format!(
            "{per_min:.1} runs/min, best {:.2}, {} anomal{}, pool {} ({} distinct)",
            s.best,
            s.anomalies,
            if s.anomalies == 1 { "y" } else { "ies" },
            s.pool,
            s.distinct
        ));
        if !r.anomalies.is_empty() {
            self.0.println(format!(
                "  run {:>4}  anomaly: {} (spec {}, score {:.2})",
                r.n,
                r.anomalies.join(", "),
                r.hash,
                r.score
            ));
        }
    }
    fn phase(&self, what: &str) {
        self.0.println(format!("  {what}"));
    }
}

pub fn run(args: Args, abort: &Arc<AtomicBool>) -> Result<u8> {
    let catalog = wirelab_lab::catalog();
    let (loaded, settings) = match prepare(&args, catalog) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("wirelab: {e:#}");
            return Ok(code::ERROR);
        }
    };
    crate::run::require_root()?;
    let (runner, settings) = match runner(&args, settings, abort) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("wirelab: {e:#}");
            return Ok(code::ERROR);
        }
    };
    let name = loaded.seed.name.clone().unwrap_or_default();
    eprintln!(
        "wirelab fuzz {} (campaign {}, seed {}, {} lab{}, {})",
        loaded.path.display(),
        settings.dir.display(),
        settings.seed,
        settings.jobs,
        if settings.jobs == 1 { "" } else { "s" },
        match settings.mode {
            Mode::Genetic => "genetic",
            Mode::Random => "random search",
        }
    );
    eprintln!(
        "  seed spec  {name}{}",
        match &loaded.target.device {
            Some(d) => format!(", device {d}"),
            None => String::new(),
        }
    );
    let pb = indicatif::ProgressBar::new(u64::from(settings.stop.runs)).with_style(
        indicatif::ProgressStyle::with_template(
            "  {elapsed:>4} [{bar:25}] {pos}/{len} runs, {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(500));
    let bar = Bar(pb);
    let outcome = campaign::run(&loaded, catalog, &settings, runner.as_ref(), &bar, abort)?;
    drop(runner);
    bar.0.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        let min = outcome.elapsed_ms as f64 / 60_000.0;
        println!(
            "  runs       {} ({} baselines), {:.1} runs/min, stopped: {}",
            outcome.runs,
            outcome.baseline_runs,
            outcome.runs as f64 / min.max(1e-9),
            outcome.stopped.describe()
        );
        println!("  best       score {:.2}", outcome.best);
        for a in &outcome.anomalies {
            println!(
                "  anomaly    {}: run {} (s {:.2}), shown again {}/{}, shrunk in {} runs{}, confirmed {}/{}",
                a.objective,
                a.run,
                a.s,
                a.reproduced,
                a.confirm,
                a.shrink_runs,
                if a.steps.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", a.steps.join("; "))
                },
                a.confirmed,
                a.confirm
            );
            if let Some(f) = &a.file {
                println!("             {f}");
            }
        }
        for a in &outcome.unconfirmed {
            println!(
                "  not shown  {}: run {} (s {:.2}) showed it again {}/{} times; not saved",
                a.objective, a.run, a.s, a.reproduced, a.confirm
            );
        }
        if outcome.anomalies.is_empty() {
            println!("  anomalies  none confirmed");
        }
        println!("  campaign   {}", settings.dir.display());
    }
    Ok(match outcome.stopped {
        Stopped::Interrupted => code::INTERRUPTED,
        _ if outcome.anomalies.is_empty() => code::OK,
        _ => code::EXPECT_FAILED,
    })
}

/// Local labs, or a Ray cluster's (whose CPUs are the default --jobs).
fn runner(
    args: &Args,
    mut settings: Settings,
    abort: &Arc<AtomicBool>,
) -> Result<(Box<dyn campaign::Runner>, Settings)> {
    let timeout = Duration::from_secs(args.timeout);
    let Some(address) = &args.ray else {
        let r = wirelab_fuzz::lab::LabRunner {
            out: settings.dir.join("runs"),
            timeout,
            abort: abort.clone(),
        };
        return Ok((Box::new(r), settings));
    };
    // The nodes write the runs' folders at this path: it must not depend
    // on a task's working directory.
    settings.dir = std::path::absolute(&settings.dir)?;
    let python = wirelab_fuzz::ray::default_python();
    let wirelab = std::env::current_exe().context("finding this wirelab binary")?;
    let out = settings.dir.join("runs");
    eprintln!("  connecting to the Ray cluster at {address}");
    let r = wirelab_fuzz::ray::RayRunner::connect(&wirelab_fuzz::ray::RayOptions {
        address,
        python: &python,
        wirelab: &wirelab,
        out: &out,
        timeout,
        abort: abort.clone(),
        connect_timeout: Duration::from_secs(30),
    })
    .with_context(|| format!("--ray {address}"))?;
    eprintln!(
        "  Ray cluster: {} node{}, {} CPUs",
        r.nodes,
        if r.nodes == 1 { "" } else { "s" },
        r.cpus
    );
    if args.jobs.is_none() && args.resume.is_none() {
        settings.jobs = r.cpus;
    }
    Ok((Box::new(r), settings))
}

/// The target and the campaign's settings, from the arguments or (with
/// `--resume`) from the folder; nothing on the host is touched.
fn prepare(
    args: &Args,
    catalog: &wirelab_spec::Catalog,
) -> Result<(wirelab_fuzz::Loaded, Settings)> {
    let (loaded, dir, seed, jobs, mode) = match (&args.resume, &args.target) {
        (Some(dir), _) => {
            let meta =
                campaign::read_meta(dir).with_context(|| format!("--resume {}", dir.display()))?;
            if args.seed.is_some() || args.jobs.is_some() || args.random || args.device.is_some() {
                bail!("--resume continues with the campaign's own seed, labs, mode and device; leave out --seed, --jobs, --random and --device");
            }
            let loaded = wirelab_fuzz::target::from_text(
                &meta.target,
                Path::new(&meta.target_path),
                meta.device.as_deref(),
                catalog,
            )?;
            (loaded, dir.clone(), meta.seed, meta.jobs, meta.mode)
        }
        (None, Some(t)) => {
            let loaded = wirelab_fuzz::load(t, args.device.as_deref(), catalog)?;
            let stem = t
                .file_stem()
                .map_or("target".into(), |s| s.to_string_lossy().into_owned());
            let dir = args
                .out
                .join(format!("fuzz-{stem}-{}", wirelab_lab::new_run_id()));
            let jobs = args.jobs.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
            });
            if jobs == 0 {
                bail!("--jobs: at least 1");
            }
            let mode = if args.random {
                Mode::Random
            } else {
                Mode::Genetic
            };
            (
                loaded,
                dir,
                args.seed.unwrap_or_else(rand::random),
                jobs,
                mode,
            )
        }
        (None, None) => bail!("name a target file, or --resume a campaign folder"),
    };
    let mut stop = loaded.target.stop.clone();
    if let Some(r) = args.runs {
        if r == 0 {
            bail!("--runs: at least 1");
        }
        stop.runs = r;
    }
    if args.time.is_some() {
        stop.time = args.time;
    }
    if args.keep_going {
        stop.anomaly = false;
    }
    let settings = Settings {
        dir,
        seed,
        jobs,
        mode,
        stop,
        keep_runs: args.keep_runs,
        save: true,
    };
    Ok((loaded, settings))
}
