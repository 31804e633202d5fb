//! First analysis of a TCP trace (pure: a trace in, findings out). Every
//! finding names its evidence: the mirror sequence number when the trace has
//! wirelab metadata, and always the frame number (Wireshark's `frame.number`).
//!
//! Vantage point: timings are taken where the trace was captured. For
//! wirelab traces that is the switch ingress (one clock for all ports).

pub mod expect;

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use serde::Serialize;
use wirelab_spec::Recovery;
use wirelab_trace::{Tcp, Trace};

/// A packet named for the user: frame number and, when known, mirror seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
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
    /// Event the switch applied to the previous transmission, if any.
    pub previous_event: String,
    /// From the previous transmission to this one, at the vantage point.
    pub since_loss_ns: u64,
    pub recovery: Recovery,
    /// The reverse-direction packet that triggered a fast retransmission.
    pub trigger: Option<Evidence>,
}

/// `fast at #22 (+136.5us after #7 drop)`: the one way a retransmission is
/// written, in summaries and in expectation verdicts.
impl std::fmt::Display for Retransmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {} (+{} after {}",
            self.recovery.name(),
            self.at,
            fmt_duration(self.since_loss_ns),
            self.previous
        )?;
        if self.previous_event != "none" && self.previous_event != "unknown" {
            write!(f, " {}", self.previous_event)?;
        }
        f.write_str(")")
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct EcnMark {
    pub at: Evidence,
    pub packet: u32,
    /// First reverse packet with ECE after the mark.
    pub echo: Option<Evidence>,
    pub echo_latency_ns: Option<u64>,
    /// First data packet with CWR after the echo.
    pub cwr: Option<Evidence>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnAnalysis {
    pub id: u32,
    pub data_src: (Ipv4Addr, u16),
    pub data_dst: (Ipv4Addr, u16),
    /// ISN of the data direction (from its SYN or SYN-ACK).
    pub isn: Option<u32>,
    pub packets: u64,
    pub data_packets: u64,
    pub first_transmissions: u32,
    pub retransmissions: Vec<Retransmission>,
    pub ce_marks: Vec<EcnMark>,
    /// Round trip seen from the vantage point during the handshake.
    pub handshake_rtt_ns: Option<u64>,
    /// Packets where the switch's (index, iteration) differs from this
    /// analyzer's; must be empty (both implement Lumina §3.3).
    pub iteration_mismatches: Vec<Evidence>,
    /// Events the switch applied, by (event, evidence, packet, iteration).
    pub events: Vec<AppliedEvent>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppliedEvent {
    pub event: String,
    pub event_id: u32,
    pub at: Evidence,
    pub packet: u32,
    pub iteration: u32,
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

#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub vantage: String,
    pub connections: Vec<ConnAnalysis>,
    /// Frames that could not be parsed, with the reason.
    pub malformed: Vec<(u64, String)>,
}

type Key = (Ipv4Addr, u16, Ipv4Addr, u16);

fn canonical(t: &Tcp) -> (Key, bool) {
    let a = (t.src, t.sport);
    let b = (t.dst, t.dport);
    if a <= b {
        ((a.0, a.1, b.0, b.1), true)
    } else {
        ((b.0, b.1, a.0, a.1), false)
    }
}

struct Pkt {
    idx: usize,
    tcp: Tcp,
    ts: u64,
}

fn evidence(trace: &Trace, i: usize) -> Evidence {
    let p = &trace.packets[i];
    Evidence {
        frame: p.frame,
        mirror_seq: p.meta.as_ref().map(|m| m.seq),
    }
}

/// What the analysis may assume about the stack that produced the trace.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The smallest retransmission timeout the sender can use: Linux's
    /// TCP_RTO_MIN (200ms) unless the route sets `rto_min`.
    pub min_rto_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min_rto_ns: 200_000_000,
        }
    }
}

/// Runs the analysis over a whole trace, assuming Linux defaults.
pub fn analyze(trace: &Trace) -> Analysis {
    analyze_with(trace, Options::default())
}

