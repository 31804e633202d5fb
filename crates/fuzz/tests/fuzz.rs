//! The fuzzer without labs: targets, the space, Algorithm 1's selection,
//! shrinking, and campaigns over a scripted runner (determinism with
//! parallel labs, resuming). The lab test is `crates/cli/tests/fuzz.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use wirelab_fuzz::campaign::{self, Runner, Settings, Stopped};
use wirelab_fuzz::mutate::{self, Mutator};
use wirelab_fuzz::score::Observation;
use wirelab_fuzz::search::{Mode, Search};
use wirelab_fuzz::target::{self, Loaded};
use wirelab_spec::{Action, IndexOrAll, Spec, Verb};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn catalog() -> &'static wirelab_spec::Catalog {
    wirelab_analyze::catalog()
}

const TARGET: &str = "\
seed: SEED
space:
  connections: {min: 1, max: 6}
  verbs: [write, read, send]
  verb_combinations: true
  message_size: {min: 1KB, max: 64KB}
  messages: {min: 1, max: 5}
  tx_depth: {min: 1, max: 3}
  mtu: [1024, 4096]
  barrier: true
  events:
    count: {min: 0, max: 5}
    actions: [drop, ecn]
    packet: {min: 1, max: 12}
    iteration: {min: 1, max: 2}
    every_packet: true
  stack:
    min_time_between_cnps: {min: 0us, max: 100us}
    dcqcn_rp: true
objectives:
  - {kind: violations, analyzers: [roce-go-back-n], weight: 2}
  - {kind: latency, finding: roce-retransmission-latency.nack-reaction, above: 100us}
";

fn target_text(extra: &str) -> String {
    let seed = repo().join("specs/roce/write-drop-5th-packet-go-back-n.yaml");
    format!(
        "{}{extra}",
        TARGET.replace("SEED", &seed.display().to_string())
    )
}

/// Algorithm 1 over the test target's space, two fields a mutation:
/// `Search::new` with the rest of its arguments.
fn search(l: &Loaded, seed: u64, init: u32, capacity: u32, p: f64, mode: Mode) -> Search<'_> {
    let m = Mutator {
        space: &l.target.space,
        catalog: catalog(),
        max_changes: 2,
    };
    Search::new(m, l.seed.clone(), seed, init, capacity, p, mode)
}

/// Runs `n` candidates through the search, each scoring `score` and
/// showing `behaviours` (the initial pool, in most tests).
fn fill(s: &mut Search<'_>, n: usize, score: f64, behaviours: &BTreeSet<String>) {
    for _ in 0..n {
        let c = s.propose();
        s.report_behaviours(&c, score, behaviours);
    }
}

fn loaded(extra: &str) -> Loaded {
    target::from_text(
        &target_text(extra),
        Path::new("/nonexistent/t.yaml"),
        None,
        catalog(),
    )
    .unwrap()
}

