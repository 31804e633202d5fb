//! A campaign: Algorithm 1 driven over N labs at once, every run recorded
//! in its folder, anomalies shrunk, confirmed and saved as specs.
//!
//! Determinism with parallel labs: candidate k is generated right after
//! the score of candidate k − jobs is applied, and scores are applied in
//! candidate order (a result that comes back early waits). The sequence of
//! specs then depends on the seed, the number of labs and the scores only,
//! never on which lab finished first, and a campaign resumes by replaying
//! its records through the same steps: same seed, same records, same specs.
//!
//! The folder:
//! - `campaign.json`: seed, labs, mode, device; at the end, the outcome;
//! - `target.yaml`: the target as it was read;
//! - `runs.jsonl`: one line per run (number, spec hash, parent, score, each
//!   objective's s, verdict, what the run showed), appended as runs end;
//! - `baselines.jsonl`: the runs without events the MCT objectives compare with;
//! - `specs/<hash>.yaml`: every spec run;
//! - `anomalies/<n>-<objective>.yaml`: shrunk, confirmed specs;
//! - `shrink.jsonl`: the runs shrinking and confirming spent;
//! - `report.html`: score over the campaign, the pool, the anomalies;
//! - `runs/`: the results folders of the runs that showed an anomaly
//!   (all of them with `keep_runs`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wirelab_spec::{Catalog, Spec};

use crate::mutate::{self, Mutator};
use crate::score::{self, Against, Observation, Score};
use crate::search::{Candidate, Mode, Search};
use crate::shrink;
use crate::target::{Loaded, Stop};

pub const SCHEMA: &str = "wirelab.fuzz/1";

/// Runs one spec in a lab (or anywhere: a test's oracle, a Ray task).
pub trait Runner: Sync {
    /// `label` names the run uniquely within the campaign (`run-12`,
    /// `base-3fa2…`, `shrink-4`); `seed` fixes its random choices.
    fn run(&self, spec: &Spec, label: &str, seed: u64) -> Observation;
    /// Removes a run's results folder (its record keeps what scoring
    /// needs), wherever the run was made.
    fn forget(&self, o: &Observation) {
        if let Some(d) = &o.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Told of the campaign's progress.
pub trait Watch: Sync {
    fn ran(&self, _r: &Record, _s: &Stats) {}
    /// A phase began: `shrinking latency(...)`, `confirming ...`.
    fn phase(&self, _what: &str) {}
}

pub struct Silent;
impl Watch for Silent {}

/// One search run, as `runs.jsonl` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub n: u64,
    pub hash: String,
    pub parent: Option<String>,
    /// Σ w_i · s(i).
    pub score: f64,
    /// s(i) per objective.
    pub s: Vec<f64>,
    /// The objectives at or past their threshold, by label.
    pub anomalies: Vec<String>,
    /// It joined the pool (Algorithm 1 lines 9–12).
    pub joined: bool,
    /// The pool's median when it was judged.
    pub median: f64,
    /// The pool's size and distinct specs after it was judged.
    #[serde(default)]
    pub pool: usize,
    #[serde(default)]
    pub distinct: usize,
    /// The baseline it was scored against (the same spec without events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The run on the reference device it was scored against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub ms: u64,
    pub observation: Observation,
}

/// Where the campaign is.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub runs: u64,
    /// Runs the budget allows.
    pub budget: u64,
    pub best: f64,
    pub anomalies: usize,
    pub pool: usize,
    pub distinct: usize,
    pub elapsed_ms: u64,
}

/// How to run a campaign.
#[derive(Debug, Clone)]
pub struct Settings {
    pub dir: PathBuf,
    pub seed: u64,
    /// Labs at once.
    pub jobs: u32,
    pub mode: Mode,
    pub stop: Stop,
    /// Keep every run's results folder, not only the anomalies'.
    pub keep_runs: bool,
    /// Shrink and save the anomalies that reproduce (a benchmark that
    /// counts runs to the first confirmed anomaly only re-runs them).
    pub save: bool,
}

