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

use std::sync::Arc;

/// Connections by 4-tuple, hashed with aHash: SipHash (std's) was a
/// twentieth of the analysis, and aHash keeps its per-process random keys
/// against captures made to collide.
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::Serialize;
use wirelab_spec::Recovery;
use wirelab_trace::Action;
use wirelab_trace::{PacketRef, Tcp, Trace};

use crate::{Evidence, Options};

mod ecn;
mod iter;
mod receiver;
mod segmap;
mod sender;
pub mod series;
mod stall;

use ecn::EcnTracker;
pub(crate) use iter::IterTracker;
use receiver::Receiver;
pub use sender::KEEP;
use sender::{AckIn, Sender};
pub use series::{Bins, Sample, Thin};
use stall::Stalls;
pub use stall::{HeldAck, IdleRestart, WindowLimited, ZeroWindow, HELD_NS};

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
    pub at: Evidence,
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
    /// Its first byte's sequence number, relative to the ISN (the first
    /// data byte is 1).
    pub seq: u32,
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
    /// The ACK that covered it passed the vantage point before it, but too
    /// shortly before for the sender to have seen it first: the two
    /// crossed, and the retransmission was spurious, not wrong (the DSACK
    /// that usually follows says the same).
    pub crossed_ack: Option<Evidence>,
    /// How long before the retransmission that ACK passed.
    pub crossed_ns: Option<u64>,
    /// Every byte was SACKed before the sender could have sent this (and no
    /// timeout let the sender forget its scoreboard, RFC 6675 §5.1).
    pub already_sacked: bool,
    /// The receiver reported it got these bytes twice (DSACK, RFC 2883).
    pub dsack: Option<Evidence>,
    /// For a timeout: how long the timer ran (from the later of the last
    /// transmission and the last ACK).
    pub rto_ns: Option<u64>,
    /// For a timeout, or a fast retransmit on duplicate ACKs: the ACKs of
    /// this segment's first byte since it was last sent that counted as
    /// duplicates, and those that did not only because their window had
    /// changed (DETER §5.3, root cause 2), that passed the vantage point
    /// before this retransmission.
    pub duplicate_acks: Option<(u32, u32)>,
    /// The cumulative ACK that first acknowledged these bytes after this
    /// retransmission, and when (`Covered`): sooner than an answer to this
    /// transmission could come back, the receiver had them already, and
    /// the retransmission was spurious.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered: Option<Covered>,
    /// For a timeout: the previous timeout of the same outstanding data with
    /// no progress in between, and how long its timer ran (for backoff).
    pub backoff_of: Option<(Evidence, u64)>,
    /// A packet the sender sent after this one (its IPv4 ID, numbered in
    /// send order, is higher) that the capture holds before it: the
    /// capture point reordered the two (several CPUs writing one file), so
    /// what the sender knew when it sent this is not what the capture
    /// order shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_after: Option<Evidence>,
}

/// The cumulative ACK that first covered a retransmission's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Covered {
    pub at: Evidence,
    /// From the retransmission to this ACK, at the vantage point. Under
    /// the receiver-side round trip (`BaseRtt`), the ACK answered an
    /// earlier transmission: the segment was reordered, not lost.
    pub after_ns: u64,
    /// Segments it newly acknowledged (rounded up): the hole it closed.
    /// When the retransmission was spurious this is how far the original
    /// was reordered, which is what Linux widens its duplicate-ACK
    /// threshold to (tcp_check_sack_reordering: `tcp_reordering`, from
    /// the cumulative ACK's jump for a sender without SACK that tells a
    /// reordering from a loss by the echoed timestamp, RFC 4015).
    pub segments: u32,
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
    /// The echo acknowledged no further than the window the sender's last
    /// CWR reduced: the CWR of that reduction. RFC 3168 §6.1.2 reduces at
    /// most once a window, and Linux stays in its CWR state (answering no
    /// further ECE) until data past the reduction's `high_seq` is
    /// acknowledged; so no CWR of its own is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reduction_of: Option<Evidence>,
    /// The first ACK that covers the marked packet (the one that should
    /// carry ECE, RFC 3168 §6.1.3).
    pub acked_by: Option<Evidence>,
    /// The marked packet never reached the receiver intact (the switch
    /// dropped or corrupted it): no echo is due.
    pub lost: bool,
    #[serde(skip)]
    #[schemars(skip)]
    end_rel: u32,
}

/// The base round trip split at the vantage point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
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

/// An event the switch applied; `packet`/`iteration` 0: the packet was not
/// a data segment (a wire event's ACK).
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
    /// Out of order only in the capture: the receiver's ACK later covered
    /// the bytes before it that the capture never showed (a `CaptureGap`),
    /// so the receiver had them, and nothing is checked about it.
    pub in_capture_gap: bool,
}

/// Data the receiver acknowledged that the capture never showed: a segment
/// the capturing tool dropped or could not read, not one the network lost.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CaptureGap {
    /// Relative sequence numbers of the bytes not seen, from..to.
    pub from: u32,
    pub to: u32,
    /// The ACK that covered them.
    pub ack: Evidence,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ConnAnalysis {
    pub id: u32,
    pub data_src: (IpAddr, u16),
    pub data_dst: (IpAddr, u16),
    /// The switch port each end's packets came in on, from wirelab's
    /// metadata: [data sender, data receiver]. Which host an end is, also
    /// when the flow tables rewrote its address.
    #[serde(default, skip_serializing_if = "no_ports")]
    pub ports: [Option<u32>; 2],
    /// ISN of the data direction (from its SYN or SYN-ACK).
    pub isn: Option<u32>,
    pub packets: u64,
    pub data_packets: u64,
    pub first_transmissions: u32,
    /// Largest payload seen, super-packets aside: the sender's SMSS.
    pub smss: u32,
    /// The MSS the receiver announced in its SYN or SYN-ACK (RFC 9293
    /// §3.7.1): no segment on the wire may carry more.
    pub announced_mss: Option<u32>,
    /// Data packets larger than `announced_mss`: super-packets, seen
    /// before segmentation offload split them (TSO/GSO) or after receive
    /// offload merged them (GRO), so the capture was taken with offloads
    /// on. The analysis keeps to bytes and the announced MSS.
    pub super_packets: u64,
    pub retransmissions: Vec<Retransmission>,
    pub ce_marks: Vec<EcnMark>,
    pub arrivals: Vec<Arrival>,
    /// Round trip seen from the vantage point during the handshake.
    pub handshake_rtt_ns: Option<u64>,
    pub base_rtt: BaseRtt,
    /// Data first transmission → the ACK that covers it, at the vantage
    /// point (Karn: never for retransmitted data), ns.
    #[serde(skip)]
    #[schemars(skip)]
    pub rtt: Sample,
    /// Bytes in flight (highest sent − cumulative ACK) at each data packet:
    /// the congestion window, where the sender is window-limited.
    #[serde(skip)]
    #[schemars(skip)]
    pub flight: Sample,
    /// Bytes of first transmissions that reached the receiver, over time
    /// (goodput, fairness).
    #[serde(skip)]
    #[schemars(skip)]
    pub delivered: Bins,
    /// The time-sequence plot's points.
    #[serde(skip)]
    #[schemars(skip)]
    pub plot: SeqPlot,
    /// The last packet's time (obligations due after the capture ends are
    /// not judged).
    #[serde(skip)]
    #[schemars(skip)]
    pub last_ts_ns: Option<u64>,
    /// The longest a packet of this connection took from its sender's
    /// stack to the capture point (`Meta::sent_before_ns`: the host's
    /// own delay, its softirq handing the packet on), ns; 0 when the
    /// packets do not say. How late this run's hosts ran their timers
    /// and delivered packets, as far as the trace shows.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_delay_max_ns: u64,
    /// Bytes first sent and cumulatively acknowledged.
    pub bytes_acked: u64,
    pub first_data_ts_ns: Option<u64>,
    pub last_ack_ts_ns: Option<u64>,
    /// DSACKs the receiver sent.
    pub dsacks: Vec<Evidence>,
    /// The receiver's ACKs that carried SACK blocks (RFC 2018): the
    /// connection uses SACK.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sack_acks: u64,
    /// The receiver's window at zero (`stall.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_windows: Vec<ZeroWindow>,
    /// ACKs of the newest data the receiver held beyond `HELD_NS` past the
    /// round trip while the sender waited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_acks: Vec<HeldAck>,
    /// Data resumed after an idle period of at least the minimum RTO.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle_restarts: Vec<IdleRestart>,
    /// The sender filling the receiver's advertised window.
    #[serde(default, skip_serializing_if = "WindowLimited::is_none")]
    pub window_limited: WindowLimited,
    /// Retransmissions of data acknowledged so long before (more than
    /// `KEEP` segments back) that the model no longer held its first
    /// transmission: counted, not judged.
    pub forgotten_retransmissions: u64,
    /// Stretches of data the receiver acknowledged but the capture lacks.
    pub capture_gaps: Vec<CaptureGap>,
    /// Packets where the switch's (index, iteration) differs from this
    /// analyzer's; must be empty (both implement Lumina §3.3).
    pub iteration_mismatches: Vec<Evidence>,
    /// Events the switch applied, by (event, evidence, packet, iteration).
    pub events: Vec<AppliedEvent>,
    /// Every packet of the connection in capture order, when the model
    /// was asked to keep them ([`Model::keep_segs`]: tests and tools; it
    /// grows with the capture).
    #[serde(skip)]
    #[schemars(skip)]
    pub segs: Vec<Seg>,
    /// Segments as each endpoint's TCP MIB counts them (RFC 1213,
    /// RFC 3168): [data source's address, data destination's address].
    #[serde(skip)]
    #[schemars(skip)]
    pub tally: [SegTally; 2],
}

