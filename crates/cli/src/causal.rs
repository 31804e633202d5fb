//! `wirelab causal TARGET`: ScalaCN's combinatorial causal testing (seed
//! 001 §4.1) over a spec. The target names the spec, the measure
//! (bandwidth or latency, as `wirelab sweep` measures them) and the
//! dimensions, each a field of the spec with its values from the lightest
//! to the heaviest. The design and the analysis are `wirelab_model::causal`
//! (no I/O); the runs go through the run library, as a sweep's do.
//!
//! Output: what degrades (the symptom), each dimension's sensitivity, what
//! permutation removal kept, and the critical path, with the runs behind
//! each step; `causal.json` and `causal.jsonl` (every point) in the
//! results folder.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_yaml::Value;
use wirelab_model::causal::{analyse, Analysis, Design, Measure, Pair, Point};

use crate::code;
use crate::sweep::{self, Vary};

#[derive(clap::Args)]
pub struct Args {
    /// The causal target (YAML): spec, measure, dimensions.
    pub target: PathBuf,
    /// Where the results folder goes.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Labs at once (default: one per core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Stop a run whose workload has not finished after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Test on this eSwitch profile (`flowtables.device`), whatever the
    /// spec says: the same target against each device, the target not
    /// knowing which quirk a device has.
    #[arg(long)]
    pub device: Option<String>,
}

/// A causal target as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    #[serde(default)]
    pub description: Option<String>,
    /// The spec to test, relative to the target.
    pub spec: String,
    /// `bandwidth` (lower is worse) or `latency` (higher is worse).
    pub measure: Measure,
    /// Fields of the spec set for every point (the path must be in the
    /// spec): `{"flowtables.optimise.policy": hit-count}`.
    #[serde(default)]
    pub set: std::collections::BTreeMap<String, serde_json::Value>,
    /// What may cause the symptom: fields of the spec and their values,
    /// lightest first.
    pub dimensions: Vec<Dimension>,
    /// Pairs per dimension in permutation removal (default 8).
    #[serde(default = "eight")]
    pub permutations: usize,
    /// Runs per point; the measure is their median (default 1).
    #[serde(default = "one")]
    pub repeat: u32,
    /// The permutations' seed (default 1).
    #[serde(default = "one_u64")]
    pub seed: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Dimension {
    pub name: String,
    /// The spec's field, dotted with [i] for list items:
    /// `flowtables.generate[0].masks`.
    pub path: String,
    /// Its values, lightest first (at least two).
    pub values: Vec<serde_json::Value>,
}

fn eight() -> usize {
    8
}
fn one() -> u32 {
    1
}
fn one_u64() -> u64 {
    1
}

fn validate(t: &Target) -> Result<(), (String, String)> {
    let bad = |p: String, m: &str| Err((p, m.to_string()));
    if t.dimensions.is_empty() {
        return bad("dimensions".into(), "at least one");
    }
    if t.dimensions.len() > 16 {
        return bad("dimensions".into(), "at most 16");
    }
    for (i, d) in t.dimensions.iter().enumerate() {
        if d.values.len() < 2 {
            return bad(
                format!("dimensions[{i}].values"),
                "at least two: the lightest and the heaviest",
            );
        }
        if let Err(e) = sweep::parse_path(&d.path) {
            return Err((format!("dimensions[{i}].path"), format!("{e:#}")));
        }
        if t.dimensions[..i].iter().any(|o| o.path == d.path) {
            return bad(format!("dimensions[{i}].path"), "a field named twice");
        }
    }
    for p in t.set.keys() {
        if let Err(e) = sweep::parse_path(p) {
            return Err((format!("set.{p}"), format!("{e:#}")));
        }
    }
    if !(1..=200).contains(&t.permutations) {
        return bad("permutations".into(), "1..=200");
    }
    if !(1..=20).contains(&t.repeat) {
        return bad("repeat".into(), "1..=20");
    }
    Ok(())
}

/// The target read and checked, the spec's YAML, and every point made
/// into a spec; any error is the user's (exit 2).
struct Loaded {
    target: Target,
    spec_path: PathBuf,
    design: Design,
    /// What is run, in order: `singles` distinct points, then each pair's
    /// light and heavy point.
    points: Vec<Point>,
    singles: usize,
    /// Distinct points among them.
    combinations: usize,
    /// The points that deliver every packet, made into specs, and their
    /// indices into `points`.
    specs: Vec<sweep::Point>,
    kept: Vec<usize>,
    /// Points whose flow tables would not deliver a connection's packets
    /// (ScalaCN §4.1 (a)): their label and why; never run.
    discarded: Vec<(Vec<String>, Vec<String>)>,
}

