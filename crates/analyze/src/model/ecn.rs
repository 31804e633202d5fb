//! RFC 3168 §6.1 at the vantage point: each CE mark on data, the ACK that
//! echoes it (ECE), and the sender's CWR on its next new data.

use super::{seq_le, EcnMark};
use crate::Evidence;

#[derive(Debug, Default)]
pub(crate) struct EcnTracker {
    /// Marks (indexes into `ConnAnalysis::ce_marks`) not echoed yet.
    pending_echo: Vec<usize>,
    /// Echoed marks the sender has not answered with CWR yet.
    awaiting_cwr: Vec<usize>,
}

impl EcnTracker {
    /// A segment (not a SYN) from the receiver: an ACK up to `ack_rel`
    /// when it has one, ECE set or not.
    pub(crate) fn on_ack(
        &mut self,
        marks: &mut [EcnMark],
        ack_rel: Option<u32>,
        ece: bool,
        at: Evidence,
        ts: u64,
    ) {
        if let Some(a) = ack_rel {
            for &m in &self.pending_echo {
                let mark = &mut marks[m];
                if mark.acked_by.is_none() && seq_le(mark.end_rel, a) {
                    mark.acked_by = Some(at);
                }
            }
        }
        if ece {
            for m in self.pending_echo.drain(..) {
                let mark = &mut marks[m];
                mark.echo = Some(at);
                mark.echo_latency_ns = Some(ts.saturating_sub(mark.ts_ns));
                self.awaiting_cwr.push(m);
            }
        }
    }

    /// A data packet from the sender: CE-marked (`ecn == 3`), a first
    /// transmission, with CWR set, lost before the receiver.
    pub(crate) fn on_data(
        &mut self,
        marks: &mut Vec<EcnMark>,
        (ecn, first, cwr, lost): (u8, bool, bool, bool),
        at: Evidence,
        ts: u64,
        packet: u32,
        end_rel: u32,
    ) {
        if ecn == 3 {
            marks.push(EcnMark {
                at,
                ts_ns: ts,
                packet,
                echo: None,
                echo_latency_ns: None,
                cwr: None,
                cwr_latency_ns: None,
                data_after_echo: false,
                acked_by: None,
                end_rel,
                lost,
            });
            self.pending_echo.push(marks.len() - 1);
        }
        if first {
            for &m in &self.awaiting_cwr {
                marks[m].data_after_echo = true;
            }
        }
        if cwr {
            for m in self.awaiting_cwr.drain(..) {
                let mark = &mut marks[m];
                mark.cwr = Some(at);
                mark.cwr_latency_ns = mark
                    .echo_latency_ns
                    .map(|e| ts.saturating_sub(mark.ts_ns).saturating_sub(e));
            }
        }
    }
}
