//! The reaction point (802.1Qau; Alizadeh et al. 2008 §3.2; NetBump §4.3),
//! byte-counter only, as NetBump ran it (§6.3.3: "We use the byte
//! counter-only model of RP"). It keeps a current rate CR and a target
//! rate TR:
//!
//! - a CNM with quantised feedback Fb: TR ← CR, CR ← CR (1 − G_d |Fb|)
//!   (G_d |Fb_max| = 1/2: at most halved), and a new count of cycles;
//! - every cycle of frames sent: during the first `fr_cycles` cycles (fast
//!   recovery) CR ← (CR + TR) / 2; after them (additive increase)
//!   TR ← TR + R_AI, then CR ← (CR + TR) / 2.
//!
//! Rates are capped at the line rate; until the first CNM the limiter is
//! off (the sender runs at line rate). Integer bits per second throughout.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpParams {
    /// The rate before any feedback and the cap, bits/s.
    pub line_rate: u64,
    /// The rate is never cut below this, bits/s.
    pub min_rate: u64,
    /// The quantised |Fb| that halves the rate (the CP's `fb_max`):
    /// G_d = 1 / (2 fb_max).
    pub fb_max: u64,
    /// Additive increase per cycle, bits/s (802.1Qau: 5 Mb/s; NetBump
    /// §6.3.3: 1.5 Mb/s).
    pub r_ai: u64,
    /// Frames per cycle in fast recovery (NetBump §4.3: 100; §6.3.3: 600).
    pub fr_cycle_frames: u64,
    /// Frames per cycle in additive increase (NetBump: 100).
    pub ai_cycle_frames: u64,
    /// Cycles of fast recovery before additive increase (802.1Qau: 5).
    pub fr_cycles: u32,
}

impl RpParams {
    pub fn standard(line_rate: u64) -> RpParams {
        RpParams {
            line_rate,
            min_rate: 1_000_000,
            fb_max: 63,
            r_ai: 5_000_000,
            fr_cycle_frames: 100,
            ai_cycle_frames: 100,
            fr_cycles: 5,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No feedback yet: not limiting.
    Idle,
    FastRecovery,
    AdditiveIncrease,
}

/// One change of the rate, for the log the lab writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Change {
    pub now_ns: u64,
    pub current_bps: u64,
    pub target_bps: u64,
    pub phase: Phase,
    /// The CNM's quantised feedback, 0 for a cycle's increase.
    pub fb: u8,
}

#[derive(Debug, Clone)]
pub struct ReactionPoint {
    p: RpParams,
    cr: u64,
    tr: u64,
    phase: Phase,
    /// Frames counted towards the current cycle.
    frames: u64,
    /// Cycles completed since the last CNM.
    cycles: u32,
    pub cnms: u64,
}

impl ReactionPoint {
    pub fn new(p: RpParams) -> ReactionPoint {
        ReactionPoint {
            cr: p.line_rate,
            tr: p.line_rate,
            p,
            phase: Phase::Idle,
            frames: 0,
            cycles: 0,
            cnms: 0,
        }
    }

