//! The wirelab spec: what a test is, as a user writes it in YAML.
//!
//! Parsing never touches the host (STYLE.md habit 3): decisions about the
//! machine happen when a plan is brought up. Every error names the YAML path
//! and line, e.g. `events[2].packet: must be >= 1 (line 23)`.

mod capture;
pub mod efsm;
mod events;
mod expect;
pub mod findings;
pub mod flowtables;
mod lines;
pub mod load;
pub mod record;
pub mod roce;
mod topology;
mod traffic;
/// Quantities as types; their own crate so protocol cores share them without YAML.
pub use wirelab_units as units;
pub mod vaqm;

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use capture::Capture;
pub use events::{Action, Edit, Event, Side, MAX_REORDER_AFTER};
pub use expect::{Claim, Expect, Recovery};
pub use findings::{Amount, AnalyzerEntry, AnalyzerName, Catalog, Stat, Unit};
pub use topology::{
    CongestionControl, Host, RoceStack, Stack, Topology, MAX_GIDS, MAX_HOSTS, MAX_SOCKET_BUFFER,
    MIN_SOCKET_BUFFER,
};
pub use traffic::{
    ConnGroup, ReplayCalls, Traffic, Transport, Verb, Verbs, MAX_CONNECTIONS, ROCE_OVERHEAD,
};
pub use units::{BitsPerSec, Bytes, Nanos};

/// A spec that failed to parse or validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct SpecError {
    /// YAML path, e.g. `events[2].packet` (indices from 0); empty for the root.
    pub path: String,
    pub message: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
}

/// The 1-based line of YAML path `path` in `text` (or of its nearest
/// ancestor there): for errors about a spec found after it parsed.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    lines::LineIndex::build(text).line_of(path)
}

impl SpecError {
    fn render(&self) -> String {
        let mut s = String::new();
        if !self.path.is_empty() && self.path != "." {
            s.push_str(&self.path);
            s.push_str(": ");
        }
        s.push_str(&self.message);
        if let Some(l) = self.line {
            s.push_str(&format!(" (line {l})"));
        }
        s
    }
}

/// A 1-based index as users write them (connections, packets, messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct Index(#[schemars(range(min = 1))] pub u32);

impl<'de> Deserialize<'de> for Index {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        if v < 1 {
            return Err(serde::de::Error::custom(format!("must be >= 1, got {v}")));
        }
        u32::try_from(v)
            .map(Index)
            .map_err(|_| serde::de::Error::custom(format!("{v} is too large")))
    }
}

/// An index or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, JsonSchema)]
#[serde(untagged)]
pub enum IndexOrAll {
    One(Index),
    #[schemars(with = "AllLiteral")]
    All,
}

#[derive(JsonSchema)]
#[allow(dead_code)]
enum AllLiteral {
    #[serde(rename = "all")]
    All,
}

/// By hand: derived, an untagged unit variant writes `null`, which does
/// not read back.
impl Serialize for IndexOrAll {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IndexOrAll::One(i) => i.serialize(s),
            IndexOrAll::All => s.serialize_str("all"),
        }
    }
}

