//! A load test's stateful side (Norma §4; issue 20): emulated TCP
//! clients on the sending port and emulated servers on the receiving
//! port, each a per-flow extended finite-state machine (EFSM) run in eBPF
//! on the tester's receive path, talking to a DUT's real kernel TCP.
//!
//! ```yaml
//! dut: {kind: haproxy}
//! stateful:
//!   clients: {efsm: http-client, connections: 200}
//!   servers: {efsm: http-server, count: 4, response: 100KB}
//! ```
//!
//! An EFSM is Norma's 7-tuple written as a table (Table 2): rows of
//! `from` state, a condition on the arriving packet (its TCP flags, its
//! payload, whether it acknowledges all the flow sent), the `next` state
//! and the action: the reply built from the flow's variables (sequence
//! and acknowledgment numbers, the side's payload), or none (Norma's
//! skip). Rows are tried in order; the first that matches fires. The
//! first state is a flow's state before it exists and after it ends.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Bytes, Invalid};

/// Bytes of payload a condition may compare (the executor's compare).
pub const MAX_PREFIX: usize = 8;
/// Rows of one EFSM (`WL_EFSM_ROWS`).
pub const MAX_ROWS: usize = 32;
/// States of one EFSM.
pub const MAX_STATES: usize = 16;
/// Flows one side holds at once (`WL_EFSM_FLOWS`).
pub const MAX_FLOWS: u32 = 65536;
/// Segments one arriving packet may answer with.
pub const MAX_SEGMENTS_PER_ACK: u8 = 4;
/// The largest request and response (their chunks are precomputed).
pub const MAX_REQUEST: usize = 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stateful {
    /// Emulated clients on the sending port, connecting to the DUT.
    #[serde(default)]
    pub clients: Option<Clients>,
    /// Emulated servers on the receiving port, which the DUT connects to.
    #[serde(default)]
    pub servers: Option<Servers>,
    /// Data segments sent for one arriving ACK (2: slow start's ACK
    /// clocking, which keeps a delayed-ACK receiver answering at once;
    /// Norma's TCP mode sends 1).
    #[serde(default = "default_segments")]
    pub segments_per_ack: u8,
    /// The MSS the emulated ends announce and send (at most MTU − 40).
    #[serde(default = "default_mss")]
    pub mss: u16,
}

fn default_segments() -> u8 {
    2
}
fn default_mss() -> u16 {
    1460
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    pub efsm: EfsmRef,
    /// Connections kept open: each that ends normally is opened again
    /// from a new port; one that ends abnormally is not (Norma §8).
    pub connections: u32,
    /// The port they connect to on the DUT.
    #[serde(default = "default_port")]
    pub port: u16,
    /// The request each connection sends (by default an HTTP GET, with
    /// `Connection: close` when `requests` is 1).
    #[serde(default)]
    pub request: Option<String>,
    /// Requests each connection sends before it closes (HTTP/1.1
    /// keep-alive, RFC 9112 §9.3): the next request leaves once the
    /// response to the last has arrived whole (its head and
    /// Content-Length bytes of body), and after the last one the client
    /// closes, then opens again. 1 (the default, Norma's): one request,
    /// and the server closes. A large number keeps every connection open
    /// for the whole run, as wrk does.
    #[serde(default = "one")]
    pub requests: u32,
}

impl Clients {
    /// The request each connection sends.
    pub fn request(&self) -> String {
        match &self.request {
            Some(r) => r.clone(),
            None if self.requests > 1 => "GET / HTTP/1.1\r\nHost: wirelab\r\n\r\n".into(),
            None => "GET / HTTP/1.1\r\nHost: wirelab\r\nConnection: close\r\n\r\n".into(),
        }
    }
}

