//! The `wirelab` binary: a thin layer over the library crates. Errors are
//! printed once as `wirelab: <cause chain>`. Exit codes: 0 every expectation
//! held on a VALID run, 1 an expectation failed, 2 bad input or an error,
//! 3 the run was INVALID (the trace is incomplete), 130 interrupted.

mod analyze;
mod bench;
mod bench_analyze;
mod bench_eswitch;
mod bench_fuzz;
mod bench_load;
mod bench_record;
mod bench_replay;
mod bench_roce;
mod bench_runs;
mod bench_stages;
mod bench_vaqm;
mod bump;
mod causal;
mod diagnose;
mod fuzz;
mod load;
mod record;
mod replay;
mod run;
mod summary;
mod sweep;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wirelab",
    version,
    about = "Deterministic tests of network stacks on commodity Linux"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run specs: bring up the lab, arm the switch, run the workload, capture,
    /// check integrity, analyze, check expectations, tear down.
    Run(run::Args),
    /// Norma's load test (seed 002) through a device under test: a stream
    /// at the rate and burst asked for, counted by version bit on both
    /// sides, one line per interval; exit 0 when its `expect:` held, 1 when
    /// not, 2 for bad input, 130 on Ctrl-C.
    Load(load::Args),
    /// Lumina's genetic fuzzer: search a spec's space for runs that score
    /// as anomalies, shrink each to a small spec that reproduces it, and
    /// save it with an `expect:` that fails on it. Exit 1 when an anomaly
    /// was found, 0 when none, 130 on Ctrl-C (resume with --resume).
    Fuzz(fuzz::Args),
    /// One fuzz run, for `wirelab fuzz --ray`'s tasks: the spec (YAML) on
    /// stdin, its observation (JSON) on stdout.
    #[command(hide = true)]
    FuzzEval(fuzz::EvalArgs),
    /// Run a spec once per point of a grid (`--vary PATH=VALUES`, repeated):
    /// sweep.jsonl, and with two flow tables ScalaCN's grid.csv for
    /// `wirelab model`.
    Sweep(sweep::Args),
    /// ScalaCN's combinatorial causal testing (seed 001 §4.1) over a spec:
    /// the symptom, each dimension's sensitivity, permutation removal
    /// (95%), and the critical path, with the runs behind each.
    Causal(causal::Args),
    /// ScalaCN's performance model (seed 001 §4.2) fitted to a measured
    /// grid: Eq. 1's RBF for bandwidth and Eq. 2's plane for latency
    /// against Q_l and Q_r, with goodness of fit and the accuracy on
    /// held-out configurations. GRID: a CSV `ql,qr,bandwidth,latency`, or
    /// a folder with grid.csv.
    Model {
        grid: PathBuf,
        /// Fit the model; without it, the grid's extent is shown.
        #[arg(long)]
        fit: bool,
        /// Hold every Nth configuration out of the fit and score the
        /// prediction on them (0: none; scored on the fitted points).
        #[arg(long, default_value_t = 5)]
        hold_out_every: usize,
        #[arg(long)]
        json: bool,
    },
    /// Check specs (and fuzz targets) without touching the host.
    Check {
        #[arg(required = true)]
        specs: Vec<PathBuf>,
    },
    /// Analyze a pcap/pcapng trace (ours or anyone's: Ethernet, raw IP or
    /// Linux cooked; IPv4/IPv6; TCP). Beside a run's summary.json, the run's
    /// counters and workload are used too. Exit 1 if an analyzer finds a
    /// violation, 2 if the trace cannot be read.
    Analyze {
        #[arg(required_unless_present = "findings")]
        trace: Option<PathBuf>,
        /// Print the report as JSON (schema: `wirelab schema --analysis`).
        #[arg(long)]
        json: bool,
        /// Write the HTML report here.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Every finding, not only violations.
        #[arg(short, long)]
        verbose: bool,
        /// Analyzers to run (default: all).
        #[arg(long, value_delimiter = ',')]
        analyzers: Vec<String>,
        /// The sender's smallest retransmission timeout (Linux: 200ms, or
        /// the route's rto_min); no timeout fires sooner.
        #[arg(long, default_value = "200ms")]
        min_rto: wirelab_spec::Nanos,
        /// List the findings `expect:` can name, with their units.
        #[arg(long, conflicts_with = "json")]
        findings: bool,
        /// Threads that build connections in the second pass (0: none
        /// beside the reader). Default: one per core after the first for
        /// files of 64 MB and more, none for smaller ones.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Run the switch with its vAQM stage inline between two existing
    /// interfaces of a namespace (NetBump's bump on the wire): each side's
    /// frames leave by the other, marked or dropped by the queues of
    /// `--config` (a YAML `vaqm:` section whose queues name an interface as
    /// `port`), all of them captured; then the trace, the analysis and a
    /// summary, and the interfaces are left as they were.
    Bump {
        /// The namespace (`ip netns list`) that holds both interfaces.
        namespace: String,
        iface_a: String,
        iface_b: String,
        /// The queues: `vaqm: {queues: [{port: IFACE, rate: ..., dctcp: ...}]}`.
        #[arg(long)]
        config: PathBuf,
        /// Seconds to stay inline (Ctrl-C stops sooner).
        #[arg(long, default_value_t = 10)]
        duration: u64,
        #[arg(long, default_value = "results")]
        out: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// DETER's recording (seed 004) of hosts you made: every TCP
    /// connection in the namespaces, one record file each: the drops,
    /// reordering and CE marks its arriving packets met (IP-ID gaps), and
    /// its send times sampled by Algorithm 1. `--read FILE...` shows them.
    Record(record::Args),
    /// DETER's replay (seed 004 §3.4): each recorded connection in a lab
    /// of its own, both ends repeating their socket calls at their
    /// recorded times, the network's drops and CE marks re-applied to the
    /// same logical packets; the replay is recorded and compared with the
    /// recording. Exit 0 when every replay passed and matched, 1 when one
    /// differed, 2 for bad input, 130 on Ctrl-C.
    Replay(replay::Args),
    /// Why the slowest flows were slow (DETER §2.1, §5): each TCP
    /// connection at or above a percentile of completion time, with its
    /// retransmission timeouts (and why no fast retransmission repaired the
    /// loss), fast and late fast retransmits, tail loss probes and CE
    /// marks, each citing its packets. On a run's or a replay's results
    /// folder, or any capture. Exit 0; 2 if the capture cannot be read, 3 if
    /// it is cut short.
    Diagnose {
        /// A capture (pcap, pcapng), or a results folder (its trace.pcapng).
        path: PathBuf,
        /// Connections at or above this percentile of completion time.
        #[arg(long, default_value_t = 99.0)]
        percentile: f64,
        /// The sender's smallest retransmission timeout (Linux: 200ms).
        #[arg(long, default_value = "200ms")]
        min_rto: wirelab_spec::Nanos,
        #[arg(long)]
        json: bool,
    },
    /// Remove namespaces and registry entries that killed runs left behind.
    Clean {
        /// Also remove labs of runs that are still alive.
        #[arg(long)]
        all: bool,
    },
    /// Print the JSON Schema of the spec (for editors), or of the analysis
    /// report.
    Schema {
        #[arg(long)]
        analysis: bool,
    },
    /// Benchmarks, printed as ratios against baselines measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// MCT through the full pipeline vs a forward-only program vs a Linux bridge.
    SwitchOverhead {
        #[arg(long, default_value_t = 1000)]
        messages: u32,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Also measure each stage's cost: the pipeline cut after each
        /// stage, 10 KB messages (9 more labs per round).
        #[arg(long)]
        breakdown: bool,
    },
    /// The eSwitch stage (ScalaCN's flow tables): ns per packet against
    /// the masks searched before a hit, 1 to 256, and the cost per mask.
    Eswitch {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Instead: both DUTs (the eSwitch stage, Open vSwitch) in labs on
        /// the same tables and traffic, cost per packet against masks.
        #[arg(long)]
        duts: bool,
    },
    /// DETER's overheads: bytes recorded per packet against tcpdump -s 96
    /// (raw and zstd -19), and the recorder's kernel time against the
    /// machine's CPU time, on an iperf3 transfer with drops.
    Record {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Megabytes per transfer.
        #[arg(long, default_value_t = 64)]
        megabytes: u32,
        /// Connections per transfer (iperf3 -P), sharing its megabytes.
        #[arg(long, default_value_t = 1)]
        parallel: u32,
    },
    /// Each stage's cost in the kernel alone (BPF_PROG_TEST_RUN): precise,
    /// for comparing the pipeline's levers.
    Stages {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 5)]
        chunks: u32,
    },
    /// Highest TCP rate with 100% capture, next to tcpdump's drops.
    Capture,
    /// RoCE goodput and message rate of 1 and 16 QPs through the switch,
    /// against iperf3's UDP goodput on the same path.
    Roce {
        /// Rounds of each case (RoCE and iperf3 back to back); medians are
        /// reported.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Packets per second of the TCP analyzers on a generated trace, against
    /// `tshark -2 -Y tcp.analysis.flags` on the same file.
    Analyze {
        #[arg(long, default_value_t = 1_000_000)]
        packets: u64,
        /// Runs of `wirelab analyze` per configuration: the median is
        /// reported, with the range (one run varies by several percent on
        /// a shared machine). tshark runs once.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Lumina's genetic search against random search: runs to find each
    /// planted RoCE quirk, several seeds each; then runs per minute with 1,
    /// 2 and N labs at once.
    Fuzz {
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// Runs each search may make.
        #[arg(long, default_value_t = 60)]
        runs: u32,
        /// Only these device profiles (default: every shipped quirk).
        #[arg(long, value_delimiter = ',')]
        devices: Vec<String>,
        /// Only campaign throughput (runs per minute), no searches.
        #[arg(long)]
        throughput: bool,
        /// Also the throughput with the runs as tasks on this Ray cluster.
        #[arg(long, value_name = "ADDRESS")]
        ray: Option<String>,
    },
    /// Norma's tester against trafgen (generation rate, 64 and 1518 B),
    /// iperf3 -u -b (rate error at the receiver) and wrk (HTTP
    /// transactions through haproxy to nginx), on the same lab.
    Load {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Length of each rate-error and HTTP run.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
        /// Only these parts (default: all): rate, error, burst, http.
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<bench_load::Part>,
    },
    /// DETER's replay fidelity: incast plus long flows through a real
    /// bottleneck, recorded, every connection replayed and compared (goal:
    /// at least 95% exactly).
    Replay {
        #[arg(long, default_value_t = 100)]
        connections: u32,
        /// Replays at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
    },
    /// Many runs in one process through the run engine, with the process's
    /// resident memory every tenth run (it must stay flat).
    Runs {
        #[arg(long, default_value_t = 50)]
        runs: u32,
    },
    /// ns per packet and Mpps of the pipeline with the vAQM stage against
    /// the same pipeline without it.
    Vaqm {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Repeat loops of 20000 packets per case and round.
        #[arg(long, default_value_t = 10)]
        chunks: u32,
    },
}

/// Exit codes, as documented above and in the README.
pub mod code {
    pub const OK: u8 = 0;
    pub const EXPECT_FAILED: u8 = 1;
    pub const ERROR: u8 = 2;
    pub const INVALID: u8 = 3;
    pub const INTERRUPTED: u8 = 130;
}

/// Set while the command holds nothing to clean up (reading and analyzing
/// a trace): Ctrl-C then exits at once with 130 instead of asking the
/// work to wind down.
static NOTHING_TO_CLEAN: AtomicBool = AtomicBool::new(false);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let abort = Arc::new(AtomicBool::new(false));
    {
        let abort = abort.clone();
        // First Ctrl-C: stop the workload and tear the lab down cleanly.
        // A second one while that happens is ignored on purpose: exiting
        // then would leave namespaces behind (`wirelab clean` removes them).
        let _ = ctrlc::set_handler(move || {
            if NOTHING_TO_CLEAN.load(Ordering::SeqCst) {
                eprintln!("wirelab: interrupted");
                std::process::exit(i32::from(code::INTERRUPTED));
            }
            if !abort.swap(true, Ordering::SeqCst) {
                eprintln!("wirelab: interrupted, cleaning up");
            }
        });
    }
    match dispatch(cli, &abort) {
        // A command that finished its work despite the interrupt still
        // says it was interrupted.
        Ok(_) if abort.load(Ordering::SeqCst) => ExitCode::from(code::INTERRUPTED),
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            eprintln!("wirelab: {e:#}");
            if abort.load(Ordering::SeqCst) {
                ExitCode::from(code::INTERRUPTED)
            } else {
                ExitCode::from(code::ERROR)
            }
        }
    }
}