/// Runs the analysis over a whole trace.
pub fn analyze_with(trace: &Trace, opts: Options) -> Analysis {
    let has_meta = trace.packets.iter().any(|p| p.meta.is_some());
    let mut malformed = Vec::new();
    let mut by_conn: BTreeMap<Key, Vec<Pkt>> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    let mut meta_conn: HashMap<Key, (u32, (Ipv4Addr, u16))> = HashMap::new();
    for (i, p) in trace.packets.iter().enumerate() {
        let t = match p.tcp() {
            Ok(t) => t,
            Err(wirelab_trace::NotTcp::Other) => continue,
            Err(wirelab_trace::NotTcp::Malformed {
                layer,
                offset,
                detail,
            }) => {
                malformed.push((p.frame, format!("{layer} at byte {offset}: {detail}")));
                continue;
            }
        };
        let (k, _) = canonical(&t);
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
        by_conn.entry(k).or_insert_with(|| {
            order.push(k);
            Vec::new()
        });
        by_conn
            .get_mut(&k)
            .expect("inserted")
            .push(Pkt { idx: i, tcp: t, ts });
    }
    let mut connections = Vec::new();
    for (n, k) in order.iter().enumerate() {
        let pkts = &by_conn[k];
        let (id, data_src) = match meta_conn.get(k) {
            Some(&(id, src)) => (id, src),
            None => (
                n as u32 + 1 + if has_meta { 10_000 } else { 0 },
                data_source(pkts),
            ),
        };
        connections.push(analyze_conn(trace, id, data_src, pkts, opts));
    }
    connections.sort_by_key(|c| c.id);
    Analysis {
        vantage: if has_meta {
            "switch ingress (wirelab metadata: one clock for every port)".into()
        } else {
            "capture point of the trace (pcap timestamps)".into()
        },
        connections,
        malformed,
    }
}

/// Without metadata the data direction is the one carrying more payload.
fn data_source(pkts: &[Pkt]) -> (Ipv4Addr, u16) {
    let mut bytes: HashMap<(Ipv4Addr, u16), u64> = HashMap::new();
    for p in pkts {
        *bytes.entry((p.tcp.src, p.tcp.sport)).or_default() += u64::from(p.tcp.payload_len);
    }
    bytes
        .into_iter()
        .max_by_key(|(src, b)| (*b, std::cmp::Reverse(*src)))
        .map(|(s, _)| s)
        .unwrap_or((pkts[0].tcp.src, pkts[0].tcp.sport))
}

fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

