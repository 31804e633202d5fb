//! Why the slowest flows were slow (DETER §2.1, §5.1–5.3, seed 004; issue
//! 21 item 4): for each connection whose completion time is at or above a
//! percentile, the causes the connection model saw, each with the packets
//! that show it. Built on the model's retransmission reasons (RFC 5681,
//! 6675, 8985 and 6298), not on timing guesses.

use std::net::IpAddr;

use serde::Serialize;
use wirelab_spec::Recovery;

use wirelab_trace::Action;

use crate::model::{ConnAnalysis, Reason, Retransmission};
use crate::Evidence;

/// A slow connection and its causes.
#[derive(Debug, Clone, Serialize)]
pub struct Slow {
    pub conn: u32,
    /// First data packet to the last ACK, at the vantage point.
    pub completion_ns: u64,
    pub causes: Vec<Cause>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cause {
    /// `timeout`, `fast-retransmit`, `late-fast-retransmit`,
    /// `tail-loss-probe`, `congestion`, `zero-window`,
    /// `receive-window-limited`, `delayed-ack`, `slow-start-after-idle`.
    pub kind: &'static str,
    /// One line: what happened and why, with its packets.
    pub text: String,
    pub evidence: Vec<Evidence>,
}

/// A fast retransmission on duplicate ACKs that left more than this many
/// base round trips after the 3rd came late: the sender sat on a signal
/// RFC 5681 §3.2 acts on, its threshold grown by an earlier reordering
/// (DETER §5.2: tcp_reordering). Measured from the 3rd duplicate ACK, not
/// from the receiver's first one as before: a slow bottleneck spaces
/// duplicate ACKs out, and three of them 120 us apart are no late sender.
const LATE_RTTS: u64 = 2;

/// Idle restarts from an initial window this small or less (RFC 6928's
/// ten segments, Linux's default) are slow start after idle.
const INITIAL_WINDOW: u32 = 10;

/// What a sender's kernel said as it resent a segment: a DETER record's
/// tcp_retransmit_skb event (`wirelab record`, a spec's `record:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelResend {
    /// The connection, from the end that resent.
    pub local: (IpAddr, u16),
    pub remote: (IpAddr, u16),
    /// The segment's first sequence number.
    pub seq: u32,
    /// `tcp_reordering` then: the duplicate-ACK threshold, 3 until a
    /// reordering widens it (DETER §5.2).
    pub reordering: u32,
    /// `sacked_out` then: without SACK, the duplicate ACKs it counted.
    pub sacked: u32,
}

/// RFC 5681 §3.2's DupThresh, Linux's initial `tcp_reordering`.
const DUPTHRESH: u32 = 3;

/// The kernel's word on retransmission `r` of connection `c`: its
/// sender's `r.nth`-th resend of those bytes in `kernel`.
fn kernel_of(
    c: &ConnAnalysis,
    r: &Retransmission,
    kernel: &[KernelResend],
) -> Option<KernelResend> {
    let seq = c.isn?.wrapping_add(r.seq);
    kernel
        .iter()
        .filter(|k| k.local == c.data_src && k.remote == c.data_dst && k.seq == seq)
        .nth(r.nth.saturating_sub(1) as usize)
        .copied()
}

/// The connections at or above percentile `p` (0..=100, nearest rank) of
/// completion time, slowest first, with their causes. `kernel` is what
/// the hosts' records say of their retransmissions, if they were
/// recorded (else empty).
pub fn diagnose(conns: &[ConnAnalysis], p: f64, kernel: &[KernelResend]) -> Vec<Slow> {
    let mut done: Vec<(&ConnAnalysis, u64)> = conns
        .iter()
        .filter_map(|c| Some((c, c.last_ack_ts_ns?.checked_sub(c.first_data_ts_ns?)?)))
        .collect();
    if done.is_empty() {
        return Vec::new();
    }
    let threshold = percentile(done.iter().map(|x| x.1).collect(), p);
    done.retain(|x| x.1 >= threshold);
    done.sort_by_key(|x| std::cmp::Reverse(x.1));
    done.into_iter()
        .map(|(c, fct)| Slow {
            conn: c.id,
            completion_ns: fct,
            causes: causes(c, fct, kernel),
        })
        .collect()
}