/// The points of a connection's time–sequence plot (ns, relative
/// sequence numbers): first transmissions, ACKs and SACK blocks as even
/// samples; retransmissions, losses and CE marks all of them.
#[derive(Debug, Clone)]
pub struct SeqPlot {
    pub first: Thin<(u64, u32)>,
    pub rtx: Vec<(u64, u32)>,
    pub lost: Vec<(u64, u32)>,
    pub ce: Vec<(u64, u32)>,
    /// Cumulative ACKs.
    pub acks: Thin<(u64, u32)>,
    /// SACK blocks: (ns, left, right).
    pub sacks: Thin<(u64, u32, u32)>,
}

/// Points each sampled series of a plot keeps: what an 1100-pixel plot
/// shows (the report draws at most 20,000), not `series::CAP`. Every
/// kept point is a store to memory that has left the cache by the time
/// the series comes round again; at `CAP` (32,768 points, 512 KB a
/// series) its two hottest stores were a sixth of `Conn::add`'s samples
/// (perf annotate); at this size `wirelab analyze` on the bench's trace
/// takes 5% less time (medians of 30 interleaved runs, 216 -> 206 ms) and
/// 35 MB instead of 40.
pub const PLOT_CAP: usize = 1 << 13;

impl Default for SeqPlot {
    fn default() -> Self {
        SeqPlot {
            first: Thin::new(PLOT_CAP),
            rtx: Vec::new(),
            lost: Vec::new(),
            ce: Vec::new(),
            acks: Thin::new(PLOT_CAP),
            sacks: Thin::new(PLOT_CAP),
        }
    }
}

/// What one endpoint's stack counted of a connection's segments, as the
/// trace shows them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SegTally {
    /// RFC 1213 tcpOutSegs: "excluding those containing only retransmitted
    /// octets" (Linux counts a segment only if it ends past snd_nxt or
    /// carries no data).
    pub out_segs: i64,
    /// Segments that reached it (not dropped by the switch).
    pub in_segs: i64,
    /// Of those, corrupted by the switch (TcpInCsumErrors).
    pub in_csum_errors: i64,
    /// Of those, CE-marked (IpExtInCEPkts).
    pub in_ce: i64,
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
    /// Timestamps that go back from one frame to the next, if any.
    pub clock_back: Option<ClockBack>,
    pub packets: u64,
    /// The first packet's timestamp (plots start there).
    #[serde(skip)]
    #[schemars(skip)]
    pub first_ts_ns: Option<u64>,
}

/// The capture's timestamps going backwards: two files merged, a clock
/// step, several CPUs writing one file. Analysis goes on in file order,
/// each step read as no time passing (`Clock`): a timing across a step is
/// off by up to `max_ns`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClockBack {
    pub steps: u64,
    pub max_ns: u64,
    /// The first frame stamped before the frame before it.
    pub first_frame: u64,
}

/// The time the analysis runs on: the capture's timestamps, made to
/// never go back. A step back (two files merged end to end, an NTP step,
/// several CPUs writing one file) is taken as a clock discontinuity: later
/// timestamps are read as shifted forward by it, so intervals on each side
/// of the step keep their length, and a loss signal seen after the step is
/// never "before" the transmission it follows in the file. Both passes
/// read the same clock. With wirelab's metadata, the switch's clock is
/// used, which never goes back.
#[derive(Debug, Default)]
struct Clock {
    prev_raw: u64,
    offset: u64,
    back: Option<ClockBack>,
}

impl Clock {
    fn at(&mut self, p: &PacketRef) -> u64 {
        let raw = p.ts_ns;
        if raw < self.prev_raw {
            let c = self.back.get_or_insert(ClockBack {
                steps: 0,
                max_ns: 0,
                first_frame: p.frame,
            });
            c.steps += 1;
            c.max_ns = c.max_ns.max(self.prev_raw - raw);
            self.offset += self.prev_raw - raw;
        }
        self.prev_raw = raw;
        p.meta.as_ref().map_or(raw + self.offset, |m| m.ts)
    }
}

/// A connection's endpoints, the lower first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key((IpAddr, u16), (IpAddr, u16));

/// Three words: an address each and the ports. The derived hash of the
/// tuple wrote eight pieces (each address's tag, its length, its bytes),
/// and hashing was a tenth of `wirelab analyze`'s time (perf). An IPv4
/// address and the IPv6 one with the same low bits hash alike; `Eq` tells
/// them apart.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u128(word(self.0 .0));
        h.write_u128(word(self.1 .0));
        h.write_u32(u32::from(self.0 .1) << 16 | u32::from(self.1 .1));
    }
}