fn default_port() -> u16 {
    80
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Servers {
    /// Emulated servers, an EFSM each ...
    #[serde(default)]
    pub efsm: Option<EfsmRef>,
    /// ... or real ones: nginx (Debian's) in the receiving port's
    /// namespace, serving the response from a file, on the kernel's TCP.
    #[serde(default)]
    pub real: Option<RealServer>,
    /// Servers, on ports `port`, `port`+1, ... of the receiving port's
    /// address (a DUT that balances load gets one backend each).
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default = "default_server_port")]
    pub port: u16,
    /// The response's body (an HTTP/1.1 200 with this Content-Length).
    #[serde(default = "default_response")]
    pub response: Bytes,
    /// Emulated servers keep a connection open after a response and
    /// answer the next request on it (HTTP/1.1's default, RFC 9112
    /// §9.3); false (the default): a FIN follows each response.
    #[serde(default)]
    pub keep_alive: bool,
}

fn one() -> u32 {
    1
}
fn default_server_port() -> u16 {
    8080
}
fn default_response() -> Bytes {
    Bytes(1024)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RealServer {
    Nginx,
}

/// A built-in EFSM by name, or a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EfsmRef {
    Builtin(String),
    Table(Efsm),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Efsm {
    /// State names; the first is a flow's before it exists and after it
    /// ends.
    pub states: Vec<String>,
    pub transitions: Vec<Transition>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    pub from: String,
    /// No condition matches any packet (Table 2's "Unknown").
    #[serde(default)]
    pub when: Condition,
    pub next: String,
    /// Required: `none` is Norma's skip, an action too.
    #[serde(default)]
    pub reply: Option<Reply>,
    /// The flow's state is dropped (it ends) whatever `next` is.
    #[serde(default)]
    pub forget: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// Exactly these of FIN, SYN, RST and ACK ("SYN|ACK"); PSH and the
    /// others are not compared.
    #[serde(default)]
    pub flags: Option<String>,
    /// At least these ("RST" matches RST and RST|ACK).
    #[serde(default)]
    pub has: Option<String>,
    #[serde(default)]
    pub payload: Option<PayloadIs>,
    /// The payload starts with these bytes (at most 8).
    #[serde(default)]
    pub prefix: Option<String>,
    /// The packet acknowledges everything the flow sent (its data and
    /// FIN), or not.
    #[serde(default)]
    pub all_acked: Option<bool>,
    /// This packet completes the peer's message, or not: an HTTP request
    /// or response whose head (to the blank line) is in its first
    /// segment, and, for a response, Content-Length bytes of body after
    /// it (RFC 9112 §6.3). A response delimited otherwise (chunked, or
    /// by the close) never completes: its end is the peer's FIN.
    #[serde(default)]
    pub message_complete: Option<bool>,
    /// The flow has sent fewer messages than the side's `requests`, or
    /// not (never while the run drains).
    #[serde(default)]
    pub requests_left: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PayloadIs {
    Empty,
    Data,
}

/// The reply: one of the templates, filled from the flow's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    /// Nothing (Norma's skip).
    None,
    /// A reset, as RFC 793 §3.4 builds one for the packet.
    Rst,
    /// SYN|ACK with the flow's ISN and the MSS option.
    SynAck,
    /// A pure ACK of what arrived.
    Ack,
    /// FIN|ACK; a plain ACK once the flow's FIN was sent (a server
    /// that closed after its response answers the peer's FIN so).
    Fin,
    /// The side's payload (a client's request, a server's response), up
    /// to `segments_per_ack` segments within the peer's window; a
    /// server's last segment carries FIN unless it keeps connections
    /// alive.
    Data,
    /// The side's payload again from its first byte, as `data` sends it:
    /// the next request, or the response to it, on a connection kept
    /// alive. Only once the last message was sent whole and this packet
    /// brought new data in order (a repeated request does not start the
    /// response again); otherwise `data`.
    NextMessage,
    /// A client's connection opened again: a SYN from the slot's next
    /// port (Norma §8 re-initiates what ends normally), after an ACK of
    /// the packet's FIN when it carries one (the old connection's last
    /// word); while the run drains, only that ACK.
    Reopen,
}

impl Reply {
    pub fn name(self) -> &'static str {
        match self {
            Reply::None => "none",
            Reply::Rst => "rst",
            Reply::SynAck => "syn-ack",
            Reply::Ack => "ack",
            Reply::Fin => "fin",
            Reply::Data => "data",
            Reply::NextMessage => "next-message",
            Reply::Reopen => "reopen",
        }
    }
}