#[test]
fn target_errors_name_the_yaml_path_and_line() {
    let bad = |from: &str, to: &str| {
        let text = target_text("").replace(from, to);
        target::from_text(&text, Path::new("t.yaml"), None, catalog())
            .unwrap_err()
            .to_string()
    };
    let e = bad(
        "connections: {min: 1, max: 6}",
        "connections: {min: 7, max: 6}",
    );
    assert!(
        e.contains("space.connections: min 7 is above max 6 (line 3)"),
        "{e}"
    );
    let e = bad("above: 100us", "above: 0ns");
    assert!(
        e.contains("objectives[1].above: must be above 0 (line 22)"),
        "{e}"
    );
    let e = bad(
        "kind: latency, finding: roce-retransmission-latency.nack-reaction",
        "kind: latency, finding: roce-retransmission-latency.nack-speed",
    );
    assert!(e.contains("objectives[1].finding: unknown finding"), "{e}");
    let e = bad("actions: [drop, ecn]", "actions: [drop, edit]");
    assert!(e.contains("space.events.actions"), "{e}");
    let e = bad(
        "{kind: violations, analyzers: [roce-go-back-n], weight: 2}",
        "{kind: counters, analyzers: [roce-go-back-n]}",
    );
    assert!(
        e.contains("objectives[0].analyzers: does not apply to `counters`"),
        "{e}"
    );
    let e = bad("seed: ", "seed: /nonexistent/");
    assert!(e.contains("seed:") && e.contains("cannot read spec"), "{e}");
    let e = target::from_text(
        &target_text("device: no-such-nic\n"),
        Path::new("t.yaml"),
        None,
        catalog(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("device:") && e.contains("no-such-nic") && e.contains("(line 23)"),
        "{e}"
    );
}

#[test]
fn the_device_reaches_every_host_and_expect_is_dropped_from_the_seed() {
    let l = target::from_text(
        &target_text(""),
        Path::new("t.yaml"),
        Some("slow-nack-reaction"),
        catalog(),
    )
    .unwrap();
    assert!(l.seed.expect.is_empty());
    assert_eq!(
        l.seed.stack.roce.as_ref().unwrap().profile.as_deref(),
        Some("slow-nack-reaction")
    );
}

/// Every mutant and random point stays inside the declared space and
/// validates as `wirelab check` would.
#[test]
fn mutation_stays_inside_the_space_and_every_mutant_validates() {
    let l = loaded("");
    let space = &l.target.space;
    let m = Mutator {
        space,
        catalog: catalog(),
        max_changes: 3,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut cur = l.seed.clone();
    let mut changed = 0;
    let mut seen_all = false;
    for i in 0..400 {
        let next = if i % 10 == 0 {
            m.random(&l.seed, &mut rng)
        } else {
            m.mutate(&cur, &mut rng)
        };
        changed += usize::from(next != cur);
        wirelab_spec::parse(&mutate::yaml(&next), catalog()).expect("every candidate validates");
        for g in &next.traffic.connections {
            assert!((1..=6).contains(&g.count.0), "{:?}", g.count);
            assert!(
                (1000..=64000).contains(&g.message_size.0),
                "{:?}",
                g.message_size
            );
            assert!((1..=5).contains(&g.messages.0));
            assert!((1..=3).contains(&g.tx_depth.0));
            assert!(matches!(g.mtu, Some(1024 | 4096)));
            assert!(g
                .verb
                .as_slice()
                .iter()
                .all(|v| [Verb::Write, Verb::Read, Verb::Send].contains(v)));
        }
        assert!(next.events.len() <= 5);
        for e in &next.events {
            assert!(matches!(e.action, Action::Drop | Action::Ecn));
            match e.packet {
                IndexOrAll::One(p) => assert!((1..=12).contains(&p.0)),
                IndexOrAll::All => seen_all = true,
            }
            if let IndexOrAll::One(it) = e.iteration {
                assert!((1..=2).contains(&it.0));
            }
        }
        if let Some(r) = &next.stack.roce {
            if let Some(c) = r.min_time_between_cnps {
                assert!(c.0 <= 100_000);
            }
        }
        // Fields outside the space keep the seed's values.
        assert_eq!(next.topology, l.seed.topology);
        assert_eq!(next.traffic.transport, l.seed.traffic.transport);
        cur = next;
    }
    assert!(
        changed > 350,
        "mutation changed only {changed} of 400 candidates"
    );
    assert!(seen_all, "`every_packet` never drew `packet: all`");
}

/// Algorithm 1 lines 9–12 on scripted scores: at or above the pool's
/// median joins; below joins with probability p (0 never, 1 always, and
/// about p of the time in between).
#[test]
fn selection_follows_the_median_rule_with_probability_p() {
    let l = loaded("");
    let mk = |p: f64| search(&l, 11, 4, 10_000, p, Mode::Genetic);
    // The initial pool (4) joins whatever it scores.
    let mut s = mk(0.0);
    for score in [1.0, 2.0, 3.0, 4.0] {
        let c = s.propose();
        assert!(s.report(&c, score));
    }
    assert_eq!(s.median(), 2.5);
    let c = s.propose();
    assert!(
        c.parent.is_some(),
        "after the initial pool, candidates are mutants of a member"
    );
    assert!(!s.report(&c, 2.4), "below the median, p = 0: never");
    let c = s.propose();
    assert!(s.report(&c, 2.5), "at the median: joins");
    assert_eq!(s.pool_len(), 5);
    assert_eq!(s.median(), 2.5);
    let c = s.propose();
    assert!(s.report(&c, 9.0));
    assert_eq!(s.median(), 2.75, "the median moves with the pool");

    let mut s = mk(1.0);
    for score in [5.0, 5.0, 5.0, 5.0] {
        let c = s.propose();
        s.report(&c, score);
    }
    let c = s.propose();
    assert!(s.report(&c, 0.0), "p = 1: always");

    // p = 0.3: the share of below-median candidates that join. Each
    // scores below every member so far, so only the coin lets it in.
    let mut s = mk(0.3);
    for score in [5.0, 5.0, 5.0, 5.0] {
        let c = s.propose();
        s.report(&c, score);
    }
    let mut joined = 0;
    for i in 0..1000 {
        let c = s.propose();
        joined += usize::from(s.report(&c, -f64::from(i)));
    }
    assert!(
        (240..=360).contains(&joined),
        "{joined} of 1000 joined with p = 0.3"
    );
}

/// A full pool drops its lowest scorer for a newcomer; a run scoring 0
/// shows nothing and joins only by the coin, even at a median of 0.
#[test]
fn a_full_pool_replaces_its_lowest_and_zero_scores_take_the_coin() {
    let l = loaded("");
    let mut s = search(&l, 5, 4, 4, 0.0, Mode::Genetic);
    for score in [0.0, 1.0, 2.0, 3.0] {
        let c = s.propose();
        s.report(&c, score);
    }
    let c = s.propose();
    assert!(s.report(&c, 5.0));
    assert_eq!(s.pool_len(), 4);
    assert_eq!(s.median(), 2.5, "0 left the pool: 1, 2, 3, 5");

    let mut s = search(&l, 5, 2, 100, 0.0, Mode::Genetic);
    fill(&mut s, 2, 0.0, &BTreeSet::new());
    assert_eq!(s.median(), 0.0);
    let c = s.propose();
    assert!(!s.report(&c, 0.0), "a zero score at a zero median, p = 0");
    let c = s.propose();
    assert!(s.report(&c, 0.1));
}

/// A member that scored 0 is no guide: drawn as a parent, it gives way to
/// a fresh point of the space. So while nothing has scored the search is
/// random search, and members that scored are the only ones mutated.
#[test]
fn members_that_scored_nothing_are_not_mutated() {
    let l = loaded("");
    let mut s = search(&l, 9, 2, 100, 0.0, Mode::Genetic);
    fill(&mut s, 2, 0.0, &BTreeSet::new());
    for _ in 0..20 {
        let c = s.propose();
        assert!(c.parent.is_none(), "a pool of zeros gave a mutant");
        assert!(!s.report(&c, 0.0));
    }
    let c = s.propose();
    let scored = c.hash.clone();
    assert!(s.report(&c, 0.5));
    let (mut mutants, mut fresh) = (0, 0);
    for _ in 0..60 {
        let c = s.propose();
        match &c.parent {
            Some(p) => {
                assert_eq!(p, &scored, "a mutant of a member that scored 0");
                mutants += 1;
            }
            None => fresh += 1,
        }
        assert!(!s.report(&c, 0.0));
    }
    // One member in three scored: about a third are its mutants.
    assert!(
        (10..=35).contains(&mutants) && fresh > 0,
        "{mutants} mutants and {fresh} fresh points of 60"
    );
}

/// Coverage: a run that scores 0 but shows a behaviour no run had (here a
/// NAK reaction measured for the first time) joins the pool and is
/// mutated; the seed's behaviours are the baseline, a behaviour seen
/// before is nothing new, and random search keeps no such member.
#[test]
fn a_run_that_shows_a_new_behaviour_joins_and_is_mutated() {
    let l = loaded("");
    let set = |b: &[&str]| {
        b.iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    let base = set(&["flow.mct"]);
    let nak = set(&["flow.mct", "roce-retransmission-latency.nack-reaction"]);
    let mut s = search(&l, 9, 2, 100, 0.0, Mode::Genetic);
    fill(&mut s, 2, 0.0, &base);
    for _ in 0..10 {
        let c = s.propose();
        assert!(c.parent.is_none(), "a pool of dull members gave a mutant");
        assert!(!s.report_behaviours(&c, 0.0, &base), "nothing new, p = 0");
    }
    let c = s.propose();
    let novel = c.hash.clone();
    assert!(s.report_behaviours(&c, 0.0, &nak), "the first NAK joins");
    let c = s.propose();
    assert!(
        !s.report_behaviours(&c, 0.0, &nak),
        "the second one is nothing new"
    );
    let mutants = (0..60)
        .filter(|_| {
            let c = s.propose();
            s.report_behaviours(&c, 0.0, &base);
            c.parent.as_deref() == Some(novel.as_str())
        })
        .count();
    assert!((10..=35).contains(&mutants), "{mutants} mutants of 60");

    // The seed's own behaviours make nothing novel; random search keeps
    // no member for novelty.
    let mut s = search(&l, 9, 1, 100, 0.0, Mode::Genetic);
    let c = s.propose();
    s.report_behaviours(&c, 0.0, &nak);
    let c = s.propose();
    assert!(!s.report_behaviours(&c, 0.0, &nak));
    let mut s = search(&l, 9, 1, 100, 0.0, Mode::Random);
    let c = s.propose();
    s.report_behaviours(&c, 0.0, &base);
    let c = s.propose();
    assert!(!s.report_behaviours(&c, 0.0, &nak));
}

/// A run's behaviours: the findings measured, the analyzers with
/// violations, an unfinished connection; none for a run not to believe.
#[test]
fn a_runs_behaviours_are_what_it_measured_and_found() {
    let mut o = Observation {
        verdict: "FAIL".into(),
        ..Default::default()
    };
    o.max.insert("roce-cnp.interval".into(), 7000.0);
    o.violations.insert("roce-cnp".into(), 2);
    o.violations.insert("roce-go-back-n".into(), 0);
    o.completed.insert(1, (3, 4));
    let b: Vec<String> = o.behaviours().into_iter().collect();
    assert_eq!(
        b,
        [
            "roce-cnp violations",
            "roce-cnp.interval",
            "unfinished connection"
        ]
    );
    // What the switch's events did: an action on two connections, or
    // three or more; not on one, not where it hit nothing.
    o.hits
        .insert("ecn".into(), [(1, 20), (2, 20), (3, 0)].into());
    o.hits.insert("drop".into(), [(4, 1)].into());
    let b = o.behaviours();
    assert!(b.contains("switch ecn: 2 connections"), "{b:?}");
    assert!(!b.iter().any(|k| k.starts_with("switch drop")), "{b:?}");
    o.hits
        .insert("drop".into(), [(1, 3), (2, 1), (3, 1)].into());
    assert!(o.behaviours().contains("switch drop: 3+ connections"));
    o.verdict = "INVALID".into();
    assert!(
        o.behaviours().is_empty(),
        "an incomplete trace shows nothing"
    );
}

#[test]
fn random_mode_draws_fresh_points_and_keeps_no_pool_after_the_initial_one() {
    let l = loaded("");
    let mut s = search(&l, 3, 2, 2, 0.5, Mode::Random);
    fill(&mut s, 2, 1.0, &BTreeSet::new());
    for _ in 0..20 {
        let c = s.propose();
        assert!(c.parent.is_none());
        assert!(!s.report(&c, 100.0));
    }
    assert_eq!(s.pool_len(), 2);
}

/// Delta debugging against a known oracle: the anomaly needs a drop on
/// connection 3, at least 3 connections, 2 messages and 4096-byte
/// messages; everything else goes.
#[test]
fn shrinking_reaches_the_known_minimal_spec() {
    let mut spec: Spec = loaded("").seed;
    let g = &mut spec.traffic.connections[0];
    g.count.0 = 8;
    g.messages.0 = 5;
    g.message_size.0 = 65536;
    g.tx_depth.0 = 3;
    spec.traffic.barrier = true;
    spec.events = (1..=7)
        .map(|c| wirelab_spec::Event {
            connection: wirelab_spec::Index(c),
            packet: IndexOrAll::One(wirelab_spec::Index(5)),
            sent_by: None,
            message: None,
            iteration: IndexOrAll::One(wirelab_spec::Index(1)),
            action: if c == 5 { Action::Ecn } else { Action::Drop },
            edit: None,
            after: None,
        })
        .collect();
    let holds = |s: &Spec| {
        let g = &s.traffic.connections[0];
        s.events
            .iter()
            .any(|e| e.connection.0 == 3 && e.action == Action::Drop)
            && g.count.0 >= 3
            && g.messages.0 >= 2
            && g.message_size.0 >= 4096
    };
    assert!(holds(&spec));
    let out = wirelab_fuzz::shrink::shrink(&spec, catalog(), 200, holds);
    let g = &out.spec.traffic.connections[0];
    assert_eq!(out.spec.events.len(), 1, "{:?}", out.spec.events);
    assert_eq!(out.spec.events[0].connection.0, 3);
    assert_eq!(
        (g.count.0, g.messages.0, g.message_size.0, g.tx_depth.0),
        (3, 2, 4096, 1)
    );
    assert!(!out.spec.traffic.barrier);
    assert!(out.runs < 60, "{} oracle runs", out.runs);
    assert!(
        out.steps.iter().any(|s| s == "events 7 -> 1"),
        "{:?}",
        out.steps
    );
}

#[test]
fn shrinking_renumbers_events_when_a_group_goes() {
    let mut spec: Spec = loaded("").seed;
    let mut second = spec.traffic.connections[0].clone();
    second.count.0 = 2;
    spec.traffic.connections[0].count.0 = 3;
    spec.traffic.connections.push(second);
    // Connection 5 is the second group's second connection.
    spec.events[0].connection.0 = 5;
    let holds = |s: &Spec| {
        s.events
            .iter()
            .any(|e| e.action == Action::Drop && e.connection.0 <= mutate::connections(s))
    };
    let out = wirelab_fuzz::shrink::shrink(&spec, catalog(), 100, holds);
    // The first group (3 connections) goes and the event moves from
    // connection 5 to 2; the second group keeps both its connections,
    // since one alone would lose the event.
    assert_eq!(out.spec.traffic.connections.len(), 1);
    assert_eq!(out.spec.traffic.connections[0].count.0, 2);
    assert_eq!(out.spec.events.len(), 1);
    assert_eq!(out.spec.events[0].connection.0, 2);
}

/// A runner whose results follow from the spec alone: go-back-N
/// violations are the drops on connection 2 (a score that needs several
/// events in one place, which selection builds up and random draws
/// rarely hit), the NAK reaction grows with the message size. Runs take
/// scrambled times so parallel results come back out of order.
struct Scripted {
    runs: Mutex<u64>,
}

impl Runner for Scripted {
    fn run(&self, spec: &Spec, label: &str, seed: u64) -> Observation {
        // Search runs only (anomalies are re-run as `reproduce-…`).
        if label.starts_with("run-") {
            *self.runs.lock().unwrap() += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(seed % 7));
        let mut o = Observation {
            verdict: "PASS".into(),
            ..Default::default()
        };
        let drops = spec
            .events
            .iter()
            .filter(|e| e.action == Action::Drop && e.connection.0 == 2)
            .count();
        o.violations.insert("roce-go-back-n".into(), drops as u64);
        let size = spec.traffic.connections[0].message_size.0 as f64;
        o.max.insert(
            "roce-retransmission-latency.nack-reaction".into(),
            size * 1.0,
        );
        o
    }
}

fn settings(dir: &Path, runs: u32, jobs: u32) -> Settings {
    Settings {
        dir: dir.to_path_buf(),
        seed: 42,
        jobs,
        mode: Mode::Genetic,
        stop: target::Stop {
            anomaly: false,
            runs,
            time: None,
        },
        keep_runs: false,
        save: false,
    }
}

fn hashes(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<campaign::Record>(l).unwrap().hash)
        .collect()
}

#[test]
fn parallel_campaigns_are_deterministic_and_resume_where_they_stopped() {
    let l = loaded("");
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &Path, runs: u32, jobs: u32| {
        let r = Scripted {
            runs: Mutex::new(0),
        };
        let out = campaign::run(
            &l,
            catalog(),
            &settings(dir, runs, jobs),
            &r,
            &campaign::Silent,
            &AtomicBool::new(false),
        )
        .unwrap();
        let ran = *r.runs.lock().unwrap();
        (out, ran)
    };
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let (out, ran) = run(&a, 40, 3);
    assert_eq!((out.runs, ran, out.stopped), (40, 40, Stopped::Runs));
    run(&b, 40, 3);
    assert_eq!(
        hashes(&a),
        hashes(&b),
        "same seed, same results: same specs, whichever lab finishes first"
    );
    assert!(
        hashes(&a)
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 20
    );
    // The campaign's page: both plots and every objective.
    let page = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert_eq!(page.matches("<svg").count(), 2, "score and pool plots");
    assert!(
        page.contains("violations(roce-go-back-n)")
            && page.contains("latency(roce-retransmission-latency.nack-reaction)")
    );

    // Stopped after 15, resumed to 40: the first 15 are replayed, not run.
    run(&c, 15, 3);
    assert_eq!(hashes(&c).len(), 15);
    let (out, ran) = run(&c, 40, 3);
    assert_eq!((out.runs, ran), (40, 25));
    assert_eq!(hashes(&a), hashes(&c));

    // A target that changed underneath is refused, not silently mixed.
    let changed = loaded("").target;
    let mut l2 = l.clone();
    l2.target = target::Target {
        pool: target::PoolSettings {
            size: 3,
            ..changed.pool
        },
        ..changed
    };
    let e = campaign::run(
        &l2,
        catalog(),
        &settings(&c, 41, 3),
        &Scripted {
            runs: Mutex::new(0),
        },
        &campaign::Silent,
        &AtomicBool::new(false),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("start a new campaign"), "{e}");
}

/// Selection keeps the better runs: over a genetic campaign on the
/// scripted runner the pool's median rises above what the initial pool
/// scored, and every run that joined after the initial pool scored at
/// least the median it was judged against, or took the coin. (Whether
/// that finds quirks in fewer runs than random search is the benchmark's
/// question, `wirelab bench fuzz`, not a test's.)
#[test]
fn selection_raises_the_pools_median() {
    let l = loaded("");
    let tmp = tempfile::tempdir().unwrap();
    for seed in 0..4 {
        let dir = tmp.path().join(format!("g{seed}"));
        let s = Settings {
            seed,
            ..settings(&dir, 80, 1)
        };
        let r = Scripted {
            runs: Mutex::new(0),
        };
        campaign::run(
            &l,
            catalog(),
            &s,
            &r,
            &campaign::Silent,
            &AtomicBool::new(false),
        )
        .unwrap();
        let recs: Vec<campaign::Record> = std::fs::read_to_string(dir.join("runs.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let init = l.target.pool.size as usize;
        let first = recs[init].median;
        let last = recs.last().unwrap().median;
        assert!(
            last > first,
            "seed {seed}: the pool's median went from {first} to {last}"
        );
        let below = recs[init..]
            .iter()
            .filter(|r| r.joined && r.score < r.median)
            .count();
        let joined = recs[init..].iter().filter(|r| r.joined).count();
        assert!(
            below * 3 < joined,
            "seed {seed}: {below} of {joined} joined below the median (p = 0.2)"
        );
    }
}

/// A run that panics is one failed run, not a campaign waiting for ever.
#[test]
fn a_run_that_panics_is_recorded_as_failed() {
    struct Panics;
    impl Runner for Panics {
        fn run(&self, _: &Spec, label: &str, _: u64) -> Observation {
            if label == "run-3" {
                panic!("the lab fell over");
            }
            Observation {
                verdict: "PASS".into(),
                ..Default::default()
            }
        }
    }
    let l = loaded("");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let out = campaign::run(
        &l,
        catalog(),
        &settings(&dir, 8, 2),
        &Panics,
        &campaign::Silent,
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(out.runs, 8);
    let recs: Vec<campaign::Record> = std::fs::read_to_string(dir.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs[3].observation.verdict, "ERROR");
    assert!(recs[3]
        .observation
        .error
        .as_deref()
        .unwrap()
        .contains("the lab fell over"));
}