/// An address as one word.
fn word(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn canonical(t: &Tcp) -> Key {
    Key::of((t.src, t.sport), (t.dst, t.dport))
}

impl Key {
    /// Which end is "lower" only has to be the same for both directions:
    /// compared as words (the derived order of `IpAddr` was a fiftieth of
    /// the analysis). A connection's ends are of one family.
    fn of(a: (IpAddr, u16), b: (IpAddr, u16)) -> Key {
        if (word(a.0), a.1) <= (word(b.0), b.1) {
            Key(a, b)
        } else {
            Key(b, a)
        }
    }
}

pub(crate) fn evidence(trace: &Trace, i: usize) -> Evidence {
    evidence_of(&trace.packets[i].as_ref())
}

fn evidence_of(p: &PacketRef) -> Evidence {
    Evidence {
        frame: p.frame,
        mirror_seq: p.meta.as_ref().map(|m| m.seq),
    }
}

/// Runs the model over a whole trace. `progress` is told how many packets
/// were classified so far (for long traces).
pub fn build(trace: &Trace, opts: Options, progress: &dyn Fn(u64)) -> Analysis {
    build_with(trace, opts, progress, false)
}

/// [`build`], keeping every packet's view in [`ConnAnalysis::segs`] when
/// `keep_segs` (tests and tools; memory grows with the trace).
pub fn build_with(
    trace: &Trace,
    opts: Options,
    progress: &dyn Fn(u64),
    keep_segs: bool,
) -> Analysis {
    let pass = |mut model: Model, progress: &dyn Fn(u64)| {
        if keep_segs {
            model.keep_segs();
        }
        for (i, p) in trace.packets.iter().enumerate() {
            if i % 65536 == 0 {
                progress(i as u64);
            }
            model.add(&p.as_ref());
        }
        progress(trace.packets.len() as u64);
        model.finish(trace.truncated.as_ref())
    };
    match pass(Model::new(opts), progress) {
        Finished::Done(a) => a,
        Finished::Again(again) => {
            let Finished::Done(redone) = pass(again.model(), &|_| {}) else {
                unreachable!("a second pass is told each connection's direction")
            };
            again.complete(redone)
        }
    }
}

/// What the model knows of a connection from its packets so far: which
/// end sends the data, and the handshake. Until it is clear which end
/// sends the data, the connection's packets wait (`Pending`); the guess is
/// checked against the whole connection at the end (`Model::finish`).
#[derive(Debug, Clone)]
struct ConnSurvey {
    /// The connection's first frame (its order of first appearance names
    /// connections without metadata).
    first_frame: u64,
    /// Payload bytes from each endpoint, once it sent anything (the data
    /// direction carries more).
    bytes: [((IpAddr, u16), Option<u64>); 2],
    /// The first packet's source and destination.
    first: ((IpAddr, u16), (IpAddr, u16)),
    /// wirelab's connection id and data source, from the metadata.
    meta: Option<(u32, (IpAddr, u16))>,
    /// First SYN (source, ts), first SYN-ACK (destination, ts), and the
    /// client's first packet after the SYN-ACK (ts).
    syn: Option<((IpAddr, u16), u64)>,
    synack: Option<((IpAddr, u16), u64)>,
    ack: Option<u64>,
}

/// A connection's packets wait for its direction at most this long: one
/// end `LEAD` payload bytes ahead of the other, or `PENDING` packets.
/// Then the end ahead is taken as the data sender; a connection whose
/// lead changes hands later is built again in a second pass, which a
/// bulk transfer or a request/response exchange never needs.
const LEAD: u64 = 64 * 1024;
const PENDING: usize = 64;

impl ConnSurvey {
    fn new(first_frame: u64, t: &Tcp) -> ConnSurvey {
        let (src, dst) = ((t.src, t.sport), (t.dst, t.dport));
        ConnSurvey {
            first_frame,
            bytes: [(src, None), (dst, None)],
            first: (src, dst),
            meta: None,
            syn: None,
            synack: None,
            ack: None,
        }
    }

    fn add(&mut self, t: &Tcp, ts: u64, meta: Option<&wirelab_trace::Meta>) {
        let (src, dst) = ((t.src, t.sport), (t.dst, t.dport));
        if let Some(b) = self.bytes.iter_mut().find(|b| b.0 == src) {
            *b.1.get_or_insert(0) += u64::from(t.payload_len);
        }
        if let Some(m) = meta.filter(|m| m.conn > 0) {
            let from = if m.data_dir { src } else { dst };
            self.meta.get_or_insert((m.conn, from));
        }
        if t.syn && !t.has_ack {
            self.syn.get_or_insert((src, ts));
        } else if t.syn {
            self.synack.get_or_insert((dst, ts));
        } else if let Some((client, _)) = self.synack {
            if self.ack.is_none() && src == client {
                self.ack = Some(ts);
            }
        }
    }

    /// Without metadata the data direction is the one carrying more payload.
    fn data_source(&self) -> (IpAddr, u16) {
        if let Some((_, src)) = self.meta {
            return src;
        }
        self.bytes
            .iter()
            .filter_map(|&(src, b)| Some((src, b?)))
            .max_by_key(|&(src, b)| (b, std::cmp::Reverse(src)))
            .map_or(self.first.0, |(src, _)| src)
    }

    /// Whether the direction is clear after `waiting` packets: the
    /// handshake is over (its split of the round trip is known) and the
    /// metadata names the data source or one end is `LEAD` ahead; or the
    /// connection waited `PENDING` packets.
    fn clear(&self, waiting: usize) -> bool {
        let handshake_over = self.ack.is_some() || self.syn.is_none() && self.synack.is_none();
        let lead = match self.bytes {
            [(_, a), (_, b)] => a.unwrap_or(0).abs_diff(b.unwrap_or(0)),
        };
        waiting >= PENDING || handshake_over && (self.meta.is_some() || lead >= LEAD)
    }

    /// The data source and what the model takes from the handshake: what
    /// a connection is built with.
    fn decision(&self) -> Decision {
        let src = self.data_source();
        let (hs, base) = self.base_rtt(src);
        Decision { src, hs, base }
    }

    /// The handshake split of the base round trip (see the module doc):
    /// (handshake rtt, split).
    fn base_rtt(&self, data_src: (IpAddr, u16)) -> (Option<u64>, BaseRtt) {
        let (Some((client, syn)), Some((_, synack)), Some(ack)) = (self.syn, self.synack, self.ack)
        else {
            return (None, BaseRtt::default());
        };
        let server_side = synack.saturating_sub(syn);
        let client_side = ack.saturating_sub(synack);
        let (sender_side_ns, receiver_side_ns) = if client == data_src {
            (client_side, server_side)
        } else {
            (server_side, client_side)
        };
        (
            Some(server_side + client_side),
            BaseRtt {
                sender_side_ns,
                receiver_side_ns,
                source: "handshake",
            },
        )
    }
}

/// What a connection was built with.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Decision {
    src: (IpAddr, u16),
    hs: Option<u64>,
    base: BaseRtt,
}

/// The model fed one packet at a time, in capture order, in one pass:
/// state per connection only.
///
/// Which end of a connection sends the data is known for sure only at
/// its end (the end that sent more), so each connection's first packets
/// wait until it is clear (`ConnSurvey::clear`), and the choice is
/// checked when the pass ends: [`Model::finish`] asks for a second pass
/// over the connections it guessed wrong ([`Finished::Again`]), which
/// then gives exactly the analysis of a model told every direction.
///
/// Connections are independent, so with [`Model::threads`] they are
/// spread over worker threads by their 4-tuple: the caller's thread reads,
/// stamps and parses each packet and hands it, in batches, to the worker
/// that owns its connection, which sees that connection's packets in
/// capture order. The analysis is the same with any number of workers.
pub struct Model {
    shared: Arc<Shared>,
    conns: Conns,
    malformed: Vec<Malformed>,
    clock: Clock,
    packets: u64,
    has_meta: bool,
    first_ts_ns: Option<u64>,
    workers: Vec<Worker>,
    /// Picks a connection's worker.
    hasher: ahash::RandomState,
}

/// What every worker reads.
struct Shared {
    opts: Options,
    keep_segs: bool,
    /// A second pass: only these connections, each built at once with
    /// what the whole first pass knew of it.
    only: Option<HashMap<Key, ConnSurvey>>,
}

/// One packet for a connection's builder, kept (waiting for its
/// connection's direction, or in a batch for a worker).
#[derive(Clone, Copy)]
struct Item {
    key: Key,
    at: Evidence,
    tcp: Tcp,
    ts: u64,
    meta: Option<wirelab_trace::Meta>,
}

/// The same, borrowed: how a packet reaches its connection. Built as an
/// `Item` on the reading path, its 232 bytes were written to the stack
/// (across a cache line, at the odd offsets its addresses' layout gave)
/// and read back for every packet (perf).
#[derive(Clone, Copy)]
struct ItemRef<'a> {
    key: Key,
    at: Evidence,
    tcp: &'a Tcp,
    ts: u64,
    meta: Option<&'a wirelab_trace::Meta>,
}

