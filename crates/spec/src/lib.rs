//! The wirelab spec: what a test is, as a user writes it in YAML.
//!
//! Parsing never touches the host (STYLE.md habit 3): decisions about the
//! machine happen when a plan is brought up. Every error names the YAML path
//! and line, e.g. `events[2].packet: must be >= 1 (line 23)`.

pub mod findings;
mod lines;
pub mod roce;
/// Quantities as types; their own crate so protocol cores share them without YAML.
pub use wirelab_units as units;
pub mod vaqm;

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use findings::{Amount, AnalyzerName, Stat, Unit};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
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
    #[serde(default)]
    pub capture: Capture,
    /// The analyzers to run after the run (all of them when absent).
    #[serde(default)]
    pub analyzers: Option<Vec<AnalyzerName>>,
    #[serde(default)]
    pub expect: Vec<Expect>,
}

impl Spec {
    /// The analyzers this spec runs.
    pub fn analyzers(&self) -> Vec<AnalyzerName> {
        self.analyzers
            .clone()
            .unwrap_or_else(|| AnalyzerName::ALL.to_vec())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// MTU of every lab link (bytes).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Hosts, each attached to its own switch port (a star around the switch).
    pub hosts: Vec<Host>,
}

fn default_mtu() -> u32 {
    1500
}

/// Most GIDs a host's RoCE device may have.
pub const MAX_GIDS: u32 = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Lower-case letters, digits and '-', at most 12 characters.
    pub name: String,
    /// Rate limit on the switch's egress port towards this host (a bottleneck).
    #[serde(default)]
    pub bottleneck: Option<BitsPerSec>,
    /// Buffer of that bottleneck queue.
    #[serde(default)]
    pub bottleneck_buffer: Option<Bytes>,
    /// Token-bucket depth of the bottleneck: how much it may send back to
    /// back after an idle spell. Default 1 ms at the rate (at least one
    /// frame); one frame makes the real queue drain like NetBump's leaky
    /// bucket, which its accuracy experiment needs (§6.2.2).
    #[serde(default)]
    pub bottleneck_burst: Option<Bytes>,
    /// RoCE: how many addresses (GIDs) the host's device answers on, 1..=8
    /// (Lumina's multiple GIDs per host). The k-th connection of a group
    /// uses GID k mod n of its requester and of its responder.
    #[serde(default)]
    pub gids: Option<u32>,
    #[serde(default)]
    pub stack: Option<Stack>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    Reno,
    Cubic,
    Bbr,
    /// DCTCP (RFC 8257): wirelab's BPF struct_ops `wl_dctcp`, registered
    /// for the run (this kernel has no tcp_dctcp). Negotiates ECN itself.
    Dctcp,
}

impl CongestionControl {
    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::Reno => "reno",
            CongestionControl::Cubic => "cubic",
            CongestionControl::Bbr => "bbr",
            CongestionControl::Dctcp => "dctcp",
        }
    }

    /// What a socket selects with TCP_CONGESTION.
    pub fn kernel_name(self) -> &'static str {
        match self {
            CongestionControl::Dctcp => "wl_dctcp",
            other => other.name(),
        }
    }
}

/// Host stack settings. Every field is optional so that a host can override
/// just one; resolved values are in the plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stack {
    /// Set on every socket (TCP_CONGESTION): this kernel defaults to bbr, so
    /// wirelab always sets it. Default: cubic.
    #[serde(default)]
    pub congestion_control: Option<CongestionControl>,
    /// net.ipv4.tcp_ecn (RFC 3168 negotiation). Default: false.
    #[serde(default)]
    pub ecn: Option<bool>,
    /// net.ipv4.tcp_sack. Default: true.
    #[serde(default)]
    pub sack: Option<bool>,
    /// net.ipv4.tcp_timestamps. Default: true.
    #[serde(default)]
    pub timestamps: Option<bool>,
    /// Route option `rto_min` on the host's lab route.
    #[serde(default)]
    pub rto_min: Option<Nanos>,
    /// Route option `quickack` on the host's lab route.
    #[serde(default)]
    pub quickack: Option<bool>,
    /// Further sysctls (names under net.ipv4. or net.core.) set in the host namespace.
    #[serde(default)]
    pub sysctls: BTreeMap<String, String>,
    /// The host's RoCE device (Lumina's `roce-parameters`), for `transport: roce`.
    #[serde(default)]
    pub roce: Option<RoceStack>,
}

