//! Analyzers: pure functions from a trace (plus the run's counters and spec
//! when there are any) to findings, each naming its evidence: the mirror
//! sequence number when the trace has wirelab metadata, and always the frame
//! number (Wireshark's `frame.number`).
//!
//! One model ([`model`]) reads the trace once per connection; every analyzer
//! ([`Analyzer`]) reads the model. The RoCE analyzers will implement the same
//! trait over their own model.

pub mod analyzers;
pub mod diagnose;
pub mod distributed;
pub mod expect;
#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod report;
pub mod results;
pub mod roce;
pub mod rp;
pub mod truth;

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Serialize;
use wirelab_spec::{AnalyzerEntry, Catalog, Unit};
use wirelab_trace::Trace;

pub use model::{
    Analysis, AppliedEvent, Arrival, BaseRtt, CaptureGap, ClockBack, ConnAnalysis, EcnMark,
    Malformed, Reason, Retransmission, Seg,
};

/// A packet named for the user: frame number and, when known, mirror seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Evidence {
    pub frame: u64,
    pub mirror_seq: Option<u64>,
}

impl std::fmt::Display for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mirror_seq {
            Some(s) => write!(f, "#{s}"),
            None => write!(f, "frame {}", self.frame),
        }
    }
}

/// A duration as people read it: µs below 10 ms, ms above.
pub fn fmt_duration(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{:.1}us", ns as f64 / 1e3)
    }
}

/// A value in its unit, as people read it.
pub fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos => fmt_duration(v.max(0.0) as u64),
        Unit::Bytes => format!("{v:.0}B"),
        Unit::BitsPerSec if v >= 1e9 => format!("{:.2}Gbit/s", v / 1e9),
        Unit::BitsPerSec => format!("{:.1}Mbit/s", v / 1e6),
        Unit::Count => format!("{v}"),
    }
}

/// What the analysis may assume about the stack that produced the trace.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The smallest retransmission timeout the sender can use: Linux's
    /// TCP_RTO_MIN (200ms) unless the route sets `rto_min`.
    pub min_rto_ns: u64,
    /// How long a receiver may take to answer an out-of-order arrival on top
    /// of its side's round trip: Linux compresses SACKs for up to
    /// `net.ipv4.tcp_comp_sack_delay_ns` (1ms by default, since 4.18).
    pub ack_allowance_ns: u64,
    /// How long a sender may take to react to a loss signal on top of its
    /// side's round trip and RACK's reordering window.
    pub reaction_allowance_ns: u64,
    /// A tick of the sender's kernel timers: 4ms at HZ=250, Debian's and
    /// Ubuntu's default (1ms at HZ=1000). Linux arms RACK's reordering
    /// timer at least two ticks out (see `RACK_TIMER_TICKS`).
    pub jiffy_ns: u64,
    /// The sender uses tail loss probes (Linux: `net.ipv4.tcp_early_retrans`
    /// 3 or 4, the default; 0-2 turn TLP off).
    pub tlp: bool,
    /// A RoCE NACK generated or reacted to later than this took a slow path.
    /// Lumina §6.1: CX5 and CX6 Dx generate NACKs in ~2 µs and react in
    /// 2-6 µs, CX4 Lx reacts in ~200 µs (~100 base RTTs) and E810 re-issues
    /// reads after ~83 ms; 150 µs separates the two groups. None: measure
    /// only (wirelab's own device, see [`Options::for_hosts`]).
    pub roce_slow_path_ns: Option<u64>,
    /// How far apart the switch's and the device's clocks may see one
    /// packet (the CNP limiter checks allow this much): ~1 µs on a hardware
    /// testbed; wirelab's user-space device reads its socket tens of µs late.
    pub roce_timing_slack_ns: u64,
    /// How much earlier than the switch saw its packet a RoCE device may
    /// have started a local ACK timer (its send path): ~1 µs on hardware;
    /// wirelab's user-space device shares two cores with the lab, where a
    /// `make test` run saw a tail packet reach the switch 175 µs after the
    /// device timed it.
    pub roce_timer_start_slack_ns: u64,
}

/// The timing slack of wirelab's own RoCE device (see
/// [`Options::roce_timing_slack_ns`]).
pub const ROCE_TIMING_SLACK_USERSPACE_NS: u64 = 10_000;

/// The timer-start slack of wirelab's own RoCE device in the lab (see
/// [`Options::roce_timer_start_slack_ns`]): a tenth of the adaptive
/// timeouts Lumina found (a tenth of the configured one), so those still
/// stand out.
pub const ROCE_TIMER_START_SLACK_LAB_NS: u64 = 1_000_000;