/// The nearest-rank percentile `p` (0..=100) of a non-empty set.
fn percentile(mut v: Vec<u64>, p: f64) -> u64 {
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{:.1}us", ns as f64 / 1e3)
    }
}

fn lost(r: &Retransmission) -> String {
    match r.previous_event {
        Some(Action::None) | None => format!("{}", r.previous),
        Some(a) => format!("{} ({})", r.previous, a.name()),
    }
}

/// What to add when the transmission `r` repeats was reordered, not
/// lost: the retransmission was spurious (DETER §5.2: what makes Linux
/// widen its reordering allowance).
fn reordered(r: &Retransmission) -> String {
    if r.previous_event != Some(Action::Reorder) {
        return String::new();
    }
    format!(
        "; it was reordered, not lost, so this retransmission was spurious{}",
        r.dsack
            .map(|d| format!(" (the receiver's DSACK {d} says so, RFC 2883)"))
            .unwrap_or_default()
    )
}

/// How long a fast retransmission on duplicate ACKs came after the 3rd
/// (RFC 5681 §3.2's DupThresh), when that was more than `LATE_RTTS` base
/// round trips. Only for duplicate ACKs, a sender without SACK's count:
/// with SACK, Linux decides by RACK's timer (RFC 8985 §6), armed in whole
/// ticks, and the wire cannot tell a grown reordering window from the
/// timer's own granularity.
fn sat_on_signal(r: &Retransmission, rtt: u64) -> Option<u64> {
    if r.reason != Reason::DupAcks {
        return None;
    }
    let waited = r.ts_ns.checked_sub(r.trigger_ts_ns?)?;
    (waited > LATE_RTTS * rtt).then_some(waited)
}

/// An earlier retransmission of connection `c`, before `r`, shown
/// spurious: the switch reordered the original (wirelab's metadata), the
/// receiver's DSACK said so (RFC 2883), or the receiver acknowledged the
/// bytes sooner than an answer to the retransmission could come back.
/// What widens Linux's duplicate-ACK threshold (tcp_reordering, to the
/// reordering's extent: DETER §5.2), and its words and packets.
fn widened_by(c: &ConnAnalysis, r: &Retransmission) -> Option<(String, Vec<Evidence>)> {
    let receiver_side = c.base_rtt.receiver_side_ns;
    c.retransmissions
        .iter()
        .filter(|e| e.ts_ns < r.ts_ns && e.recovery == Recovery::Fast)
        .find_map(|e| {
            let early = e.covered.filter(|v| v.after_ns < receiver_side);
            let why = if e.previous_event == Some(Action::Reorder) {
                format!("the switch reordered {}", e.previous)
            } else if let Some(d) = e.dsack {
                format!("the receiver's DSACK {d} says so, RFC 2883")
            } else if let Some(v) = early {
                format!(
                    "{} acknowledged it {} after the retransmission, sooner than the receiver's side of a round trip, {}: the original had arrived",
                    v.at,
                    us(v.after_ns),
                    us(receiver_side)
                )
            } else {
                return None;
            };
            let hole = e
                .covered
                .map(|v| format!("; {} closed a hole of {} packets", v.at, v.segments))
                .unwrap_or_default();
            Some((
                format!(
                    "packet {}'s fast retransmit at {} was spurious ({why}{hole}), and Linux widens the threshold to a reordering's extent (tcp_reordering; without SACK it tells a reordering from the echoed timestamp, RFC 4015)",
                    e.packet, e.at
                ),
                [e.previous, e.at]
                    .into_iter()
                    .chain(e.covered.map(|v| v.at))
                    .collect(),
            ))
        })
}