fn analyze_conn(
    trace: &Trace,
    id: u32,
    src: (Ipv4Addr, u16),
    pkts: &[Pkt],
    opts: Options,
) -> ConnAnalysis {
    let is_data = |t: &Tcp| (t.src, t.sport) == src;
    let dst = pkts
        .iter()
        .find(|p| is_data(&p.tcp))
        .map(|p| (p.tcp.dst, p.tcp.dport))
        .or_else(|| pkts.first().map(|p| (p.tcp.src, p.tcp.sport)))
        .unwrap_or(src);
    // Handshake RTT at the vantage point: SYN -> SYN-ACK -> ACK.
    let syn = pkts.iter().find(|p| p.tcp.syn && !p.tcp.has_ack);
    let synack = pkts.iter().find(|p| p.tcp.syn && p.tcp.has_ack);
    let handshake_rtt_ns = match (syn, synack) {
        (Some(s), Some(sa)) => pkts
            .iter()
            .find(|p| {
                p.idx > sa.idx && !p.tcp.syn && (p.tcp.src, p.tcp.sport) == (s.tcp.src, s.tcp.sport)
            })
            .map(|a| a.ts.saturating_sub(s.ts)),
        _ => None,
    };
    // An ACK-triggered retransmission (RFC 5681 §3.2 fast retransmit, RFC 8985
    // RACK, whose reordering timer adds up to about an RTT) follows its
    // trigger within a round trip or two. A timeout cannot fire sooner than
    // RTO after the ACK that restarted the timer, and Linux keeps
    // RTO >= SRTT + rto_min (RFC 6298 §2.4, §5.3). So an ACK that still
    // reports the segment missing, arriving within max(2 RTT, rto_min / 2)
    // before the retransmission, is its trigger; with none, it was a timeout.
    let mut max_rtt = handshake_rtt_ns.unwrap_or(0);
    // Karn's algorithm (RFC 6298 §3): RTT samples only from segments that
    // were never retransmitted. end (relative) -> send time.
    let mut unacked: BTreeMap<u32, u64> = BTreeMap::new();
    let mut retransmitted_ends: std::collections::HashSet<u32> = Default::default();
    let mut snd_una_rel = 0u32;
    let mut isn: Option<u32> = None;
    let mut seen = false;
    let mut last_rel = 0u32;
    let mut next_new = 1u32;
    let mut iter = 1u32;
    let mut first_tx = 0u32;
    // first-transmission start (relative) -> (index, end)
    let mut segs: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    let mut last_tx: HashMap<u32, (usize, u64)> = HashMap::new();
    let mut nth: HashMap<u32, u32> = HashMap::new();
    // Reverse-direction packets so far: (trace index, ts, ack).
    let mut rev: Vec<(usize, u64, u32)> = Vec::new();
    let mut out = ConnAnalysis {
        id,
        data_src: src,
        data_dst: dst,
        isn: None,
        packets: pkts.len() as u64,
        data_packets: 0,
        first_transmissions: 0,
        retransmissions: Vec::new(),
        ce_marks: Vec::new(),
        handshake_rtt_ns,
        iteration_mismatches: Vec::new(),
        events: Vec::new(),
    };
    let mut pending_echo: Vec<usize> = Vec::new(); // indices into out.ce_marks
    let mut awaiting_cwr: Vec<usize> = Vec::new();
    for p in pkts {
        let t = &p.tcp;
        let meta = trace.packets[p.idx].meta.as_ref();
        if !is_data(t) {
            rev.push((p.idx, p.ts, t.ack));
            if let (Some(b), true) = (isn, t.has_ack) {
                let a = t.ack.wrapping_sub(b);
                if !seq_le(a, snd_una_rel) {
                    snd_una_rel = a;
                    if let Some((end, sent)) = unacked.range(..=a).next_back() {
                        if !retransmitted_ends.contains(end) {
                            max_rtt = max_rtt.max(p.ts.saturating_sub(*sent));
                        }
                    }
                    unacked = unacked.split_off(&a.wrapping_add(1));
                }
            }
            if t.ece && !t.syn {
                for m in pending_echo.drain(..) {
                    let mark = &mut out.ce_marks[m];
                    mark.echo = Some(evidence(trace, p.idx));
                    mark.echo_latency_ns = Some(p.ts.saturating_sub(mark_ts(trace, mark)));
                    awaiting_cwr.push(m);
                }
            }
            continue;
        }
        if t.syn {
            // Lumina's register starts over with a new connection.
            isn = Some(t.seq);
            out.isn = isn;
            seen = false;
            next_new = 1;
            iter = 1;
            continue;
        }
        if t.payload_len == 0 {
            continue;
        }
        out.data_packets += 1;
        let base = *isn.get_or_insert_with(|| t.seq.wrapping_sub(1));
        let rel = t.seq.wrapping_sub(base);
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
            unacked.insert(end, p.ts);
            segs.insert(rel, (first_tx, end));
            first_tx
        } else {
            // The first transmission that holds this byte.
            segs.range(..=rel)
                .next_back()
                .filter(|(_, (_, e))| seq_le(rel.wrapping_add(1), *e))
                .map_or(0, |(_, (i, _))| *i)
        };
        if !seq_le(end, next_new) {
            next_new = end;
        }
        if let Some(m) = meta {
            if m.data_dir && (m.index != index || m.iter != iter) {
                out.iteration_mismatches.push(evidence(trace, p.idx));
            }
            if m.event != "none" {
                out.events.push(AppliedEvent {
                    event: m.event.clone(),
                    event_id: m.event_id,
                    at: evidence(trace, p.idx),
                    packet: index,
                    iteration: iter,
                });
            }
        }
        if t.ecn == 3 {
            out.ce_marks.push(EcnMark {
                at: evidence(trace, p.idx),
                packet: index,
                echo: None,
                echo_latency_ns: None,
                cwr: None,
            });
            pending_echo.push(out.ce_marks.len() - 1);
        }
        if t.cwr {
            for m in awaiting_cwr.drain(..) {
                out.ce_marks[m].cwr = Some(evidence(trace, p.idx));
            }
        }
        if !first {
            retransmitted_ends.insert(end);
        }
        if !first && index > 0 {
            let fast_window = max_rtt.saturating_mul(2).max(opts.min_rto_ns / 2);
            let (prev_idx, prev_ts) = last_tx[&index];
            let n = nth.entry(index).or_insert(0);
            *n += 1;
            // The trigger is the latest ACK since the lost transmission that
            // still reported this segment missing. A later ACK that reached
            // the vantage point just before the retransmission cannot have
            // reached the sender in time, so it is skipped, not disqualifying.
            let trigger = rev
                .iter()
                .rev()
                .take_while(|(_, rts, _)| *rts >= prev_ts)
                .filter(|(_, rts, _)| p.ts.saturating_sub(*rts) <= fast_window)
                .find(|(_, _, ack)| seq_le(ack.wrapping_sub(base), rel))
                .map(|(ri, _, _)| evidence(trace, *ri));
            let recovery = if trigger.is_some() {
                Recovery::Fast
            } else {
                Recovery::Timeout
            };
            out.retransmissions.push(Retransmission {
                packet: index,
                nth: *n,
                iteration: iter,
                at: evidence(trace, p.idx),
                ts_ns: p.ts,
                previous: evidence(trace, prev_idx),
                previous_event: trace.packets[prev_idx]
                    .meta
                    .as_ref()
                    .map_or_else(|| "unknown".to_string(), |m| m.event.clone()),
                since_loss_ns: p.ts.saturating_sub(prev_ts),
                recovery,
                trigger,
            });
        }
        if index > 0 {
            last_tx.insert(index, (p.idx, p.ts));
        }
    }
    out.first_transmissions = first_tx;
    out
}

fn mark_ts(trace: &Trace, m: &EcnMark) -> u64 {
    let p = &trace.packets[m.at.frame as usize - 1];
    p.meta.as_ref().map_or(p.ts_ns, |x| x.ts)
}