/// The answer and reaction allowance of the TCP analyzers for lab hosts
/// (see `Options::for_hosts`): scheduling on a shared two-core machine, not
/// the stack, decides the last milliseconds there.
pub const LAB_SCHEDULING_SLACK_NS: u64 = 30_000_000;

impl Default for Options {
    fn default() -> Self {
        Options {
            min_rto_ns: 200_000_000,
            ack_allowance_ns: 1_000_000,
            reaction_allowance_ns: 1_000_000,
            jiffy_ns: 4_000_000,
            tlp: true,
            roce_slow_path_ns: Some(150_000),
            roce_timing_slack_ns: 1_000,
            roce_timer_start_slack_ns: 1_000,
        }
    }
}

/// Runs the model over a whole trace, assuming Linux defaults.
pub fn analyze(trace: &Trace) -> Analysis {
    analyze_with(trace, Options::default())
}

/// [`analyze`], keeping every packet's view in `ConnAnalysis::segs`
/// (tests and tools: memory grows with the trace).
pub fn analyze_keeping_segs(trace: &Trace, opts: Options) -> Analysis {
    model::build_with(trace, opts, &|_| {}, true)
}

/// Runs the model over a whole trace.
pub fn analyze_with(trace: &Trace, opts: Options) -> Analysis {
    model::build(trace, opts, &|_| {})
}

/// What the workload and the hosts reported, beside the trace: written by a
/// run as `facts.json` (`results::write`) and read back by `wirelab
/// analyze` on the results folder (`results::read`).
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RunFacts {
    /// What each host's stack lets the analysis assume (`Options`).
    pub hosts: Vec<HostFacts>,
    /// Connection id -> (messages completed, messages expected).
    pub completed: BTreeMap<u32, (u32, u32)>,
    /// Connection id -> message completion times.
    pub mct_ns: BTreeMap<u32, Vec<u64>>,
    /// Host name -> counter deltas (nstat names).
    pub counters: BTreeMap<String, BTreeMap<String, i64>>,
    /// Host name -> packets its bottleneck dropped between the switch's
    /// capture and the host (hosts without drops left out).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub bottleneck_drops: BTreeMap<String, u64>,
    /// Host name -> its address in the lab.
    pub addresses: BTreeMap<String, IpAddr>,
    /// Host name -> the switch port its link is on. With the switch's
    /// metadata a packet is its sender's by the port it came in on, also
    /// when the flow tables rewrote its addresses (a NAT).
    pub ports: BTreeMap<String, u32>,
    /// Host name -> every address its RoCE device answers on (its GIDs),
    /// when it has more than its lab address.
    pub gids: BTreeMap<String, Vec<IpAddr>>,
    /// Host name -> RoCE device counter deltas.
    pub device_counters: BTreeMap<String, BTreeMap<String, i64>>,
    /// Host name -> the min_time_between_cnps its RoCE device was given.
    pub cnp_interval_ns: BTreeMap<String, u64>,
    /// RoCE connection id -> (minimum local ACK timeout 4.096 µs × 2^timeout,
    /// retry_cnt) its requester QP was given.
    pub roce_retransmit: BTreeMap<u32, (u64, u32)>,
    /// Host name -> the device profile its RoCE device ran.
    pub roce_profile: BTreeMap<String, String>,
    /// The switch's virtual queues (NetBump) with their ground truth.
    pub vaqm: Vec<truth::VqFacts>,
    /// QCN reaction points: their rate changes and the CNMs they received.
    pub qcn: Vec<rp::RpFacts>,
}

/// One host's settings that the analysis depends on.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostFacts {
    pub name: String,
    /// The route's rto_min, when the spec set one.
    pub rto_min_ns: Option<u64>,
    /// `net.ipv4.tcp_early_retrans`, when the spec set it.
    pub early_retrans: Option<String>,
}

impl RunFacts {
    /// What the analysis may assume about these hosts (`Options::for_hosts`);
    /// `default_rto` when the run named no host.
    pub fn options(&self, default_rto: u64) -> Options {
        if self.hosts.is_empty() {
            Options::for_hosts(std::iter::empty(), Some(default_rto))
        } else {
            Options::for_hosts(
                self.hosts
                    .iter()
                    .map(|h| (h.rto_min_ns, h.early_retrans.clone())),
                None,
            )
        }
    }