impl<'de> Deserialize<'de> for IndexOrAll {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IndexOrAll;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number >= 1 or `all`")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<IndexOrAll, E> {
                if s == "all" {
                    Ok(IndexOrAll::All)
                } else {
                    Err(E::custom(format!(
                        "must be a number >= 1 or `all`, got `{s}`"
                    )))
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IndexOrAll, E> {
                if v < 1 {
                    return Err(E::custom(format!("must be >= 1, got {v}")));
                }
                u32::try_from(v)
                    .map(|v| IndexOrAll::One(Index(v)))
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IndexOrAll, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Short name; defaults to the file name.
    #[serde(default)]
    pub name: Option<String>,
    /// The claim this spec checks, in a sentence.
    #[serde(default)]
    pub description: Option<String>,
    pub topology: Topology,
    /// Stack settings of every host; a host's own `stack` overrides them.
    #[serde(default)]
    pub stack: Stack,
    pub traffic: Traffic,
    #[serde(default)]
    pub events: Vec<Event>,
    /// NetBump's virtual queues in the switch (vAQM): marks and drops as
    /// if the port towards a host ran a discipline it does not have.
    #[serde(default)]
    pub vaqm: Option<vaqm::Vaqm>,
    /// An eSwitch's flow tables in the switch (ScalaCN): masks searched
    /// one after another.
    #[serde(default)]
    pub flowtables: Option<flowtables::FlowTables>,
    #[serde(default)]
    pub capture: Capture,
    /// DETER's recording of every host: one record per TCP connection.
    #[serde(default)]
    pub record: Option<record::Record>,
    /// The analyzers to run after the run (all of them when absent).
    #[serde(default)]
    pub analyzers: Option<Vec<AnalyzerName>>,
    #[serde(default)]
    pub expect: Vec<Expect>,
}

impl Spec {
    /// The analyzers this spec runs: its `analyzers:`, or all of them.
    pub fn analyzers<'a>(&'a self, catalog: &Catalog) -> Vec<&'a str> {
        analyzers_or_all(&self.analyzers, catalog)
    }
}

fn analyzers_or_all<'a>(list: &'a Option<Vec<AnalyzerName>>, catalog: &Catalog) -> Vec<&'a str> {
    match list {
        Some(v) => v.iter().map(AnalyzerName::as_str).collect(),
        None => catalog.names(),
    }
}

/// Every name in `analyzers:` is one the catalog has.
fn validate_analyzers(list: &Option<Vec<AnalyzerName>>, catalog: &Catalog) -> Result<(), Invalid> {
    for (i, a) in list.iter().flatten().enumerate() {
        catalog
            .check(a.as_str())
            .or_else(|m| err(format!("analyzers[{i}]"), m))?;
    }
    Ok(())
}

/// Parses and validates a spec against the analyzers there are
/// (`wirelab_analyze::catalog()`).
pub fn parse(text: &str, catalog: &Catalog) -> Result<Spec, SpecError> {
    parse_yaml(text, |s| validate(s, catalog))
}

/// What `wirelab bump` runs between two existing interfaces: the vAQM
/// stage (its queues name an interface as their `port`: the packets that
/// leave through it) and the capture settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BumpSpec {
    pub vaqm: vaqm::Vaqm,
    #[serde(default)]
    pub capture: Capture,
    /// The analyzers to run on the trace (all of them when absent).
    #[serde(default)]
    pub analyzers: Option<Vec<AnalyzerName>>,
}

impl BumpSpec {
    /// The analyzers this bump runs: its `analyzers:`, or all of them.
    pub fn analyzers<'a>(&'a self, catalog: &Catalog) -> Vec<&'a str> {
        analyzers_or_all(&self.analyzers, catalog)
    }
}

/// Parses a bump's YAML for the interfaces `ports` (their MTU `mtu`).
pub fn parse_bump(
    text: &str,
    ports: [&str; 2],
    mtu: u32,
    catalog: &Catalog,
) -> Result<BumpSpec, SpecError> {
    parse_yaml(text, |b: &BumpSpec| {
        validate_analyzers(&b.analyzers, catalog)?;
        vaqm::validate_queues(&b.vaqm, &|n| ports.contains(&n), "interface", mtu)?;
        let v = &b.vaqm;
        for (field, set) in [
            ("extension", v.extension.is_some()),
            ("reaction_point", v.reaction_point.is_some()),
        ] {
            if set {
                return err(
                    format!("vaqm.{field}"),
                    "needs a lab's hosts; `wirelab bump` runs the queues, capture and analysis only",
                );
            }
        }
        for (i, q) in v.queues.iter().enumerate() {
            if q.distributed.is_some() || q.extension.is_some() || !q.destinations.is_empty() {
                return err(
                    format!("vaqm.queues[{i}]"),
                    "`wirelab bump` queues are classified by `port` (an interface) and run \
                     dctcp, red, qcn or estimate only",
                );
            }
        }
        Ok(())
    })
}

