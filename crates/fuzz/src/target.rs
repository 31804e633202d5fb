//! A fuzzing target (Lumina §4, "Test case generation"): the seed spec the
//! pool starts from, the search space, the objectives scored on every run
//! and when to stop. Parsed as specs are, so every error names the YAML
//! path and line; nothing on the host is touched.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wirelab_spec::{Action, Bytes, Catalog, CongestionControl, Nanos, Spec, Verb};

/// A target file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// What the campaign looks for, in a sentence.
    #[serde(default)]
    pub description: Option<String>,
    /// The spec the search starts from, relative to the target file.
    pub seed: PathBuf,
    /// Every host's RoCE device profile (a built-in name or a file): the
    /// device under test, whose quirks the campaign must find without being
    /// told which. Overrides the seed's; `wirelab fuzz --device` overrides it.
    #[serde(default)]
    pub device: Option<String>,
    /// The device objectives with `reference` compare with (default: the
    /// `default` profile, which follows the specification).
    #[serde(default)]
    pub reference_device: Option<String>,
    /// Which fields of the seed may change, and within what.
    pub space: Space,
    /// Score = Σ weight · s(objective) (Lumina §4 step 3). An objective
    /// whose s reaches 1 is an anomaly.
    pub objectives: Vec<Objective>,
    #[serde(default)]
    pub pool: PoolSettings,
    #[serde(default)]
    pub stop: Stop,
    #[serde(default)]
    pub shrink: ShrinkSettings,
}

/// An inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Range<T> {
    pub min: T,
    pub max: T,
}

/// The search space. A field left out keeps the seed's value; each field
/// given applies to every connection group of the seed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Space {
    /// Connections (QPs) per group.
    #[serde(default)]
    pub connections: Option<Range<u32>>,
    /// Verbs a group may use; with `verb_combinations`, also two of them in
    /// turn (Lumina §3.2).
    #[serde(default)]
    pub verbs: Vec<Verb>,
    #[serde(default)]
    pub verb_combinations: bool,
    #[serde(default)]
    pub message_size: Option<Range<Bytes>>,
    #[serde(default)]
    pub messages: Option<Range<u32>>,
    #[serde(default)]
    pub tx_depth: Option<Range<u32>>,
    /// RoCE path MTUs to choose from.
    #[serde(default)]
    pub mtu: Vec<u32>,
    /// `barrier` may be turned on and off.
    #[serde(default)]
    pub barrier: bool,
    #[serde(default)]
    pub events: Option<EventSpace>,
    #[serde(default)]
    pub stack: StackSpace,
}

/// The events (Lumina §3.3 addressing) a candidate may carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventSpace {
    /// How many events a candidate has.
    pub count: Range<u32>,
    pub actions: Vec<Action>,
    /// The data packet an event addresses.
    pub packet: Range<u32>,
    #[serde(default = "first_iteration")]
    pub iteration: Range<u32>,
    /// An event may address every packet (`packet: all`) and every
    /// iteration, as Lumina's CNP tests mark every packet.
    #[serde(default)]
    pub every_packet: bool,
}

fn first_iteration() -> Range<u32> {
    Range { min: 1, max: 1 }
}

/// Stack and device settings that may change (every host at once).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StackSpace {
    #[serde(default)]
    pub congestion_control: Vec<CongestionControl>,
    #[serde(default)]
    pub rto_min: Option<Range<Nanos>>,
    /// `sack` may be turned on and off.
    #[serde(default)]
    pub sack: bool,
    /// RoCE: the device's `min_time_between_cnps`.
    #[serde(default)]
    pub min_time_between_cnps: Option<Range<Nanos>>,
    /// RoCE: `dcqcn_rp` may be turned on and off.
    #[serde(default)]
    pub dcqcn_rp: bool,
    /// RoCE: `adaptive_retransmission` may be turned on and off.
    #[serde(default)]
    pub adaptive_retransmission: bool,
    /// RoCE: the connections' `min_retransmit_timeout` exponent.
    #[serde(default)]
    pub min_retransmit_timeout: Option<Range<u8>>,
}

