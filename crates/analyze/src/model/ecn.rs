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
    /// The last CWR, and where the window it reduced ends: the relative
    /// sequence of the data that carried it (the sender's `snd_nxt` when
    /// it reduced, Linux's `high_seq`).
    reduction: Option<(Evidence, u32)>,
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
            // An echo acknowledging no further than the last reduced
            // window: the sender already reduced once for that window.
            let within = self
                .reduction
                .zip(ack_rel)
                .filter(|((_, high), a)| seq_le(*a, *high))
                .map(|((w, _), _)| w);
            for m in self.pending_echo.drain(..) {
                let mark = &mut marks[m];
                mark.echo = Some(at);
                mark.echo_latency_ns = Some(ts.saturating_sub(mark.ts_ns));
                match within {
                    Some(w) => mark.in_reduction_of = Some(w),
                    None => self.awaiting_cwr.push(m),
                }
            }
        }
    }

    /// A data packet [`rel`, `end_rel`) from the sender: CE-marked
    /// (`ecn == 3`), a first transmission, with CWR set, lost before the
    /// receiver.
    pub(crate) fn on_data(
        &mut self,
        marks: &mut Vec<EcnMark>,
        (ecn, first, cwr, lost): (u8, bool, bool, bool),
        at: Evidence,
        ts: u64,
        packet: u32,
        (rel, end_rel): (u32, u32),
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
                in_reduction_of: None,
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
            self.reduction = Some((at, rel));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(frame: u64) -> Evidence {
        Evidence {
            frame,
            mirror_seq: None,
        }
    }

    /// RFC 3168 §6.1.2: one reduction, and one CWR, a window. An echo that
    /// acknowledges no further than the window the last CWR reduced needs
    /// no CWR of its own (seen in the lab: DCTCP's sender, in its CWR
    /// state, got an ECE on an ACK for older data right after a new mark,
    /// sent new data, and rightly set no CWR); an echo past it does.
    #[test]
    fn an_echo_inside_a_reduced_window_needs_no_cwr_of_its_own() {
        let mut t = EcnTracker::default();
        let mut m = Vec::new();
        let data = |t: &mut EcnTracker, m: &mut Vec<EcnMark>, f: u64, ce, cwr, rel| {
            let ecn = if ce { 3 } else { 2 };
            t.on_data(
                m,
                (ecn, true, cwr, false),
                ev(f),
                f * 10,
                f as u32,
                (rel, rel + 1000),
            );
        };
        data(&mut t, &mut m, 1, true, false, 0); // mark 0
        t.on_ack(&mut m, Some(1000), true, ev(2), 20); // its echo
        data(&mut t, &mut m, 3, false, true, 5000); // CWR: reduced up to 5000
        assert_eq!(m[0].cwr, Some(ev(3)));
        data(&mut t, &mut m, 4, true, false, 6000); // mark 1
        t.on_ack(&mut m, Some(3000), true, ev(5), 50); // ECE inside the window
        data(&mut t, &mut m, 6, false, false, 7000); // new data, no CWR
        assert_eq!(m[1].in_reduction_of, Some(ev(3)));
        assert!(!m[1].data_after_echo, "nothing was due");
        data(&mut t, &mut m, 7, true, false, 8000); // mark 2
        t.on_ack(&mut m, Some(9000), true, ev(8), 80); // ECE past 5000
        data(&mut t, &mut m, 9, false, false, 9000); // new data, no CWR
        assert_eq!(m[2].in_reduction_of, None);
        assert!(m[2].data_after_echo && m[2].cwr.is_none(), "a CWR was due");
    }
}