impl Item {
    fn as_ref(&self) -> ItemRef<'_> {
        ItemRef {
            key: self.key,
            at: self.at,
            tcp: &self.tcp,
            ts: self.ts,
            meta: self.meta.as_ref(),
        }
    }
}

impl ItemRef<'_> {
    fn owned(&self) -> Item {
        Item {
            key: self.key,
            at: self.at,
            tcp: *self.tcp,
            ts: self.ts,
            meta: self.meta.copied(),
        }
    }
}

/// Packets handed to a worker at a time (a channel message each).
const BATCH: usize = 1024;

struct Worker {
    batch: Vec<Item>,
    tx: std::sync::mpsc::SyncSender<Vec<Item>>,
    done: std::thread::JoinHandle<Vec<Built>>,
}

/// A connection: what is known of it, and its model once its direction
/// was chosen.
struct Entry {
    survey: ConnSurvey,
    state: State,
}

enum State {
    Pending(Vec<Item>),
    Built(Decision, Box<Conn>),
}

/// A connection as a pass ends.
struct Built {
    key: Key,
    survey: ConnSurvey,
    decision: Decision,
    analysis: ConnAnalysis,
}

/// Connections by 4-tuple, each built from its packets in order.
///
/// A packet finds its connection through a small cache indexed by its
/// ports before the map: consecutive packets mostly belong to a few
/// connections, and hashing the 4-tuple and probing the map was about a
/// tenth of `wirelab analyze`'s time (perf, 1 M packets).
struct Conns {
    entries: Vec<(Key, Entry)>,
    index: HashMap<Key, usize>,
    /// Entry index + 1 by `slot`; 0 is empty. A stale slot only costs
    /// the map lookup: its key is compared first.
    recent: [u32; RECENT],
}

const RECENT: usize = 256;

impl Default for Conns {
    fn default() -> Self {
        Conns {
            entries: Vec::new(),
            index: HashMap::default(),
            recent: [0; RECENT],
        }
    }
}

/// A connection's cache slot: from its ports, the same both ways.
fn slot(k: &Key) -> usize {
    let p = u32::from(k.0 .1) ^ u32::from(k.1 .1);
    ((p ^ p >> 8) as usize) % RECENT
}

impl Conns {
    /// The entry of `it`'s connection, made if it is new; None for a
    /// connection a second pass does not redo.
    fn entry(&mut self, shared: &Shared, it: &ItemRef) -> Option<&mut Entry> {
        let s = slot(&it.key);
        let i = match self.recent[s].checked_sub(1) {
            Some(i) if self.entries[i as usize].0 == it.key => i as usize,
            _ => {
                let i = match self.index.get(&it.key) {
                    Some(&i) => i,
                    None => {
                        let survey = match &shared.only {
                            None => ConnSurvey::new(it.at.frame, it.tcp),
                            Some(only) => only.get(&it.key)?.clone(),
                        };
                        self.entries.push((
                            it.key,
                            Entry {
                                survey,
                                state: State::Pending(Vec::new()),
                            },
                        ));
                        self.index.insert(it.key, self.entries.len() - 1);
                        self.entries.len() - 1
                    }
                };
                // u32: a capture holds fewer connections than packets.
                self.recent[s] = i as u32 + 1;
                i
            }
        };
        Some(&mut self.entries[i].1)
    }

    fn add(&mut self, shared: &Shared, it: ItemRef) {
        let Some(e) = self.entry(shared, &it) else {
            return;
        };
        if shared.only.is_none() {
            e.survey.add(it.tcp, it.ts, it.meta);
        }
        match &mut e.state {
            State::Built(_, c) => c.add(it.at, it.tcp, it.ts, it.meta),
            State::Pending(waiting) => {
                waiting.push(it.owned());
                if shared.only.is_some() || e.survey.clear(waiting.len()) {
                    e.build(shared);
                }
            }
        }
    }

    fn finish(self, shared: &Shared) -> Vec<Built> {
        self.entries
            .into_iter()
            .map(|(key, mut e)| {
                // The pass ended before the direction was clear: it is now.
                e.build(shared);
                let State::Built(decision, c) = e.state else {
                    unreachable!("just built")
                };
                Built {
                    key,
                    survey: e.survey,
                    decision,
                    analysis: c.finish(),
                }
            })
            .collect()
    }
}

impl Entry {
    /// Builds the connection's model with what is known now, from the
    /// packets that waited.
    fn build(&mut self, shared: &Shared) {
        let State::Pending(waiting) = &mut self.state else {
            return;
        };
        let waiting = std::mem::take(waiting);
        let d = self.survey.decision();
        let s = &self.survey;
        let dst = if s.first.0 == d.src {
            s.first.1
        } else {
            s.first.0
        };
        let mut c = Box::new(Conn::new(0, d.src, dst, d.hs, d.base, shared.opts));
        c.keep_segs = shared.keep_segs;
        for it in waiting {
            c.add(it.at, &it.tcp, it.ts, it.meta.as_ref());
        }
        self.state = State::Built(d, c);
    }
}

/// A pass's end: the analysis, or a second pass to make over the
/// connections whose direction was guessed wrong.
pub enum Finished {
    Done(Analysis),
    Again(Again),
}

/// The first pass's analysis, less the connections to build again.
pub struct Again {
    partial: Analysis,
    /// The connections to build again, with all the first pass knew of
    /// them, and their ids.
    redo: HashMap<Key, (ConnSurvey, u32)>,
    opts: Options,
    keep_segs: bool,
    threads: usize,
}

impl Again {
    /// How many connections the second pass builds.
    pub fn connections(&self) -> usize {
        self.redo.len()
    }

    /// The model of the second pass: feed it every packet again.
    pub fn model(&self) -> Model {
        let mut m = Model::new(self.opts);
        Arc::get_mut(&mut m.shared).expect("a new model").only = Some(
            self.redo
                .iter()
                .map(|(k, (s, _))| (*k, s.clone()))
                .collect(),
        );
        if self.keep_segs {
            m.keep_segs();
        }
        m.threads(self.threads);
        m
    }

    /// The analysis, with the second pass's connections.
    pub fn complete(self, redone: Analysis) -> Analysis {
        let mut a = self.partial;
        for mut c in redone.connections {
            let key = Key::of(c.data_src, c.data_dst);
            if let Some((_, id)) = self.redo.get(&key) {
                c.id = *id;
                a.connections.push(c);
            }
        }
        a.connections.sort_by_key(|c| c.id);
        a
    }
}

impl Model {
    pub fn new(opts: Options) -> Model {
        Model {
            shared: Arc::new(Shared {
                opts,
                keep_segs: false,
                only: None,
            }),
            conns: Conns::default(),
            malformed: Vec::new(),
            clock: Clock::default(),
            packets: 0,
            has_meta: false,
            first_ts_ns: None,
            workers: Vec::new(),
            hasher: ahash::RandomState::new(),
        }
    }

    /// Keep every packet's view in [`ConnAnalysis::segs`] (tests and
    /// tools: memory then grows with the capture). Before any packet.
    pub fn keep_segs(&mut self) {
        Arc::get_mut(&mut self.shared)
            .expect("keep_segs before threads")
            .keep_segs = true;
    }

    /// Builds connections on `n` worker threads (0: on the caller's).
    /// Before any packet.
    pub fn threads(&mut self, n: usize) {
        assert!(self.packets == 0 && self.workers.is_empty());
        for _ in 0..n {
            // A few batches in flight per worker: memory stays bounded
            // when the reader is faster than a worker.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Item>>(4);
            let shared = Arc::clone(&self.shared);
            let done = std::thread::spawn(move || {
                let mut conns = Conns::default();
                for batch in rx {
                    for it in batch {
                        conns.add(&shared, it.as_ref());
                    }
                }
                conns.finish(&shared)
            });
            self.workers.push(Worker {
                batch: Vec::with_capacity(BATCH),
                tx,
                done,
            });
        }
    }