/// What `campaign.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub schema: String,
    /// The target file's text, and where it was (its seed is named
    /// relative to it).
    pub target: String,
    pub target_path: String,
    pub seed: u64,
    pub jobs: u32,
    pub mode: Mode,
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    Anomaly,
    Runs,
    Time,
    Interrupted,
}

impl Stopped {
    pub fn describe(self) -> &'static str {
        match self {
            Stopped::Anomaly => "anomaly found",
            Stopped::Runs => "run budget spent",
            Stopped::Time => "time is up",
            Stopped::Interrupted => "interrupted",
        }
    }
}

/// An anomaly the campaign found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Anomaly {
    /// The objective's label.
    pub objective: String,
    /// The run that showed it.
    pub run: u64,
    pub hash: String,
    pub s: f64,
    /// Runs of the spec as found (with the `expect:` written for it) that
    /// showed it again and failed that `expect:`, of `confirm`. Below
    /// `confirm`, the anomaly did not reproduce and was not shrunk.
    pub reproduced: u32,
    /// The saved spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub shrink_runs: u32,
    pub steps: Vec<String>,
    /// Runs of the saved spec that showed it and failed its `expect:`, of `confirm`.
    pub confirmed: u32,
    pub confirm: u32,
}

impl Anomaly {
    /// Shown again every time it was re-run as found.
    pub fn confirmed(&self) -> bool {
        self.reproduced == self.confirm
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub stopped: Stopped,
    pub runs: u64,
    /// Runs spent on baselines.
    pub baseline_runs: u64,
    pub best: f64,
    /// Confirmed anomalies, with their saved specs.
    pub anomalies: Vec<Anomaly>,
    /// Runs that scored as anomalies but did not show it again when re-run
    /// (lab noise, or a behaviour that needs luck): not saved.
    pub unconfirmed: Vec<Anomaly>,
    pub elapsed_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}")]
    Resume(String),
}

fn io(what: impl Fn() -> String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::Io(what(), e)
}

/// Reads a folder's `campaign.json`.
pub fn read_meta(dir: &Path) -> Result<Meta, Error> {
    let p = dir.join("campaign.json");
    let text = std::fs::read_to_string(&p).map_err(io(|| p.display().to_string()))?;
    serde_json::from_str(&text).map_err(|e| Error::Resume(format!("{}: {e}", p.display())))
}

