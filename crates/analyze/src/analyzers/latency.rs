//! Retransmission latency breakdown (Lumina §4, Fig. 5), per loss:
//! - NACK generation (receiver): first out-of-order arrival after the loss
//!   → first duplicate ACK/SACK;
//! - reaction (sender): the ACK that completed the loss signal → the
//!   retransmission;
//! - timeout: last transmission → timeout retransmission (and the backoff
//!   sequence);
//! - total: the lost transmission → its retransmission.
//!
//! All are taken at the vantage point. A mid-path point sees the receiver's
//! answer one receiver-side round trip late and the sender's reaction one
//! sender-side round trip late (Lumina's "half-RTT deviation"); those base
//! round trips, split from the handshake, are subtracted. The message keeps
//! the raw figure.

use wirelab_spec::Unit;

use crate::{fmt_duration, Analyzer, Finding, Input, Reason};

pub struct RetransmissionLatency;

const A: &str = "retransmission-latency";

impl Analyzer for RetransmissionLatency {
    fn name(&self) -> &'static str {
        "retransmission-latency"
    }

    fn findings(&self) -> &'static [(&'static str, Unit)] {
        &[
            ("nack-generation", Unit::Nanos),
            ("reaction", Unit::Nanos),
            ("timeout", Unit::Nanos),
            ("total", Unit::Nanos),
        ]
    }

    fn about(&self) -> &'static str {
        "per loss: NACK generation, reaction and timeout latency, base round trip of the vantage point removed"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let mut out = Vec::new();
        for c in &input.analysis.connections {
            let b = c.base_rtt;
            let mut timeouts: Vec<u64> = Vec::new();
            for r in &c.retransmissions {
                let total = r.since_loss_ns;
                out.push(
                    Finding::measurement(
                        A,
                        "total",
                        total as f64,
                        Unit::Nanos,
                        format!(
                            "packet {} ({}): lost at {}, retransmitted at {} after {}",
                            r.packet,
                            r.reason.name(),
                            r.previous,
                            r.at,
                            fmt_duration(total)
                        ),
                    )
                    .conn(c.id)
                    .packet(r.packet)
                    .evidence([r.previous, r.at]),
                );
                match r.reason {
                    Reason::DupAcks | Reason::Sack | Reason::Rack => {
                        // The receiver learns of the hole from the first
                        // out-of-order arrival after the lost transmission.
                        if let Some(ar) = c.arrivals.iter().find(|a| {
                            a.first_of_hole
                                && a.ts_ns > r.ts_ns - r.since_loss_ns
                                && a.ts_ns < r.ts_ns
                        }) {
                            if let (Some(ans), Some(ats)) = (ar.answer, ar.answer_ts_ns) {
                                let raw = ats.saturating_sub(ar.ts_ns);
                                let v = raw.saturating_sub(b.receiver_side_ns);
                                out.push(
                                    Finding::measurement(
                                        A,
                                        "nack-generation",
                                        v as f64,
                                        Unit::Nanos,
                                        format!(
                                            "packet {}: out-of-order {} answered by {} after {} ({} as seen; receiver-side base RTT {})",
                                            r.packet,
                                            ar.at,
                                            ans,
                                            fmt_duration(v),
                                            fmt_duration(raw),
                                            fmt_duration(b.receiver_side_ns)
                                        ),
                                    )
                                    .conn(c.id)
                                    .packet(r.packet)
                                    .evidence([ar.at, ans]),
                                );
                            }
                        }
                        if let (Some(t), Some(tts)) = (r.trigger, r.trigger_ts_ns) {
                            let raw = r.ts_ns.saturating_sub(tts);
                            let v = raw.saturating_sub(b.sender_side_ns);
                            out.push(
                                Finding::measurement(
                                    A,
                                    "reaction",
                                    v as f64,
                                    Unit::Nanos,
                                    format!(
                                        "packet {}: loss signal {} ({}) → retransmission {} after {} ({} as seen; sender-side base RTT {})",
                                        r.packet,
                                        t,
                                        r.reason.name(),
                                        r.at,
                                        fmt_duration(v),
                                        fmt_duration(raw),
                                        fmt_duration(b.sender_side_ns)
                                    ),
                                )
                                .conn(c.id)
                                .packet(r.packet)
                                .evidence([t, r.at]),
                            );
                        }
                    }
                    Reason::Timeout => {
                        if r.backoff_of.is_none() {
                            timeouts.clear();
                        }
                        timeouts.push(r.rto_ns.unwrap_or(r.since_loss_ns));
                        let seq: Vec<String> = timeouts.iter().map(|t| fmt_duration(*t)).collect();
                        out.push(
                            Finding::measurement(
                                A,
                                "timeout",
                                r.since_loss_ns as f64,
                                Unit::Nanos,
                                format!(
                                    "packet {}: last sent {}, timeout retransmission {} after {} (timers ran {})",
                                    r.packet,
                                    r.previous,
                                    r.at,
                                    fmt_duration(r.since_loss_ns),
                                    seq.join(" → ")
                                ),
                            )
                            .conn(c.id)
                            .packet(r.packet)
                            .evidence([r.previous, r.at]),
                        );
                    }
                    _ => {}
                }
            }
        }
        // Measurements only: nothing here is a verdict.
        (0, out)
    }
}