/// TCP flag bits (RFC 793 §3.1), as in the header's 13th byte.
pub mod flag {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    /// The flags a condition compares.
    pub const COMPARED: u8 = FIN | SYN | RST | ACK;
}

/// "SYN|ACK" as bits.
pub fn parse_flags(s: &str) -> Result<u8, String> {
    let mut v = 0;
    for part in s.split(['|', ',', ' ']).filter(|p| !p.is_empty()) {
        v |= match part.to_ascii_uppercase().as_str() {
            "FIN" | "F" => flag::FIN,
            "SYN" | "S" => flag::SYN,
            "RST" | "R" => flag::RST,
            "ACK" | "A" => flag::ACK,
            other => {
                return Err(format!(
                "`{other}` is not one of FIN, SYN, RST, ACK (PSH and the others are not compared)"
            ))
            }
        };
    }
    if v == 0 {
        return Err("names no flag".into());
    }
    Ok(v)
}

fn row(from: &str, when: Condition, next: &str, reply: Reply, forget: bool) -> Transition {
    Transition {
        from: from.into(),
        when,
        next: next.into(),
        reply: Some(reply),
        forget,
    }
}

fn flags(f: &str) -> Condition {
    Condition {
        flags: Some(f.into()),
        ..Condition::default()
    }
}

fn has(f: &str) -> Condition {
    Condition {
        has: Some(f.into()),
        ..Condition::default()
    }
}

/// The built-in EFSMs' names.
pub const BUILTINS: [&str; 5] = [
    "http-server",
    "http-client",
    "tcp-server",
    "tcp-client",
    "syn-flood",
];