/// Reads a JSON-lines file; a last line cut short by a kill is dropped.
fn read_lines<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<Vec<T>, Error> {
    let f = match std::fs::File::open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::Io(p.display().to_string(), e)),
    };
    let lines: Vec<String> = std::io::BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(io(|| p.display().to_string()))?;
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match serde_json::from_str(l) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => {
                return Err(Error::Resume(format!(
                    "{} line {}: {e}",
                    p.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(out)
}

struct Appender(std::fs::File, PathBuf);

impl Appender {
    fn open(p: PathBuf) -> Result<Appender, Error> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(io(|| p.display().to_string()))?;
        Ok(Appender(f, p))
    }
    /// One whole line per write, so a kill leaves at most a cut last line.
    fn push<T: Serialize>(&mut self, v: &T) -> Result<(), Error> {
        let mut line = serde_json::to_string(v).expect("records serialise");
        line.push('\n');
        self.0
            .write_all(line.as_bytes())
            .map_err(io(|| self.1.display().to_string()))
    }
}

/// The YAML a campaign writes for a spec: fields left at their defaults
/// (`null`, empty lists and maps) are left out, as a person writes it.
pub fn tidy_yaml(spec: &Spec) -> String {
    fn tidy(v: &mut serde_yaml::Value) {
        match v {
            serde_yaml::Value::Mapping(m) => {
                for (_, x) in m.iter_mut() {
                    tidy(x);
                }
                m.retain(|_, x| match x {
                    serde_yaml::Value::Null => false,
                    serde_yaml::Value::Sequence(s) => !s.is_empty(),
                    serde_yaml::Value::Mapping(m) => !m.is_empty(),
                    _ => true,
                });
            }
            serde_yaml::Value::Sequence(s) => s.iter_mut().for_each(tidy),
            _ => {}
        }
    }
    let mut v = serde_yaml::to_value(spec).expect("a spec serialises");
    tidy(&mut v);
    serde_yaml::to_string(&v).expect("a value serialises")
}

/// A run's seed, from the campaign's and the run's label: its QPNs and
/// PSNs are then fixed by the campaign.
fn run_seed(seed: u64, label: &str) -> u64 {
    label.bytes().fold(seed ^ 0x9e37_79b9_7f4a_7c15, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

struct Job {
    n: u64,
    spec: Spec,
}

struct Done {
    n: u64,
    obs: Observation,
    base: Option<(String, Observation, bool)>,
    reference: Option<(String, Observation, bool)>,
    ms: u64,
}

/// Runs (or resumes) a campaign in `settings.dir`. Returns when a stop
/// condition holds or `abort` is set. An anomaly is re-run `confirm` times
/// as found; one that shows again every time is shrunk, confirmed and
/// saved, and one that does not is set aside while the search goes on.
pub fn run(
    loaded: &Loaded,
    catalog: &Catalog,
    settings: &Settings,
    runner: &dyn Runner,
    watch: &dyn Watch,
    abort: &AtomicBool,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let dir = &settings.dir;
    for d in [dir.clone(), dir.join("specs"), dir.join("anomalies")] {
        std::fs::create_dir_all(&d).map_err(io(|| d.display().to_string()))?;
    }
    let meta_path = dir.join("campaign.json");
    if !meta_path.exists() {
        let meta = Meta {
            schema: SCHEMA.into(),
            target: loaded.text.clone(),
            target_path: loaded.path.display().to_string(),
            seed: settings.seed,
            jobs: settings.jobs,
            mode: settings.mode,
            device: loaded.target.device.clone(),
            outcome: None,
        };
        write_json(&meta_path, &meta)?;
        let t = dir.join("target.yaml");
        std::fs::write(&t, &loaded.text).map_err(io(|| t.display().to_string()))?;
    }
    let recorded: Vec<Record> = read_lines(&dir.join("runs.jsonl"))?;
    let baselines: HashMap<String, Observation> =
        read_lines::<(String, Observation)>(&dir.join("baselines.jsonl"))?
            .into_iter()
            .collect();
    let mut runs_out = Appender::open(dir.join("runs.jsonl"))?;
    let mut base_out = Appender::open(dir.join("baselines.jsonl"))?;
    let mut shrink_out = Appender::open(dir.join("shrink.jsonl"))?;

    let t = &loaded.target;
    let needs_base = t.objectives.iter().any(|o| o.kind.needs_baseline());
    let reference = t.reference();
    let mutator = Mutator {
        space: &t.space,
        catalog,
        max_changes: t.pool.mutations,
    };
    let mut search = Search::new(
        mutator,
        loaded.seed.clone(),
        settings.seed,
        t.pool.size,
        t.pool.capacity,
        t.pool.keep_probability,
        settings.mode,
    );
    let budget = u64::from(settings.stop.runs);
    let jobs = u64::from(settings.jobs.max(1));
    let mut stats = Stats {
        budget,
        ..Default::default()
    };
    // Anomalies seen in this search phase, per objective: the first run.
    // (run, spec, what it showed, its run on the reference device, s)
    type Found = (u64, Spec, Observation, Option<Observation>, f64);
    let mut found: BTreeMap<usize, Found> = BTreeMap::new();
    let mut anomalies: Vec<Anomaly> = Vec::new();
    let mut unconfirmed: Vec<Anomaly> = Vec::new();
    let mut stopped = None;
    let mut baseline_runs = 0u64;
    let base_cache = Mutex::new(baselines);
    let time_up = || settings.stop.time.is_some_and(|t| started.elapsed() >= t);

    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let job_rx = Mutex::new(job_rx);
    std::thread::scope(|scope| -> Result<(), Error> {
        let (done_tx, done_rx) = mpsc::channel::<Done>();
        for _ in 0..jobs {
            let (job_rx, done_tx, base_cache) = (&job_rx, done_tx.clone(), &base_cache);
            scope.spawn(move || loop {
                let job = match job_rx.lock().expect("not poisoned").recv() {
                    Ok(j) => j,
                    Err(_) => return,
                };
                if abort.load(Ordering::SeqCst) {
                    return;
                }
                let t0 = Instant::now();
                let seed = settings.seed;
                let base = needs_base.then(|| {
                    companion(
                        &job.spec,
                        Companion::Base,
                        runner,
                        seed,
                        Some(base_cache),
                        "",
                    )
                });
                let reference = reference.map(|d| {
                    let which = Companion::Reference(d);
                    companion(&job.spec, which, runner, seed, Some(base_cache), "")
                });
                let label = format!("run-{}", job.n);
                // A run that panics is recorded as a failed run: the
                // campaign waits for every candidate's result in order, and
                // one never sent would hold it for ever.
                let obs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runner.run(&job.spec, &label, run_seed(settings.seed, &label))
                }))
                .unwrap_or_else(|p| {
                    let why = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Observation::failed(format!("the run panicked: {why}"))
                });
                let ms = t0.elapsed().as_millis() as u64;
                if done_tx
                    .send(Done {
                        n: job.n,
                        obs,
                        base,
                        reference,
                        ms,
                    })
                    .is_err()
                {
                    return;
                }
            });
        }
        drop(done_tx);

        let mut pending: VecDeque<Candidate> = VecDeque::new();
        let mut arrived: HashMap<u64, Done> = HashMap::new();
        let issue = |search: &mut Search, pending: &mut VecDeque<Candidate>| -> Result<(), Error> {
            let c = search.propose();
            match recorded.get(c.n as usize) {
                Some(r) if r.hash != c.hash => {
                    return Err(Error::Resume(format!(
                        "run {} was spec {} but the target now gives {}: the target, its seed or wirelab changed since; start a new campaign",
                        c.n, r.hash, c.hash
                    )))
                }
                Some(_) => {}
                None => {
                    let p = dir.join("specs").join(format!("{}.yaml", c.hash));
                    if !p.exists() {
                        std::fs::write(&p, tidy_yaml(&c.spec)).map_err(io(|| p.display().to_string()))?;
                    }
                    job_tx
                        .send(Job {
                            n: c.n,
                            spec: c.spec.clone(),
                        })
                        .expect("workers wait for jobs");
                }
            }
            pending.push_back(c);
            Ok(())
        };
        loop {
            // The search (Algorithm 1), `jobs` candidates in flight.
            while (pending.len() as u64) < jobs && search.issued() < budget && stopped.is_none() {
                issue(&mut search, &mut pending)?;
            }
            while let Some(c) = pending.front().cloned() {
                let (rec, replayed) = match recorded.get(c.n as usize) {
                    Some(r) => (r.clone(), true),
                    None => {
                        let done = loop {
                            if let Some(d) = arrived.remove(&c.n) {
                                break Some(d);
                            }
                            if abort.load(Ordering::SeqCst) {
                                break None;
                            }
                            match done_rx.recv_timeout(Duration::from_millis(200)) {
                                Ok(d) => {
                                    arrived.insert(d.n, d);
                                }
                                Err(mpsc::RecvTimeoutError::Timeout) => {}
                                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                            }
                        };
                        let Some(d) = done.filter(|d| d.obs.verdict != "INTERRUPTED") else {
                            // Not recorded: a resumed campaign runs it again.
                            stopped = Some(Stopped::Interrupted);
                            break;
                        };
                        let mut keep = |c: Option<(String, Observation, bool)>| {
                            c.map(|(h, o, fresh)| {
                                if fresh {
                                    baseline_runs += 1;
                                    let _ = base_out.push(&(&h, &o));
                                    if !settings.keep_runs {
                                        runner.forget(&o);
                                    }
                                }
                                (h, o)
                            })
                        };
                        let (base, reference) = (keep(d.base), keep(d.reference));
                        let against = Against {
                            base: base.as_ref().map(|b| &b.1),
                            reference: reference.as_ref().map(|r| &r.1),
                        };
                        let sc = score::score(&t.objectives, &d.obs, against);
                        let mut rec = record(&c, sc, d.obs, base.map(|b| b.0), d.ms, &t.objectives);
                        rec.reference = reference.map(|r| r.0);
                        (rec, false)
                    }
                };
                pending.pop_front();
                let median = search.median();
                let joined = search.report_behaviours(&c, rec.score, &rec.observation.behaviours());
                let rec = Record {
                    joined,
                    median,
                    pool: search.pool_len(),
                    distinct: search.distinct(),
                    ..rec
                };
                if !replayed {
                    runs_out.push(&rec)?;
                }
                let s = Score {
                    s: rec.s.clone(),
                    total: rec.score,
                };
                let settled = |i: usize| {
                    anomalies
                        .iter()
                        .any(|a| a.objective == t.objectives[i].label())
                };
                let new: Vec<usize> = s.anomalies().into_iter().filter(|&i| !settled(i)).collect();
                for &i in &new {
                    found.entry(i).or_insert_with(|| {
                        let on_reference = rec
                            .reference
                            .as_ref()
                            .and_then(|h| base_cache.lock().expect("not poisoned").get(h).cloned());
                        (
                            c.n,
                            c.spec.clone(),
                            rec.observation.clone(),
                            on_reference,
                            s.s[i],
                        )
                    });
                }
                if s.anomalies().is_empty() && !settings.keep_runs && !replayed {
                    runner.forget(&rec.observation);
                }
                stats.runs += 1;
                stats.best = stats.best.max(rec.score);
                stats.anomalies = anomalies.len() + found.len();
                stats.pool = search.pool_len();
                stats.distinct = search.distinct();
                stats.elapsed_ms = started.elapsed().as_millis() as u64;
                watch.ran(&rec, &stats);
                if stopped.is_none() {
                    if !new.is_empty() && settings.stop.anomaly {
                        stopped = Some(Stopped::Anomaly);
                    } else if time_up() {
                        stopped = Some(Stopped::Time);
                    }
                }
                if stopped.is_none() && search.issued() < budget {
                    issue(&mut search, &mut pending)?;
                }
            }
            if abort.load(Ordering::SeqCst) || stopped == Some(Stopped::Interrupted) {
                stopped = Some(Stopped::Interrupted);
                break;
            }
            // Settle what this phase found.
            let mut confirmed_now = 0;
            for (i, (n, spec, obs, on_reference, sv)) in std::mem::take(&mut found) {
                let ob = &t.objectives[i];
                let mut a = Anomaly {
                    objective: ob.label(),
                    run: n,
                    hash: mutate::hash(&spec),
                    s: sv,
                    reproduced: 0,
                    file: None,
                    shrink_runs: 0,
                    steps: Vec::new(),
                    confirmed: 0,
                    confirm: t.shrink.confirm,
                };
                {
                    let mut cx = Settle {
                        loaded,
                        catalog,
                        settings,
                        runner,
                        watch,
                        abort,
                        cache: &base_cache,
                        out: &mut shrink_out,
                        k: 0,
                    };
                    cx.settle(&mut a, i, &spec, (obs, on_reference))?;
                }
                if a.confirmed() {
                    confirmed_now += 1;
                    anomalies.push(a);
                } else {
                    unconfirmed.push(a);
                }
            }
            if abort.load(Ordering::SeqCst) {
                stopped = Some(Stopped::Interrupted);
                break;
            }
            // Nothing reproduced: the search goes on where it stopped, or
            // ends for the reason it would have ended without the find.
            if stopped == Some(Stopped::Anomaly) && confirmed_now == 0 {
                stopped = None;
                if search.issued() < budget && !time_up() {
                    continue;
                }
            }
            break;
        }
        drop(job_tx);
        Ok(())
    })?;
    let stopped = stopped.unwrap_or(if time_up() {
        Stopped::Time
    } else {
        Stopped::Runs
    });
    let outcome = Outcome {
        stopped,
        runs: stats.runs,
        baseline_runs,
        best: stats.best,
        anomalies,
        unconfirmed,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    let mut meta = read_meta(dir)?;
    meta.outcome = Some(outcome.clone());
    write_json(&meta_path, &meta)?;
    let records: Vec<Record> = read_lines(&dir.join("runs.jsonl"))?;
    let page = crate::report::render(&meta, &t.objectives, &records, &outcome);
    let p = dir.join("report.html");
    std::fs::write(&p, page).map_err(io(|| p.display().to_string()))?;
    Ok(outcome)
}

fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(v).expect("serialises");
    // Written beside and renamed over, so a kill never leaves half a file.
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(io(|| tmp.display().to_string()))?;
    std::fs::rename(&tmp, p).map_err(io(|| p.display().to_string()))
}

fn record(
    c: &Candidate,
    sc: Score,
    obs: Observation,
    base: Option<String>,
    ms: u64,
    objectives: &[crate::target::Objective],
) -> Record {
    Record {
        n: c.n,
        hash: c.hash.clone(),
        parent: c.parent.clone(),
        anomalies: sc
            .anomalies()
            .iter()
            .map(|&i| objectives[i].label())
            .collect(),
        score: sc.total,
        s: sc.s,
        joined: false,
        median: 0.0,
        pool: 0,
        distinct: 0,
        base,
        reference: None,
        ms,
        observation: obs,
    }
}

/// A run a candidate is compared with.
#[derive(Debug, Clone, Copy)]
enum Companion<'a> {
    /// The same spec without its events.
    Base,
    /// The same spec on the reference device.
    Reference(&'a str),
}

/// A companion run of `spec`, from `cache` or made now (`true`: made now;
/// without a cache, always made now). `tag` makes the label of a fresh
/// run unique.
fn companion(
    spec: &Spec,
    which: Companion,
    runner: &dyn Runner,
    seed: u64,
    cache: Option<&Mutex<HashMap<String, Observation>>>,
    tag: &str,
) -> (String, Observation, bool) {
    let mut b = spec.clone();
    let kind = match which {
        Companion::Base => {
            b.events.clear();
            "base"
        }
        Companion::Reference(d) => {
            crate::target::set_device(&mut b, d);
            "ref"
        }
    };
    let h = mutate::hash(&b);
    let label = format!("{kind}-{h}{tag}");
    let Some(cache) = cache else {
        let o = runner.run(&b, &label, run_seed(seed, &label));
        return (h, o, true);
    };
    if let Some(o) = cache.lock().expect("not poisoned").get(&h) {
        return (h, o.clone(), false);
    }
    let o = runner.run(&b, &label, run_seed(seed, &label));
    cache
        .lock()
        .expect("not poisoned")
        .insert(h.clone(), o.clone());
    (h, o, true)
}

/// A sentence for a saved spec's description.
fn what_it_is(ob: &crate::target::Objective) -> String {
    use crate::target::Kind;
    let finding = ob.finding.as_deref().unwrap_or_default();
    match ob.kind {
        Kind::Violations => "an analyzer reports violations".into(),
        Kind::Counters => "a counter disagrees with the trace".into(),
        Kind::Latency if ob.reference => format!(
            "{finding} is more than {} beyond the reference device's",
            ob.above.map(|a| a.to_string()).unwrap_or_default()
        ),
        Kind::Latency => format!(
            "{finding} is above {}",
            ob.above.map(|a| a.to_string()).unwrap_or_default()
        ),
        Kind::Differs => format!("{finding} differs from the reference device's"),
        Kind::MctInflation => format!(
            "a message takes over {}x as long as without the events",
            ob.above_baseline.unwrap_or_default()
        ),
        Kind::NoisyNeighbour => "connections no event touches are slowed by the others'".into(),
        Kind::Unfairness => "goodput is shared unfairly".into(),
    }
}

/// What settling an anomaly needs.
struct Settle<'a> {
    loaded: &'a Loaded,
    catalog: &'a Catalog,
    settings: &'a Settings,
    runner: &'a dyn Runner,
    watch: &'a dyn Watch,
    abort: &'a AtomicBool,
    cache: &'a Mutex<HashMap<String, Observation>>,
    out: &'a mut Appender,
    /// Runs made, for their labels.
    k: u64,
}