    /// Every address of `host`: its GIDs, else its lab address.
    pub fn addresses_of(&self, host: &str) -> Vec<IpAddr> {
        match self.gids.get(host) {
            Some(g) if !g.is_empty() => g.clone(),
            _ => self.addresses.get(host).copied().into_iter().collect(),
        }
    }

    /// How findings name the device at `ip`: `host (profile)`.
    pub fn device_at(&self, ip: IpAddr) -> Option<String> {
        let h = self.host_of(ip)?;
        Some(match self.roce_profile.get(h) {
            Some(p) => format!("{h} ({p})"),
            None => h.to_string(),
        })
    }

    /// The host that owns `ip`, among lab addresses and GIDs.
    pub fn host_of(&self, ip: IpAddr) -> Option<&str> {
        self.addresses
            .iter()
            .find(|(_, a)| **a == ip)
            .map(|(n, _)| n.as_str())
            .or_else(|| {
                self.gids
                    .iter()
                    .find(|(_, g)| g.contains(&ip))
                    .map(|(n, _)| n.as_str())
            })
    }
}

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A rule the stack broke.
    Violation,
    /// A number measured on the trace.
    Measurement,
    /// Worth knowing, neither a violation nor a number (a DSACK, a
    /// damaged frame).
    Note,
}

/// One result of an analyzer, with the packets that prove it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Finding {
    pub analyzer: &'static str,
    /// Name within the analyzer (`expect:` names it `analyzer.name`).
    pub name: &'static str,
    pub kind: Kind,
    pub connection: Option<u32>,
    /// Data packet index the finding is about.
    pub packet: Option<u32>,
    /// The device whose behaviour a measurement times (the RoCE endpoint
    /// that NAKs, re-issues or resends): `host (profile)` in a wirelab run,
    /// its address in a capture from elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// RoCE losses: the lost packet's position in its message (1 = first),
    /// the relative PSN Lumina plots NACK latencies against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_message: Option<u32>,
    /// The virtual queue (vAQM) the finding is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    /// Which variant of a measurement this is, when one finding name has
    /// several (a distributed bump, its update delay and batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub value: Option<f64>,
    pub unit: Option<Unit>,
    /// The specification text the verdict rests on.
    pub rule: Option<&'static str>,
    pub message: String,
    pub evidence: Vec<Evidence>,
    /// A measurement over many samples: their summary.
    pub distribution: Option<Dist>,
    /// The samples themselves (for `expect:` and plots; summarized in JSON).
    #[serde(skip)]
    pub samples: Vec<f64>,
    /// The measurement over time, for the report's plots (one line each).
    #[serde(skip)]
    pub series: Vec<Series>,
}