/// The causes of connection `c`, which completed in `fct` ns.
fn causes(c: &ConnAnalysis, fct: u64, kernel: &[KernelResend]) -> Vec<Cause> {
    let rtt = (c.base_rtt.sender_side_ns + c.base_rtt.receiver_side_ns).max(1);
    let mut out = Vec::new();
    for r in &c.retransmissions {
        let base = format!(
            "packet {} resent at {}, {} after {}",
            r.packet,
            r.at,
            us(r.since_loss_ns),
            lost(r)
        );
        let ev = vec![r.previous, r.at];
        let k = kernel_of(c, r, kernel);
        // Late by the kernel's own count (a record: the threshold it
        // resent at), or by the wire (it sat on a complete signal).
        let grown = k.filter(|k| r.reason == Reason::DupAcks && k.reordering > DUPTHRESH);
        let waited = sat_on_signal(r, rtt);
        if r.recovery == Recovery::Fast && (grown.is_some() || waited.is_some()) {
            let (growth, mut evidence) = widened_by(c, r).unwrap_or_else(|| {
                (
                    "what widened it is not in this trace".to_string(),
                    Vec::new(),
                )
            });
            let signal = r.trigger.map(|e| e.to_string()).unwrap_or_default();
            let wire = waited
                .map(|w| {
                    format!(
                        ", the 3rd ({signal}) {} before it ({:.1} base round trips of {})",
                        us(w),
                        w as f64 / rtt as f64,
                        us(rtt)
                    )
                })
                .unwrap_or_default();
            let text = match grown {
                Some(k) => format!(
                    "late fast retransmit (dupacks): {base}; the sender's kernel resent it on duplicate ACK {}, its threshold tcp_reordering {} where RFC 5681 §3.2 has {DUPTHRESH}{wire}: {growth}",
                    k.sacked, k.reordering
                ),
                None => format!(
                    "late fast retransmit (dupacks): {base}; {} duplicate ACKs had passed before it{wire}: DupThresh, {DUPTHRESH} (RFC 5681 §3.2), had grown: {growth}",
                    r.duplicate_acks.map_or(0, |d| d.0)
                ),
            };
            evidence.extend(r.trigger.into_iter().chain(ev));
            out.push(Cause {
                kind: "late-fast-retransmit",
                text,
                evidence,
            });
            continue;
        }
        match (r.recovery, r.reason) {
            (Recovery::Timeout, Reason::Timeout) => {
                out.push(Cause {
                    kind: "timeout",
                    text: format!(
                        "retransmission timeout: {base}; {}",
                        rto_why(c, r, k)
                    ),
                    evidence: ev,
                });
            }
            (Recovery::Probe, _) => out.push(Cause {
                kind: "tail-loss-probe",
                text: format!(
                    "tail loss probe (RFC 8985 §7): {base}, the last data with nothing after it to signal the loss"
                ),
                evidence: ev,
            }),
            (Recovery::Fast, reason) => out.push(Cause {
                kind: "fast-retransmit",
                text: format!(
                    "fast retransmit ({}){}: {base}{}",
                    reason.name(),
                    r.trigger.map(|t| format!(" on {t}")).unwrap_or_default(),
                    reordered(r)
                ),
                evidence: r.trigger.into_iter().chain(ev).collect(),
            }),
            _ => {}
        }
    }
    if let Some(first) = c.ce_marks.first() {
        out.push(Cause {
            kind: "congestion",
            text: format!(
                "congestion: {} CE-marked data packets (first {}), each halving the window it reached",
                c.ce_marks.len(),
                first.at
            ),
            evidence: c.ce_marks.iter().take(3).map(|m| m.at).collect(),
        });
    }
    if let Some(z) = c.zero_windows.first() {
        let total: u64 = c.zero_windows.iter().map(|z| z.ns).sum();
        out.push(Cause {
            kind: "zero-window",
            text: format!(
                "zero window: the receiver's window was closed {} in {} stall(s), first from {}{}: its application did not read as fast as the data came (DETER Table 2, Rwnd=0)",
                us(total),
                c.zero_windows.len(),
                z.from,
                z.to.map(|t| format!(" to {t}")).unwrap_or_else(|| " to the capture's end".into())
            ),
            evidence: c
                .zero_windows
                .iter()
                .take(3)
                .flat_map(|z| [Some(z.from), z.to])
                .flatten()
                .collect(),
        });
    }
    // Held back by the window for a twentieth of its time or more: a
    // flow's start, before autotuning grows the window, stays below it.
    let w = &c.window_limited;
    if let Some(first) = w
        .first
        .filter(|_| w.waited_ns.saturating_mul(20) >= fct && fct > 0)
    {
        out.push(Cause {
            kind: "receive-window-limited",
            text: format!(
                "receive window: {} time(s) the sender filled the window the receiver advertised (first at {first}) and waited {} in all ({:.0}% of the flow) for it to open; the largest window was {} bytes: the receiver's buffer (tcp_rmem) or its application held the flow back",
                w.times,
                us(w.waited_ns),
                100.0 * w.waited_ns as f64 / fct as f64,
                w.largest_window
            ),
            evidence: vec![first],
        });
    }
    if let Some(longest) = c.held_acks.iter().max_by_key(|h| h.held_ns) {
        let total: u64 = c.held_acks.iter().map(|h| h.held_ns).sum();
        // DETER §2.1: after a timeout the sender may send one segment, and
        // the receiver delays the ACK of it.
        let after_timeout = c.held_acks.iter().find(|h| {
            c.retransmissions
                .iter()
                .any(|r| r.at == h.data && r.recovery == Recovery::Timeout)
        });
        out.push(Cause {
            kind: "delayed-ack",
            text: format!(
                "delayed ACK: {} time(s) the sender waited on an ACK of its newest data that the receiver held back, {} in all beyond the round trip (longest {}: {} answered by {}){}",
                c.held_acks.len(),
                us(total),
                us(longest.held_ns),
                longest.data,
                longest.ack,
                after_timeout
                    .map(|h| format!(
                        "; the retransmission {} after a timeout, the one segment the sender could send, had its ACK delayed (DETER §2.1)",
                        h.data
                    ))
                    .unwrap_or_default()
            ),
            evidence: after_timeout
                .into_iter()
                .chain(std::iter::once(longest))
                .flat_map(|h| [h.data, h.ack])
                .collect(),
        });
    }
    for r in c
        .idle_restarts
        .iter()
        .filter(|r| r.more_after && r.segments <= INITIAL_WINDOW && r.segments < r.before)
    {
        out.push(Cause {
            kind: "slow-start-after-idle",
            text: format!(
                "slow start after idle: the sender was idle {} and resumed at {} with {} segment(s) in the round trip, against {} in flight before (RFC 5681 §4.1 restarts the window after an idle RTO; Linux's net.ipv4.tcp_slow_start_after_idle)",
                us(r.idle_ns),
                r.first,
                r.segments,
                r.before
            ),
            evidence: vec![r.first],
        });
    }
    out
}

