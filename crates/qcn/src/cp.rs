//! The congestion point (802.1Qau; Alizadeh et al. 2008 §3; NetBump §4.3):
//! on each frame the queue is sampled with a probability that grows with
//! the congestion, and a sample computes
//!
//! ```text
//!   Q_off = Q − Q_eq,  Q_δ = Q − Q_old,  Fb = −(Q_off + w·Q_δ)
//! ```
//!
//! where Q_old is the queue at the previous sample. Fb < 0 sends a CNM with
//! |Fb| quantised to 6 bits; Fb ≥ 0 sends nothing. The switch runs this in
//! BPF (`stage_vaqm.h`, `vq_qcn`); this module is the reference its fixtures and
//! the `vaqm` analyzer check it against, integer for integer.

use serde::{Deserialize, Serialize};

/// Probabilities are kept in 2^-32 (as in the switch).
pub const P_ONE: u64 = 1 << 32;

/// The congestion point's parameters in the switch's integer units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpParams {
    /// Equilibrium queue Q_eq, bytes (802.1Qau: 20% of the buffer).
    pub q_eq: u64,
    /// Weight of the queue's growth, w (802.1Qau: 2; NetBump §6.3.3: 1).
    pub w: u64,
    /// The quantised |Fb| at which feedback saturates: 63 for 802.1Qau's
    /// 6 bits (NetBump §6.3.3 used 32).
    pub fb_max: u64,
    /// Sampling probability with no congestion, in 2^-32 (1%).
    pub p_min: u64,
    /// Sampling probability at |Fb| = fb_max, in 2^-32 (10%; NetBump
    /// §6.3.3 plateaued at 20%).
    pub p_max: u64,
}

impl CpParams {
    /// 802.1Qau's defaults for a queue with equilibrium `q_eq` bytes.
    pub fn standard(q_eq: u64) -> CpParams {
        CpParams {
            q_eq,
            w: 2,
            fb_max: 63,
            p_min: prob(0.01),
            p_max: prob(0.10),
        }
    }

    /// |Fb| that maps to `fb_max`: Q_eq (1 + 2w), the feedback of a queue
    /// at 2 Q_eq that grew by Q_eq since the last sample (Alizadeh et al.
    /// 2008: "Fb_max = Q_eq (1 + 2w)").
    pub fn fb_range(&self) -> u64 {
        (self.q_eq * (1 + 2 * self.w)).max(1)
    }
}

/// A probability in 2^-32.
pub fn prob(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * P_ONE as f64).round() as u64
}

/// The feedback of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feedback {
    /// Fb in bytes (negative = congestion).
    pub fb: i64,
    /// |Fb| quantised to 1..=fb_max when Fb < 0, else 0 (no CNM).
    pub quantised: u64,
    pub q_off: i64,
    pub q_delta: i64,
}

/// Fb for a queue of `q` bytes whose previous sample saw `q_old`.
pub fn feedback(p: &CpParams, q: u64, q_old: u64) -> Feedback {
    let q_off = q as i64 - p.q_eq as i64;
    let q_delta = q as i64 - q_old as i64;
    let fb = -(q_off + p.w as i64 * q_delta);
    let quantised = if fb < 0 {
        // Rounded down but at least 1: any congestion is reported.
        ((fb.unsigned_abs() * p.fb_max) / p.fb_range()).clamp(1, p.fb_max)
    } else {
        0
    };
    Feedback {
        fb,
        quantised,
        q_off,
        q_delta,
    }
}

/// The chance a frame is sampled given the last sample's quantised |Fb|:
/// linear from `p_min` at 0 to `p_max` at `fb_max` (NetBump §4.3: "starts
/// from 1% and plateaus at 10% when |Fb| ≥ Fb_max"), in 2^-32.
pub fn sample_probability(p: &CpParams, quantised: u64) -> u64 {
    let q = quantised.min(p.fb_max);
    p.p_min + (p.p_max.saturating_sub(p.p_min)) * q / p.fb_max.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> CpParams {
        CpParams::standard(20_000)
    }

    #[test]
    fn a_queue_at_equilibrium_that_did_not_grow_gives_no_feedback() {
        let f = feedback(&p(), 20_000, 20_000);
        assert_eq!((f.fb, f.quantised), (0, 0));
    }

    #[test]
    fn fb_is_minus_offset_minus_w_times_growth() {
        // Q = 30 KB, Q_old = 25 KB: Q_off = 10 KB, Q_δ = 5 KB, w = 2.
        let f = feedback(&p(), 30_000, 25_000);
        assert_eq!(f.fb, -(10_000 + 2 * 5_000));
        // |Fb| 20000 of a range 20000 × 5 = 100000, × 63 = 12.6 -> 12.
        assert_eq!(f.quantised, 12);
    }

    #[test]
    fn a_shrinking_queue_above_equilibrium_can_give_no_feedback() {
        // Q_off = +5 KB but Q_δ = −10 KB: Fb = −(5000 − 20000) > 0.
        assert_eq!(feedback(&p(), 25_000, 35_000).quantised, 0);
    }

    #[test]
    fn feedback_saturates_at_fb_max_and_is_at_least_one() {
        assert_eq!(feedback(&p(), 1_000_000, 0).quantised, 63);
        // Fb = −1 byte: reported as 1.
        assert_eq!(feedback(&p(), 20_001, 20_001).quantised, 1);
    }

    #[test]
    fn sampling_grows_linearly_from_p_min_to_p_max() {
        let p = p();
        assert_eq!(sample_probability(&p, 0), p.p_min);
        assert_eq!(sample_probability(&p, 63), p.p_max);
        assert_eq!(sample_probability(&p, 100), p.p_max);
        let mid = sample_probability(&p, 21);
        assert_eq!(mid, p.p_min + (p.p_max - p.p_min) * 21 / 63);
    }
}