/// What an objective measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Analyzer violations (of `analyzers`, or of all): s = their count.
    Violations,
    /// Counters that disagree with the trace (the `counters` and
    /// `roce-counters` analyzers, Lumina §6.2.4): s = their violations.
    Counters,
    /// A finding's largest value above `above`: s = max / above.
    Latency,
    /// The slowest message against the same spec without its events:
    /// s = max MCT / (`above_baseline` × baseline's max MCT).
    MctInflation,
    /// Connections no event touches, slowed by others' events (Lumina
    /// §6.2.2): s = the worst innocent's max MCT over its own baseline,
    /// divided by `above_baseline`.
    NoisyNeighbour,
    /// Goodput shared unfairly: Jain's index J of per-connection goodput;
    /// s = (1 − J) / (1 − `below`).
    Unfairness,
    /// A finding that differs from the reference device's on the same
    /// spec, either way: s = |x − x_ref| / `by` (a CNP limiter of another
    /// scope sends fewer CNPs for the same marks, Lumina §6.3).
    Differs,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Violations => "violations",
            Kind::Counters => "counters",
            Kind::Latency => "latency",
            Kind::MctInflation => "mct-inflation",
            Kind::NoisyNeighbour => "noisy-neighbour",
            Kind::Unfairness => "unfairness",
            Kind::Differs => "differs",
        }
    }
    /// Scored against a run of the same spec without events.
    pub fn needs_baseline(self) -> bool {
        matches!(self, Kind::MctInflation | Kind::NoisyNeighbour)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    pub kind: Kind,
    /// w_i in Score = Σ w_i · s(i).
    #[serde(default = "one")]
    pub weight: f64,
    /// `violations`: only these analyzers' (default: every analyzer's).
    #[serde(default)]
    pub analyzers: Vec<String>,
    /// `latency`: the finding, `analyzer.name`.
    #[serde(default)]
    pub finding: Option<String>,
    /// `latency`: the bound.
    #[serde(default)]
    pub above: Option<Nanos>,
    /// `differs`: how far from the reference device's value is an anomaly,
    /// in the finding's unit (`5`, `100us`).
    #[serde(default)]
    pub by: Option<wirelab_spec::Amount>,
    /// `latency`, `differs`: which of the run's values is compared: `p50`
    /// (the default: a device's slow path moves the median, a lab's
    /// scheduling noise only the tail) or `max`.
    #[serde(default)]
    pub stat: Option<LatencyStat>,
    /// Score only what the device under test shows beyond the reference
    /// device (`reference_device`) on the same spec: violations it has and
    /// the reference has not, or a latency `above` the reference's own
    /// (`violations`, `counters`, `latency`). Differential testing: the
    /// lab's own delays (a userspace transport under a burst) cancel out.
    #[serde(default)]
    pub reference: bool,
    /// `mct-inflation`, `noisy-neighbour`: k, the slowdown that is an anomaly.
    #[serde(default)]
    pub above_baseline: Option<f64>,
    /// `unfairness`: the index below which it is an anomaly.
    #[serde(default)]
    pub below: Option<f64>,
}

fn one() -> f64 {
    1.0
}

impl Objective {
    /// A short name: `latency(roce-retransmission-latency.nack-reaction)`.
    pub fn label(&self) -> String {
        match (&self.finding, self.analyzers.is_empty()) {
            (Some(f), _) if self.stat == Some(LatencyStat::Max) => {
                format!("{}({f}, max)", self.kind.name())
            }
            (Some(f), _) => format!("{}({f})", self.kind.name()),
            (None, false) => format!("{}({})", self.kind.name(), self.analyzers.join(",")),
            (None, true) => self.kind.name().to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LatencyStat {
    #[default]
    P50,
    Max,
}

/// Algorithm 1's pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    /// Configurations the pool starts with (random points of the space).
    #[serde(default = "pool_size")]
    pub size: u32,
    /// Members the pool holds at most; a candidate joining a full pool
    /// replaces its lowest scorer.
    #[serde(default = "pool_capacity")]
    pub capacity: u32,
    /// p: a candidate scoring below the pool's median joins it with this
    /// probability (Algorithm 1 line 12).
    #[serde(default = "keep_p")]
    pub keep_probability: f64,
    /// Fields changed per mutation, at most.
    #[serde(default = "mutations")]
    pub mutations: u32,
}

fn pool_size() -> u32 {
    8
}
fn pool_capacity() -> u32 {
    16
}
fn keep_p() -> f64 {
    0.2
}
fn mutations() -> u32 {
    3
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            size: pool_size(),
            capacity: pool_capacity(),
            keep_probability: keep_p(),
            mutations: mutations(),
        }
    }
}