    /// The next packet; whether it was TCP (well-formed or not: a packet
    /// that was not may be another protocol's).
    pub fn add(&mut self, p: &PacketRef) -> bool {
        self.packets += 1;
        self.has_meta |= p.meta.is_some();
        self.first_ts_ns.get_or_insert(p.ts_ns);
        let ts = self.clock.at(p);
        // Read where the parser wrote it, not moved out of the `Result`
        // (a copy whose reads stall on the parser's stores).
        let parsed = p.tcp();
        let t = match &parsed {
            Ok(t) => t,
            Err(wirelab_trace::NotTcp::Other) => return false,
            Err(wirelab_trace::NotTcp::Malformed {
                layer,
                offset,
                detail,
            }) => {
                self.malformed.push(Malformed {
                    frame: p.frame,
                    layer: layer.clone(),
                    offset: *offset,
                    detail: detail.clone(),
                });
                return true;
            }
        };
        let it = ItemRef {
            key: canonical(t),
            at: evidence_of(p),
            tcp: t,
            ts,
            meta: p.meta.as_ref(),
        };
        if self.workers.is_empty() {
            self.conns.add(&self.shared, it);
            return true;
        }
        let n = self.workers.len();
        let w = &mut self.workers[(self.hasher.hash_one(it.key) as usize) % n];
        w.batch.push(it.owned());
        if w.batch.len() == BATCH {
            let full = std::mem::replace(&mut w.batch, Vec::with_capacity(BATCH));
            // A worker that is gone panicked; its join in `finish` says so.
            let _ = w.tx.send(full);
        }
        true
    }

