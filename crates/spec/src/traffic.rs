//! `traffic:`: the transport and the connection groups.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, BitsPerSec, Bytes, Index, Invalid, Nanos, Spec};

/// Most connections a spec may have (the switch's `WL_MAX_CONNS`).
pub const MAX_CONNECTIONS: u32 = 1024;

/// Headers around a RoCE payload on the wire, within the link MTU: IPv4 20,
/// UDP 8, BTH 12, RETH 16 (first packet of a write), ICRC 4.
pub const ROCE_OVERHEAD: u32 = 60;

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
    /// TCP, writes and sends: the responder's application reads at most
    /// this fast (reads of at most 4 KiB, paced), so a receive buffer
    /// that fills closes the window: DETER §5.1's slow reader, Table 2's
    /// Rwnd=0. A small `net.ipv4.tcp_rmem` in the responder's
    /// `stack.sysctls` closes it sooner.
    #[serde(default)]
    pub read_rate: Option<BitsPerSec>,
    /// The group's first connection posts its first message this long
    /// after the workload starts (default: at once).
    #[serde(default)]
    pub start: Option<Nanos>,
    /// Each further connection of the group starts this much after
    /// the one before (DCTCP's convergence test: flows joining one by one).
    #[serde(default)]
    pub stagger: Option<Nanos>,
    /// TCP: instead of messages, repeat a recorded connection's socket
    /// calls at their recorded times (DETER's replay, seed 004 §3.4): each
    /// end's record from `wirelab record` (paths relative to the spec).
    /// `wirelab replay` writes such specs; the one message is the whole
    /// exchange, complete when the requester's calls are done.
    #[serde(default)]
    pub replay: Option<ReplayCalls>,
}

/// The two records a replayed connection repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayCalls {
    /// The record of the end that opened the connection (`from:`).
    pub requester: std::path::PathBuf,
    /// The record of the end that accepted it (`to:`).
    pub responder: std::path::PathBuf,
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

fn validate_transport(s: &Spec, g: &ConnGroup, at: &str) -> Result<(), Invalid> {
    let roce = s.traffic.transport == Transport::Roce;
    let udp = s.traffic.transport == Transport::Udp;
    if let Some(r) = g.read_rate {
        if s.traffic.transport != Transport::Tcp {
            return err(
                format!("{at}.read_rate"),
                "a TCP setting: the application reading from its socket",
            );
        }
        if g.verb.responder_sends_data() || g.replay.is_some() {
            return err(
                format!("{at}.read_rate"),
                "the responder reads writes and sends; reads (and replays) have their own timing",
            );
        }
        if r.0 < 8_000 {
            return err(
                format!("{at}.read_rate"),
                format!("at least 8kbit, got {r}"),
            );
        }
    }
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

/// Checks `traffic:` against the hosts; returns each connection's group
/// (connection `c`, numbered from 1, is in group `groups[c - 1]`).
pub(crate) fn validate(s: &Spec, names: &BTreeSet<&str>) -> Result<Vec<usize>, Invalid> {
    if s.traffic.connections.is_empty() {
        return err("traffic.connections", "needs at least one connection group");
    }
    // Counted in 64 bits and bounded before anything is allocated per
    // connection (`count: 4294967295` once asked for 17 GB).
    let mut total = 0u64;
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
        if g.replay.is_some() {
            if s.traffic.transport != Transport::Tcp {
                return err(
                    format!("{at}.replay"),
                    "a replay repeats TCP socket calls: needs `traffic.transport: tcp`",
                );
            }
            if (g.count.0, g.messages.0, g.tx_depth.0) != (1, 1, 1) {
                return err(
                    format!("{at}.replay"),
                    "a replay is one connection whose calls are its one message: count, messages and tx_depth must be 1",
                );
            }
        }
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
        total += u64::from(g.count.0);
        if total > u64::from(MAX_CONNECTIONS) {
            return err(
                "traffic.connections",
                format!("{total} connections; at most {MAX_CONNECTIONS}"),
            );
        }
        per_conn_group.extend(std::iter::repeat(i).take(g.count.0 as usize));
    }
    Ok(per_conn_group)
}