/// Why a timeout, not a fast retransmission, repaired a loss (DETER §2.1,
/// §5.3): the repair was lost too, the ACKs that would have signalled it
/// were dropped, or too little data followed it.
fn rto_why(c: &ConnAnalysis, r: &Retransmission, k: Option<KernelResend>) -> String {
    if r.nth >= 2 && r.previous_event == Some(Action::Drop) {
        return format!(
            "its earlier retransmission {} was dropped too, and nothing sent after it could signal that",
            r.previous
        );
    }
    // DETER §2.1: the earlier retransmission arrived (the receiver says
    // it got this copy's bytes twice) but was not acknowledged before the
    // backed-off timer ran out: after a timeout the sender may send that
    // one segment, and a receiver whose quick-ACK quota is spent holds the
    // ACK of one segment for its delayed-ACK timer (RFC 1122 §4.2.3.2;
    // Linux: 40 ms at most, here longer than the doubled RTO).
    if let (true, Some(d)) = (r.nth >= 2, r.dsack) {
        return format!(
            "its earlier retransmission {} reached the receiver (the DSACK {d} of this copy says so, RFC 2883), which held its ACK past the sender's backed-off timer{}: a delayed ACK of the one segment a timeout lets the sender send (DETER §2.1)",
            r.previous,
            r.rto_ns.map(|t| format!(" of {}", us(t))).unwrap_or_default()
        );
    }
    let acks_dropped: Vec<Evidence> = c
        .events
        .iter()
        .filter(|e| {
            e.packet == 0
                && e.event == Action::Drop
                && e.at.frame > r.previous.frame
                && e.at.frame < r.at.frame
        })
        .map(|e| e.at)
        .collect();
    if !acks_dropped.is_empty() {
        return format!(
            "{} ACKs between the loss and the timeout were dropped ({}): the duplicate ACKs that would have signalled it",
            acks_dropped.len(),
            acks_dropped.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    // RFC 5681 §2 (e): an ACK that changes the window is no duplicate, so
    // a receiver whose window grows with out-of-order data keeps a sender
    // without SACK below DupThresh (DETER §5.3, root cause 2).
    if let Some((dups, updates)) = r.duplicate_acks.filter(|&(d, u)| d < 3 && d + u >= 3) {
        return format!(
            "{} ACKs of its bytes came back, but {updates} of them each advertised another window, which RFC 5681 §2 does not count as a duplicate: {dups} of DupThresh 3 counted (a receiver growing its window with out-of-order data, DETER §5.3)",
            dups + updates
        );
    }
    // DETER §5.2: enough duplicate ACKs for RFC 5681, too few for a
    // threshold a reordering had widened. A sender that counts them: one
    // without SACK (none of its repairs was SACK's or RACK's, no DSACK;
    // with SACK Linux decides by RACK's time, RFC 8985).
    let sack = c.sack_acks > 0
        || !c.dsacks.is_empty()
        || c.retransmissions
            .iter()
            .any(|x| matches!(x.reason, Reason::Sack | Reason::Rack));
    if let (Some((dups, _)), Some(k), false) = (r.duplicate_acks, k, sack) {
        if dups >= DUPTHRESH && k.reordering > dups {
            let growth = widened_by(c, r)
                .map(|g| format!(": {}", g.0))
                .unwrap_or_default();
            return format!(
                "{dups} duplicate ACKs came back, DupThresh {DUPTHRESH} for RFC 5681 §3.2, but the sender's kernel wanted {} (tcp_reordering, widened by a reordering){growth}",
                k.reordering
            );
        }
    }
    // Enough duplicate ACKs passed the vantage point for a sender without
    // SACK, with its threshold not grown, and still a timeout: the sender
    // did not count them. On Linux, the likely reason: an ACK that updates
    // the window counts as no duplicate, and the first ACK after the
    // peer's last segment (or after the handshake) is one, since its
    // sequence number is new (RFC 9293 §3.10.7.4's SND.WL1 rule,
    // tcp_may_update_window), whatever its window; ACKs that reach the
    // sender while its application holds the socket (a write still
    // running) wait in the backlog, where Linux merges them
    // (tcp_add_backlog, TcpExtTCPBacklogCoalesce) into one ACK that is
    // that update. A lab spec pinned to one CPU timed out so in 39 of 40
    // runs, its 9 ACKs (8 of them duplicates) all on the wire.
    if let (Some((dups, _)), false) = (r.duplicate_acks, sack) {
        if dups >= DUPTHRESH && k.is_none_or(|k| k.reordering <= dups) {
            return format!(
                "{dups} duplicate ACKs came back, DupThresh {DUPTHRESH} (RFC 5681 §3.2), and still the timer: the sender did not count them. On Linux, likely merged with a window update (the first ACK after the peer's last segment is one: a new sequence number, RFC 9293's SND.WL1 rule) in the socket's backlog while the sending application held the socket (TcpExtTCPBacklogCoalesce counts such merges)"
            );
        }
    }
    let after = c.first_transmissions.saturating_sub(r.packet);
    if after == 0 {
        return "nothing was sent after it to bring duplicate ACKs: a tail loss".into();
    }
    if after < 3 {
        return format!(
            "too few packets after it for duplicate ACKs ({after} of DupThresh 3, RFC 5681 §3.2; DETER §5.3, root cause 1)"
        );
    }
    format!(
        "the timer ran {} with {after} packets after the loss",
        r.rto_ns.map(us).unwrap_or_else(|| "its course".into())
    )
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(v.clone(), 99.0), 99);
        assert_eq!(percentile(v.clone(), 50.0), 50);
        assert_eq!(percentile(v.clone(), 100.0), 100);
        assert_eq!(percentile(v, 0.0), 1);
        // One flow: it is its own p99.
        assert_eq!(percentile(vec![7], 99.0), 7);
        // Three flows: p99 is the slowest, p50 the middle one.
        assert_eq!(percentile(vec![30, 10, 20], 99.0), 30);
        assert_eq!(percentile(vec![30, 10, 20], 50.0), 20);
    }
}