    pub fn rate_bps(&self) -> u64 {
        self.cr
    }
    pub fn target_bps(&self) -> u64 {
        self.tr
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn change(&self, now_ns: u64, fb: u8) -> Change {
        Change {
            now_ns,
            current_bps: self.cr,
            target_bps: self.tr,
            phase: self.phase,
            fb,
        }
    }

    /// A CNM arrived with quantised feedback `fb` (1..=fb_max).
    pub fn on_cnm(&mut self, now_ns: u64, fb: u8) -> Change {
        self.cnms += 1;
        let fb_max = self.p.fb_max.max(1);
        let q = u64::from(fb).min(fb_max);
        self.tr = self.cr;
        // CR (1 − q / (2 fb_max)), exactly in integers.
        let cut = (u128::from(self.cr) * u128::from(q) / u128::from(2 * fb_max)) as u64;
        self.cr = (self.cr - cut).max(self.p.min_rate);
        self.phase = Phase::FastRecovery;
        self.frames = 0;
        self.cycles = 0;
        self.change(now_ns, fb)
    }

    fn cycle_len(&self) -> u64 {
        match self.phase {
            Phase::AdditiveIncrease => self.p.ai_cycle_frames,
            _ => self.p.fr_cycle_frames,
        }
        .max(1)
    }

    /// `n` more frames left the rate limiter. Returns each rate change the
    /// cycles they completed made, oldest first.
    pub fn on_frames(&mut self, now_ns: u64, n: u64) -> Vec<Change> {
        let mut out = Vec::new();
        if self.phase == Phase::Idle {
            return out;
        }
        self.frames += n;
        while self.frames >= self.cycle_len() {
            self.frames -= self.cycle_len();
            self.cycles += 1;
            if self.phase == Phase::AdditiveIncrease {
                self.tr = (self.tr + self.p.r_ai).min(self.p.line_rate);
            }
            self.cr = (self.cr + self.tr).div_ceil(2).min(self.p.line_rate);
            out.push(self.change(now_ns, 0));
            // After `fr_cycles` cycles of fast recovery the next cycle is
            // additive increase, with its own (shorter) length.
            if self.phase == Phase::FastRecovery && self.cycles >= self.p.fr_cycles {
                self.phase = Phase::AdditiveIncrease;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: u64 = 1_000_000;

    fn rp() -> ReactionPoint {
        ReactionPoint::new(RpParams {
            line_rate: 1000 * MBIT,
            min_rate: 10 * MBIT,
            fb_max: 32,
            r_ai: 2 * MBIT,
            fr_cycle_frames: 600,
            ai_cycle_frames: 100,
            fr_cycles: 5,
        })
    }

    #[test]
    fn no_feedback_no_limit() {
        let mut r = rp();
        assert!(r.on_frames(1, 10_000).is_empty());
        assert_eq!((r.rate_bps(), r.phase()), (1000 * MBIT, Phase::Idle));
    }

    #[test]
    fn a_cnm_cuts_in_proportion_to_feedback_at_most_half() {
        let mut r = rp();
        // |Fb| 8 of 32: CR × (1 − 8/64) = 875 Mb/s, TR = 1000.
        let c = r.on_cnm(10, 8);
        assert_eq!((c.current_bps, c.target_bps), (875 * MBIT, 1000 * MBIT));
        // |Fb| 32: halved: 437.5 Mb/s; TR = 875.
        r.on_cnm(20, 32);
        assert_eq!((r.rate_bps(), r.target_bps()), (437_500_000, 875 * MBIT));
        // Beyond fb_max is fb_max.
        r.on_cnm(30, 63);
        assert_eq!(r.rate_bps(), 218_750_000);
    }

    #[test]
    fn the_rate_never_falls_below_the_minimum() {
        let mut r = rp();
        for t in 0..20 {
            r.on_cnm(t, 32);
        }
        assert_eq!(r.rate_bps(), 10 * MBIT);
    }

    #[test]
    fn fast_recovery_halves_the_gap_each_cycle_then_additive_increase() {
        let mut r = rp();
        r.on_cnm(0, 32); // CR 500, TR 1000
                         // 599 frames: no cycle yet.
        assert!(r.on_frames(1, 599).is_empty());
        // Five FR cycles of 600 frames: 750, 875, 937.5, 968.75, 984.375.
        let c = r.on_frames(2, 1 + 4 * 600);
        let rates: Vec<u64> = c.iter().map(|c| c.current_bps).collect();
        assert_eq!(
            rates,
            vec![
                750_000_000,
                875_000_000,
                937_500_000,
                968_750_000,
                984_375_000
            ]
        );
        assert!(c.iter().all(|c| c.phase == Phase::FastRecovery));
        // AI: cycles of 100 frames, TR += 2 Mb/s, CR = (CR + TR) / 2.
        let c = r.on_frames(3, 100);
        assert_eq!(c[0].phase, Phase::AdditiveIncrease);
        assert_eq!(c[0].target_bps, 1000 * MBIT); // capped at line rate
        assert_eq!(c[0].current_bps, 992_187_500);
    }

    #[test]
    fn additive_increase_raises_the_target_each_cycle() {
        let mut r = rp();
        r.on_cnm(0, 32); // 500 / 1000
        r.on_cnm(1, 32); // 250 / 500
        r.on_frames(2, 5 * 600); // FR: 375, 437.5, 468.75, 484.375, 492.1875
        assert_eq!(r.rate_bps(), 492_187_500);
        let c = r.on_frames(3, 200);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].target_bps, 502 * MBIT);
        assert_eq!(c[0].current_bps, 497_093_750);
        assert_eq!(c[1].target_bps, 504 * MBIT);
        assert_eq!(c[1].current_bps, 500_546_875);
        // A new CNM restarts fast recovery from the current rate.
        let c = r.on_cnm(4, 16);
        assert_eq!(c.phase, Phase::FastRecovery);
        assert_eq!(c.target_bps, 500_546_875);
        assert_eq!(c.current_bps, 500_546_875 - 500_546_875 / 4);
    }
}