/// When the campaign stops: whichever comes first (Algorithm 1 line 13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    /// At the first anomaly (after shrinking it).
    #[serde(default = "yes")]
    pub anomaly: bool,
    #[serde(default = "runs")]
    pub runs: u32,
    /// Wall time, e.g. `20m`, `1h 30m`.
    #[serde(default, with = "opt_duration")]
    #[schemars(with = "Option<String>")]
    pub time: Option<std::time::Duration>,
}

fn yes() -> bool {
    true
}
fn runs() -> u32 {
    100
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            anomaly: true,
            runs: runs(),
            time: None,
        }
    }
}

mod opt_duration {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(
        d: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| {
            humantime::parse_duration(&s)
                .map_err(|e| serde::de::Error::custom(format!("`{s}`: {e}")))
        })
        .transpose()
    }
}

/// How an anomaly's spec is reduced and confirmed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShrinkSettings {
    /// The shrunk spec must show the anomaly this many times in a row.
    #[serde(default = "confirm")]
    pub confirm: u32,
    /// Lab runs the reduction may spend.
    #[serde(default = "shrink_runs")]
    pub max_runs: u32,
}

fn confirm() -> u32 {
    3
}
fn shrink_runs() -> u32 {
    60
}

impl Default for ShrinkSettings {
    fn default() -> Self {
        ShrinkSettings {
            confirm: confirm(),
            max_runs: shrink_runs(),
        }
    }
}

/// A target that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Invalid {
        path: String,
        error: wirelab_spec::SpecError,
    },
    #[error("--device: {0}")]
    Device(String),
    #[error("{path}: seed: {error}")]
    Seed {
        path: String,
        error: wirelab_spec::LoadError,
    },
}

/// A target with its seed spec loaded.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub target: Target,
    /// The target file's text, kept in the campaign folder.
    pub text: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// The seed with `device` applied and its `expect:` removed (runs are
    /// scored, not judged).
    pub seed: Spec,
}

/// Whether a file is a fuzz target rather than a spec: a YAML mapping
/// with `objectives` and `seed` (a spec has neither). Unreadable files
/// are not: the spec loader says why.
pub fn is_target_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(v) = wirelab_spec::parse_yaml::<serde_yaml::Value>(&text, |_| Ok(())) else {
        return false;
    };
    v.get("objectives").is_some() && v.get("seed").is_some()
}

/// Reads a target and its seed spec; `device` overrides the target's.
pub fn load(path: &Path, device: Option<&str>, catalog: &Catalog) -> Result<Loaded, TargetError> {
    let text = std::fs::read_to_string(path).map_err(|source| TargetError::Read {
        path: path.display().to_string(),
        source,
    })?;
    from_text(&text, path, device, catalog)
}

/// [`load`] on a target's text; `path` names it and anchors the seed.
pub fn from_text(
    text: &str,
    path: &Path,
    device: Option<&str>,
    catalog: &Catalog,
) -> Result<Loaded, TargetError> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let invalid = |error| TargetError::Invalid {
        path: path.display().to_string(),
        error,
    };
    let mut target: Target = wirelab_spec::parse_yaml(text, |t: &Target| {
        validate(t, catalog)?;
        for (field, d) in [
            ("device", &t.device),
            ("reference_device", &t.reference_device),
        ] {
            if let Some(d) = d {
                check_device(&resolve(dir, d)).map_err(|m| (field.to_string(), m))?;
            }
        }
        Ok(())
    })
    .map_err(invalid)?;
    if let Some(d) = device {
        check_device(d).map_err(TargetError::Device)?;
        target.device = Some(d.to_string());
    } else if let Some(d) = target.device.as_mut() {
        *d = resolve(dir, d);
    }
    if let Some(d) = target.reference_device.as_mut() {
        *d = resolve(dir, d);
    }
    let seed_path = dir.join(&target.seed);
    let mut seed = wirelab_spec::load(&seed_path, catalog).map_err(|error| TargetError::Seed {
        path: path.display().to_string(),
        error,
    })?;
    seed.expect.clear();
    if let Some(d) = &target.device {
        set_device(&mut seed, d);
    }
    Ok(Loaded {
        target,
        text: text.to_string(),
        path: path.to_path_buf(),
        seed,
    })
}