fn load(path: &Path, device: Option<&str>) -> Result<Loaded, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let target: Target = wirelab_spec::parse_yaml(&text, validate)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let spec_path = path.parent().unwrap_or(Path::new("")).join(&target.spec);
    let mut doc =
        sweep::read_doc(&spec_path).map_err(|e| format!("{}: spec: {e}", path.display()))?;
    for (p, v) in &target.set {
        let segs = sweep::parse_path(p).expect("validated");
        sweep::set(&mut doc, &segs, p, json_to_yaml(v))
            .map_err(|e| format!("{}: set: {e:#}", path.display()))?;
    }
    if let Some(d) = device {
        let ft = doc
            .get_mut("flowtables")
            .and_then(Value::as_mapping_mut)
            .ok_or_else(|| format!("--device {d}: {} has no flow tables", spec_path.display()))?;
        ft.insert("device".into(), Value::String(d.into()));
    }
    let varies: Vec<Vary> = target
        .dimensions
        .iter()
        .map(|d| Vary {
            path: sweep::parse_path(&d.path).expect("validated"),
            text: d.path.clone(),
            values: d.values.iter().map(json_to_yaml).collect(),
        })
        .collect();
    let design = Design::new(
        &target
            .dimensions
            .iter()
            .map(|d| d.values.len())
            .collect::<Vec<_>>(),
        target.permutations,
        target.seed,
    );
    // The runs: the symptom's and sensitivity's points, then each
    // permutation pair's two points back to back (`Design::pairs`), every
    // other pair heavy first (`heavy_first`).
    let singles = design.points().len();
    let mut points: Vec<Point> = design.points();
    points.resize(singles + 2 * design.pairs().len(), Vec::new());
    for (n, (_, _, l, h)) in design.pairs().into_iter().enumerate() {
        let (light, heavy) = pair_runs(singles, n);
        points[light] = l.clone();
        points[heavy] = h.clone();
    }
    let values: Vec<Vec<Value>> = points
        .iter()
        .map(|p| {
            p.iter()
                .zip(&varies)
                .map(|(&i, v)| v.values[i].clone())
                .collect()
        })
        .collect();
    let all = sweep::make_points(&spec_path, &doc, &varies, values)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // Topological restrictions (§4.1 (a)): a combination whose tables drop
    // a connection's packets, send them elsewhere or loop is not run.
    let (mut specs, mut kept, mut discarded) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in all.into_iter().enumerate() {
        let why = wirelab_plan::plan(&p.spec, "causal", 0)
            .map(|plan| wirelab_plan::reach::undelivered(&plan))
            .map_err(|e| {
                format!(
                    "{}: {} with {}: {e}",
                    path.display(),
                    spec_path.display(),
                    p.label.join(" ")
                )
            })?;
        if why.is_empty() {
            specs.push(p);
            kept.push(i);
        } else if seen.insert(points[i].clone()) {
            discarded.push((p.label, why));
        }
    }
    let combinations = points
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Ok(Loaded {
        target,
        spec_path,
        design,
        points,
        singles,
        combinations,
        specs,
        kept,
        discarded,
    })
}

/// Whether a file is a causal target rather than a spec: a YAML mapping
/// with `measure` and `dimensions` (a spec has neither).
pub fn is_target_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    // Through the spec's parser, which refuses a hostile nesting before
    // the YAML library sees it (serde_yaml took 30 s on 100,000 brackets).
    let Ok(v) = wirelab_spec::parse_yaml::<Value>(&text, |_| Ok(())) else {
        return false;
    };
    v.get("measure").is_some() && v.get("dimensions").is_some()
}

/// Whether the n-th permutation pair runs its heavy point first. With a
/// fixed light-then-heavy order, anything that makes the second of two
/// runs slower (the first lab's teardown still going on, say; not
/// measured) lands on the heavy side of every pair: twice in a row under
/// `make test` a decoy was kept with 4 of 4 pairs degraded. Alternating
/// the order puts such a bias on the light side of half the pairs.
fn heavy_first(n: usize) -> bool {
    n % 2 == 1
}

/// Where the n-th permutation pair's (light, heavy) runs are in the run
/// list, after the `singles` symptom and sensitivity runs: adjacent.
fn pair_runs(singles: usize, n: usize) -> (usize, usize) {
    let first = singles + 2 * n;
    if heavy_first(n) {
        (first + 1, first)
    } else {
        (first, first + 1)
    }
}