/// A host's RoCE device settings; every field optional so a host can
/// override one. Defaults: profile `default`, DCQCN RP and NP on,
/// min_time_between_cnps 4us, no adaptive retransmission, no slow restart,
/// line rate 10gbit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoceStack {
    /// A built-in device profile (`profiles/roce/`) or a path to a YAML file.
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub dcqcn_rp: Option<bool>,
    #[serde(default)]
    pub dcqcn_np: Option<bool>,
    #[serde(default)]
    pub min_time_between_cnps: Option<Nanos>,
    #[serde(default)]
    pub adaptive_retransmission: Option<bool>,
    #[serde(default)]
    pub slow_restart: Option<bool>,
    /// The rate data is paced at when DCQCN is not limiting it.
    #[serde(default)]
    pub line_rate: Option<BitsPerSec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    /// `tcp` (kernel sockets), `roce` (wirelab's RoCEv2 RC transport over
    /// UDP 4791) or `udp` (an unresponsive paced sender, as NetBump's QCN
    /// experiment, Fig. 17).
    #[serde(default)]
    pub transport: Transport,
    /// Start round r+1 only when every connection completed round r
    /// (Lumina §3.2); a round is `tx_depth` messages on each connection.
    #[serde(default)]
    pub barrier: bool,
    /// Connection groups; connections are numbered from 1 in this order.
    pub connections: Vec<ConnGroup>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    #[default]
    Tcp,
    Roce,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// RoCE only: the requester sends each message into a receive the responder posted.
    Send,
    /// The requester sends each message; the responder answers with a small completion.
    Write,
    /// The requester sends a small request; the responder sends the message.
    Read,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnGroup {
    /// Requester host.
    pub from: String,
    /// Responder host.
    pub to: String,
    #[serde(default = "one")]
    pub count: Index,
    /// One verb, or a combination the requester posts in turn (RoCE only;
    /// Lumina §3.2: "verb combinations, such as Send and Read, facilitating
    /// the generation of bi-directional data traffic").
    #[serde(default)]
    pub verb: Verbs,
    #[serde(default = "one")]
    pub messages: Index,
    pub message_size: Bytes,
    /// Outstanding messages per connection.
    #[serde(default = "one")]
    pub tx_depth: Index,
    /// RoCE: path MTU (256, 512, 1024, 2048 or 4096; default 1024).
    #[serde(default)]
    pub mtu: Option<u32>,
    /// RoCE: local ACK timeout exponent, 4.096us × 2^n (IBTA; default 14, 0 = never).
    #[serde(default)]
    pub min_retransmit_timeout: Option<u8>,
    /// RoCE: retries after a timeout, 0..7 (default 7).
    #[serde(default)]
    pub max_retransmit_retry: Option<u8>,
    /// UDP: the rate each connection sends its datagrams at (required):
    /// `messages` × `message_size` bytes in datagrams that fill the MTU,
    /// paced, never reacting to loss or marks.
    #[serde(default)]
    pub rate: Option<BitsPerSec>,
    /// TCP and UDP: the group's first connection posts its first message
    /// this long after the workload starts (default: at once).
    #[serde(default)]
    pub start: Option<Nanos>,
    /// TCP and UDP: each further connection of the group starts this much after
    /// the one before (DCTCP's convergence test: flows joining one by one).
    #[serde(default)]
    pub stagger: Option<Nanos>,
}

fn one() -> Index {
    Index(1)
}
/// The verbs of a connection group's messages: `write`, or `[send, read]`
/// for message k using verb k mod 2 (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verbs(Vec<Verb>);

impl Verbs {
    /// At least one verb: the deserialiser refuses an empty list.
    pub fn new(verbs: Vec<Verb>) -> Option<Self> {
        (!verbs.is_empty()).then_some(Self(verbs))
    }
    pub fn single(v: Verb) -> Self {
        Self(vec![v])
    }
    pub fn as_slice(&self) -> &[Verb] {
        &self.0
    }
    /// The verb of the 0-based `msg`-th message.
    pub fn of(&self, msg: u32) -> Verb {
        self.0[msg as usize % self.0.len()]
    }
    pub fn contains(&self, v: Verb) -> bool {
        self.0.contains(&v)
    }
    pub fn is_combination(&self) -> bool {
        self.0.len() > 1
    }
    /// Some message carries data from the requester (send, write).
    pub fn requester_sends_data(&self) -> bool {
        self.0.iter().any(|&v| v != Verb::Read)
    }
    /// Some message carries data from the responder (read).
    pub fn responder_sends_data(&self) -> bool {
        self.contains(Verb::Read)
    }
}