fn dispatch(cli: Cli, abort: &Arc<AtomicBool>) -> anyhow::Result<u8> {
    match cli.cmd {
        Cmd::Run(args) => run::run(args, abort),
        Cmd::Load(args) => load::run(args, abort),
        Cmd::Fuzz(args) => fuzz::run(args, abort),
        Cmd::FuzzEval(args) => fuzz::eval(args, abort),
        Cmd::Sweep(args) => sweep::run(args, abort),
        Cmd::Causal(args) => causal::run(args, abort),
        Cmd::Model {
            grid,
            fit,
            hold_out_every,
            json,
        } => {
            NOTHING_TO_CLEAN.store(true, Ordering::SeqCst);
            model(&grid, fit, hold_out_every, json)
        }
        Cmd::Check { specs } => {
            let mut bad = false;
            for p in &specs {
                // A fuzz target (`wirelab fuzz`) is checked as one, with its seed spec.
                if wirelab_fuzz::target::is_target_file(p) {
                    match wirelab_fuzz::load(p, None, wirelab_lab::catalog()) {
                        Ok(_) => println!("{}: ok (fuzz target)", p.display()),
                        Err(e) => {
                            eprintln!("wirelab: {e}");
                            bad = true;
                        }
                    }
                    continue;
                }
                // A causal target (`wirelab causal`), with every point it makes.
                if causal::is_target_file(p) {
                    match causal::check(p) {
                        Ok(n) => println!("{}: ok (causal target, {n} runs a round)", p.display()),
                        Err(e) => {
                            eprintln!("wirelab: {e}");
                            bad = true;
                        }
                    }
                    continue;
                }
                // A load test (`wirelab load`).
                if std::fs::read_to_string(p).is_ok_and(|t| wirelab_spec::load::is_load_text(&t)) {
                    match wirelab_spec::load::load(p)
                        .map_err(|e| e.to_string())
                        .and_then(|s| match &s.stateful {
                            // Its tables were checked as it was parsed.
                            Some(t) => Ok(format!(
                                "stateful load test: clients {}, servers {}",
                                t.clients
                                    .as_ref()
                                    .map_or("none".into(), |c| efsm_name(&c.efsm)),
                                t.servers.as_ref().map_or("none".into(), |v| match &v.efsm {
                                    Some(e) => efsm_name(e),
                                    None => "real (nginx)".into(),
                                }),
                            )),
                            None => {
                                let views = s.stream_views();
                                let several = views.len() > 1;
                                views
                                    .iter()
                                    .enumerate()
                                    .map(|(k, v)| {
                                        wirelab_lab::load::setup(v)
                                            .map(|(s, ..)| s.rate.describe())
                                            .map_err(|e| match several {
                                                true => {
                                                    format!("{}: streams[{k}]: {e}", p.display())
                                                }
                                                false => format!("{}: {e}", p.display()),
                                            })
                                    })
                                    .collect::<Result<Vec<_>, _>>()
                                    .map(|plans| format!("load test: {}", plans.join("; ")))
                            }
                        }) {
                        Ok(what) => println!("{}: ok ({what})", p.display()),
                        Err(e) => {
                            eprintln!("wirelab: {e}");
                            bad = true;
                        }
                    }
                    continue;
                }
                match wirelab_spec::load(p, wirelab_lab::catalog()) {
                    // A discipline is compiled and linked too (not loaded:
                    // that needs root and the verifier).
                    Ok(s) => match wirelab_lab::build_extension(&s) {
                        Ok(_) => {
                            println!("{}: ok", p.display());
                            // ScalaCN §4.1 (a): where the flow tables send
                            // each connection's packets, found statically.
                            // Legitimate in a negative test, so a warning.
                            let plan = wirelab_plan::plan(&s, "check", 0);
                            for why in plan.iter().flat_map(wirelab_plan::reach::undelivered) {
                                println!("  warning: {why}");
                            }
                        }
                        Err(e) => {
                            eprintln!("wirelab: {}: {:#}", p.display(), anyhow::Error::from(e));
                            bad = true;
                        }
                    },
                    Err(e) => {
                        eprintln!("wirelab: {e}");
                        bad = true;
                    }
                }
            }
            Ok(if bad { code::ERROR } else { code::OK })
        }
        Cmd::Analyze {
            trace,
            json,
            html,
            verbose,
            analyzers,
            min_rto,
            findings,
            threads,
        } => {
            if findings {
                for (n, u) in wirelab_analyze::catalog().findings() {
                    println!("{n:<45} {u:?}");
                }
                return Ok(code::OK);
            }
            let trace = trace.expect("clap requires TRACE without --findings");
            NOTHING_TO_CLEAN.store(true, Ordering::SeqCst);
            analyze::run(
                &trace,
                json,
                html.as_deref(),
                verbose,
                &analyzers,
                min_rto.0,
                threads,
                &NOTHING_TO_CLEAN,
            )
        }
        Cmd::Bump {
            namespace,
            iface_a,
            iface_b,
            config,
            duration,
            out,
            json,
        } => {
            let args = wirelab_lab::bump::Args {
                ns: &namespace,
                ifaces: [&iface_a, &iface_b],
                config: &config,
                duration: std::time::Duration::from_secs(duration),
                out: &out,
            };
            run::require_root()?;
            bump::run(&args, json, abort)
        }
        Cmd::Record(args) => record::run(&args, abort),
        Cmd::Replay(args) => replay::run(&args, abort),
        Cmd::Diagnose {
            path,
            percentile,
            min_rto,
            json,
        } => {
            NOTHING_TO_CLEAN.store(true, Ordering::SeqCst);
            diagnose::run(&path, percentile, min_rto.0, json)
        }
        Cmd::Clean { all } => clean(all),
        Cmd::Bench { which } => bench(which, abort),
        Cmd::Schema { analysis } => schema(analysis),
    }
}