/// `wirelab check` on a target: it and every point it makes are valid;
/// how many runs a round.
pub fn check(path: &Path) -> Result<usize, String> {
    load(path, None).map(|l| l.specs.len())
}

fn json_to_yaml(v: &serde_json::Value) -> Value {
    serde_yaml::to_value(v).unwrap_or(Value::Null)
}

/// The measure of a run's row, in the unit printed.
/// A run that FAILed its expectations still measured bandwidth (0 when
/// the bandwidth QP delivered short: the symptom of a device that drops,
/// ScalaCN S8); a latency from it, or anything from an INVALID or ERROR
/// run, is left out.
fn value_of(m: Measure, row: &serde_json::Value) -> Option<f64> {
    match (m, row["verdict"].as_str()) {
        (Measure::Bandwidth, Some("PASS" | "FAIL")) => {
            row["bandwidth_bps"].as_f64().map(|b| b / 1e9)
        }
        (Measure::Latency, Some("PASS")) => row["latency_ns"].as_f64().map(|l| l / 1e3),
        _ => None,
    }
}

fn unit(m: Measure) -> &'static str {
    match m {
        Measure::Bandwidth => "Gbit/s",
        Measure::Latency => "µs",
    }
}

pub fn run(args: Args, abort: &Arc<AtomicBool>) -> Result<u8> {
    let l = match load(&args.target, args.device.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    crate::run::require_root()?;
    let dir = sweep::results_dir(&args.out, "causal", &args.target)?;
    let jobs = sweep::default_jobs(args.jobs);
    let t = &l.target;
    eprintln!(
        "wirelab causal {}: {} dimensions of {}{}, {} combinations in {} runs a round × {} round{}, {jobs} lab{} at once, into {}",
        args.target.display(),
        t.dimensions.len(),
        l.spec_path.display(),
        args.device.as_ref().map_or(String::new(), |d| format!(" on eSwitch profile {d}")),
        l.combinations - l.discarded.len(),
        l.specs.len(),
        t.repeat,
        if t.repeat == 1 { "" } else { "s" },
        if jobs == 1 { "" } else { "s" },
        dir.display()
    );
    let rows = sweep::run_points(
        &l.specs,
        &sweep::Runs {
            dir: &dir,
            jobs,
            repeat: t.repeat,
            of: sweep::Of::Median,
            timeout: Duration::from_secs(args.timeout),
            abort,
        },
    );
    let mut jl = std::fs::File::create(dir.join("causal.jsonl"))?;
    for (_, r) in &rows {
        writeln!(jl, "{r}")?;
    }
    if abort.load(Ordering::SeqCst) {
        eprintln!(
            "wirelab causal: interrupted; the runs so far are in {}",
            dir.display()
        );
        return Ok(code::INTERRUPTED);
    }
    // Rows by the index of what was run.
    let by_run: HashMap<usize, &serde_json::Value> =
        rows.iter().map(|(i, r)| (l.kept[*i], r)).collect();
    let at = |p: &Point| l.points[..l.singles].iter().position(|q| q == p);
    let single = |p: &Point| at(p).and_then(|i| by_run.get(&i).copied());
    let result = |p: &Point| single(p).and_then(|r| value_of(t.measure, r));
    let pair_at: HashMap<(usize, usize), usize> = l
        .design
        .pairs()
        .iter()
        .enumerate()
        .map(|(n, &(d, k, _, _))| ((d, k), n))
        .collect();
    // A pair's two runs of the same round, round by round (a round whose
    // run failed or measured nothing is left out).
    let rounds = |a: usize, b: usize| -> Vec<(f64, f64)> {
        let per = |i: usize| -> Vec<Option<f64>> {
            by_run.get(&i).map_or(Vec::new(), |r| {
                r["rounds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| value_of(t.measure, x))
                    .collect()
            })
        };
        per(a)
            .into_iter()
            .zip(per(b))
            .filter_map(|(x, y)| x.zip(y))
            .collect()
    };
    let pair = |p: Pair| match p {
        Pair::Symptom => match (at(&l.design.base), at(&l.design.heaviest)) {
            (Some(a), Some(b)) => rounds(a, b),
            _ => Vec::new(),
        },
        Pair::Permutation(d, k) => {
            let (light, heavy) = pair_runs(l.singles, pair_at[&(d, k)]);
            rounds(light, heavy)
        }
    };
    let a = analyse(&l.design, t.measure, &result, &pair);
    let folder = |p: &Point| -> serde_json::Value {
        single(p).map_or(serde_json::Value::Null, |r| r["results"].clone())
    };
    if !l.discarded.is_empty() {
        println!(
            "  topology   {} of {} combinations discarded: their flow tables do not deliver (§4.1 (a)); first: {}: {}",
            l.discarded.len(),
            l.combinations,
            l.discarded[0].0.join(" "),
            l.discarded[0].1.join("; ")
        );
    }
    print_report(t, &l.design, &a, &rows);
    let report = serde_json::json!({
        "target": t,
        "device": args.device,
        "spec": l.spec_path,
        "unit": unit(t.measure),
        "analysis": a,
        "names": t.dimensions.iter().map(|d| &d.name).collect::<Vec<_>>(),
        "base_runs": folder(&l.design.base),
        "heaviest_runs": folder(&l.design.heaviest),
        "failed_points": rows.iter().filter(|r| r.1["verdict"] != "PASS").count(),
        "topology": {
            "combinations": l.combinations,
            "discarded": l.discarded.iter().map(|(p, why)| serde_json::json!({"point": p, "why": why})).collect::<Vec<_>>(),
        },
    });
    let path = dir.join("causal.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("  report     {}", path.display());
    Ok(code::OK)
}

fn print_report(t: &Target, d: &Design, a: &Analysis, rows: &[(usize, serde_json::Value)]) {
    let u = unit(t.measure);
    let name = |i: usize| t.dimensions[i].name.as_str();
    let w = t.dimensions.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let f = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.3}"));
    // A degradation shown as the measure's change: bandwidth down, latency up.
    let sign = match t.measure {
        Measure::Bandwidth => -100.0,
        Measure::Latency => 100.0,
    };
    let pct = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{:+.0}%", sign * v));
    let failed = rows.iter().filter(|r| r.1["verdict"] != "PASS").count();
    let left_out = rows
        .iter()
        .filter(|r| value_of(t.measure, &r.1).is_none())
        .count();
    if failed > left_out {
        println!(
            "  {} point(s) FAILed and count with the bandwidth they delivered (0 when short)",
            failed - left_out
        );
    }
    if left_out > 0 {
        println!("  {left_out} point(s) measured nothing and are left out (causal.jsonl says why)");
    }
    println!(
        "  symptom    {} {} {u} with every dimension at its lightest, {} at its heaviest: {} in the median round{}",
        match t.measure {
            Measure::Bandwidth => "bandwidth",
            Measure::Latency => "latency",
        },
        f(a.base),
        f(a.heaviest),
        pct(a.symptom),
        if a.has_symptom() {
            ""
        } else {
            " (under 5%: no symptom to explain)"
        }
    );
    println!("  sensitivity, one dimension at a time from the lightest ({u}):");
    for r in &a.dimensions {
        let dim = &t.dimensions[r.dimension];
        let curve: Vec<String> = dim
            .values
            .iter()
            .zip(&r.sensitivity)
            .map(|(v, m)| format!("{}: {}", show(v), f(*m)))
            .collect();
        println!(
            "    {:w$}  {}   effect {}",
            dim.name,
            curve.join("  "),
            pct(r.effect)
        );
    }
    println!(
        "  permutation removal ({} pairs a dimension, the others permuted, each judged by its median round; kept above 95%):",
        d.permutations.first().map_or(0, Vec::len)
    );
    for r in &a.dimensions {
        println!(
            "    {:w$}  {} of {} degraded by 5% or more   {}",
            name(r.dimension),
            r.degraded,
            r.pairs,
            if r.kept { "kept" } else { "removed" }
        );
    }
    if a.has_symptom() {
        let path: Vec<String> = a
            .critical_path
            .iter()
            .map(|&i| format!("{} ({})", name(i), pct(a.dimensions[i].effect)))
            .collect();
        println!(
            "  critical path: {}",
            if path.is_empty() {
                "no dimension degrades on its own in more than 95% of the permutations".into()
            } else {
                path.join(" → ")
            }
        );
    }
}

fn show(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Target, String> {
        wirelab_spec::parse_yaml(text, validate).map_err(|e| e.to_string())
    }

    #[test]
    fn a_target_names_its_dimensions_and_bad_ones_are_refused_with_path_and_line() {
        let ok = "spec: s.yaml\nmeasure: bandwidth\ndimensions:\n  - {name: masks, path: 'flowtables.generate[0].masks', values: [0, 100]}\n";
        let t = parse(ok).unwrap();
        assert_eq!((t.permutations, t.repeat, t.seed), (8, 1, 1));
        for (text, want) in [
            (
                ok.replace("[0, 100]", "[0]"),
                "dimensions[0].values: at least two: the lightest and the heaviest (line 4)",
            ),
            (
                ok.replace("bandwidth", "goodput"),
                "measure: unknown variant `goodput`, expected `bandwidth` or `latency` (line 2)",
            ),
            (
                ok.replace("generate[0]", "generate[x]"),
                "dimensions[0].path: `x` is not an index or *: invalid digit found in string (line 4)",
            ),
            (
                ok.to_string() + "permutations: 0\n",
                "permutations: 1..=200 (line 5)",
            ),
            (
                ok.to_string()
                    + "  - {name: again, path: 'flowtables.generate[0].masks', values: [1, 2]}\n",
                "dimensions[1].path: a field named twice (line 5)",
            ),
        ] {
            assert_eq!(parse(&text).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn pairs_run_back_to_back_every_other_one_heavy_first() {
        assert_eq!(pair_runs(7, 0), (7, 8));
        assert_eq!(pair_runs(7, 1), (10, 9));
        assert_eq!(pair_runs(7, 2), (11, 12));
        assert_eq!(pair_runs(7, 3), (14, 13));
    }

    #[test]
    fn a_target_whose_point_is_not_a_valid_spec_is_refused_before_any_lab() {
        let dir = tempfile::tempdir().unwrap();
        let spec = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../specs/scalacn/write-searches-200-masks-before-its-own.yaml"),
        )
        .unwrap();
        std::fs::write(dir.path().join("s.yaml"), spec).unwrap();
        let t = dir.path().join("t.yaml");
        std::fs::write(
            &t,
            "spec: s.yaml\nmeasure: latency\ndimensions:\n  - {name: masks, path: 'flowtables.generate.masks', values: [0, 300]}\n",
        )
        .unwrap();
        let e = load(&t, None).err().expect("300 masks do not fit");
        assert!(
            e.contains("flowtables.generate.masks=300") && e.contains("a table holds 256"),
            "{e}"
        );
        // A dimension that sends the write to the wrong host: those
        // combinations are discarded before any lab (§4.1 (a)).
        std::fs::write(
            &t,
            "spec: s.yaml\nmeasure: latency\ndimensions:\n  - {name: masks, path: 'flowtables.generate.masks', values: [0, 100]}\n  - {name: to, path: 'flowtables.tables[0].masks[0].entries[0].to', values: [responder, requester]}\n",
        )
        .unwrap();
        let bad = load(&t, None).unwrap();
        assert_eq!((bad.combinations, bad.discarded.len()), (4, 2));
        assert_eq!(bad.specs.len(), bad.points.len() / 2);
        // The heaviest point runs second (`Design::points`): in run order,
        // the write behind 100 masks is discarded first.
        let why: Vec<&str> = bad.discarded.iter().map(|d| d.1[0].as_str()).collect();
        assert_eq!(
            why,
            [
                "connection 1 requester to responder: sent to requester by table 0 mask 100",
                "connection 1 requester to responder: sent to requester by table 0 mask 0"
            ]
        );
        assert!(bad.specs.iter().all(|p| p.label[1].ends_with("=responder")));
        std::fs::write(
            &t,
            "spec: s.yaml\nmeasure: latency\ndimensions:\n  - {name: masks, path: 'flowtables.generate.masks', values: [0, 100]}\n  - {name: entries, path: 'flowtables.generate.entries', values: [1, 8]}\npermutations: 3\n",
        )
        .unwrap();
        let l = load(&t, None).unwrap();
        assert!(l.discarded.is_empty());
        // Base, heaviest, the sensitivity points and the permuted pairs,
        // each once.
        // The 4 combinations once each for the symptom and sensitivity
        // (4 of them: the base, one step each, the heaviest), then 3 pairs
        // a dimension (2 combinations of the other: 2 pairs), 2 runs each.
        assert_eq!((l.singles, l.combinations), (4, 4));
        assert_eq!(l.points.len(), 4 + 2 * (2 + 2));
        assert_eq!(l.specs.len(), l.points.len());
        assert_eq!(
            l.specs[0].label,
            vec![
                "flowtables.generate.masks=0",
                "flowtables.generate.entries=1"
            ]
        );
    }
}