impl Default for Verbs {
    fn default() -> Self {
        Self::single(Verb::Write)
    }
}

impl std::fmt::Display for Verbs {
    /// `write`, or `send+read` for a combination.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|v| v.name()).collect();
        f.write_str(&names.join("+"))
    }
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
        }
    }
}

impl Serialize for Verbs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Verbs {
    /// A verb or a non-empty list of verbs. By hand rather than an untagged
    /// enum, whose error ("did not match any variant") names no verb.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Verbs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a verb (send, write, read) or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Verbs, E> {
                Verb::deserialize(serde::de::value::StrDeserializer::<E>::new(v)).map(Verbs::single)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Verbs, A::Error> {
                let mut all = Vec::new();
                while let Some(v) = a.next_element::<Verb>()? {
                    all.push(v);
                }
                Verbs::new(all).ok_or_else(|| {
                    serde::de::Error::custom("an empty list of verbs; name at least one")
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Verbs {
    fn schema_name() -> String {
        "Verbs".into()
    }
    fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        use schemars::schema::{ArrayValidation, InstanceType, SchemaObject, SubschemaValidation};
        let one = gen.subschema_for::<Verb>();
        let many = SchemaObject {
            instance_type: Some(InstanceType::Array.into()),
            array: Some(Box::new(ArrayValidation {
                items: Some(one.clone().into()),
                min_items: Some(1),
                ..Default::default()
            })),
            ..Default::default()
        };
        SchemaObject {
            subschemas: Some(Box::new(SubschemaValidation {
                one_of: Some(vec![one, many.into()]),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Drop,
    /// Set CE on an ECN-capable packet (RFC 3168).
    Ecn,
    /// Flip a payload bit; the receiver's checksum must catch it.
    Corrupt,
    /// Rewrite a header field (the event's `edit`), keeping the packet
    /// valid: RoCE's ICRC is patched (Lumina §6.2.3 set MigReq).
    Edit,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Drop => "drop",
            Action::Ecn => "ecn",
            Action::Corrupt => "corrupt",
            Action::Edit => "edit",
        }
    }
}

/// An injected event, addressed as in Lumina §3.3: a connection by its index,
/// a data packet by its index among the connection's first transmissions
/// (or within a message), and an iteration (1 = first transmission round).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub connection: Index,
    /// With `message`, the packet index within that message.
    pub packet: IndexOrAll,
    #[serde(default)]
    pub message: Option<Index>,
    #[serde(default = "iter_one")]
    pub iteration: IndexOrAll,
    pub action: Action,
    /// With `action: edit`: the field to rewrite and its new value.
    #[serde(default)]
    pub edit: Option<Edit>,
}

/// A header field an `edit` event rewrites. RoCE only for now: MigReq (BTH,
/// IBTA §9.2.4), which Lumina §6.2.3 set to 1 on an E810's packets to show
/// a CX5 dropped them for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// 0 or 1.
    pub migreq: u8,
}

fn iter_one() -> IndexOrAll {
    IndexOrAll::One(Index(1))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// Bytes kept of each packet.
    #[serde(default = "default_snap")]
    pub snap_len: u32,
    /// Size of the capture ring between the switch and the dumper.
    #[serde(default = "default_ring")]
    pub ring_size: Bytes,
    /// Fault injection into wirelab's own capture path: the dumper starts
    /// draining only after this long. With a small ring the run must come
    /// out INVALID; used to prove the integrity check.
    #[serde(default)]
    pub stall_dumper: Option<Nanos>,
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            snap_len: default_snap(),
            ring_size: default_ring(),
            stall_dumper: None,
        }
    }
}

/// Every amount of a claim reads in the claim's unit.
fn validate_amounts(x: &Expect, at: &str) -> Result<(), Invalid> {
    let unit = x.unit();
    for (name, a) in [
        ("at_least", &x.at_least),
        ("at_most", &x.at_most),
        ("equals", &x.equals),
    ] {
        if let Some(a) = a {
            if let Err(e) = a.value_in(unit) {
                return err(format!("{at}.{name}"), e);
            }
        }
    }
    if let Some(t) = &x.tolerance {
        if x.equals.is_none() {
            return err(format!("{at}.tolerance"), "`tolerance` goes with `equals`");
        }
        if let Err(e) = t.tolerance(unit, 1.0) {
            return err(format!("{at}.tolerance"), e);
        }
    }
    if x.equals.is_some() && (x.at_least.is_some() || x.at_most.is_some()) {
        return err(at, "`equals` or `at_least`/`at_most`, not both");
    }
    Ok(())
}

fn default_snap() -> u32 {
    128
}
fn default_ring() -> Bytes {
    Bytes(16 << 20)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// Triggered by the receiver's loss signal: duplicate ACKs (RFC 5681),
    /// SACK (RFC 6675) or RACK (RFC 8985).
    Fast,
    /// A tail loss probe (RFC 8985 §7).
    Probe,
    /// The retransmission timer (RFC 6298), or the recovery after it.
    Timeout,
    /// Nothing on the wire justified it (a conformance violation).
    Unjustified,
}

impl Recovery {
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Fast => "fast",
            Recovery::Probe => "probe",
            Recovery::Timeout => "timeout",
            Recovery::Unjustified => "unjustified",
        }
    }
}