/// A built-in EFSM.
///
/// - `http-server`: Norma Table 2 grown to a whole exchange: SYN gets
///   SYN|ACK, a GET gets the response (segments per ACK as set, FIN on
///   the last unless the server keeps connections alive, when the next
///   GET gets the response again), the peer's FIN a FIN (an ACK if ours
///   went already); RST ends the flow; an unknown flow's packet gets RST.
/// - `http-client`: SYN|ACK gets the ACK with the request, data its ACK;
///   a response that arrived whole gets the next request while the
///   connection has requests left, else our FIN (as wrk closes once a
///   response says the connection ends); the server's FIN gets our FIN;
///   the end of the close (the ACK of our FIN, with or after the
///   server's) a new connection.
/// - `tcp-server` / `tcp-client`: the same without the payload prefix
///   (any data is a request).
/// - `syn-flood`: Norma's state-machine bypass: every SYN gets RST, no
///   flow is kept (§4.2).
pub fn builtin(name: &str) -> Option<Efsm> {
    let states = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    let get = Condition {
        flags: Some("ACK".into()),
        prefix: Some("GET ".into()),
        ..Condition::default()
    };
    let data = Condition {
        flags: Some("ACK".into()),
        payload: Some(PayloadIs::Data),
        ..Condition::default()
    };
    let empty_ack = Condition {
        flags: Some("ACK".into()),
        payload: Some(PayloadIs::Empty),
        ..Condition::default()
    };
    let any = Condition::default;
    let server = |request: Condition| Efsm {
        states: states(&["listen", "syn-received", "established", "sending"]),
        transitions: vec![
            row("listen", has("RST"), "listen", Reply::None, false),
            row("listen", flags("SYN"), "syn-received", Reply::SynAck, false),
            row("listen", any(), "listen", Reply::Rst, false),
            row(
                "syn-received",
                request.clone(),
                "sending",
                Reply::Data,
                false,
            ),
            row(
                "syn-received",
                empty_ack.clone(),
                "established",
                Reply::None,
                false,
            ),
            row("syn-received", has("RST"), "listen", Reply::None, true),
            row(
                "established",
                request.clone(),
                "sending",
                Reply::Data,
                false,
            ),
            row("established", has("RST"), "listen", Reply::None, true),
            row("established", has("FIN"), "listen", Reply::Fin, true),
            row("established", any(), "established", Reply::None, false),
            // A reset once everything we sent was acknowledged closes an
            // idle connection (haproxy closes its idle server
            // connections so); any other is an exchange cut short.
            row(
                "sending",
                Condition {
                    has: Some("RST".into()),
                    all_acked: Some(true),
                    ..Condition::default()
                },
                "listen",
                Reply::None,
                true,
            ),
            row("sending", has("RST"), "listen", Reply::None, true),
            row("sending", has("FIN"), "listen", Reply::Fin, true),
            // Keep-alive: the next request on the same connection.
            row("sending", request, "sending", Reply::NextMessage, false),
            row("sending", flags("ACK"), "sending", Reply::Data, false),
            row("sending", any(), "sending", Reply::None, false),
        ],
    };
    let complete = |left: Option<bool>| Condition {
        flags: Some("ACK".into()),
        message_complete: Some(true),
        requests_left: left,
        ..Condition::default()
    };
    let client = || Efsm {
        states: states(&["syn-sent", "requested", "closing", "fin-wait"]),
        transitions: vec![
            row(
                "syn-sent",
                flags("SYN|ACK"),
                "requested",
                Reply::Data,
                false,
            ),
            row("syn-sent", has("RST"), "syn-sent", Reply::None, false),
            row("syn-sent", any(), "syn-sent", Reply::Rst, false),
            row("requested", has("RST"), "syn-sent", Reply::None, true),
            // The server closed (after its response, or not).
            row("requested", has("FIN"), "closing", Reply::Fin, false),
            // Keep-alive: the response is whole; the next request, or
            // the close once none is left.
            row(
                "requested",
                complete(Some(true)),
                "requested",
                Reply::NextMessage,
                false,
            ),
            row("requested", complete(None), "fin-wait", Reply::Fin, false),
            row("requested", data.clone(), "requested", Reply::Ack, false),
            row("requested", any(), "requested", Reply::None, false),
            row(
                "closing",
                Condition {
                    flags: Some("ACK".into()),
                    all_acked: Some(true),
                    ..Condition::default()
                },
                "syn-sent",
                Reply::Reopen,
                true,
            ),
            row("closing", has("RST"), "syn-sent", Reply::None, true),
            row("closing", any(), "closing", Reply::None, false),
            // We closed first: the server's FIN, with the ACK of ours,
            // ends it; a FIN that crossed ours is ACKed, and the ACK of
            // ours then ends it (in `closing`).
            row("fin-wait", has("RST"), "syn-sent", Reply::None, true),
            row(
                "fin-wait",
                Condition {
                    has: Some("FIN|ACK".into()),
                    all_acked: Some(true),
                    ..Condition::default()
                },
                "syn-sent",
                Reply::Reopen,
                true,
            ),
            row("fin-wait", has("FIN"), "closing", Reply::Ack, false),
            row("fin-wait", any(), "fin-wait", Reply::None, false),
        ],
    };
    Some(match name {
        "http-server" => server(get),
        "tcp-server" => server(data),
        "http-client" | "tcp-client" => client(),
        "syn-flood" => Efsm {
            states: states(&["none"]),
            transitions: vec![
                row("none", flags("SYN"), "none", Reply::Rst, false),
                row("none", any(), "none", Reply::None, false),
            ],
        },
        _ => return None,
    })
}

