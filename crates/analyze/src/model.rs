//! The connection model every analyzer shares: one pass over a connection's
//! packets at the vantage point that numbers data packets (Lumina §3.3),
//! keeps the sender's view (cumulative ACK, SACK scoreboard, duplicate ACKs)
//! and the receiver's (what arrived in order), and says for every
//! retransmission what justified it.
//!
//! Vantage point. A trace is taken at one point: the switch (wirelab
//! metadata), a host, or a mirror port. Every time is taken there. The
//! handshake splits the base round trip at that point (Lumina §4 pre-measures
//! the testbed RTT for the same reason): SYN → SYN-ACK is the round trip
//! through the server's side, SYN-ACK → ACK the one through the client's.
//! A receiver's reaction seen at the vantage point includes its side's round
//! trip, a sender's reaction its side's; latencies are reported both as seen
//! and with that base round trip taken out.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Serialize;
use wirelab_spec::Recovery;
use wirelab_trace::Action;
use wirelab_trace::{Tcp, Trace};

use crate::{Evidence, Options};

/// Sequence-space comparison (RFC 9293 §3.4: modulo 2^32).
pub(crate) fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// One packet of a connection, as the analyzers see it.
#[derive(Debug, Clone)]
pub struct Seg {
    /// Index into `Trace::packets`.
    pub idx: usize,
    pub ts: u64,
    /// From the data sender (else from the receiver).
    pub data: bool,
    pub tcp: Tcp,
    /// Data direction: sequence number relative to the ISN (first byte is 1).
    /// Reverse direction: acknowledgment number relative to the same ISN.
    pub rel: u32,
    /// Data packet index among first transmissions (0: not a data packet,
    /// or a retransmission of bytes this trace never saw sent).
    pub index: u32,
    /// Lumina iteration.
    pub iter: u32,
    /// A first transmission.
    pub first: bool,
    /// The switch dropped or corrupted it: it never reached the receiver intact.
    pub lost: bool,
    /// RFC 5681 §2 duplicate acknowledgment.
    pub dupack: bool,
}