/// A claim the run must satisfy. Exactly one claim per entry:
/// `retransmitted` (with `packet`), `ce_echoed`, `messages_completed`,
/// `counter` or `finding` (any analyzer finding, with bounds or a tolerance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default)]
    pub connection: Option<IndexOrAll>,
    #[serde(default)]
    pub packet: Option<Index>,
    /// With `finding`: only the findings about this virtual queue (vAQM,
    /// numbered from 1 in `vaqm.queues` order).
    #[serde(default)]
    pub queue: Option<Index>,
    /// With `finding`: only the variants whose label has these
    /// comma-separated parts, e.g. `25us, batch 4` for a distributed
    /// bump's findings labelled `bump 2, 25us, batch 4` (labels are in the
    /// JSON report).
    #[serde(default)]
    pub label: Option<String>,
    /// How many times the packet was retransmitted.
    #[serde(default)]
    pub retransmitted: Option<u32>,
    /// How each retransmission was triggered, in order.
    #[serde(default)]
    pub recovery: Option<Vec<Recovery>>,
    /// Every CE mark on the connection was echoed (ECE) by the receiver.
    #[serde(default)]
    pub ce_echoed: Option<bool>,
    /// Every message of the connection completed.
    #[serde(default)]
    pub messages_completed: Option<bool>,
    /// A kernel counter (nstat name) delta on `host`.
    #[serde(default)]
    pub counter: Option<String>,
    #[serde(default)]
    pub host: Option<String>,
    /// An analyzer finding, `analyzer.name` (see `wirelab analyze --findings`).
    #[serde(default)]
    pub finding: Option<String>,
    /// How the finding's values are combined (default: every value).
    #[serde(default)]
    pub stat: Option<Stat>,
    #[serde(default)]
    pub at_least: Option<Amount>,
    #[serde(default)]
    pub at_most: Option<Amount>,
    /// With `tolerance`: the value must be within it of this.
    #[serde(default)]
    pub equals: Option<Amount>,
    /// Absolute (`5us`) or relative (`10%`).
    #[serde(default)]
    pub tolerance: Option<Amount>,
}

impl Expect {
    /// The unit `at_least`/`at_most`/`equals` are read in.
    pub fn unit(&self) -> Unit {
        if self.counter.is_some() || self.stat == Some(Stat::Count) {
            return Unit::Count;
        }
        self.finding
            .as_deref()
            .and_then(findings::unit_of)
            .unwrap_or(Unit::Count)
    }

    /// (at least, at most) in the claim's unit; validated, so never fails
    /// on a parsed spec.
    pub fn bounds(&self) -> (Option<f64>, Option<f64>) {
        let u = self.unit();
        let v = |a: &Option<Amount>| a.as_ref().and_then(|a| a.value_in(u).ok());
        if let Some(e) = v(&self.equals) {
            let tol = self
                .tolerance
                .as_ref()
                .and_then(|t| t.tolerance(u, e).ok())
                .unwrap_or(0.0);
            return (Some(e - tol), Some(e + tol));
        }
        (v(&self.at_least), v(&self.at_most))
    }
}

/// Parses and validates a spec. `source` names the file in messages.
pub fn parse(text: &str) -> Result<Spec, SpecError> {
    parse_yaml(text, validate)
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

/// Parses a bump's YAML for the interfaces `ports` (their MTU `mtu`).
pub fn parse_bump(text: &str, ports: [&str; 2], mtu: u32) -> Result<BumpSpec, SpecError> {
    parse_yaml(text, |b: &BumpSpec| {
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
            message,
            line,
        }
    })?;
    let index = lines::LineIndex::build(text);
    validate(&value).map_err(|(path, message)| SpecError {
        line: index.line_of(&path),
        path,
        message,
    })?;
    Ok(value)
}

