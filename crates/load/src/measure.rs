//! One interval's figures (seed 002 §6). Each packet carries the version
//! bit of the interval it was sent in; the sender's and the receiver's
//! counters are kept per version, and a version's are read only after it
//! has been retired for longer than the DUT can hold a packet, so what
//! was sent and what arrived in it are counted over the same packets:
//! no cross-interval "loss" (Figure 5). The naive counters, read at the
//! same instants without versions, are kept beside them to show it.

use serde::Serialize;

/// A side's counts for one version (or the naive totals' difference).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Side {
    pub packets: u64,
    pub bytes: u64,
    /// The mean time of the packets (ns on the shared clock): Norma's
    /// B + T/P.
    pub mean_ns: Option<f64>,
}

/// One interval, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    pub sent: Side,
    pub received: Side,
    /// sent − received (negative: duplicates).
    pub lost: i64,
    /// The naive counters' "loss": the difference of totals read at the
    /// interval's two ends.
    pub naive_lost: i64,
    /// The blind average delay, §6.2: d = (B_i + T_i/P_i) − (B_o + T_o/P_o)
    /// (ns). App. D bounds its error by drops / the send rate.
    pub blind_delay_ns: Option<f64>,
}

impl Interval {
    pub fn of(sent: Side, received: Side, naive_sent: u64, naive_received: u64) -> Interval {
        Interval {
            sent,
            received,
            lost: sent.packets as i64 - received.packets as i64,
            naive_lost: naive_sent as i64 - naive_received as i64,
            blind_delay_ns: match (sent.mean_ns, received.mean_ns) {
                (Some(o), Some(i)) => Some(i - o),
                _ => None,
            },
        }
    }
}

/// Norma's worked example (§6.2, Figure 6) as a check of the formula: the
/// base times 1000 and 1005, three packets each.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norma_s_figure_6() {
        let side = |base: f64, sum: f64, n: u64| Side {
            packets: n,
            bytes: 0,
            mean_ns: Some(base + sum / n as f64),
        };
        let i = Interval::of(side(1000.0, 60.0, 3), side(1005.0, 360.0, 3), 3, 2);
        assert_eq!(i.blind_delay_ns, Some(105.0));
        assert_eq!(i.lost, 0);
        assert_eq!(i.naive_lost, 1);
        let none = Interval::of(side(1000.0, 60.0, 3), Side::default(), 3, 0);
        assert_eq!(none.blind_delay_ns, None);
        assert_eq!(none.lost, 3);
    }
}
