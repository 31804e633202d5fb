//! The receiver's view: what arrived in order, and the arrivals it had to
//! answer at once (RFC 5681 §4.2: an out-of-order segment, or one that
//! fills a hole). The receiver's own ACKs correct it where the capture
//! missed data: an ACK beyond what the capture showed arriving proves the
//! receiver had those bytes (a capture gap, not a loss).

use std::collections::BTreeMap;

use super::{seq_le, seq_lt, Arrival, CaptureGap};
use crate::Evidence;

#[derive(Debug, Default)]
pub(crate) struct Receiver {
    /// Next expected byte (relative).
    rcv_nxt: Option<u32>,
    /// Out-of-order ranges held, start -> end.
    ooo: BTreeMap<u32, u32>,
    /// Arrivals (indexes into `ConnAnalysis::arrivals`) not answered yet.
    unanswered: Vec<usize>,
    /// Out-of-order arrivals still beyond `rcv_nxt`, with their start.
    beyond: Vec<(usize, u32)>,
    /// Where the sender's FIN sits: its ACK is one beyond the data
    /// (RFC 9293 §3.4, the FIN occupies a sequence number).
    fin: Option<u32>,
}

impl Receiver {
    /// Any ACK the receiver sends answers the arrivals before it. One that
    /// acknowledges bytes the capture never showed arriving (`ack` beyond
    /// `rcv_nxt`) is a capture gap: the receiver had them, so the arrivals
    /// that looked out of order behind the gap were not, and are not
    /// checked.
    pub(crate) fn on_ack(
        &mut self,
        arrivals: &mut [Arrival],
        gaps: &mut Vec<CaptureGap>,
        at: Evidence,
        ts: u64,
        ack: u32,
    ) {
        let ack = match self.fin {
            Some(f) if ack == f.wrapping_add(1) => f,
            _ => ack,
        };
        if let Some(nxt) = self.rcv_nxt.filter(|n| seq_lt(*n, ack)) {
            // The first stretch not seen: up to the first range held, or
            // to the ACK.
            let to = self
                .ooo
                .keys()
                .next()
                .copied()
                .filter(|s| seq_lt(*s, ack))
                .unwrap_or(ack);
            gaps.push(CaptureGap {
                from: nxt,
                to,
                ack: at,
            });
            self.advance_to(ack);
            self.beyond.retain(|&(i, rel)| {
                let covered = seq_lt(rel, ack);
                if covered {
                    arrivals[i].in_capture_gap = true;
                }
                !covered
            });
        }
        for i in self.unanswered.drain(..) {
            arrivals[i].answer = Some(at);
            arrivals[i].answer_ts_ns = Some(ts);
        }
    }

    /// The sender's FIN, after its data up to `end`.
    pub(crate) fn on_fin(&mut self, end: u32) {
        self.fin = Some(end);
    }

    /// Everything before `n` has arrived: the ranges held that it reaches
    /// are in order now.
    fn advance_to(&mut self, mut n: u32) {
        while let Some((&s, &e)) = self.ooo.iter().next() {
            if seq_le(s, n) {
                self.ooo.remove(&s);
                if seq_lt(n, e) {
                    n = e;
                }
            } else {
                break;
            }
        }
        self.rcv_nxt = Some(n);
    }

    /// Data `rel..end` reached the receiver; an arrival that needs an
    /// immediate ACK is added to `arrivals`.
    pub(crate) fn on_data(
        &mut self,
        arrivals: &mut Vec<Arrival>,
        rel: u32,
        end: u32,
        at: Evidence,
        ts: u64,
        packet: u32,
    ) {
        let nxt = *self.rcv_nxt.get_or_insert(rel);
        let kind = if seq_lt(nxt, rel) {
            Some("out-of-order")
        } else if seq_le(rel, nxt) && seq_lt(nxt, end) && !self.ooo.is_empty() {
            Some("fills-hole")
        } else {
            None
        };
        if seq_lt(nxt, rel) {
            self.ooo
                .entry(rel)
                .and_modify(|e| {
                    if seq_lt(*e, end) {
                        *e = end
                    }
                })
                .or_insert(end);
        } else if seq_lt(nxt, end) {
            self.advance_to(end);
            let n = self.rcv_nxt.unwrap_or(end);
            self.beyond.retain(|&(_, r)| !seq_lt(r, n));
        }
        if let Some(kind) = kind {
            let first_of_hole =
                kind == "out-of-order" && self.ooo.len() == 1 && self.ooo.contains_key(&rel);
            arrivals.push(Arrival {
                at,
                ts_ns: ts,
                packet,
                kind,
                answer: None,
                answer_ts_ns: None,
                first_of_hole,
                in_capture_gap: false,
            });
            self.unanswered.push(arrivals.len() - 1);
            if kind == "out-of-order" {
                self.beyond.push((arrivals.len() - 1, rel));
            }
        }
    }
}