/// `wirelab model GRID --fit`.
fn model(
    grid: &std::path::Path,
    fit: bool,
    hold_out_every: usize,
    json: bool,
) -> anyhow::Result<u8> {
    let file = if grid.is_dir() {
        grid.join("grid.csv")
    } else {
        grid.to_path_buf()
    };
    if !fit {
        let p = match wirelab_model::read_csv(&file) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("wirelab: {e}");
                return Ok(code::ERROR);
            }
        };
        let range = |f: fn(&wirelab_model::Point) -> f64| {
            p.iter()
                .map(f)
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)))
        };
        let ((a, b), (c, d)) = (range(|x| x.ql), range(|x| x.qr));
        let ((e, f), (g, h)) = (range(|x| x.bw), range(|x| x.lat));
        println!(
            "{}: {} configurations, Ql {a}..{b}, Qr {c}..{d}, bandwidth {e}..{f}, latency {g}..{h} (--fit fits the model)",
            file.display(),
            p.len()
        );
        return Ok(code::OK);
    }
    let fitted = wirelab_model::read_csv(&file)
        .and_then(|p| wirelab_model::evaluate(&p, hold_out_every).map(|r| (p.len(), r)));
    let (n, r) = match fitted {
        Ok(x) => x,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(code::OK);
    }
    let (b, l) = (r.bandwidth, r.latency);
    println!(
        "ScalaCN's model (seed 001 §4.2) over {n} configurations of {}",
        file.display()
    );
    println!(
        "  bandwidth  BW = u·exp(-((Ql-m)² + (Qr-n)²)/(2v²)) + w: u {:.2}, v {:.2}, m {:.2}, n {:.2}, w {:.2}",
        b.u, b.v, b.m, b.n, b.w
    );
    println!(
        "  latency    LAT = a·Ql + b·Qr + c: a {:.4}, b {:.4}, c {:.3}",
        l.a, l.b, l.c
    );
    if let Some(d) = r.device_latency {
        println!(
            "  device     LAT = a·Ql + b·Qr + c over the eSwitch's own search time: a {:.4}, b {:.4}, c {:.3}; R² {:.3}, accuracy {:.1}%",
            d.plane.a,
            d.plane.b,
            d.plane.c,
            d.goodness,
            100.0 * d.accuracy
        );
    }
    println!(
        "  goodness   bandwidth R² {:.3}, latency R² {:.3} ({} configurations fitted)",
        r.bandwidth_goodness, r.latency_goodness, r.fitted
    );
    println!(
        "  accuracy   bandwidth {:.1}%, latency {:.1}% on {} {} (ScalaCN: 98.9% and 98.5%)",
        100.0 * r.bandwidth_accuracy,
        100.0 * r.latency_accuracy,
        if r.held_out > 0 { r.held_out } else { r.fitted },
        if r.held_out > 0 {
            "held-out configurations"
        } else {
            "fitted configurations"
        },
    );
    Ok(code::OK)
}