    /// The analysis, once every packet was added, or the second pass it
    /// needs; `truncated` is where the file stopped being readable, if
    /// it did.
    pub fn finish(self, truncated: Option<&wirelab_trace::Damage>) -> Finished {
        let threads = self.workers.len();
        let mut built = self.conns.finish(&self.shared);
        for w in self.workers {
            if !w.batch.is_empty() {
                let _ = w.tx.send(w.batch);
            }
            drop(w.tx);
            match w.done.join() {
                Ok(c) => built.extend(c),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        // Connections without metadata are numbered in order of first
        // appearance (after the switch's own, when it numbered some).
        built.sort_by_key(|b| b.survey.first_frame);
        let has_meta = self.has_meta;
        let mut redo = HashMap::default();
        let mut connections = Vec::with_capacity(built.len());
        for (order, mut b) in built.into_iter().enumerate() {
            b.analysis.id = b.survey.meta.map_or_else(
                || order as u32 + 1 + if has_meta { 10_000 } else { 0 },
                |(id, _)| id,
            );
            if self.shared.only.is_none() && b.survey.decision() != b.decision {
                redo.insert(b.key, (b.survey, b.analysis.id));
            } else {
                connections.push(b.analysis);
            }
        }
        connections.sort_by_key(|c| c.id);
        let analysis = Analysis {
            vantage: vantage_words(has_meta, &connections),
            switch_metadata: has_meta,
            connections,
            malformed: self.malformed,
            truncated: truncated.map(|d| (d.offset, d.detail.clone())),
            clock_back: self.clock.back,
            packets: self.packets,
            first_ts_ns: self.first_ts_ns,
        };
        if redo.is_empty() {
            return Finished::Done(analysis);
        }
        Finished::Again(Again {
            partial: analysis,
            redo,
            opts: self.shared.opts,
            keep_segs: self.shared.keep_segs,
            threads,
        })
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

/// A first transmission and what the sender knows of it.
///
/// One is kept for every segment of a connection's recent history, and
/// writing them (`SegMap::insert`) was 6-7% of the analysis (perf): 72
/// bytes, not 104 (`Option`s of a time and of an `Evidence` cost a word
/// of tag each; here one flag says whether the SACK fields hold).
#[derive(Debug, Clone)]
struct SegState {
    index: u32,
    end: u32,
    tx_count: u32,
    /// The event the switch applied to the last transmission.
    last_event: Option<Action>,
    /// `sack_ts` and `sack_at` hold.
    sacked: bool,
    first_ts: u64,
    last_tx_ts: u64,
    /// When the sender released the last transmission (`last_tx_ts` where
    /// the packet did not say).
    last_sent_ts: u64,
    /// The last transmission.
    last_tx_at: PackedEvidence,
    /// When a SACK covering it passed the vantage point, and that ACK.
    sack_ts: u64,
    sack_at: PackedEvidence,
}

/// An `Evidence` in two words: the mirror sequence number plus one, 0 for
/// none (a ring counter never reaches u64::MAX).
#[derive(Debug, Clone, Copy, Default)]
struct PackedEvidence {
    frame: u64,
    mirror: u64,
}

impl From<Evidence> for PackedEvidence {
    fn from(e: Evidence) -> Self {
        PackedEvidence {
            frame: e.frame,
            mirror: e.mirror_seq.map_or(0, |s| s + 1),
        }
    }
}

impl From<PackedEvidence> for Evidence {
    fn from(e: PackedEvidence) -> Self {
        Evidence {
            frame: e.frame,
            mirror_seq: e.mirror.checked_sub(1),
        }
    }
}

impl SegState {
    /// A first transmission at `ts`, by `tx` (its packet and event).
    fn new(index: u32, end: u32, (ts, sent): (u64, u64), tx: (Evidence, Option<Action>)) -> Self {
        SegState {
            index,
            end,
            tx_count: 1,
            last_event: tx.1,
            sacked: false,
            first_ts: ts,
            last_tx_ts: ts,
            last_sent_ts: sent,
            last_tx_at: tx.0.into(),
            sack_ts: 0,
            sack_at: PackedEvidence::default(),
        }
    }

    /// The last transmission, and the event the switch applied to it.
    fn last_tx(&self) -> (Evidence, Option<Action>) {
        (self.last_tx_at.into(), self.last_event)
    }

    fn set_last_tx(&mut self, tx: (Evidence, Option<Action>)) {
        self.last_tx_at = tx.0.into();
        self.last_event = tx.1;
    }

    /// When a SACK covering it passed the vantage point.
    fn sacked_ts(&self) -> Option<u64> {
        self.sacked.then_some(self.sack_ts)
    }

    /// That SACK.
    fn sack_at(&self) -> Option<Evidence> {
        self.sacked.then(|| self.sack_at.into())
    }

    fn set_sacked(&mut self, ts: u64, at: Evidence) {
        self.sacked = true;
        self.sack_ts = ts;
        self.sack_at = at.into();
    }
}

/// An ACK from the receiver, as the sender's loss detection uses it.
#[derive(Debug, Clone, Copy)]
struct AckEv {
    at: Evidence,
    ts: u64,
    /// Relative cumulative ACK.
    ack: u32,
    dup: bool,
    /// Would be a duplicate but for its window: the same cumulative ACK as
    /// the last, no data, yet another window (RFC 5681 §2 (e); Linux flags
    /// it FLAG_WIN_UPDATE and does not count it as a duplicate).
    window_update: bool,
}

/// One connection's model as its packets arrive: each side's view is its
/// own tracker: the sender's (`sender.rs`), the receiver's (`receiver.rs`),
/// ECN (`ecn.rs`) and Lumina's iteration counter (`iter.rs`).
struct Conn {
    opts: Options,
    out: ConnAnalysis,
    /// Largest payload of a segment the wire could carry (not a
    /// super-packet).
    largest_segment: u32,
    snd: Sender,
    rcv: Receiver,
    stalls: Stalls,
    /// Each end's SYN window scale option, once its SYN was seen: [data
    /// sender, data receiver].
    wscale: [Option<Option<u8>>; 2],
    ecn: EcnTracker,
    iters: IterTracker,
    isn: Option<u32>,
    keep_segs: bool,
    ids: IdOrder,
}

/// The send order of the data sender's packets, from their IPv4 IDs:
/// Linux numbers a connected socket's packets consecutively, by the
/// segments each carries (`ip_select_ident_segs`), so each ID is a little
/// above the last. Trusted once nine steps in ten of at least eight were
/// such; a stack that numbers at random (or not at all) never is.
#[derive(Debug, Default)]
struct IdOrder {
    /// The highest ID so far and its packet, once `seen`. Plain words,
    /// not an `Option` of a tuple with an `Evidence`: the compiler built
    /// that on the stack and copied it in wider words than it had
    /// written, which the CPU cannot forward (a fifth of `Conn::add`,
    /// perf).
    high: u16,
    seen: bool,
    high_at: PackedEvidence,
    steps: u32,
    forward: u32,
}

/// How far apart, in ID, two packets of one sender can be and still be
/// taken as sent in that order (a super-packet of 64 KB is 45 segments).
const ID_STEP: u16 = 64;

impl IdOrder {
    /// The packet sent after this one that the capture showed first, if
    /// the IDs say so.
    fn on_packet(&mut self, id: Option<u16>, at: Evidence) -> Option<Evidence> {
        let id = id?;
        if !self.seen {
            self.seen = true;
            self.set(id, at);
            return None;
        }
        let ahead = id.wrapping_sub(self.high);
        let behind = self.high.wrapping_sub(id);
        self.steps += 1;
        if (1..=ID_STEP).contains(&ahead) {
            self.forward += 1;
            self.set(id, at);
            return None;
        }
        let trusted = self.steps >= 8 && self.forward * 10 >= self.steps * 9;
        if (1..=ID_STEP).contains(&behind) {
            return trusted.then(|| self.high_at.into());
        }
        // Numbered otherwise: start again from here.
        self.set(id, at);
        None
    }

    fn set(&mut self, id: u16, at: Evidence) {
        self.high = id;
        self.high_at = at.into();
    }
}

impl Conn {
    fn new(
        id: u32,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        handshake_rtt_ns: Option<u64>,
        base_rtt: BaseRtt,
        opts: Options,
    ) -> Self {
        Conn {
            opts,
            largest_segment: 0,
            snd: Sender::new(handshake_rtt_ns),
            rcv: Receiver::default(),
            stalls: Stalls::default(),
            wscale: [None; 2],
            ecn: EcnTracker::default(),
            iters: IterTracker::default(),
            isn: None,
            keep_segs: false,
            ids: IdOrder::default(),
            out: ConnAnalysis {
                id,
                data_src: src,
                data_dst: dst,
                ports: [None; 2],
                isn: None,
                packets: 0,
                data_packets: 0,
                first_transmissions: 0,
                smss: 0,
                announced_mss: None,
                super_packets: 0,
                retransmissions: Vec::new(),
                ce_marks: Vec::new(),
                arrivals: Vec::new(),
                handshake_rtt_ns,
                base_rtt,
                rtt: Sample::default(),
                flight: Sample::default(),
                delivered: Bins::default(),
                plot: SeqPlot::default(),
                last_ts_ns: None,
                sack_acks: 0,
                host_delay_max_ns: 0,
                bytes_acked: 0,
                first_data_ts_ns: None,
                last_ack_ts_ns: None,
                dsacks: Vec::new(),
                zero_windows: Vec::new(),
                held_acks: Vec::new(),
                idle_restarts: Vec::new(),
                window_limited: WindowLimited::default(),
                forgotten_retransmissions: 0,
                capture_gaps: Vec::new(),
                iteration_mismatches: Vec::new(),
                events: Vec::new(),
                segs: Vec::new(),
                tally: [SegTally::default(); 2],
            },
        }
    }

    /// From the data sender.
    fn is_data(&self, t: &Tcp) -> bool {
        (t.src, t.sport) == self.out.data_src
    }

    /// The next packet of the connection, in capture order.
    fn add(&mut self, at: Evidence, t: &Tcp, ts: u64, meta: Option<&wirelab_trace::Meta>) {
        self.out.packets += 1;
        if let Some(d) = meta.and_then(|m| m.sent_before_ns()) {
            self.out.host_delay_max_ns = self.out.host_delay_max_ns.max(d);
        }
        // The receiver's SYN or SYN-ACK bounds what the sender sends.
        if t.syn && !self.is_data(t) {
            if let Some(m) = t.mss {
                self.out.announced_mss = Some(u32::from(m));
            }
        }
        // Window scaling holds when both SYNs offered it (RFC 7323 §2.2);
        // the receiver's windows are scaled by the shift it sent.
        if t.syn {
            self.wscale[usize::from(!self.is_data(t))] = Some(t.wscale);
            if let [Some(s), Some(r)] = self.wscale {
                self.stalls.shift = Some(if s.is_some() { r.unwrap_or(0) } else { 0 });
            }
        }
        let mut seg = Seg {
            at,
            ts,
            data: self.is_data(t),
            tcp: *t,
            rel: 0,
            index: 0,
            iter: 0,
            first: false,
            lost: meta.is_some_and(|m| m.dropped() || m.event.loses()),
            dupack: false,
        };
        if let Some(m) = meta {
            self.out.ports[usize::from(!seg.data)].get_or_insert(m.port);
        }
        if !seg.data {
            let base = self.isn.unwrap_or(0);
            seg.rel = t.ack.wrapping_sub(base);
            if t.has_ack && self.isn.is_some() && !t.syn {
                self.rcv.on_ack(
                    &mut self.out.arrivals,
                    &mut self.out.capture_gaps,
                    at,
                    ts,
                    seg.rel,
                );
                let ack = AckIn {
                    at,
                    tcp: t,
                    ts,
                    base,
                    ack: seg.rel,
                };
                // An ACK the switch dropped never reached the sender.
                if !seg.lost {
                    seg.dupack = self.snd.on_ack(&mut self.out, &ack);
                }
                if !t.rst {
                    self.stalls.on_ack(
                        &mut self.out.zero_windows,
                        &mut self.out.held_acks,
                        &mut self.out.window_limited,
                        (at, ts),
                        seg.rel,
                        t.window,
                        self.out.base_rtt.receiver_side_ns,
                    );
                }
            }
            if !t.syn {
                let acked = t.has_ack.then_some(seg.rel);
                self.ecn
                    .on_ack(&mut self.out.ce_marks, acked, t.ece, at, ts);
            }
            self.record(&seg, meta);
            return;
        }
        if t.syn {
            self.isn = Some(t.seq);
            self.out.isn = self.isn;
            self.iters.restart();
            self.snd.restart();
            self.record(&seg, meta);
            return;
        }
        let snd = &mut self.snd;
        let base = *self.isn.get_or_insert_with(|| {
            snd.joined();
            t.seq.wrapping_sub(1)
        });
        seg.rel = t.seq.wrapping_sub(base);
        if t.payload_len > 0 {
            self.data(&mut seg, meta);
        }
        if t.fin {
            self.rcv.on_fin(seg.rel.wrapping_add(t.payload_len));
        }
        self.record(&seg, meta);
    }

    /// What is kept of a packet once the model has read it: the
    /// endpoints' counters, the plot's points, the segment itself when
    /// asked.
    fn record(&mut self, seg: &Seg, meta: Option<&wirelab_trace::Meta>) {
        self.out.last_ts_ns = Some(seg.ts);
        // An event on a packet that is not a data segment (a wire event on
        // an ACK; `data` lists those on data segments with their index).
        let data_segment = seg.data && seg.tcp.payload_len > 0 && !seg.tcp.syn;
        if let Some(m) = meta.filter(|m| m.event != Action::None && !data_segment) {
            self.out.events.push(AppliedEvent {
                event: m.event,
                event_id: m.event_id,
                at: seg.at,
                packet: 0,
                iteration: 0,
            });
        }
        let plot = &mut self.out.plot;
        let p = (seg.ts, seg.rel);
        if seg.data && seg.tcp.payload_len > 0 && !seg.tcp.syn {
            if seg.lost {
                plot.lost.push(p);
            }
            if seg.tcp.ecn == 3 {
                plot.ce.push(p);
            }
            if seg.first {
                plot.first.push(p);
                if !seg.lost {
                    self.out
                        .delivered
                        .add(seg.ts, u64::from(seg.tcp.payload_len));
                }
            } else {
                plot.rtx.push(p);
            }
        } else if !seg.data && seg.tcp.has_ack && self.isn.is_some() && !seg.tcp.syn {
            plot.acks.push(p);
            let base = self.isn.unwrap_or(0);
            if !seg.tcp.sacks().is_empty() {
                self.out.sack_acks += 1;
            }
            for &(l, r) in seg.tcp.sacks() {
                plot.sacks
                    .push((seg.ts, l.wrapping_sub(base), r.wrapping_sub(base)));
            }
        }
        self.tally(seg, meta);
        if self.keep_segs {
            self.out.segs.push(seg.clone());
        }
    }

    /// The packet in the endpoints' counters (`SegTally`), once the model
    /// knows whether it was a first transmission.
    fn tally(&mut self, seg: &Seg, meta: Option<&wirelab_trace::Meta>) {
        let (from, to) = if seg.data { (0, 1) } else { (1, 0) };
        if seg.first || seg.tcp.payload_len == 0 || !seg.data {
            self.out.tally[from].out_segs += 1;
        }
        if !meta.is_some_and(|m| m.dropped()) {
            let t = &mut self.out.tally[to];
            t.in_segs += 1;
            t.in_csum_errors += i64::from(meta.is_some_and(|m| m.event == Action::Corrupt));
            t.in_ce += i64::from(seg.tcp.ecn == 3);
        }
    }

    fn finish(mut self) -> ConnAnalysis {
        self.snd.finish(&mut self.out);
        let last = self.out.last_ts_ns.unwrap_or(0);
        self.stalls.finish(&mut self.out.zero_windows, last);
        self.out
    }

    /// A data packet from the sender, through each tracker.
    fn data(&mut self, seg: &mut Seg, meta: Option<&wirelab_trace::Meta>) {
        let (at, ts, t, rel) = (seg.at, seg.ts, seg.tcp, seg.rel);
        let (snd, rcv, ecn, iters) = (&mut self.snd, &mut self.rcv, &mut self.ecn, &mut self.iters);
        let flight_before = snd.flight();
        let event = meta.map(|m| m.event);
        self.out.data_packets += 1;
        // SMSS from the segments the wire could carry; a super-packet
        // says only that the announced MSS is as far as it goes.
        let mss = self.out.announced_mss.unwrap_or(u32::MAX);
        if t.payload_len > mss {
            self.out.super_packets += 1;
        } else {
            self.largest_segment = self.largest_segment.max(t.payload_len);
        }
        self.out.smss = if self.largest_segment > 0 {
            self.largest_segment
        } else {
            mss.min(t.payload_len)
        };
        self.out.first_data_ts_ns.get_or_insert(ts);
        let iter = iters.on_data(rel);
        let end = rel.wrapping_add(t.payload_len);
        // When the sender's stack released it, where the packet says (the
        // capture point saw it later by the host's own delay): the
        // sender's timers are measured on this.
        let sent = ts.saturating_sub(meta.and_then(|m| m.sent_before_ns()).unwrap_or(0));
        let (index, first) = snd.on_send(rel, end, (ts, sent), (at, event));
        seg.index = index;
        seg.iter = iter;
        seg.first = first;
        if let Some(m) = meta {
            if m.data_dir && (m.index != index || m.iter != iter) {
                self.out.iteration_mismatches.push(at);
            }
            if m.event != Action::None {
                self.out.events.push(AppliedEvent {
                    event: m.event,
                    event_id: m.event_id,
                    at,
                    packet: index,
                    iteration: iter,
                });
            }
        }
        self.out.flight.push(u64::from(snd.flight()));
        self.stalls.on_data(
            &mut self.out.idle_restarts,
            &mut self.out.window_limited,
            (at, ts),
            end,
            first,
            (flight_before, snd.flight()),
            self.out.smss,
            self.opts.min_rto_ns,
        );
        ecn.on_data(
            &mut self.out.ce_marks,
            (t.ecn, first, t.cwr, seg.lost),
            at,
            ts,
            index,
            (rel, end),
        );
        // The receiver's side: did this arrival need an immediate ACK?
        if !seg.lost {
            rcv.on_data(&mut self.out.arrivals, rel, end, at, ts, index);
        }
        if !first && index == 0 && snd.forgot(rel) {
            self.out.forgotten_retransmissions += 1;
        }
        let captured_after = self.ids.on_packet(t.ip_id, at);
        if !first && index > 0 {
            let n = self.out.retransmissions.len();
            snd.on_resend(
                &mut self.out,
                (at, event),
                (ts, sent),
                (rel, end),
                (index, iter),
                self.opts,
            );
            if let Some(r) = self.out.retransmissions.get_mut(n) {
                r.captured_after = captured_after;
            }
        } else if !first {
            // Bytes never seen sent (a capture gap, or reordered before
            // the capture point): not judged, but a RACK signal still.
            snd.remember_resend(rel, end, ts, self.out.base_rtt.sender_side_ns);
        }
        snd.sent(ts);
    }
}

/// How long a packet the sender has committed to can sit in its own
/// transmit path before it passes a capture point: TCP small queues let a
/// flow hold about 1 ms of data at its pacing rate below the socket (Linux
/// tcp_small_queue_check: sk_pacing_rate >> sk_pacing_shift, shift 10). A
/// retransmission seen less than that after the ACK covering it may have
/// been queued before the ACK arrived.
pub(crate) const SEND_QUEUE_NS: u64 = 1_000_000;

/// What a sender could know when it sent a retransmission.
struct Classify<'a> {
    ts: u64,
    start: u32,
    seg: &'a SegState,
    segs: &'a segmap::SegMap,
    acks: &'a [AckEv],
    una_hist: &'a [(u64, u32)],
    /// `acks` is in time order, and in cumulative ACK order (then binary
    /// searches replace scans from the start).
    acks_ordered: (bool, bool),
    /// The cumulative ACK before the oldest `una_hist` entry.
    una_floor: u32,
    next_new: u32,
    smss: u32,
    max_rtt: u64,
    min_rtt: u64,
    sender_side: u64,
    opts: Options,
    last_data_ts: u64,
    tlp_out: bool,
    rto_recovery: Option<(u32, u64)>,
    /// Recent retransmissions, oldest first.
    resent: &'a std::collections::VecDeque<sender::Resent>,
}

impl Classify<'_> {
    /// ACKs of this segment's first byte since its last transmission:
    /// (duplicates, window updates).
    fn duplicate_acks(&self) -> (u32, u32) {
        let since = self.seg.last_tx_ts;
        self.acks
            .iter()
            .filter(|a| a.ts >= since && a.ts <= self.ts && a.ack == self.start)
            .fold((0, 0), |(d, w), a| {
                (d + u32::from(a.dup), w + u32::from(a.window_update))
            })
    }

    /// The first ACK covering the retransmitted bytes that passed the
    /// vantage point before the retransmission, if any.
    fn covering_ack(&self) -> Option<AckEv> {
        if self.acks_ordered.0 && self.acks_ordered.1 {
            // In time and ACK order (the usual case): two binary searches
            // find what the scan below finds.
            let before = &self.acks[..self.acks.partition_point(|a| a.ts <= self.ts)];
            let i = before.partition_point(|a| !seq_le(self.seg.end, a.ack));
            return before.get(i).copied();
        }
        self.acks
            .iter()
            .take_while(|a| a.ts <= self.ts)
            .find(|a| seq_le(self.seg.end, a.ack))
            .copied()
    }

    /// SACKs, passed in `since..=cut`, of repairs sent after `since`.
    /// RACK goes by send time, not sequence (RFC 8985 §6.2): with two
    /// holes, the repair of the upper one can be SACKed while the lower one
    /// holds the cumulative ACK back, and Linux takes that SACK as the
    /// repair's delivery (tcp_rack_advance) and marks lost what was sent
    /// before the repair. Which transmission the SACK was for is ambiguous
    /// on the wire; the sender may have read it as the repair's, so it
    /// counts as a signal. The repaired bytes may never have been seen sent
    /// (a receiver-side capture with reordering ahead of it), so the
    /// retransmissions keep their own SACK (`sender::Resent`).
    fn sacked_repairs(&self, since: u64, cut: u64) -> impl Iterator<Item = AckEv> + '_ {
        self.resent
            .iter()
            .filter(move |e| e.ts > since && e.rel != self.start)
            .filter_map(move |e| {
                e.sacked
                    .filter(|(t, _)| *t >= since && *t <= cut)
                    .map(|(ts, at)| AckEv {
                        at,
                        ts,
                        ack: 0,
                        dup: false,
                        window_update: false,
                    })
            })
    }

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
        // Acknowledged (or SACKed) data: the ACK must also have passed
        // before the sender's own transmit queue could still hold a
        // retransmission it committed to earlier (SEND_QUEUE_NS).
        let known = sure.saturating_sub(SEND_QUEUE_NS);
        let una_at_cut = self
            .una_hist
            .iter()
            .rev()
            .find(|(t, _)| *t <= known)
            .map_or(self.una_floor, |(_, u)| *u);
        let already_acked = seq_le(self.seg.end, una_at_cut);
        let after_rto = self.rto_recovery.is_some_and(|(_, rto_ts)| since < rto_ts);
        let already_sacked = !after_rto && self.seg.sacked_ts().is_some_and(|t| t <= known);
        let flags = (already_acked, already_sacked);
        // ACKs the sender could have acted on, since it last sent this.
        let window: Vec<&AckEv> = if self.acks_ordered.0 {
            let from = self.acks.partition_point(|a| a.ts < since);
            let to = self.acks.partition_point(|a| a.ts <= cut);
            self.acks[from..to.max(from)].iter().collect()
        } else {
            self.acks
                .iter()
                .filter(|a| a.ts >= since && a.ts <= cut)
                .collect()
        };
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
        let mut above: Vec<(u64, Option<Evidence>, u32)> = self
            .segs
            .range(self.seg.end..)
            .take_while(|(&k, _)| seq_lt(k, self.next_new))
            .filter_map(|(k, s)| {
                s.sacked_ts()
                    .filter(|t| *t >= since && *t <= cut)
                    .map(|t| (t, s.sack_at(), s.end.wrapping_sub(*k)))
            })
            .collect();
        above.sort_unstable_by_key(|&(t, a, len)| (t, a.map(|e| e.frame), len));
        let mut bytes = 0u32;
        for (n, &(t, i, len)) in above.iter().enumerate() {
            bytes += len;
            if n + 1 >= 3 || bytes > 2 * self.smss {
                sack_signal = Some(AckEv {
                    at: i.expect("a SACKed segment has its SACK"),
                    ts: t,
                    ack: 0,
                    dup: false,
                    window_update: false,
                });
                break;
            }
        }
        // 3. RACK (RFC 8985 §6.2): a segment sent after this one's last
        //    transmission was delivered (SACKed or cumulatively ACKed).
        //    A tie in time is broken by sequence (Linux's
        //    tcp_rack_sent_after), so a segment above this one stamped
        //    with the same time counts as sent after it: a capture with
        //    microsecond timestamps makes such ties.
        let rack_signal = self
            .segs
            .range(self.seg.end..)
            .take_while(|(&k, _)| seq_lt(k, self.next_new))
            .filter(|(_, s)| s.last_tx_ts >= since)
            .filter_map(|(_, s)| {
                s.sacked_ts()
                    .filter(|t| *t >= since && *t <= cut)
                    .map(|t| AckEv {
                        at: s.sack_at().expect("a SACKed segment has its SACK"),
                        ts: t,
                        ack: 0,
                        dup: false,
                        window_update: false,
                    })
            })
            .chain(self.sacked_repairs(since, cut))
            .min_by_key(|a| a.ts)
            .or_else(|| {
                // A cumulative ACK past data sent after this transmission:
                // above it, or a retransmission below it (RACK goes by send
                // time, not sequence: a repair sent after this segment and
                // delivered first marks it lost, RFC 8985 §6.2). The repair
                // may pass the capture point after the ACK and still have
                // left the sender's stack before the ACK reached it: by up
                // to the sender's side of the round trip and its transmit
                // queue (a capture at the receiver sees exactly this).
                let slack = self.sender_side + SEND_QUEUE_NS;
                window.iter().find_map(|a| {
                    let above = seq_lt(self.seg.end, a.ack)
                        && self
                            .segs
                            .range(self.seg.end..a.ack)
                            .any(|(_, s)| s.last_tx_ts >= since && seq_le(s.end, a.ack));
                    let below = || {
                        self.resent.iter().rev().any(|e| {
                            e.ts > since
                                && e.ts <= a.ts + slack
                                && seq_lt(e.rel, self.start)
                                && seq_le(e.end, a.ack)
                        })
                    };
                    (above || below()).then_some(**a)
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
        // The timer's least interval, less 1% for clock skew between the
        // timestamps (Linux timers fire no earlier than asked).
        let min_rto = self.opts.min_rto_ns - self.opts.min_rto_ns / 100;
        // Quiet since: the last ACK that passed, or data sent, whichever
        // came later (what a retransmission timer runs from).
        let quiet_since = self
            .acks
            .iter()
            .rev()
            .find(|a| a.ts <= cut)
            .map_or(0, |a| a.ts)
            .max(self.last_data_ts);
        if after_rto {
            // The recovery after a timeout resends as ACKs come (slow
            // start, RFC 5681 §3.1); a resend after a whole minimum RTO
            // with no ACK and nothing sent is the timer firing again,
            // backed off (RFC 6298 §5.5), as the kernel counts it
            // (TCPTimeouts): a congested run's senders counted 1-2 such
            // timeouts more than the trace called so.
            if self.ts.saturating_sub(quiet_since) < min_rto {
                return (Reason::AfterTimeout, None, flags);
            }
            return (Reason::Timeout, None, flags);
        }
        if let Some((r, a)) = ack_based {
            return (r, Some(a), flags);
        }
        let elapsed = self.ts.saturating_sub(since);
        // 4. TLP (RFC 8985 §7): the last segment, one probe per episode,
        //    after a quiet probe timeout (PTO = 2 SRTT, never under the
        //    least round trip the sender's SRTT may hold, the handshake's
        //    included;
        //    with one segment in flight PTO adds the delayed-ACK time, 200ms,
        //    so a probe can come as late as a timeout: the wire cannot tell
        //    them apart then, and a sender with TLP on sends the probe, as
        //    the PTO is capped at the RTO).
        let is_tail = self.seg.end == self.next_new;
        if self.opts.tlp
            && is_tail
            && !self.tlp_out
            && self.ts.saturating_sub(quiet_since) >= self.min_rtt
        {
            return (Reason::Tlp, None, flags);
        }
        if elapsed >= min_rto {
            return (Reason::Timeout, None, flags);
        }
        (Reason::Unjustified, None, flags)
    }
}

fn no_ports(p: &[Option<u32>; 2]) -> bool {
    p.iter().all(Option::is_none)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