/// What justified a retransmission, per the specifications a sender follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// DupThresh (3) duplicate ACKs for it: fast retransmit, RFC 5681 §3.2.
    DupAcks,
    /// SACKed data above it past DupThresh: RFC 6675 §4 IsLost.
    Sack,
    /// Data sent after it was delivered: RACK, RFC 8985 §6.2.
    Rack,
    /// The last segment, after no ACK for a probe timeout: TLP, RFC 8985 §7.
    Tlp,
    /// The retransmission timer expired: RFC 6298 §5.4.
    Timeout,
    /// Sent before a timeout and repeated in the recovery that followed it
    /// (RFC 6298 §5.4, RFC 5681 §3.1: after an RTO everything outstanding is lost).
    AfterTimeout,
    /// Nothing on the wire justified it.
    Unjustified,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::DupAcks => "dupacks",
            Reason::Sack => "sack",
            Reason::Rack => "rack",
            Reason::Tlp => "tlp",
            Reason::Timeout => "timeout",
            Reason::AfterTimeout => "after-timeout",
            Reason::Unjustified => "unjustified",
        }
    }

    /// The coarse class a spec's `recovery:` names.
    pub fn recovery(self) -> Recovery {
        match self {
            Reason::DupAcks | Reason::Sack | Reason::Rack => Recovery::Fast,
            Reason::Tlp => Recovery::Probe,
            Reason::Timeout | Reason::AfterTimeout => Recovery::Timeout,
            Reason::Unjustified => Recovery::Unjustified,
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Retransmission {
    /// Data packet index (1-based, among first transmissions).
    pub packet: u32,
    /// 1 for the first retransmission of this packet, 2 for the second...
    pub nth: u32,
    /// Lumina iteration of the retransmission.
    pub iteration: u32,
    pub at: Evidence,
    pub ts_ns: u64,
    /// The transmission it repeats (the one that was lost).
    pub previous: Evidence,
    /// What the switch did to the previous transmission; `None` when the
    /// trace has no wirelab metadata (written "unknown").
    #[serde(serialize_with = "action_or_unknown")]
    #[schemars(with = "String")]
    pub previous_event: Option<Action>,
    /// From the previous transmission to this one, at the vantage point.
    pub since_loss_ns: u64,
    pub recovery: Recovery,
    pub reason: Reason,
    /// The receiver's packet that completed the loss signal (the 3rd
    /// duplicate ACK, the SACK that made it lost, the delivery RACK saw).
    pub trigger: Option<Evidence>,
    pub trigger_ts_ns: Option<u64>,
    /// Every byte was cumulatively acknowledged before the sender could
    /// have sent this: a retransmission of acknowledged data.
    pub already_acked: bool,
    /// Every byte was SACKed before the sender could have sent this (and no
    /// timeout let the sender forget its scoreboard, RFC 6675 §5.1).
    pub already_sacked: bool,
    /// The receiver reported it got these bytes twice (DSACK, RFC 2883).
    pub dsack: Option<Evidence>,
    /// For a timeout: how long the timer ran (from the later of the last
    /// transmission and the last ACK).
    pub rto_ns: Option<u64>,
    /// For a timeout: the previous timeout of the same outstanding data with
    /// no progress in between, and how long its timer ran (for backoff).
    pub backoff_of: Option<(Evidence, u64)>,
}

/// `fast at #22 (+136.5us after #7 drop)`: the one way a retransmission is
/// written, in summaries and in expectation verdicts.
impl std::fmt::Display for Retransmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.recovery.name())?;
        if self.reason.name() != self.recovery.name() {
            write!(f, " ({})", self.reason.name())?;
        }
        write!(
            f,
            " at {} (+{} after {}",
            self.at,
            crate::fmt_duration(self.since_loss_ns),
            self.previous
        )?;
        if let Some(a) = self.previous_event.filter(|a| *a != Action::None) {
            write!(f, " {a}")?;
        }
        f.write_str(")")
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EcnMark {
    pub at: Evidence,
    pub ts_ns: u64,
    pub packet: u32,
    /// First reverse packet with ECE after the mark.
    pub echo: Option<Evidence>,
    pub echo_latency_ns: Option<u64>,
    /// First data packet with CWR after the echo.
    pub cwr: Option<Evidence>,
    pub cwr_latency_ns: Option<u64>,
    /// New data was sent after the echo (so a CWR was due, RFC 3168 §6.1.2).
    pub data_after_echo: bool,
    /// The first ACK that covers the marked packet (the one that should
    /// carry ECE, RFC 3168 §6.1.3).
    pub acked_by: Option<Evidence>,
    #[serde(skip)]
    #[schemars(skip)]
    end_rel: u32,
}

/// The base round trip split at the vantage point.
#[derive(Debug, Clone, Copy, Default, Serialize, JsonSchema)]
pub struct BaseRtt {
    /// Vantage → data sender → vantage.
    pub sender_side_ns: u64,
    /// Vantage → receiver → vantage.
    pub receiver_side_ns: u64,
    /// "handshake", "handshake and data" (the receiver's side from the
    /// smallest data → ACK time, when smaller: an ACK that covers data is a
    /// true sample of that side) or "data" (no handshake in the trace: all
    /// of the smallest data → ACK time on the receiver's side).
    pub source: &'static str,
}

fn action_or_unknown<S: serde::Serializer>(a: &Option<Action>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => a.serialize(s),
        None => s.serialize_str("unknown"),
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AppliedEvent {
    #[schemars(with = "String")]
    pub event: Action,
    pub event_id: u32,
    pub at: Evidence,
    pub packet: u32,
    pub iteration: u32,
}

/// An arrival the receiver had to answer at once (RFC 5681 §4.2): an
/// out-of-order segment, or one that fills a hole.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Arrival {
    pub at: Evidence,
    pub ts_ns: u64,
    pub packet: u32,
    /// "out-of-order" or "fills-hole".
    pub kind: &'static str,
    /// The first ACK the receiver sent after it.
    pub answer: Option<Evidence>,
    pub answer_ts_ns: Option<u64>,
    /// The first out-of-order arrival after an in-order stretch (where the
    /// receiver first learns of a loss).
    pub first_of_hole: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ConnAnalysis {
    pub id: u32,
    pub data_src: (IpAddr, u16),
    pub data_dst: (IpAddr, u16),
    /// ISN of the data direction (from its SYN or SYN-ACK).
    pub isn: Option<u32>,
    pub packets: u64,
    pub data_packets: u64,
    pub first_transmissions: u32,
    /// Largest payload seen: the sender's SMSS.
    pub smss: u32,
    pub retransmissions: Vec<Retransmission>,
    pub ce_marks: Vec<EcnMark>,
    pub arrivals: Vec<Arrival>,
    /// Round trip seen from the vantage point during the handshake.
    pub handshake_rtt_ns: Option<u64>,
    pub base_rtt: BaseRtt,
    /// Data first transmission → the ACK that covers it, at the vantage
    /// point (Karn: never for retransmitted data), (ts of the ACK, rtt).
    #[serde(skip)]
    pub rtt_samples: Vec<(u64, u64)>,
    /// Bytes in flight (highest sent − cumulative ACK) at each data packet:
    /// the congestion window, where the sender is window-limited.
    #[serde(skip)]
    pub flight: Vec<(u64, u32)>,
    /// Bytes first sent and cumulatively acknowledged.
    pub bytes_acked: u64,
    pub first_data_ts_ns: Option<u64>,
    pub last_ack_ts_ns: Option<u64>,
    /// DSACKs the receiver sent.
    pub dsacks: Vec<Evidence>,
    /// Packets where the switch's (index, iteration) differs from this
    /// analyzer's; must be empty (both implement Lumina §3.3).
    pub iteration_mismatches: Vec<Evidence>,
    /// Events the switch applied, by (event, evidence, packet, iteration).
    pub events: Vec<AppliedEvent>,
    /// Every packet of the connection in capture order.
    #[serde(skip)]
    #[schemars(skip)]
    pub segs: Vec<Seg>,
}

impl ConnAnalysis {
    /// Retransmissions of data packet `packet`, in order.
    pub fn retransmissions_of(&self, packet: u32) -> Vec<&Retransmission> {
        self.retransmissions
            .iter()
            .filter(|r| r.packet == packet)
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Malformed {
    pub frame: u64,
    pub layer: String,
    /// Byte offset in the frame.
    pub offset: usize,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Analysis {
    /// Where the timings were taken, in words.
    pub vantage: String,
    /// The trace carries wirelab's switch metadata.
    pub switch_metadata: bool,
    pub connections: Vec<ConnAnalysis>,
    /// Frames that could not be parsed, with where and why.
    pub malformed: Vec<Malformed>,
    /// Where the file stops being readable, if it does.
    pub truncated: Option<(u64, String)>,
    pub packets: u64,
}

type Key = (IpAddr, u16, IpAddr, u16);

fn canonical(t: &Tcp) -> Key {
    let a = (t.src, t.sport);
    let b = (t.dst, t.dport);
    if a <= b {
        (a.0, a.1, b.0, b.1)
    } else {
        (b.0, b.1, a.0, a.1)
    }
}

pub(crate) fn evidence(trace: &Trace, i: usize) -> Evidence {
    let p = &trace.packets[i];
    Evidence {
        frame: p.frame,
        mirror_seq: p.meta.as_ref().map(|m| m.seq),
    }
}

/// Runs the model over a whole trace. `progress` is told how many packets
/// were classified so far (for long traces).
pub fn build(trace: &Trace, opts: Options, progress: &dyn Fn(u64)) -> Analysis {
    let has_meta = trace.packets.iter().any(|p| p.meta.is_some());
    let mut malformed = Vec::new();
    let mut by_conn: HashMap<Key, usize> = HashMap::new();
    let mut groups: Vec<(Key, Vec<(usize, Tcp, u64)>)> = Vec::new();
    let mut meta_conn: HashMap<Key, (u32, (IpAddr, u16))> = HashMap::new();
    for (i, p) in trace.packets.iter().enumerate() {
        if i % 65536 == 0 {
            progress(i as u64);
        }
        let t = match p.tcp() {
            Ok(t) => t,
            Err(wirelab_trace::NotTcp::Other) => continue,
            Err(wirelab_trace::NotTcp::Malformed {
                layer,
                offset,
                detail,
            }) => {
                malformed.push(Malformed {
                    frame: p.frame,
                    layer,
                    offset,
                    detail,
                });
                continue;
            }
        };
        let k = canonical(&t);
        if let Some(m) = &p.meta {
            if m.conn > 0 {
                let src = if m.data_dir {
                    (t.src, t.sport)
                } else {
                    (t.dst, t.dport)
                };
                meta_conn.entry(k).or_insert((m.conn, src));
            }
        }
        let ts = p.meta.as_ref().map_or(p.ts_ns, |m| m.ts);
        let g = *by_conn.entry(k).or_insert_with(|| {
            groups.push((k, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push((i, t, ts));
    }
    let mut connections = Vec::new();
    for (n, (k, pkts)) in groups.iter().enumerate() {
        let (id, data_src) = match meta_conn.get(k) {
            Some(&(id, src)) => (id, src),
            None => (
                n as u32 + 1 + if has_meta { 10_000 } else { 0 },
                data_source(pkts),
            ),
        };
        connections.push(Builder::new(trace, id, data_src, pkts, opts).run());
    }
    progress(trace.packets.len() as u64);
    connections.sort_by_key(|c| c.id);
    Analysis {
        vantage: vantage_words(has_meta, &connections),
        switch_metadata: has_meta,
        connections,
        malformed,
        truncated: trace
            .truncated
            .as_ref()
            .map(|d| (d.offset, d.detail.clone())),
        packets: trace.packets.len() as u64,
    }
}

fn vantage_words(has_meta: bool, conns: &[ConnAnalysis]) -> String {
    if has_meta {
        return "switch ingress (wirelab metadata: one clock for every port)".into();
    }
    // Where the capture sat, from the handshake split of the first
    // connection that has one.
    let Some(b) = conns
        .iter()
        .map(|c| c.base_rtt)
        .find(|b| b.source.starts_with("handshake"))
    else {
        return "capture point of the trace (no handshake seen: its position on the path is unknown)"
            .into();
    };
    let total = (b.sender_side_ns + b.receiver_side_ns).max(1);
    let f = b.sender_side_ns as f64 / total as f64;
    let place = if f < 0.1 {
        "at or near the data sender"
    } else if f > 0.9 {
        "at or near the receiver"
    } else {
        "mid-path"
    };
    format!(
        "capture point {place} ({:.0}% of the handshake round trip on the sender's side)",
        f * 100.0
    )
}

/// Without metadata the data direction is the one carrying more payload.
fn data_source(pkts: &[(usize, Tcp, u64)]) -> (IpAddr, u16) {
    let mut bytes: HashMap<(IpAddr, u16), u64> = HashMap::new();
    for (_, t, _) in pkts {
        *bytes.entry((t.src, t.sport)).or_default() += u64::from(t.payload_len);
    }
    bytes
        .into_iter()
        .max_by_key(|(src, b)| (*b, std::cmp::Reverse(*src)))
        .map(|(s, _)| s)
        .unwrap_or((pkts[0].1.src, pkts[0].1.sport))
}

/// A first transmission and what the sender knows of it.
#[derive(Debug, Clone)]
struct SegState {
    index: u32,
    end: u32,
    first_ts: u64,
    last_tx_ts: u64,
    last_tx_idx: usize,
    tx_count: u32,
    /// When a SACK covering it passed the vantage point.
    sacked_ts: Option<u64>,
    sack_idx: usize,
}

/// An ACK from the receiver, as the sender's loss detection uses it.
#[derive(Debug, Clone, Copy)]
struct AckEv {
    idx: usize,
    ts: u64,
    /// Relative cumulative ACK.
    ack: u32,
    dup: bool,
}

struct Builder<'a> {
    trace: &'a Trace,
    pkts: &'a [(usize, Tcp, u64)],
    opts: Options,
    out: ConnAnalysis,
}

impl<'a> Builder<'a> {
    fn new(
        trace: &'a Trace,
        id: u32,
        src: (IpAddr, u16),
        pkts: &'a [(usize, Tcp, u64)],
        opts: Options,
    ) -> Self {
        let dst = pkts
            .iter()
            .find(|(_, t, _)| (t.src, t.sport) == src)
            .map(|(_, t, _)| (t.dst, t.dport))
            .or_else(|| pkts.first().map(|(_, t, _)| (t.src, t.sport)))
            .unwrap_or(src);
        Builder {
            trace,
            pkts,
            opts,
            out: ConnAnalysis {
                id,
                data_src: src,
                data_dst: dst,
                isn: None,
                packets: pkts.len() as u64,
                data_packets: 0,
                first_transmissions: 0,
                smss: 0,
                retransmissions: Vec::new(),
                ce_marks: Vec::new(),
                arrivals: Vec::new(),
                handshake_rtt_ns: None,
                base_rtt: BaseRtt::default(),
                rtt_samples: Vec::new(),
                flight: Vec::new(),
                bytes_acked: 0,
                first_data_ts_ns: None,
                last_ack_ts_ns: None,
                dsacks: Vec::new(),
                iteration_mismatches: Vec::new(),
                events: Vec::new(),
                segs: Vec::with_capacity(pkts.len()),
            },
        }
    }

    /// From the data sender.
    fn is_data(&self, t: &Tcp) -> bool {
        (t.src, t.sport) == self.out.data_src
    }

    fn ev(&self, i: usize) -> Evidence {
        evidence(self.trace, i)
    }

    /// The handshake split of the base round trip (see the module doc).
    fn base_rtt(&mut self) {
        let p = self.pkts;
        let syn = p.iter().find(|(_, t, _)| t.syn && !t.has_ack);
        let synack = p.iter().find(|(_, t, _)| t.syn && t.has_ack);
        let (Some(s), Some(sa)) = (syn, synack) else {
            return;
        };
        let Some(a) = p
            .iter()
            .find(|(i, t, _)| *i > sa.0 && !t.syn && (t.src, t.sport) == (s.1.src, s.1.sport))
        else {
            return;
        };
        let server_side = sa.2.saturating_sub(s.2);
        let client_side = a.2.saturating_sub(sa.2);
        self.out.handshake_rtt_ns = Some(server_side + client_side);
        let sender_is_client = self.is_data(&s.1);
        self.out.base_rtt = if sender_is_client {
            BaseRtt {
                sender_side_ns: client_side,
                receiver_side_ns: server_side,
                source: "handshake",
            }
        } else {
            BaseRtt {
                sender_side_ns: server_side,
                receiver_side_ns: client_side,
                source: "handshake",
            }
        };
    }

    fn run(mut self) -> ConnAnalysis {
        self.base_rtt();
        let trace = self.trace;
        let opts = self.opts;
        // Largest round trip seen at the vantage point (bounds how long an
        // ACK-triggered retransmission may take; see `classify`).
        let mut max_rtt = self.out.handshake_rtt_ns.unwrap_or(0);
        let mut min_data_rtt = u64::MAX;
        let mut isn: Option<u32> = None;
        let mut seen = false;
        let mut last_rel = 0u32;
        let mut next_new = 1u32; // snd_nxt high-water mark (relative)
        let mut iter = 1u32;
        let mut first_tx = 0u32;
        let mut segs: BTreeMap<u32, SegState> = BTreeMap::new();
        let mut nth: HashMap<u32, u32> = HashMap::new();
        // Sender's view.
        let mut snd_una = 1u32;
        let mut una_hist: Vec<(u64, u32)> = Vec::new();
        let mut last_ack: Option<(u32, u16)> = None;
        let mut acks: Vec<AckEv> = Vec::new();
        // Latest timeout: (retransmission evidence, ts, recovery point, interval)
        let mut last_timeout: Option<(Evidence, u64, u32, u64)> = None;
        let mut rto_recovery_until: Option<(u32, u64)> = None;
        let mut tlp_out = false;
        let mut last_data_ts = 0u64;
        // Receiver's view: next expected byte and the out-of-order ranges.
        let mut rcv_nxt: Option<u32> = None;
        let mut ooo: BTreeMap<u32, u32> = BTreeMap::new();
        let mut unanswered: Vec<usize> = Vec::new(); // into out.arrivals
        let mut pending_echo: Vec<usize> = Vec::new();
        let mut awaiting_cwr: Vec<usize> = Vec::new();
        for &(idx, t, ts) in self.pkts {
            let meta = trace.packets[idx].meta.as_ref();
            let data = self.is_data(&t);
            let mut seg = Seg {
                idx,
                ts,
                data,
                tcp: t,
                rel: 0,
                index: 0,
                iter: 0,
                first: false,
                lost: meta.is_some_and(|m| m.dropped() || m.event == Action::Corrupt),
                dupack: false,
            };
            if !data {
                let base = isn.unwrap_or(0);
                seg.rel = t.ack.wrapping_sub(base);
                if t.has_ack && isn.is_some() && !t.syn {
                    let a = seg.rel;
                    // RFC 5681 §2: a duplicate ACK carries no data, no SYN/FIN,
                    // the same ACK and window as the last one, while data is
                    // outstanding.
                    seg.dupack = t.payload_len == 0
                        && !t.fin
                        && !t.rst
                        && last_ack == Some((t.ack, t.window))
                        && seq_lt(snd_una, next_new);
                    last_ack = Some((t.ack, t.window));
                    // Any ACK the receiver sends answers the arrivals before it.
                    for a_i in unanswered.drain(..) {
                        let ar = &mut self.out.arrivals[a_i];
                        ar.answer = Some(evidence(trace, idx));
                        ar.answer_ts_ns = Some(ts);
                    }
                    if seq_lt(snd_una, a) && seq_le(a, next_new) {
                        // Cumulative progress: RTT sample from the newest
                        // segment it covers that was never retransmitted.
                        if let Some((_, s)) = segs.range(..a).next_back() {
                            // Karn (RFC 6298 §3): never retransmitted; and
                            // not SACKed before (then this ACK was held back
                            // by a hole, and the SACK gave the sample).
                            if s.tx_count == 1 && s.sacked_ts.is_none() && seq_le(s.end, a) {
                                let rtt = ts.saturating_sub(s.first_ts);
                                self.out.rtt_samples.push((ts, rtt));
                                max_rtt = max_rtt.max(rtt);
                                min_data_rtt = min_data_rtt.min(rtt);
                            }
                        }
                        self.out.bytes_acked += u64::from(a.wrapping_sub(snd_una));
                        snd_una = a;
                        una_hist.push((ts, a));
                        self.out.last_ack_ts_ns = Some(ts);
                        tlp_out = false;
                        if rto_recovery_until.is_some_and(|(p, _)| seq_le(p, a)) {
                            rto_recovery_until = None;
                        }
                        if last_timeout.is_some_and(|(_, _, p, _)| seq_lt(p, a)) {
                            last_timeout = None;
                        }
                    } else if seq_lt(snd_una, a) {
                        // Acknowledges bytes never seen sent: the capture
                        // missed them. Follow the receiver.
                        snd_una = a;
                        una_hist.push((ts, a));
                    }
                    // SACK blocks (RFC 2018) and DSACK (RFC 2883 §4: the
                    // first block below the cumulative ACK, or inside the
                    // second block).
                    let sacks = t.sacks();
                    for (n, &(l, r)) in sacks.iter().enumerate() {
                        let (l, r) = (l.wrapping_sub(base), r.wrapping_sub(base));
                        let is_dsack = n == 0
                            && (seq_le(r, a)
                                || sacks.get(1).is_some_and(|&(l2, r2)| {
                                    seq_le(l2.wrapping_sub(base), l)
                                        && seq_le(r, r2.wrapping_sub(base))
                                }));
                        if is_dsack {
                            self.out.dsacks.push(evidence(trace, idx));
                            let packet = segs.range(..=l).next_back().map(|(_, s)| s.index);
                            if let Some(r) = self
                                .out
                                .retransmissions
                                .iter_mut()
                                .rev()
                                .find(|r| Some(r.packet) == packet)
                            {
                                r.dsack.get_or_insert(evidence(trace, idx));
                            }
                            continue;
                        }
                        for (_, s) in segs.range_mut(l..) {
                            if !seq_le(s.end, r) {
                                break;
                            }
                            if s.sacked_ts.is_none() {
                                s.sacked_ts = Some(ts);
                                s.sack_idx = idx;
                                if s.tx_count == 1 {
                                    let rtt = ts.saturating_sub(s.first_ts);
                                    self.out.rtt_samples.push((ts, rtt));
                                    max_rtt = max_rtt.max(rtt);
                                    min_data_rtt = min_data_rtt.min(rtt);
                                }
                            }
                        }
                    }
                    acks.push(AckEv {
                        idx,
                        ts,
                        ack: a,
                        dup: seg.dupack,
                    });
                }
                if t.has_ack && !t.syn {
                    for &m in &pending_echo {
                        let mark = &mut self.out.ce_marks[m];
                        if mark.acked_by.is_none() && seq_le(mark.end_rel, seg.rel) {
                            mark.acked_by = Some(evidence(trace, idx));
                        }
                    }
                }
                if t.ece && !t.syn {
                    for m in pending_echo.drain(..) {
                        let mark = &mut self.out.ce_marks[m];
                        mark.echo = Some(evidence(trace, idx));
                        mark.echo_latency_ns = Some(ts.saturating_sub(mark.ts_ns));
                        awaiting_cwr.push(m);
                    }
                }
                self.out.segs.push(seg);
                continue;
            }
            if t.syn {
                // Lumina's register starts over with a new connection.
                isn = Some(t.seq);
                self.out.isn = isn;
                seen = false;
                next_new = 1;
                snd_una = 1;
                iter = 1;
                self.out.segs.push(seg);
                continue;
            }
            let base = *isn.get_or_insert_with(|| {
                // Joined mid-connection: number from the first byte seen.
                snd_una = 1;
                t.seq.wrapping_sub(1)
            });
            seg.rel = t.seq.wrapping_sub(base);
            if t.payload_len == 0 {
                self.out.segs.push(seg);
                continue;
            }
            self.out.data_packets += 1;
            self.out.smss = self.out.smss.max(t.payload_len);
            self.out.first_data_ts_ns.get_or_insert(ts);
            let rel = seg.rel;
            // Lumina §3.3 ITER rule, as the switch applies it.
            if seen && seq_le(rel, last_rel) {
                iter += 1;
            }
            seen = true;
            last_rel = rel;
            let end = rel.wrapping_add(t.payload_len);
            let first = seq_le(next_new, rel);
            let index = if first {
                first_tx += 1;
                segs.insert(
                    rel,
                    SegState {
                        index: first_tx,
                        end,
                        first_ts: ts,
                        last_tx_ts: ts,
                        last_tx_idx: idx,
                        tx_count: 1,
                        sacked_ts: None,
                        sack_idx: 0,
                    },
                );
                first_tx
            } else {
                // The first transmission that holds this byte.
                segs.range(..=rel)
                    .next_back()
                    .filter(|(_, s)| seq_lt(rel, s.end))
                    .map_or(0, |(_, s)| s.index)
            };
            if !seq_le(end, next_new) {
                next_new = end;
            }
            seg.index = index;
            seg.iter = iter;
            seg.first = first;
            if let Some(m) = meta {
                if m.data_dir && (m.index != index || m.iter != iter) {
                    self.out.iteration_mismatches.push(self.ev(idx));
                }
                if m.event != Action::None {
                    self.out.events.push(AppliedEvent {
                        event: m.event,
                        event_id: m.event_id,
                        at: self.ev(idx),
                        packet: index,
                        iteration: iter,
                    });
                }
            }
            self.out.flight.push((ts, next_new.wrapping_sub(snd_una)));
            if t.ecn == 3 {
                self.out.ce_marks.push(EcnMark {
                    at: self.ev(idx),
                    ts_ns: ts,
                    packet: index,
                    echo: None,
                    echo_latency_ns: None,
                    cwr: None,
                    cwr_latency_ns: None,
                    data_after_echo: false,
                    acked_by: None,
                    end_rel: end,
                });
                pending_echo.push(self.out.ce_marks.len() - 1);
            }
            if first {
                for &m in &awaiting_cwr {
                    self.out.ce_marks[m].data_after_echo = true;
                }
            }
            if t.cwr {
                for m in awaiting_cwr.drain(..) {
                    let mark = &mut self.out.ce_marks[m];
                    mark.cwr = Some(evidence(trace, idx));
                    mark.cwr_latency_ns = mark
                        .echo_latency_ns
                        .map(|e| ts.saturating_sub(mark.ts_ns).saturating_sub(e));
                }
            }
            // The receiver's side: did this arrival need an immediate ACK?
            if !seg.lost {
                let nxt = *rcv_nxt.get_or_insert(rel);
                let kind = if seq_lt(nxt, rel) {
                    Some("out-of-order")
                } else if seq_le(rel, nxt) && seq_lt(nxt, end) && !ooo.is_empty() {
                    Some("fills-hole")
                } else {
                    None
                };
                if seq_lt(nxt, rel) {
                    ooo.entry(rel)
                        .and_modify(|e| {
                            if seq_lt(*e, end) {
                                *e = end
                            }
                        })
                        .or_insert(end);
                } else if seq_lt(nxt, end) {
                    let mut n = end;
                    // Pull in the out-of-order ranges the new data reaches.
                    while let Some((&s, &e)) = ooo.iter().next() {
                        if seq_le(s, n) {
                            ooo.remove(&s);
                            if seq_lt(n, e) {
                                n = e;
                            }
                        } else {
                            break;
                        }
                    }
                    rcv_nxt = Some(n);
                }
                if let Some(kind) = kind {
                    let first_of_hole =
                        kind == "out-of-order" && ooo.len() == 1 && ooo.get(&rel).is_some();
                    self.out.arrivals.push(Arrival {
                        at: self.ev(idx),
                        ts_ns: ts,
                        packet: index,
                        kind,
                        answer: None,
                        answer_ts_ns: None,
                        first_of_hole,
                    });
                    unanswered.push(self.out.arrivals.len() - 1);
                }
            }
            if !first && index > 0 {
                let s = segs
                    .range(..=rel)
                    .next_back()
                    .map(|(&k, s)| (k, s.clone()))
                    .expect("index > 0 has a segment");
                let n = nth.entry(index).or_insert(0);
                *n += 1;
                let ctx = Classify {
                    ts,
                    start: s.0,
                    seg: &s.1,
                    segs: &segs,
                    acks: &acks,
                    una_hist: &una_hist,
                    next_new,
                    smss: self.out.smss,
                    max_rtt,
                    min_rtt: if min_data_rtt == u64::MAX {
                        max_rtt
                    } else {
                        min_data_rtt
                    },
                    sender_side: self.out.base_rtt.sender_side_ns,
                    opts,
                    last_data_ts,
                    tlp_out,
                    rto_recovery: rto_recovery_until,
                };
                let (reason, trigger, flags) = ctx.classify();
                // The timer runs from the later of the last transmission and
                // the last ACK (each ACK re-arms it: RFC 6298 §5.3, Linux's
                // tcp_rearm_rto).
                let rto_ns = (reason == Reason::Timeout).then(|| {
                    let last_ack = acks.last().map_or(0, |a| a.ts);
                    ts.saturating_sub(s.1.last_tx_ts.max(last_ack))
                });
                let backoff_of = match (rto_ns, last_timeout) {
                    (Some(_), Some((e, pts, _, rto))) if pts >= s.1.first_ts => Some((e, rto)),
                    _ => None,
                };
                if let Some(rto) = rto_ns {
                    last_timeout = Some((self.ev(idx), ts, next_new, rto));
                    rto_recovery_until = Some((next_new, ts));
                }
                if reason == Reason::Tlp {
                    tlp_out = true;
                }
                self.out.retransmissions.push(Retransmission {
                    packet: index,
                    nth: *n,
                    iteration: iter,
                    at: self.ev(idx),
                    ts_ns: ts,
                    previous: self.ev(s.1.last_tx_idx),
                    previous_event: trace.packets[s.1.last_tx_idx]
                        .meta
                        .as_ref()
                        .map(|m| m.event),
                    since_loss_ns: ts.saturating_sub(s.1.last_tx_ts),
                    recovery: reason.recovery(),
                    reason,
                    trigger: trigger.map(|a| self.ev(a.idx)),
                    trigger_ts_ns: trigger.map(|a| a.ts),
                    already_acked: flags.0,
                    already_sacked: flags.1,
                    dsack: None,
                    rto_ns,
                    backoff_of,
                });
                if let Some(st) = segs.get_mut(&s.0) {
                    st.last_tx_ts = ts;
                    st.last_tx_idx = idx;
                    st.tx_count += 1;
                }
            }
            last_data_ts = ts;
            self.out.segs.push(seg);
        }
        self.out.first_transmissions = first_tx;
        // The receiver's side is also sampled by every data packet and its
        // ACK; the smallest sample beats the handshake's (a SYN takes the
        // slow path through the stack).
        if min_data_rtt != u64::MAX {
            if self.out.base_rtt.source.is_empty() {
                self.out.base_rtt = BaseRtt {
                    sender_side_ns: 0,
                    receiver_side_ns: min_data_rtt,
                    source: "data",
                };
            } else if min_data_rtt < self.out.base_rtt.receiver_side_ns {
                self.out.base_rtt.receiver_side_ns = min_data_rtt;
                self.out.base_rtt.source = "handshake and data";
            }
        }
        // The sender's side keeps the handshake's figure: new data that
        // follows an ACK need not be clocked out by it, so data-path samples
        // can be arbitrarily small, and the classifier relies on this side
        // not being underestimated (an ACK counts as known to the sender
        // only a sender-side round trip after it passed).
        self.out
    }
}

/// What a sender could know when it sent a retransmission.
struct Classify<'a> {
    ts: u64,
    start: u32,
    seg: &'a SegState,
    segs: &'a BTreeMap<u32, SegState>,
    acks: &'a [AckEv],
    una_hist: &'a [(u64, u32)],
    next_new: u32,
    smss: u32,
    max_rtt: u64,
    min_rtt: u64,
    sender_side: u64,
    opts: Options,
    last_data_ts: u64,
    tlp_out: bool,
    rto_recovery: Option<(u32, u64)>,
}

impl Classify<'_> {
    /// (reason, the ACK that completed the signal, (already acked, already sacked)).
    fn classify(&self) -> (Reason, Option<AckEv>, (bool, bool)) {
        // Two cuts, each cautious in its own direction. A loss signal counts
        // if it passed the vantage point before the retransmission (it may
        // have reached the sender just in time: the data path is faster
        // than the handshake the sender's side round trip comes from). An
        // acknowledgment makes a retransmission wrong only if it passed a
        // whole sender-side round trip before it (the sender surely had it).
        let cut = self.ts;
        let sure = self.ts.saturating_sub(self.sender_side);
        let since = self.seg.last_tx_ts;
        let una_at_cut = self
            .una_hist
            .iter()
            .rev()
            .find(|(t, _)| *t <= sure)
            .map_or(1, |(_, u)| *u);
        let already_acked = seq_le(self.seg.end, una_at_cut);
        let after_rto = self.rto_recovery.is_some_and(|(_, rto_ts)| since < rto_ts);
        let already_sacked = !after_rto && self.seg.sacked_ts.is_some_and(|t| t <= sure);
        let flags = (already_acked, already_sacked);
        // ACKs the sender could have acted on, since it last sent this.
        let window: Vec<&AckEv> = self
            .acks
            .iter()
            .filter(|a| a.ts >= since && a.ts <= cut)
            .collect();
        // An ACK-triggered retransmission follows its trigger within a round
        // trip or two (RACK's reordering window is at most an RTT, RFC 8985
        // §6.2). A timeout cannot fire sooner than RTO after the transmission
        // it repeats, and Linux keeps RTO >= SRTT + rto_min (RFC 6298 §2.4).
        let fast_window = self.max_rtt.saturating_mul(2).max(self.opts.min_rto_ns / 2);
        let recent = |a: &AckEv| self.ts.saturating_sub(a.ts) <= fast_window;
        // 1. DupThresh duplicate ACKs at this segment (RFC 5681 §3.2).
        let mut dups = 0;
        let mut dup_signal = None;
        for a in &window {
            if a.dup && a.ack == self.start {
                dups += 1;
                if dups == 3 {
                    dup_signal = Some(**a);
                }
            }
        }
        // 2. RFC 6675 IsLost: DupThresh SACKed segments above it, or more than
        //    (DupThresh - 1) * SMSS SACKed bytes above it.
        let mut sack_signal: Option<AckEv> = None;
        let mut above: Vec<(u64, usize, u32)> = self
            .segs
            .range(self.seg.end..)
            .take_while(|(&k, _)| seq_lt(k, self.next_new))
            .filter_map(|(k, s)| {
                s.sacked_ts
                    .filter(|t| *t >= since && *t <= cut)
                    .map(|t| (t, s.sack_idx, s.end.wrapping_sub(*k)))
            })
            .collect();
        above.sort_unstable();
        let mut bytes = 0u32;
        for (n, &(t, i, len)) in above.iter().enumerate() {
            bytes += len;
            if n + 1 >= 3 || bytes > 2 * self.smss {
                sack_signal = Some(AckEv {
                    idx: i,
                    ts: t,
                    ack: 0,
                    dup: false,
                });
                break;
            }
        }
        // 3. RACK (RFC 8985 §6.2): a segment sent after this one's last
        //    transmission was delivered (SACKed or cumulatively ACKed).
        let rack_signal = self
            .segs
            .range(self.seg.end..)
            .take_while(|(&k, _)| seq_lt(k, self.next_new))
            .filter(|(_, s)| s.last_tx_ts > since)
            .filter_map(|(_, s)| {
                s.sacked_ts
                    .filter(|t| *t >= since && *t <= cut)
                    .map(|t| AckEv {
                        idx: s.sack_idx,
                        ts: t,
                        ack: 0,
                        dup: false,
                    })
            })
            .min_by_key(|a| a.ts)
            .or_else(|| {
                // A cumulative ACK past data sent after this transmission.
                window.iter().find_map(|a| {
                    let covered = a.ack > self.seg.end
                        && self
                            .segs
                            .range(self.seg.end..a.ack)
                            .any(|(_, s)| s.last_tx_ts > since && seq_le(s.end, a.ack));
                    covered.then_some(**a)
                })
            });
        let ack_based = [
            (Reason::DupAcks, dup_signal),
            (Reason::Sack, sack_signal),
            (Reason::Rack, rack_signal),
        ]
        .into_iter()
        .filter_map(|(r, s)| s.filter(|a| recent(a)).map(|a| (r, a)))
        .min_by_key(|(_, a)| a.ts);
        if after_rto {
            return (Reason::AfterTimeout, None, flags);
        }
        if let Some((r, a)) = ack_based {
            return (r, Some(a), flags);
        }
        let elapsed = self.ts.saturating_sub(since);
        // 4. TLP (RFC 8985 §7): the last segment, one probe per episode,
        //    after a quiet probe timeout (PTO = 2 SRTT, never under one RTT;
        //    with one segment in flight PTO adds the delayed-ACK time, 200ms,
        //    so a probe can come as late as a timeout: the wire cannot tell
        //    them apart then, and a sender with TLP on sends the probe, as
        //    the PTO is capped at the RTO).
        let is_tail = self.seg.end == self.next_new;
        let quiet_since = self
            .acks
            .iter()
            .rev()
            .find(|a| a.ts <= cut)
            .map_or(0, |a| a.ts)
            .max(self.last_data_ts);
        if self.opts.tlp
            && is_tail
            && !self.tlp_out
            && self.ts.saturating_sub(quiet_since) >= self.min_rtt
        {
            return (Reason::Tlp, None, flags);
        }
        // Linux timers fire no earlier than asked; allow 1% for clock skew
        // between the transmission and the retransmission timestamps.
        if elapsed >= self.opts.min_rto_ns - self.opts.min_rto_ns / 100 {
            return (Reason::Timeout, None, flags);
        }
        (Reason::Unjustified, None, flags)
    }
}
