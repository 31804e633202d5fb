//! Lumina's iteration counter (§3.3): a connection's data packets are
//! numbered in rounds; a packet whose sequence number is not above the
//! previous data packet's starts a new iteration (a retransmission round).
//! The switch applies the same rule (`switch.bpf.c`), and the golden test
//! `the_iteration_tracker_agrees_with_the_switch` holds the two together.

use super::seq_le;

/// The ITER rule over one connection's data packets, in capture order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IterTracker {
    iter: u32,
    /// The previous data packet's relative sequence number, if any.
    last: Option<u32>,
}

impl Default for IterTracker {
    fn default() -> Self {
        IterTracker {
            iter: 1,
            last: None,
        }
    }
}

impl IterTracker {
    /// A SYN: Lumina's register starts over with a new connection.
    pub(crate) fn restart(&mut self) {
        *self = IterTracker::default();
    }

    /// The iteration of a data packet starting at `rel`.
    pub(crate) fn on_data(&mut self, rel: u32) -> u32 {
        if self.last.is_some_and(|last| seq_le(rel, last)) {
            self.iter += 1;
        }
        self.last = Some(rel);
        self.iter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lumina §3.3's example shape: 1 2 3 4, then 2 again (round 2), then
    /// 3 4 follow it, then 2 once more (round 3).
    #[test]
    fn a_packet_not_above_the_previous_one_starts_an_iteration() {
        let mut t = IterTracker::default();
        let rels = [1, 1449, 2897, 4345, 1449, 2897, 4345, 1449, 5793];
        let got: Vec<u32> = rels.iter().map(|&r| t.on_data(r)).collect();
        assert_eq!(got, [1, 1, 1, 1, 2, 2, 2, 3, 3]);
        // Sequence numbers wrap (RFC 9293 §3.4).
        let mut w = IterTracker::default();
        assert_eq!(w.on_data(u32::MAX - 100), 1);
        assert_eq!(w.on_data(1348), 1, "past the wrap is above");
        assert_eq!(w.on_data(u32::MAX - 100), 2);
        w.restart();
        assert_eq!(w.on_data(u32::MAX - 100), 1, "a SYN starts over");
    }
}