/// Deserialises any wirelab YAML document, then runs its cross-field
/// checks; either kind of error names the YAML path and line.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    validate: impl FnOnce(&T) -> Result<(), Invalid>,
) -> Result<T, SpecError> {
    lines::check_depth(text, MAX_DEPTH)?;
    let value: T = serde_yaml::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        let mut message = e.to_string();
        // serde_yaml appends " at line L column C"; the line goes at the end.
        if let Some(i) = message.find(" at line ") {
            message.truncate(i);
        }
        // ... and puts the YAML path first ("events[0].packet: ...").
        let mut path = String::new();
        if let Some((p, rest)) = message.split_once(": ") {
            if !p.is_empty() && !p.contains(' ') {
                path = p.to_string();
                message = rest.to_string();
            }
        }
        SpecError {
            path,
            message: clip(&message),
            line,
        }
    })?;
    let index = lines::LineIndex::build(text);
    validate(&value).map_err(|(path, message)| SpecError {
        line: index.line_of(&path),
        path,
        message: clip(&message),
    })?;
    Ok(value)
}

/// Reads and parses a spec file; the error names the file.
pub fn load(path: &std::path::Path, catalog: &Catalog) -> Result<Spec, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut spec = parse(&text, catalog).map_err(|error| LoadError::Invalid {
        path: path.display().to_string(),
        error,
    })?;
    // A discipline's C file is named relative to the spec.
    if let Some(ext) = spec.vaqm.as_mut().and_then(|v| v.extension.as_mut()) {
        if ext.is_relative() {
            *ext = path
                .parent()
                .unwrap_or(std::path::Path::new(""))
                .join(&*ext);
        }
        if !ext.is_file() {
            return Err(LoadError::Invalid {
                path: path.display().to_string(),
                error: SpecError {
                    line: lines::LineIndex::build(&text).line_of("vaqm.extension"),
                    path: "vaqm.extension".into(),
                    message: format!("no such file: {}", ext.display()),
                },
            });
        }
    }
    resolve_profiles(&mut spec, path, &text)?;
    resolve_replays(&mut spec, path, &text)?;
    if spec.name.is_none() {
        spec.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    }
    Ok(spec)
}

/// RoCE profile files are named relative to the spec, as the extension is,
/// and read now, so `check` finds what `run` would trip over.
fn resolve_profiles(spec: &mut Spec, path: &std::path::Path, text: &str) -> Result<(), LoadError> {
    let dir = path.parent().unwrap_or(std::path::Path::new(""));
    let mut stacks: Vec<(String, &mut Stack)> = vec![("stack".into(), &mut spec.stack)];
    for (i, h) in spec.topology.hosts.iter_mut().enumerate() {
        if let Some(st) = h.stack.as_mut() {
            stacks.push((format!("topology.hosts[{i}].stack"), st));
        }
    }
    for (at, st) in stacks {
        let Some(p) = st.roce.as_mut().and_then(|r| r.profile.as_mut()) else {
            continue;
        };
        if roce::is_path(p) && std::path::Path::new(p.as_str()).is_relative() {
            *p = dir.join(p.as_str()).display().to_string();
        }
        if let Err(e) = roce::load_profile(p) {
            let yaml_path = format!("{at}.roce.profile");
            return Err(LoadError::Invalid {
                path: path.display().to_string(),
                error: SpecError {
                    line: lines::LineIndex::build(text).line_of(&yaml_path),
                    path: yaml_path,
                    message: clip(&e.to_string()),
                },
            });
        }
    }
    Ok(())
}