/// A measurement over time: `(seconds from the series' start, value in
/// the finding's unit)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Summary of a sample set.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct Dist {
    pub count: u64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Dist {
    /// Nearest-rank percentiles; None for no samples.
    pub fn of(samples: &[f64]) -> Option<Dist> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Dist {
            count: v.len() as u64,
            min: v[0],
            p50: rank(0.5),
            p99: rank(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

impl Finding {
    fn new(analyzer: &'static str, name: &'static str, kind: Kind, message: String) -> Self {
        Finding {
            analyzer,
            name,
            kind,
            connection: None,
            packet: None,
            device: None,
            in_message: None,
            queue: None,
            label: None,
            value: None,
            unit: None,
            rule: None,
            message,
            evidence: Vec::new(),
            distribution: None,
            samples: Vec::new(),
            series: Vec::new(),
        }
    }

    /// Attaches samples; the value becomes their median.
    pub fn samples(mut self, samples: Vec<f64>) -> Self {
        self.distribution = Dist::of(&samples);
        if let Some(d) = self.distribution {
            self.value = Some(d.p50);
        }
        self.samples = samples;
        self
    }

    /// The values `expect:` compares: the samples, or the one value.
    pub fn values(&self) -> Vec<f64> {
        if self.samples.is_empty() {
            self.value.into_iter().collect()
        } else {
            self.samples.clone()
        }
    }

    pub fn violation(
        analyzer: &'static str,
        name: &'static str,
        rule: &'static str,
        message: String,
    ) -> Self {
        Finding {
            rule: Some(rule),
            ..Finding::new(analyzer, name, Kind::Violation, message)
        }
    }

    pub fn measurement(
        analyzer: &'static str,
        name: &'static str,
        value: f64,
        unit: Unit,
        message: String,
    ) -> Self {
        Finding {
            value: Some(value),
            unit: Some(unit),
            ..Finding::new(analyzer, name, Kind::Measurement, message)
        }
    }

    pub fn note(analyzer: &'static str, name: &'static str, message: String) -> Self {
        Finding::new(analyzer, name, Kind::Note, message)
    }

    /// A measurement over samples (none when there are none), its message
    /// made from their summary.
    pub fn summarized(
        analyzer: &'static str,
        name: &'static str,
        unit: Unit,
        samples: Vec<f64>,
        message: impl FnOnce(&Dist) -> String,
    ) -> Option<Finding> {
        let f = Finding::measurement(analyzer, name, 0.0, unit, String::new()).samples(samples);
        let d = f.distribution?;
        Some(Finding {
            message: message(&d),
            ..f
        })
    }

    /// Adds a line to the finding's plot over time.
    pub fn series(mut self, label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        if !points.is_empty() {
            self.series.push(Series {
                label: label.into(),
                points,
            });
        }
        self
    }

    pub fn conn(mut self, id: u32) -> Self {
        self.connection = Some(id);
        self
    }

    pub fn packet(mut self, p: u32) -> Self {
        self.packet = Some(p).filter(|p| *p > 0);
        self
    }

    pub fn in_message(mut self, n: u32) -> Self {
        self.in_message = Some(n).filter(|n| *n > 0);
        self
    }

    pub fn label(mut self, l: impl Into<String>) -> Self {
        self.label = Some(l.into());
        self
    }

    pub fn device(mut self, d: Option<String>) -> Self {
        self.device = d;
        self
    }

    pub fn evidence(mut self, e: impl IntoIterator<Item = Evidence>) -> Self {
        self.evidence.extend(e);
        self
    }

    /// `analyzer.name`, as `expect:` writes it.
    pub fn path(&self) -> String {
        format!("{}.{}", self.analyzer, self.name)
    }
}

/// Everything an analyzer may read.
pub struct Input<'a> {
    pub trace: &'a Trace,
    pub analysis: &'a Analysis,
    /// Present for wirelab runs (and `wirelab analyze` on a results folder).
    pub facts: Option<&'a RunFacts>,
    pub opts: Options,
    /// The RoCEv2 view of the same trace, built once for every analyzer.
    pub roce: &'a roce::RoceView,
}

/// A pure function from the model to findings.
pub trait Analyzer {
    /// The name a spec uses (`analyzers:`, `finding: <name>.<finding>`).
    fn name(&self) -> &'static str;
    /// One line: what it checks or measures.
    fn about(&self) -> &'static str;
    /// The findings it reports that `expect:` can name, with their units:
    /// the analyzer's entry in the [`catalog`].
    fn findings(&self) -> &'static [(&'static str, Unit)];
    /// Rules checked (obligations examined), so a pass is never vacuous.
    fn run(&self, input: &Input) -> (u64, Vec<Finding>);
}

/// One analyzer's part of the report.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AnalyzerReport {
    pub name: &'static str,
    pub about: &'static str,
    /// How many obligations it examined.
    pub checks: u64,
    pub violations: u64,
    /// "pass" (checked something, no violation), "violation", "measured"
    /// (an analyzer that only measures), or "nothing to check".
    pub verdict: &'static str,
    pub findings: Vec<Finding>,
}

/// The analyzers there are and the findings each declares; specs are
/// checked against it (`wirelab_spec::parse`).
pub fn catalog() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| Catalog {
        analyzers: analyzers::all()
            .iter()
            .map(|a| AnalyzerEntry {
                name: a.name(),
                about: a.about(),
                findings: a.findings(),
            })
            .collect(),
        // The kernel's counter names are the lab's to read
        // (`wirelab_lab::catalog()`).
        counters: None,
    })
}

/// Runs the named analyzers, in the order given.
pub fn run_analyzers<S: AsRef<str>>(input: &Input, names: &[S]) -> Vec<AnalyzerReport> {
    let all = analyzers::all();
    names
        .iter()
        .filter_map(|n| all.iter().find(|a| a.name() == n.as_ref()))
        .map(|a| {
            let (checks, findings) = a.run(input);
            let violations = findings
                .iter()
                .filter(|f| f.kind == Kind::Violation)
                .count() as u64;
            AnalyzerReport {
                name: a.name(),
                about: a.about(),
                checks,
                violations,
                verdict: if violations > 0 {
                    "violation"
                } else if checks > 0 {
                    "pass"
                } else if findings.iter().any(|f| f.kind == Kind::Measurement) {
                    "measured"
                } else {
                    "nothing to check"
                },
                findings,
            }
        })
        .collect()
}
