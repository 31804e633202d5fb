//! The receiver's view: what arrived in order, and the arrivals it had to
//! answer at once (RFC 5681 §4.2: an out-of-order segment, or one that
//! fills a hole).

use std::collections::BTreeMap;

use super::{seq_le, seq_lt, Arrival};
use crate::Evidence;

#[derive(Debug, Default)]
pub(crate) struct Receiver {
    /// Next expected byte (relative).
    rcv_nxt: Option<u32>,
    /// Out-of-order ranges held, start -> end.
    ooo: BTreeMap<u32, u32>,
    /// Arrivals (indexes into `ConnAnalysis::arrivals`) not answered yet.
    unanswered: Vec<usize>,
}

impl Receiver {
    /// Any ACK the receiver sends answers the arrivals before it.
    pub(crate) fn on_ack(&mut self, arrivals: &mut [Arrival], at: Evidence, ts: u64) {
        for i in self.unanswered.drain(..) {
            arrivals[i].answer = Some(at);
            arrivals[i].answer_ts_ns = Some(ts);
        }
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
            let mut n = end;
            // Pull in the out-of-order ranges the new data reaches.
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
            });
            self.unanswered.push(arrivals.len() - 1);
        }
    }
}