/// A replay's records are named relative to the spec, and read now, so
/// `check` says which file is damaged and where.
fn resolve_replays(spec: &mut Spec, path: &std::path::Path, text: &str) -> Result<(), LoadError> {
    let dir = path.parent().unwrap_or(std::path::Path::new(""));
    for (i, g) in spec.traffic.connections.iter_mut().enumerate() {
        let Some(r) = g.replay.as_mut() else { continue };
        for (end, file) in [
            ("requester", &mut r.requester),
            ("responder", &mut r.responder),
        ] {
            if file.is_relative() {
                *file = dir.join(&*file);
            }
            let why = match std::fs::read(&*file) {
                Ok(bytes) => match wirelab_deter::record::decode(&bytes) {
                    Ok(_) => continue,
                    Err(d) => format!("{}: {d}", file.display()),
                },
                Err(e) => format!("{}: {e}", file.display()),
            };
            let yaml_path = format!("traffic.connections[{i}].replay.{end}");
            return Err(LoadError::Invalid {
                path: path.display().to_string(),
                error: SpecError {
                    line: lines::LineIndex::build(text).line_of(&yaml_path),
                    path: yaml_path,
                    message: clip(&why),
                },
            });
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read spec {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Invalid { path: String, error: SpecError },
}

/// The JSON Schema of the spec, generated from the same types; the
/// analyzers' names come from the catalog, so editors can offer them.
pub fn json_schema(catalog: &Catalog) -> serde_json::Value {
    let schema = schemars::schema_for!(Spec);
    let mut v = serde_json::to_value(schema).expect("schema serialises");
    let one_of: Vec<_> = catalog
        .analyzers
        .iter()
        .map(|a| serde_json::json!({"description": a.about, "enum": [a.name], "type": "string"}))
        .collect();
    v["definitions"]["AnalyzerName"] = serde_json::json!({
        "description": "The analyzers a spec can turn on (`analyzers:`; all by default).",
        "oneOf": one_of,
    });
    v
}

/// Deepest nesting a spec may have; real ones stay under 10. Checked before
/// the YAML parser runs: its scanner takes minutes on a million levels.
pub const MAX_DEPTH: usize = 64;

/// An error message short enough to read: a value quoted in it may be
/// megabytes long.
fn clip(message: &str) -> String {
    const MAX: usize = 300;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &message[..end], message.len())
}

/// A cross-field error: (YAML path, message).
pub type Invalid = (String, String);

fn err<T>(path: impl Into<String>, msg: impl Into<String>) -> Result<T, Invalid> {
    Err((path.into(), msg.into()))
}

/// A queue or token bucket of `b` must take one full Ethernet frame.
pub(crate) fn holds_a_frame(s: &Spec, b: Bytes, at: String) -> Result<(), Invalid> {
    frame_fits(s.topology.mtu, b, at)
}

pub(crate) fn frame_fits(mtu: u32, b: Bytes, at: String) -> Result<(), Invalid> {
    let frame = u64::from(mtu) + 14;
    if b.0 < frame {
        return err(
            at,
            format!("{b} is below one frame ({frame}B at MTU {mtu})"),
        );
    }
    Ok(())
}

/// A name is joined onto the results folder: it must stay one plain name.
pub(crate) fn validate_name(name: &Option<String>) -> Result<(), Invalid> {
    if let Some(n) = name {
        if n.is_empty() || n == "." || n == ".." || n.contains(['/', '\\', '\0']) {
            return err(
                "name",
                format!(
                    "`{}` must be a plain name: no `/`, `\\`, `.` or `..`",
                    clip(n)
                ),
            );
        }
    }
    Ok(())
}

fn validate(s: &Spec, catalog: &Catalog) -> Result<(), Invalid> {
    validate_name(&s.name)?;
    validate_analyzers(&s.analyzers, catalog)?;
    let hosts = topology::validate(s)?;
    vaqm::validate(s)?;
    flowtables::validate(s, &hosts)?;
    let groups = traffic::validate(s, &hosts)?;
    events::validate(s, &groups)?;
    capture::validate(s)?;
    record::validate(s)?;
    expect::validate(s, &hosts, groups.len() as u32, catalog)
}