/// `wirelab clean`: namespaces and registry entries of killed runs.
fn clean(all: bool) -> anyhow::Result<u8> {
    run::require_root()?;
    let c = wirelab_netns::clean(all)?;
    for ns in &c.namespaces {
        println!("removed namespace {ns}");
    }
    for b in &c.bumps {
        println!("detached a killed bump from {b}");
    }
    for x in &c.sysctls {
        println!("put back the host setting a killed run had changed: {x}");
    }
    for r in &c.registry_entries {
        println!("removed registry entry {r}");
    }
    for ns in &c.kept {
        println!("kept {ns} (its run is still alive; --all removes it)");
    }
    if c.namespaces.is_empty() && c.registry_entries.is_empty() {
        println!("nothing to clean");
    }
    Ok(code::OK)
}

fn bench(which: BenchCmd, abort: &Arc<AtomicBool>) -> anyhow::Result<u8> {
    if !matches!(which, BenchCmd::Analyze { .. }) {
        run::require_root()?;
    }
    match which {
        BenchCmd::SwitchOverhead {
            messages,
            rounds,
            breakdown,
        } => bench::switch_overhead(abort, messages, rounds, breakdown)?,
        BenchCmd::Stages { rounds, chunks } => bench_stages::run(rounds, chunks)?,
        BenchCmd::Eswitch {
            rounds,
            duts: false,
        } => bench_eswitch::run(rounds)?,
        BenchCmd::Eswitch { rounds, duts: true } => bench_eswitch::duts(abort, rounds)?,
        BenchCmd::Capture => bench::capture(abort)?,
        BenchCmd::Record {
            rounds,
            megabytes,
            parallel,
        } => bench_record::run(abort, rounds, megabytes, parallel)?,
        BenchCmd::Roce { rounds } => bench_roce::run(abort, rounds)?,
        BenchCmd::Analyze { packets, runs } => bench_analyze::run(packets, runs)?,
        BenchCmd::Vaqm { rounds, chunks } => bench_vaqm::run(abort, rounds, chunks)?,
        BenchCmd::Runs { runs } => bench_runs::run(abort, runs)?,
        BenchCmd::Replay { connections, jobs } => bench_replay::run(abort, connections, jobs)?,
        BenchCmd::Load {
            rounds,
            seconds,
            only,
        } => bench_load::run(abort, rounds, seconds, &only)?,
        BenchCmd::Fuzz {
            seeds,
            runs,
            devices,
            throughput,
            ray,
        } => bench_fuzz::run(abort, seeds, runs, &devices, throughput, ray.as_deref())?,
    }
    Ok(code::OK)
}

fn schema(analysis: bool) -> anyhow::Result<u8> {
    if analysis {
        print!("{}", wirelab_analyze::report::json_schema());
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&wirelab_spec::json_schema(wirelab_analyze::catalog()))?
        );
    }
    Ok(code::OK)
}

/// A stateful side's EFSM as `wirelab check` names it.
fn efsm_name(e: &wirelab_spec::efsm::EfsmRef) -> String {
    match e {
        wirelab_spec::efsm::EfsmRef::Builtin(n) => n.clone(),
        wirelab_spec::efsm::EfsmRef::Table(t) => {
            format!("a table of {} transitions", t.transitions.len())
        }
    }
}