/// A run and its run on the reference device.
type Seen = (Observation, Option<Observation>);

impl Settle<'_> {
    /// One run of `s` scored on objective `i` (with a fresh run on the
    /// reference device when it compares with one): what it showed and s,
    /// or None once interrupted. Kept in `shrink.jsonl`.
    fn trial(&mut self, s: &Spec, i: usize, what: &str) -> Option<(Seen, f64)> {
        if self.abort.load(Ordering::SeqCst) {
            return None;
        }
        self.k += 1;
        let (runner, seed, tag) = (
            self.runner,
            self.settings.seed,
            format!("-{what}-{}", self.k),
        );
        let ob = &self.loaded.target.objectives[i];
        let base = ob
            .kind
            .needs_baseline()
            .then(|| companion(s, Companion::Base, runner, seed, Some(self.cache), "").1);
        // Fresh every time: a reference run that happened to be quick
        // must not confirm an anomaly three times over.
        let reference = self
            .loaded
            .target
            .reference()
            .filter(|_| ob.reference)
            .map(|d| companion(s, Companion::Reference(d), runner, seed, None, &tag).1);
        let label = format!("{what}-{}", self.k);
        let o = runner.run(s, &label, run_seed(seed, &label));
        let against = Against {
            base: base.as_ref(),
            reference: reference.as_ref(),
        };
        let sc = score::score(std::slice::from_ref(ob), &o, against);
        let _ = self.out.push(&serde_json::json!({
            "what": what, "objective": ob.label(), "hash": mutate::hash(s),
            "s": sc.s[0], "verdict": o.verdict, "observation": &o, "reference": &reference,
        }));
        // The runs that confirm a saved spec are its evidence; the rest go.
        if !self.settings.keep_runs {
            reference.iter().for_each(|r| runner.forget(r));
            if what == "shrink" {
                runner.forget(&o);
            }
        }
        if o.verdict == "INTERRUPTED" {
            return None;
        }
        Some(((o, reference), sc.s[0]))
    }

    /// Runs `spec` `confirm` times: how often it showed the anomaly and
    /// failed its `expect:`.
    fn confirm(&mut self, spec: &Spec, i: usize, what: &str) -> u32 {
        let mut n = 0;
        for _ in 0..self.loaded.target.shrink.confirm {
            match self.trial(spec, i, what) {
                Some(((o, _), s)) if s >= 1.0 && o.verdict == "FAIL" => n += 1,
                Some(_) => {}
                None => break,
            }
        }
        n
    }

    /// `spec` with the claims that state objective `i`'s anomaly as `seen` showed it.
    fn with_expect(&self, spec: &Spec, i: usize, seen: &Seen) -> Spec {
        let ob = &self.loaded.target.objectives[i];
        let base = ob.kind.needs_baseline().then(|| {
            let mut b = spec.clone();
            b.events.clear();
            let h = mutate::hash(&b);
            self.cache.lock().expect("not poisoned").get(&h).cloned()
        });
        let base = base.flatten();
        let against = Against {
            base: base.as_ref(),
            reference: seen.1.as_ref(),
        };
        let mut s = spec.clone();
        s.expect = score::expectations(ob, &seen.0, against);
        let stem = self
            .loaded
            .seed
            .name
            .clone()
            .unwrap_or_else(|| "spec".into());
        s.name = Some(format!("{stem}-{}-{}", ob.kind.name(), mutate::hash(spec)));
        // The seed's sentence described the seed; this one says what the
        // spec shows (its header comment says how it was found).
        s.description = Some(format!(
            "Found by `wirelab fuzz` from {stem}: {} (objective {}). The expect: \
             below holds where the anomaly is absent and fails where it shows.",
            what_it_is(ob),
            ob.label()
        ));
        s
    }

    /// Re-runs anomaly `a` (objective `i`) as found; if it shows every
    /// time, shrinks it, confirms the shrunk spec and saves the smallest
    /// spec that reproduced every time.
    fn settle(&mut self, a: &mut Anomaly, i: usize, spec: &Spec, seen: Seen) -> Result<(), Error> {
        let k = self.loaded.target.shrink.confirm;
        let found = self.with_expect(spec, i, &seen);
        self.watch.phase(&format!(
            "re-running {} (run {}) {k} times",
            a.objective, a.run
        ));
        a.reproduced = self.confirm(&found, i, "reproduce");
        if a.reproduced < k {
            self.watch.phase(&format!(
                "{}: shown again {} of {k} times; not saved, the search goes on",
                a.objective, a.reproduced
            ));
            return Ok(());
        }
        if !self.settings.save {
            return Ok(());
        }
        self.watch
            .phase(&format!("shrinking {} (run {})", a.objective, a.run));
        let mut last: (Spec, Seen) = (spec.clone(), seen);
        let budget = self.loaded.target.shrink.max_runs;
        let catalog = self.catalog;
        let shrunk = shrink::shrink(spec, catalog, budget, |s: &Spec| {
            match self.trial(s, i, "shrink") {
                Some((seen, sv)) if sv >= 1.0 => {
                    last = (s.clone(), seen);
                    true
                }
                _ => false,
            }
        });
        a.shrink_runs = shrunk.runs;
        a.steps = shrunk.steps;
        let mut saved = found;
        let mut note = String::new();
        // The shrunk spec is the last one the oracle held on.
        if !a.steps.is_empty() && last.0 == shrunk.spec {
            let small = self.with_expect(&last.0, i, &last.1);
            self.watch
                .phase(&format!("confirming the shrunk {} ({k} runs)", a.objective));
            let c = self.confirm(&small, i, "confirm");
            if c == k {
                saved = small;
                a.confirmed = c;
            } else {
                note = format!(
                    "# The shrunk spec showed it {c} of {k} times; this is the spec as found.\n"
                );
                a.confirmed = a.reproduced;
            }
        } else {
            a.confirmed = a.reproduced;
        }
        if self.abort.load(Ordering::SeqCst) {
            return Ok(());
        }
        let ob = &self.loaded.target.objectives[i];
        let file = self.settings.dir.join("anomalies").join(format!(
            "{:03}-{}.yaml",
            a.run,
            ob.kind.name()
        ));
        let mut text = format!(
            "# An anomaly found by `wirelab fuzz` (Lumina §4, Algorithm 1): {}.\n\
             # Run {} of campaign seed {} (spec {}) scored s = {:.2} on it (1 is the threshold).\n",
            a.objective, a.run, self.settings.seed, a.hash, a.s
        );
        if a.steps.is_empty() {
            text.push_str(&format!(
                "# Shrinking found nothing to remove ({} runs).\n",
                a.shrink_runs
            ));
        } else {
            text.push_str(&format!(
                "# Shrunk in {} runs: {}.\n",
                a.shrink_runs,
                a.steps.join("; ")
            ));
        }
        text.push_str(&note);
        text.push_str(&format!(
            "# Confirmed {} of {k} runs: each showed the anomaly and failed this spec's expect:.\n",
            a.confirmed
        ));
        if saved.expect.is_empty() {
            text.push_str(
                "# No expect: claim can state this anomaly; the runs above measured it.\n",
            );
        }
        text.push_str(&tidy_yaml(&saved));
        std::fs::write(&file, text).map_err(io(|| file.display().to_string()))?;
        a.file = Some(file.display().to_string());
        Ok(())
    }
}