/// Reads and parses a spec file; the error names the file.
pub fn load(path: &std::path::Path) -> Result<Spec, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut spec = parse(&text).map_err(|error| LoadError::Invalid {
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
    if spec.name.is_none() {
        spec.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    }
    Ok(spec)
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

/// The JSON Schema of the spec, generated from the same types.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Spec);
    serde_json::to_value(schema).expect("schema serialises")
}

/// A cross-field error: (YAML path, message).
pub type Invalid = (String, String);

fn err<T>(path: impl Into<String>, msg: impl Into<String>) -> Result<T, Invalid> {
    Err((path.into(), msg.into()))
}

/// Headers around a RoCE payload on the wire, within the link MTU: IPv4 20,
/// UDP 8, BTH 12, RETH 16 (first packet of a write), ICRC 4.
pub const ROCE_OVERHEAD: u32 = 60;

fn validate_transport(s: &Spec, g: &ConnGroup, at: &str) -> Result<(), Invalid> {
    let roce = s.traffic.transport == Transport::Roce;
    let udp = s.traffic.transport == Transport::Udp;
    match (udp, g.rate) {
        (true, None) => {
            return err(
                format!("{at}.rate"),
                "a UDP connection needs `rate` (how fast it sends, e.g. 300mbit)",
            )
        }
        (true, Some(r)) if r.0 < 8_000 => {
            return err(format!("{at}.rate"), format!("at least 8kbit, got {r}"))
        }
        (false, Some(_)) => {
            return err(
                format!("{at}.rate"),
                "is a UDP setting (TCP and RoCE pace themselves); set `traffic.transport: udp`",
            )
        }
        _ => {}
    }
    if udp {
        if g.verb != Verbs::single(Verb::Write) {
            return err(
                format!("{at}.verb"),
                "UDP connections only send (`write`, the default)",
            );
        }
        if g.tx_depth.0 != 1 {
            return err(
                format!("{at}.tx_depth"),
                "UDP connections do not post messages",
            );
        }
        if s.traffic.barrier {
            return err(
                "traffic.barrier",
                "UDP connections have no rounds to wait for",
            );
        }
    }
    for (field, set) in [
        ("start", g.start.is_some()),
        ("stagger", g.stagger.is_some()),
    ] {
        if set && roce {
            return err(
                format!("{at}.{field}"),
                "is a TCP setting; RoCE QPs start together",
            );
        }
        if set && s.traffic.barrier {
            return err(
                format!("{at}.{field}"),
                "cannot delay a connection under `traffic.barrier`: every round waits for all",
            );
        }
    }
    if !roce {
        if g.verb.contains(Verb::Send) {
            return err(
                format!("{at}.verb"),
                "`send` needs `traffic.transport: roce`",
            );
        }
        if g.verb.is_combination() {
            return err(
                format!("{at}.verb"),
                "a combination of verbs needs `traffic.transport: roce`",
            );
        }
        for (field, set) in [
            ("mtu", g.mtu.is_some()),
            ("min_retransmit_timeout", g.min_retransmit_timeout.is_some()),
            ("max_retransmit_retry", g.max_retransmit_retry.is_some()),
        ] {
            if set {
                return err(
                    format!("{at}.{field}"),
                    "is a RoCE setting; set `traffic.transport: roce`",
                );
            }
        }
        return Ok(());
    }
    let mtu = g.mtu.unwrap_or(1024);
    if ![256, 512, 1024, 2048, 4096].contains(&mtu) {
        return err(
            format!("{at}.mtu"),
            format!("must be 256, 512, 1024, 2048 or 4096 (IBTA path MTU), got {mtu}"),
        );
    }
    if mtu + ROCE_OVERHEAD > s.topology.mtu {
        return err(
            format!("{at}.mtu"),
            format!(
                "a {mtu}-byte RoCE payload needs a link MTU of at least {}; topology.mtu is {}",
                mtu + ROCE_OVERHEAD,
                s.topology.mtu
            ),
        );
    }
    if let Some(t) = g.min_retransmit_timeout.filter(|&t| t > 31) {
        return err(
            format!("{at}.min_retransmit_timeout"),
            format!("must be 0..31, got {t}"),
        );
    }
    if let Some(r) = g.max_retransmit_retry.filter(|&r| r > 7) {
        return err(
            format!("{at}.max_retransmit_retry"),
            format!("must be 0..7 (a 3-bit field), got {r}"),
        );
    }
    if g.message_size.0 > (1 << 31) {
        return err(
            format!("{at}.message_size"),
            "RoCE messages are at most 2GiB",
        );
    }
    Ok(())
}

fn validate_roce_stack(r: &RoceStack, at: &str) -> Result<(), Invalid> {
    if let Some(p) = &r.profile {
        if !roce::is_profile_ref(p) {
            let names: Vec<&str> = roce::BUILTIN.iter().map(|(n, _)| *n).collect();
            return err(
                format!("{at}.profile"),
                format!(
                    "unknown profile `{p}`: give a path to a YAML file or one of {}",
                    names.join(", ")
                ),
            );
        }
    }
    if let Some(l) = r.line_rate {
        if l.0 < 1_000_000 {
            return err(
                format!("{at}.line_rate"),
                format!("must be at least 1mbit, got {l}"),
            );
        }
    }
    Ok(())
}

/// Largest number of hosts: switch ports in `wirelab.h` less one spare.
pub const MAX_HOSTS: usize = 62;
pub const MAX_CONNECTIONS: u32 = 1024;

fn validate_stack(s: &Stack, at: &str) -> Result<(), Invalid> {
    if let Some(r) = &s.roce {
        validate_roce_stack(r, &format!("{at}.roce"))?;
    }
    if let Some(r) = s.rto_min {
        // The kernel keeps rto_min in jiffies (ip-route(8)); below 1ms it
        // rounds to nothing useful, above 120s it exceeds TCP_RTO_MAX.
        if r.0 < 1_000_000 || r.0 > 120_000_000_000 {
            return err(
                format!("{at}.rto_min"),
                format!("must be between 1ms and 120s, got {r}"),
            );
        }
    }
    for (k, v) in &s.sysctls {
        if !(k.starts_with("net.ipv4.") || k.starts_with("net.core.")) {
            return err(
                format!("{at}.sysctls.{k}"),
                "only net.ipv4.* and net.core.* sysctls are namespaced; others would change the host",
            );
        }
        if k.contains("..") || k.contains('/') || v.contains('\n') {
            return err(
                format!("{at}.sysctls.{k}"),
                "malformed sysctl name or value",
            );
        }
    }
    Ok(())
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

fn validate(s: &Spec) -> Result<(), Invalid> {
    let t = &s.topology;
    if !(576..=9000).contains(&t.mtu) {
        return err(
            "topology.mtu",
            format!("must be between 576 and 9000, got {}", t.mtu),
        );
    }
    if t.hosts.len() < 2 {
        return err(
            "topology.hosts",
            format!("needs at least 2 hosts, got {}", t.hosts.len()),
        );
    }
    if t.hosts.len() > MAX_HOSTS {
        return err(
            "topology.hosts",
            format!("at most {MAX_HOSTS} hosts, got {}", t.hosts.len()),
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, h) in t.hosts.iter().enumerate() {
        if h.name == "switch" {
            return err(
                format!("topology.hosts[{i}].name"),
                "`switch` is the switch's own name",
            );
        }
        let ok = !h.name.is_empty()
            && h.name.len() <= 12
            && h.name.starts_with(|c: char| c.is_ascii_lowercase())
            && h.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return err(
                format!("topology.hosts[{i}].name"),
                format!(
                    "`{}` must be 1-12 of a-z, 0-9, '-' starting with a letter",
                    h.name
                ),
            );
        }
        if !names.insert(h.name.as_str()) {
            return err(
                format!("topology.hosts[{i}].name"),
                format!("duplicate host `{}`", h.name),
            );
        }
        if let Some(r) = h.bottleneck {
            if r.0 < 64_000 {
                return err(
                    format!("topology.hosts[{i}].bottleneck"),
                    format!("{r} is below 64kbit"),
                );
            }
        }
        if h.bottleneck_buffer.is_some() && h.bottleneck.is_none() {
            return err(
                format!("topology.hosts[{i}].bottleneck_buffer"),
                "needs `bottleneck`",
            );
        }
        if let Some(b) = h.bottleneck_burst {
            if h.bottleneck.is_none() {
                return err(
                    format!("topology.hosts[{i}].bottleneck_burst"),
                    "needs `bottleneck`",
                );
            }
            holds_a_frame(s, b, format!("topology.hosts[{i}].bottleneck_burst"))?;
        }
        if let Some(n) = h.gids {
            if !(1..=MAX_GIDS).contains(&n) {
                return err(
                    format!("topology.hosts[{i}].gids"),
                    format!("must be between 1 and {MAX_GIDS}, got {n}"),
                );
            }
            if n > 1 && s.traffic.transport != Transport::Roce {
                return err(
                    format!("topology.hosts[{i}].gids"),
                    "GIDs are RoCE device addresses: needs `traffic.transport: roce`",
                );
            }
        }
        if let Some(st) = &h.stack {
            validate_stack(st, &format!("topology.hosts[{i}].stack"))?;
        }
    }
    validate_stack(&s.stack, "stack")?;
    vaqm::validate(s)?;
    if s.traffic.connections.is_empty() {
        return err("traffic.connections", "needs at least one connection group");
    }
    let mut total = 0u32;
    let mut per_conn_group = Vec::new();
    for (i, g) in s.traffic.connections.iter().enumerate() {
        let at = format!("traffic.connections[{i}]");
        for (field, h) in [("from", &g.from), ("to", &g.to)] {
            if !names.contains(h.as_str()) {
                let known: Vec<_> = names.iter().copied().collect();
                return err(
                    format!("{at}.{field}"),
                    format!("unknown host `{h}` (hosts: {})", known.join(", ")),
                );
            }
        }
        if g.from == g.to {
            return err(format!("{at}.to"), "a connection needs two different hosts");
        }
        validate_transport(s, g, &at)?;
        if g.message_size.0 == 0 || g.message_size.0 > (1 << 30) {
            return err(
                format!("{at}.message_size"),
                format!("must be 1B..1GiB, got {}", g.message_size),
            );
        }
        if g.tx_depth.0 > g.messages.0 {
            return err(
                format!("{at}.tx_depth"),
                format!(
                    "{} outstanding messages but only {} messages",
                    g.tx_depth.0, g.messages.0
                ),
            );
        }
        total += g.count.0;
        for _ in 0..g.count.0 {
            per_conn_group.push(i);
        }
    }
    if total > MAX_CONNECTIONS {
        return err(
            "traffic.connections",
            format!("{total} connections; at most {MAX_CONNECTIONS}"),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, e) in s.events.iter().enumerate() {
        let at = format!("events[{i}]");
        if s.traffic.transport == Transport::Udp {
            return err(
                at,
                "UDP datagrams carry no sequence numbers to address; events need TCP or RoCE",
            );
        }
        if e.connection.0 > total {
            return err(
                format!("{at}.connection"),
                format!(
                    "connection {} does not exist (the spec has {total})",
                    e.connection.0
                ),
            );
        }
        let g = &s.traffic.connections[per_conn_group[e.connection.0 as usize - 1]];
        if let Some(m) = e.message {
            if m.0 > g.messages.0 {
                return err(
                    format!("{at}.message"),
                    format!(
                        "message {} does not exist (the connection sends {})",
                        m.0, g.messages.0
                    ),
                );
            }
            // RoCE assigns each message its PSNs when posted, so any depth works.
            if g.tx_depth.0 != 1 && s.traffic.transport == Transport::Tcp {
                return err(
                    format!("{at}.message"),
                    "message-relative packets need tx_depth: 1 (otherwise messages share segments)",
                );
            }
            if e.packet == IndexOrAll::All {
                return err(
                    format!("{at}.packet"),
                    "`all` cannot be combined with `message`",
                );
            }
        }
        match (e.action, e.edit) {
            (Action::Edit, None) => {
                return err(
                    format!("{at}.edit"),
                    "`action: edit` needs `edit:` naming the field, e.g. `edit: {migreq: 1}`",
                )
            }
            (Action::Edit, Some(ed)) => {
                if ed.migreq > 1 {
                    return err(
                        format!("{at}.edit.migreq"),
                        format!("MigReq is one bit: 0 or 1, got {}", ed.migreq),
                    );
                }
                if s.traffic.transport != Transport::Roce {
                    return err(
                        format!("{at}.edit"),
                        "MigReq is a RoCE header field: `edit` needs `transport: roce`",
                    );
                }
            }
            (_, Some(_)) => {
                return err(
                    format!("{at}.edit"),
                    format!("`edit` goes with `action: edit`, not `{}`", e.action.name()),
                )
            }
            (_, None) => {}
        }
        let key = (e.connection, e.message, e.packet, e.iteration);
        if !seen.insert(format!("{key:?}")) {
            return err(
                at,
                "the same packet and iteration is already addressed by an earlier event",
            );
        }
    }
    if s.capture.snap_len < 64 || s.capture.snap_len > 1518 {
        return err(
            "capture.snap_len",
            format!("must be between 64 and 1518, got {}", s.capture.snap_len),
        );
    }
    let r = s.capture.ring_size.0;
    if !r.is_power_of_two() || !(4096..=(1 << 30)).contains(&r) {
        return err(
            "capture.ring_size",
            format!(
                "must be a power of two between 4KiB and 1GiB, got {}",
                s.capture.ring_size
            ),
        );
    }
    for (i, x) in s.expect.iter().enumerate() {
        let at = format!("expect[{i}]");
        let claims = [
            x.retransmitted.is_some() || x.recovery.is_some(),
            x.ce_echoed.is_some(),
            x.messages_completed.is_some(),
            x.counter.is_some(),
            x.finding.is_some(),
        ];
        let n = claims.iter().filter(|c| **c).count();
        if n != 1 {
            return err(
                at,
                "needs exactly one claim: retransmitted/recovery, ce_echoed, messages_completed, counter or finding",
            );
        }
        validate_amounts(x, &at)?;
        if let Some(f) = &x.finding {
            if findings::unit_of(f).is_none() {
                let known: Vec<&str> = findings::FINDINGS.iter().map(|(n, _)| *n).collect();
                return err(
                    format!("{at}.finding"),
                    format!("unknown finding `{f}` (known: {})", known.join(", ")),
                );
            }
            let analyzer = f.split('.').next().unwrap_or_default();
            if !s.analyzers().iter().any(|a| a.name() == analyzer) {
                return err(
                    format!("{at}.finding"),
                    format!("analyzer `{analyzer}` is not in `analyzers:`"),
                );
            }
            if x.at_least.is_none() && x.at_most.is_none() && x.equals.is_none() {
                return err(at, "`finding` needs `at_least`, `at_most` or `equals`");
            }
            let queues = s.vaqm.as_ref().map_or(0, |v| v.queues.len());
            if let Some(q) = x.queue.filter(|q| q.0 as usize > queues) {
                return err(
                    format!("{at}.queue"),
                    format!(
                        "virtual queue {} does not exist (the spec has {queues})",
                        q.0
                    ),
                );
            }
        } else if x.queue.is_some() {
            return err(format!("{at}.queue"), "`queue` goes with `finding`");
        } else if x.label.is_some() {
            return err(format!("{at}.label"), "`label` goes with `finding`");
        } else if x.stat.is_some() {
            return err(format!("{at}.stat"), "`stat` goes with `finding`");
        } else if x.counter.is_none() && (x.equals.is_some() || x.tolerance.is_some()) {
            return err(
                at,
                "`equals` and `tolerance` go with `counter` or `finding`",
            );
        }
        if let Some(IndexOrAll::One(c)) = x.connection {
            if c.0 > total {
                return err(
                    format!("{at}.connection"),
                    format!("connection {} does not exist (the spec has {total})", c.0),
                );
            }
        }
        if claims[0] {
            if x.packet.is_none() || !matches!(x.connection, Some(IndexOrAll::One(_))) {
                return err(
                    at,
                    "`retransmitted`/`recovery` need `connection: N` and `packet: N`",
                );
            }
            if let (Some(n), Some(r)) = (x.retransmitted, &x.recovery) {
                if r.len() != n as usize {
                    return err(
                        format!("{at}.recovery"),
                        format!("lists {} recoveries but `retransmitted` is {n}", r.len()),
                    );
                }
            }
        } else if x.packet.is_some() && !claims[4] {
            return err(
                format!("{at}.packet"),
                "only `retransmitted`/`recovery` and `finding` take a packet",
            );
        }
        if claims[1] || claims[2] {
            if x.connection.is_none() {
                return err(at, "needs `connection` (a number or `all`)");
            }
        }
        if claims[3] {
            match &x.host {
                None => return err(at, "`counter` needs `host`"),
                Some(h) if !names.contains(h.as_str()) => {
                    return err(format!("{at}.host"), format!("unknown host `{h}`"))
                }
                _ => {}
            }
            if x.at_least.is_none() && x.at_most.is_none() && x.equals.is_none() {
                return err(at, "`counter` needs `at_least`, `at_most` or `equals`");
            }
        } else if !claims[4] && (x.host.is_some() || x.at_least.is_some() || x.at_most.is_some()) {
            return err(
                at,
                "`host`, `at_least` and `at_most` go with `counter` or `finding`",
            );
        } else if claims[4] && x.host.is_some() {
            return err(format!("{at}.host"), "`host` goes with `counter`");
        }
    }
    Ok(())
}