/// One row in the executor's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub from: u8,
    /// (mask, value) over the flags: exact (`flags`) and at least (`has`).
    pub flags_mask: u8,
    pub flags_value: u8,
    /// 0: any payload, 1: empty, 2: data.
    pub payload: u8,
    /// The prefix, and its length (0: none).
    pub prefix: [u8; MAX_PREFIX],
    pub prefix_len: u8,
    /// 0: not compared, 1: must acknowledge all, 2: must not.
    pub all_acked: u8,
    /// 0: not compared, 1: the packet completes the peer's message, 2: not.
    pub message_complete: u8,
    /// 0: not compared, 1: the flow has requests left, 2: not.
    pub requests_left: u8,
    pub next: u8,
    pub reply: Reply,
    pub forget: bool,
}

/// An EFSM checked and numbered: its states and its rows, grouped by
/// state in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub states: Vec<String>,
    pub rows: Vec<Row>,
}

impl Table {
    /// "syn-received --ACK \"GET \"--> sending": a row as a report names it.
    pub fn describe(&self, i: usize) -> String {
        let r = &self.rows[i];
        format!(
            "{} -> {} ({})",
            self.states[r.from as usize],
            self.states[r.next as usize],
            r.reply.name()
        )
    }
}

/// A condition on a yes/no fact in the executor's terms: 0 not
/// compared, 1 yes, 2 no.
fn tri(b: Option<bool>) -> u8 {
    match b {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    }
}