/// A profile file is named relative to the target, as a spec's is.
fn resolve(dir: &Path, d: &str) -> String {
    if wirelab_spec::roce::is_path(d) && Path::new(d).is_relative() {
        dir.join(d).display().to_string()
    } else {
        d.to_string()
    }
}

/// Read now, so a misspelt device fails before a lab exists.
fn check_device(d: &str) -> Result<(), String> {
    wirelab_spec::roce::load_profile(d)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl Target {
    /// The reference device, when an objective compares with one.
    pub fn reference(&self) -> Option<&str> {
        self.objectives
            .iter()
            .any(|o| o.reference)
            .then(|| self.reference_device.as_deref().unwrap_or("default"))
    }
}

/// Every host's RoCE device runs `profile`.
pub fn set_device(spec: &mut Spec, profile: &str) {
    spec.stack.roce.get_or_insert_with(Default::default).profile = Some(profile.to_string());
    for h in &mut spec.topology.hosts {
        if let Some(r) = h.stack.as_mut().and_then(|s| s.roce.as_mut()) {
            r.profile = Some(profile.to_string());
        }
    }
}

fn bad<T>(path: impl Into<String>, msg: impl Into<String>) -> Result<T, (String, String)> {
    Err((path.into(), msg.into()))
}

fn range<T: PartialOrd + std::fmt::Debug>(
    r: &Option<Range<T>>,
    at: &str,
    low: T,
) -> Result<(), (String, String)> {
    if let Some(r) = r {
        if r.min < low {
            return bad(format!("{at}.min"), format!("must be at least {low:?}"));
        }
        if r.min > r.max {
            return bad(at, format!("min {:?} is above max {:?}", r.min, r.max));
        }
    }
    Ok(())
}

fn validate(t: &Target, catalog: &Catalog) -> Result<(), (String, String)> {
    let s = &t.space;
    range(&s.connections, "space.connections", 1)?;
    if let Some(c) = &s.connections {
        if c.max > wirelab_spec::MAX_CONNECTIONS {
            return bad(
                "space.connections.max",
                format!("at most {}", wirelab_spec::MAX_CONNECTIONS),
            );
        }
    }
    range(&s.messages, "space.messages", 1)?;
    range(&s.tx_depth, "space.tx_depth", 1)?;
    range(&s.message_size, "space.message_size", Bytes(1))?;
    for (i, m) in s.mtu.iter().enumerate() {
        if ![256, 512, 1024, 2048, 4096].contains(m) {
            return bad(
                format!("space.mtu[{i}]"),
                "a RoCE path MTU is 256, 512, 1024, 2048 or 4096",
            );
        }
    }
    if s.verb_combinations && s.verbs.len() < 2 {
        return bad(
            "space.verb_combinations",
            "needs at least two `verbs` to combine",
        );
    }
    if let Some(e) = &s.events {
        range(&Some(e.count), "space.events.count", 0)?;
        range(&Some(e.packet), "space.events.packet", 1)?;
        range(&Some(e.iteration), "space.events.iteration", 1)?;
        if e.actions.is_empty() {
            return bad("space.events.actions", "name at least one action");
        }
        if e.actions.contains(&Action::Edit) {
            return bad(
                "space.events.actions",
                "`edit` needs a field to rewrite; the fuzzer injects drop, ecn and corrupt",
            );
        }
    }
    range(&s.stack.rto_min, "space.stack.rto_min", Nanos(1))?;
    range(
        &s.stack.min_time_between_cnps,
        "space.stack.min_time_between_cnps",
        Nanos(0),
    )?;
    range(
        &s.stack.min_retransmit_timeout,
        "space.stack.min_retransmit_timeout",
        0,
    )?;
    if let Some(r) = &s.stack.min_retransmit_timeout {
        if r.max > 31 {
            return bad(
                "space.stack.min_retransmit_timeout.max",
                "an IBTA timeout exponent is 0..31",
            );
        }
    }
    if t.objectives.is_empty() {
        return bad("objectives", "name at least one objective");
    }
    for (i, o) in t.objectives.iter().enumerate() {
        let at = format!("objectives[{i}]");
        if !(o.weight.is_finite() && o.weight > 0.0) {
            return bad(format!("{at}.weight"), "must be a positive number");
        }
        let want = |field: &str, set: bool| -> Result<(), (String, String)> {
            if !set {
                return bad(
                    format!("{at}.{field}"),
                    format!("`{}` needs `{field}`", o.kind.name()),
                );
            }
            Ok(())
        };
        let stray = [
            (
                "analyzers",
                !o.analyzers.is_empty(),
                o.kind == Kind::Violations,
            ),
            (
                "finding",
                o.finding.is_some(),
                matches!(o.kind, Kind::Latency | Kind::Differs),
            ),
            ("above", o.above.is_some(), o.kind == Kind::Latency),
            ("by", o.by.is_some(), o.kind == Kind::Differs),
            (
                "stat",
                o.stat.is_some(),
                matches!(o.kind, Kind::Latency | Kind::Differs),
            ),
            (
                "above_baseline",
                o.above_baseline.is_some(),
                o.kind.needs_baseline(),
            ),
            ("below", o.below.is_some(), o.kind == Kind::Unfairness),
            (
                "reference",
                o.reference,
                matches!(
                    o.kind,
                    Kind::Violations | Kind::Counters | Kind::Latency | Kind::Differs
                ),
            ),
        ];
        for (field, set, allowed) in stray {
            if set && !allowed {
                return bad(
                    format!("{at}.{field}"),
                    format!("does not apply to `{}`", o.kind.name()),
                );
            }
        }
        match o.kind {
            Kind::Violations => {
                for (j, a) in o.analyzers.iter().enumerate() {
                    catalog
                        .check(a)
                        .or_else(|m| bad(format!("{at}.analyzers[{j}]"), m))?;
                }
            }
            Kind::Counters => {}
            Kind::Latency => {
                want("finding", o.finding.is_some())?;
                want("above", o.above.is_some())?;
                let f = o.finding.as_deref().unwrap_or_default();
                if catalog.unit_of(f).is_none() {
                    return bad(
                        format!("{at}.finding"),
                        format!("unknown finding `{f}` (`wirelab analyze --findings` lists them)"),
                    );
                }
                if o.above == Some(Nanos(0)) {
                    return bad(format!("{at}.above"), "must be above 0");
                }
            }
            Kind::MctInflation | Kind::NoisyNeighbour => {
                want("above_baseline", o.above_baseline.is_some())?;
                let k = o.above_baseline.unwrap_or_default();
                if !(k.is_finite() && k > 1.0) {
                    return bad(format!("{at}.above_baseline"), "a slowdown factor above 1");
                }
            }
            Kind::Differs => {
                want("finding", o.finding.is_some())?;
                want("by", o.by.is_some())?;
                if !o.reference {
                    return bad(
                        format!("{at}.reference"),
                        "`differs` compares with the reference device: set `reference: true`",
                    );
                }
                let f = o.finding.as_deref().unwrap_or_default();
                let Some(unit) = catalog.unit_of(f) else {
                    return bad(
                        format!("{at}.finding"),
                        format!("unknown finding `{f}` (`wirelab analyze --findings` lists them)"),
                    );
                };
                match o.by.as_ref().map(|b| b.value_in(unit)) {
                    Some(Ok(v)) if v > 0.0 => {}
                    Some(Ok(_)) => return bad(format!("{at}.by"), "must be above 0"),
                    Some(Err(m)) => return bad(format!("{at}.by"), m),
                    None => {}
                }
            }
            Kind::Unfairness => {
                want("below", o.below.is_some())?;
                let b = o.below.unwrap_or_default();
                if !(b > 0.0 && b < 1.0) {
                    return bad(format!("{at}.below"), "Jain's index bound, between 0 and 1");
                }
            }
        }
    }
    let p = &t.pool;
    if p.size == 0 {
        return bad("pool.size", "must be at least 1");
    }
    if p.capacity < p.size {
        return bad(
            "pool.capacity",
            format!("must be at least pool.size ({})", p.size),
        );
    }
    if !(0.0..=1.0).contains(&p.keep_probability) {
        return bad("pool.keep_probability", "a probability, 0 to 1");
    }
    if p.mutations == 0 {
        return bad("pool.mutations", "must be at least 1");
    }
    if t.stop.runs == 0 {
        return bad("stop.runs", "must be at least 1");
    }
    if t.shrink.confirm == 0 {
        return bad("shrink.confirm", "must be at least 1");
    }
    Ok(())
}