/// Checks an EFSM and numbers it. `at` is its YAML path.
pub fn compile(e: &EfsmRef, at: &str) -> Result<Table, Invalid> {
    let (name, efsm) = match e {
        EfsmRef::Builtin(n) => match builtin(n) {
            Some(t) => (n.clone(), t),
            None => {
                return err(
                    at,
                    format!(
                        "no built-in EFSM `{n}` (there are: {})",
                        BUILTINS.join(", ")
                    ),
                )
            }
        },
        EfsmRef::Table(t) => ("table".to_string(), t.clone()),
    };
    // A built-in's rows have no YAML lines of their own: name the field.
    let row_at = |k: usize, f: &str| match e {
        EfsmRef::Builtin(_) => at.to_string(),
        EfsmRef::Table(_) => format!("{at}.transitions[{k}]{f}"),
    };
    let states = &efsm.states;
    if states.is_empty() || states.len() > MAX_STATES {
        return err(
            format!("{at}.states"),
            format!("from 1 to {MAX_STATES} states, got {}", states.len()),
        );
    }
    for (i, s) in states.iter().enumerate() {
        if states[..i].contains(s) {
            return err(format!("{at}.states[{i}]"), format!("`{s}` is named twice"));
        }
    }
    if efsm.transitions.is_empty() || efsm.transitions.len() > MAX_ROWS {
        return err(
            format!("{at}.transitions"),
            format!(
                "from 1 to {MAX_ROWS} transitions, got {}",
                efsm.transitions.len()
            ),
        );
    }
    let index = |s: &str, k: usize, f: &str| -> Result<u8, Invalid> {
        states.iter().position(|x| x == s).map(|i| i as u8).ok_or((
            row_at(k, f),
            format!("no state `{s}` (states: {})", states.join(", ")),
        ))
    };
    let mut rows = Vec::new();
    let sends_data = efsm
        .transitions
        .iter()
        .any(|t| matches!(t.reply, Some(Reply::Data | Reply::NextMessage)));
    for (k, t) in efsm.transitions.iter().enumerate() {
        let from = index(&t.from, k, ".from")?;
        let next = index(&t.next, k, ".next")?;
        let Some(reply) = t.reply else {
            return err(
                row_at(k, ""),
                "has no action: give a `reply:` (`none` is Norma's skip)",
            );
        };
        let w = &t.when;
        let (mut mask, mut value) = (0u8, 0u8);
        if let Some(f) = &w.flags {
            let v = parse_flags(f).map_err(|m| (row_at(k, ".when.flags"), m))?;
            mask = flag::COMPARED;
            value = v;
        }
        if let Some(f) = &w.has {
            let v = parse_flags(f).map_err(|m| (row_at(k, ".when.has"), m))?;
            if w.flags.is_some() {
                return err(row_at(k, ".when.has"), "`flags` or `has`, not both");
            }
            mask |= v;
            value |= v;
        }
        let mut prefix = [0u8; MAX_PREFIX];
        let mut prefix_len = 0;
        if let Some(p) = &w.prefix {
            let b = p.as_bytes();
            if b.is_empty() || b.len() > MAX_PREFIX {
                return err(
                    row_at(k, ".when.prefix"),
                    format!(
                        "from 1 to {MAX_PREFIX} bytes (the executor compares that many), got {}",
                        b.len()
                    ),
                );
            }
            if w.payload == Some(PayloadIs::Empty) {
                return err(
                    row_at(k, ".when.prefix"),
                    "an empty payload has no prefix: no packet can match",
                );
            }
            prefix[..b.len()].copy_from_slice(b);
            prefix_len = b.len() as u8;
        }
        if w.all_acked.is_some()
            && !sends_data
            && !efsm.transitions.iter().any(|t| t.reply == Some(Reply::Fin))
        {
            return err(
                row_at(k, ".when.all_acked"),
                "compares what the flow sent, and no transition sends data or FIN",
            );
        }
        rows.push((
            k,
            Row {
                from,
                flags_mask: mask,
                flags_value: value,
                payload: match (w.payload, prefix_len) {
                    (_, 1..) | (Some(PayloadIs::Data), _) => 2,
                    (Some(PayloadIs::Empty), _) => 1,
                    (None, _) => 0,
                },
                prefix,
                prefix_len,
                all_acked: tri(w.all_acked),
                message_complete: tri(w.message_complete),
                requests_left: tri(w.requests_left),
                next,
                reply,
                forget: t.forget,
            },
        ));
    }
    // Unreachable states: not reached from the first by any transition.
    let mut seen = vec![false; states.len()];
    seen[0] = true;
    let mut changed = true;
    while changed {
        changed = false;
        for (_, r) in &rows {
            if seen[r.from as usize] && !seen[r.next as usize] {
                seen[r.next as usize] = true;
                changed = true;
            }
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return err(
            format!("{at}.states[{i}]"),
            format!(
                "`{}` is unreachable: no transition from `{}` leads to it",
                states[i], states[0]
            ),
        );
    }
    // Grouped by state (the executor's index), in table order within one.
    rows.sort_by_key(|(k, r)| (r.from, *k));
    Ok(Table {
        name,
        states: states.clone(),
        rows: rows.into_iter().map(|(_, r)| r).collect(),
    })
}

/// Checks the stateful section; `mtu` is the ports'.
pub fn validate(s: &Stateful, mtu: u32) -> Result<(), Invalid> {
    // The clients open what the servers answer, through the DUT (haproxy
    // too: its backends are the servers).
    if s.clients.is_none() {
        return err(
            "stateful.clients",
            "needed: the clients open the connections",
        );
    }
    if s.servers.is_none() {
        return err(
            "stateful.servers",
            "needed: emulated (`efsm:`) or real (`real: nginx`) servers answer the clients",
        );
    }
    if !(1..=MAX_SEGMENTS_PER_ACK).contains(&s.segments_per_ack) {
        return err(
            "stateful.segments_per_ack",
            format!("from 1 to {MAX_SEGMENTS_PER_ACK}"),
        );
    }
    let most = mtu.saturating_sub(40);
    // The response's HTTP head goes in its first segment.
    if s.mss < 256 || u32::from(s.mss) > most {
        return err(
            "stateful.mss",
            format!("from 256 to the MTU's {most} (MTU − 40), got {}", s.mss),
        );
    }
    if let Some(c) = &s.clients {
        compile(&c.efsm, "stateful.clients.efsm")?;
        if c.connections == 0 || c.connections > MAX_FLOWS / 2 {
            return err(
                "stateful.clients.connections",
                format!("from 1 to {}", MAX_FLOWS / 2),
            );
        }
        let request = c.request();
        if request.is_empty() || request.len() > MAX_REQUEST.min(usize::from(s.mss)) {
            return err(
                "stateful.clients.request",
                format!(
                    "from 1 byte to one segment ({} bytes), got {}",
                    MAX_REQUEST.min(usize::from(s.mss)),
                    request.len()
                ),
            );
        }
        if c.requests == 0 {
            return err(
                "stateful.clients.requests",
                "at least 1 (requests each connection sends)",
            );
        }
    }
    if let Some(v) = &s.servers {
        match (&v.efsm, v.real) {
            (Some(e), None) => {
                compile(e, "stateful.servers.efsm")?;
            }
            (None, Some(_)) => {}
            _ => return err("stateful.servers", "needs `efsm:` or `real:`, one of them"),
        }
        if v.count == 0 || v.count > 64 {
            return err("stateful.servers.count", "from 1 to 64");
        }
        if u32::from(v.port) + v.count > 65536 {
            return err("stateful.servers.port", "the servers' ports pass 65535");
        }
        if v.response.0 > 1 << 32 {
            return err("stateful.servers.response", "at most 4 GiB");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse;

    /// A haproxy test whose servers run `table` (YAML, indented 6).
    fn with_servers(table: &str) -> String {
        format!(
            "dut: {{kind: haproxy}}
stateful:
  clients: {{efsm: http-client, connections: 10}}
  servers:
    efsm:
{table}"
        )
    }

    const GOOD: &str = "      states: [listen, open]
      transitions:
        - {from: listen, when: {flags: SYN}, next: open, reply: syn-ack}
        - {from: open, when: {prefix: 'GET '}, next: open, reply: data}
        - {from: open, when: {has: FIN}, next: listen, reply: ack}
";

    #[test]
    fn a_table_of_ones_own_compiles_grouped_by_state() {
        let s = parse(&with_servers(GOOD)).unwrap();
        let v = s.stateful.unwrap().servers.unwrap();
        let t = compile(v.efsm.as_ref().unwrap(), "x").unwrap();
        assert_eq!(t.states, ["listen", "open"]);
        assert_eq!(t.rows[0].flags_value, flag::SYN);
        assert_eq!(t.rows[0].flags_mask, flag::COMPARED);
        assert_eq!((t.rows[1].prefix_len, t.rows[1].payload), (4, 2));
        assert_eq!(
            (t.rows[2].flags_mask, t.rows[2].flags_value),
            (flag::FIN, flag::FIN)
        );
        // Every built-in compiles.
        for b in BUILTINS {
            compile(&EfsmRef::Builtin(b.into()), "x").unwrap();
        }
    }

    #[test]
    fn an_unreachable_state_is_named_with_its_line() {
        let t = GOOD.replace("[listen, open]", "[listen, open, lost]");
        let e = parse(&with_servers(&t)).unwrap_err();
        assert_eq!(e.path, "stateful.servers.efsm.states[2]");
        assert!(e.message.contains("`lost` is unreachable"), "{}", e.message);
        assert_eq!(e.line, Some(6));
    }

    #[test]
    fn a_transition_without_an_action_is_refused() {
        let t = GOOD.replace(", reply: ack}", "}");
        let e = parse(&with_servers(&t)).unwrap_err();
        assert_eq!(e.path, "stateful.servers.efsm.transitions[2]");
        assert!(e.message.contains("has no action"), "{}", e.message);
        assert_eq!(e.line, Some(10));
    }

    #[test]
    fn conditions_on_what_the_executor_cannot_see_are_refused() {
        let long = GOOD.replace("'GET '", "'GET /index.html'");
        let e = parse(&with_servers(&long)).unwrap_err();
        assert_eq!(e.path, "stateful.servers.efsm.transitions[1].when.prefix");
        assert!(e.message.contains("from 1 to 8 bytes"), "{}", e.message);
        let flags = GOOD.replace("flags: SYN", "flags: SYN|PSH");
        let e = parse(&with_servers(&flags)).unwrap_err();
        assert!(e.message.contains("`PSH` is not one of"), "{}", e.message);
        let state = GOOD.replace("next: open, reply: syn-ack", "next: opened, reply: syn-ack");
        let e = parse(&with_servers(&state)).unwrap_err();
        assert_eq!(e.path, "stateful.servers.efsm.transitions[0].next");
        // all_acked compares what the flow sent: a table that sends
        // neither data nor FIN has nothing to compare.
        let acked = "      states: [a, b]
      transitions:
        - {from: a, when: {flags: SYN}, next: b, reply: syn-ack}
        - {from: b, when: {all_acked: true}, next: a, reply: none}
";
        let e = parse(&with_servers(acked)).unwrap_err();
        assert_eq!(
            e.path,
            "stateful.servers.efsm.transitions[1].when.all_acked"
        );
        let e = parse(&with_servers("      http-serverr\n")).unwrap_err();
        assert!(
            e.message.contains("no built-in EFSM `http-serverr`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn keep_alive_clients_ask_for_it_and_zero_requests_is_refused() {
        let spec = |clients: &str| {
            format!(
                "dut: {{kind: haproxy}}
stateful:
  clients: {clients}
  servers: {{efsm: http-server, keep_alive: true}}
"
            )
        };
        let one = parse(&spec("{efsm: http-client, connections: 10}")).unwrap();
        let c = one.stateful.unwrap().clients.unwrap();
        assert_eq!(c.requests, 1);
        assert!(c.request().contains("Connection: close"));
        let many = parse(&spec("{efsm: http-client, connections: 10, requests: 50}")).unwrap();
        let st = many.stateful.unwrap();
        assert!(st.servers.unwrap().keep_alive);
        let c = st.clients.unwrap();
        assert_eq!(c.requests, 50);
        assert!(
            !c.request().contains("Connection:"),
            "HTTP/1.1 keeps it alive"
        );
        let e = parse(&spec("{efsm: http-client, connections: 10, requests: 0}")).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.line),
            ("stateful.clients.requests", Some(3))
        );
        // The built-in client's keep-alive rows compile to the executor's
        // conditions.
        let t = compile(&EfsmRef::Builtin("http-client".into()), "x").unwrap();
        let next = t
            .rows
            .iter()
            .find(|r| r.reply == Reply::NextMessage)
            .unwrap();
        assert_eq!((next.message_complete, next.requests_left), (1, 1));
    }

    #[test]
    fn a_stateful_test_is_checked_as_a_whole() {
        let both = "dut: {kind: router}
stream: {size: 64, pps: 1000}
stateful:
  clients: {efsm: http-client, connections: 10}
";
        assert_eq!(parse(both).unwrap_err().path, "stateful");
        let no_servers = "dut: {kind: router}
stateful:
  clients: {efsm: http-client, connections: 10}
";
        assert_eq!(parse(no_servers).unwrap_err().path, "stateful.servers");
        let stream_metric = "dut: {kind: haproxy}
stateful:
  clients: {efsm: http-client, connections: 10}
  servers: {efsm: http-server}
expect:
  - {metric: latency_p99, at_most: 1ms}
";
        let e = parse(stream_metric).unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("expect[0].metric", Some(6)));
        let mss = "dut: {kind: haproxy}
ports: {mtu: 1500}
stateful:
  clients: {efsm: http-client, connections: 10}
  servers: {efsm: http-server}
  mss: 1461
";
        assert_eq!(parse(mss).unwrap_err().path, "stateful.mss");
        let conn_metric = "dut: {kind: router}
stream: {size: 64, pps: 1000}
expect:
  - {metric: transactions, at_least: 1}
";
        assert_eq!(parse(conn_metric).unwrap_err().path, "expect[0].metric");
    }
}
