//! DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//! SIGCOMM 2015, §3.1): the notification point's CNP limiter and the
//! reaction point's rate machine. Pure state: every call takes `now`.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

pub use crate::profile::CnpScope;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LimiterKey {
    Qp(u32),
    Ip(Ipv4Addr),
    Port,
}

/// Notification point: decides whether a CE-marked packet yields a CNP.
#[derive(Debug, Clone)]
pub struct CnpLimiter {
    pub scope: CnpScope,
    pub min_interval_ns: u64,
    last: HashMap<LimiterKey, u64>,
}

impl CnpLimiter {
    pub fn new(scope: CnpScope, min_interval_ns: u64) -> CnpLimiter {
        CnpLimiter {
            scope,
            min_interval_ns,
            last: HashMap::new(),
        }
    }

    /// A CE-marked packet arrived for local QP `qpn` from `src`: true if a
    /// CNP is sent now (and the limiter restarts).
    pub fn on_marked(&mut self, now: u64, qpn: u32, src: Ipv4Addr) -> bool {
        let key = match self.scope {
            CnpScope::Qp => LimiterKey::Qp(qpn),
            CnpScope::Ip => LimiterKey::Ip(src),
            CnpScope::Port => LimiterKey::Port,
        };
        match self.last.get(&key) {
            Some(&t) if now.saturating_sub(t) < self.min_interval_ns => false,
            _ => {
                self.last.insert(key, now);
                true
            }
        }
    }
}

/// Reaction point parameters. Defaults are the DCQCN paper's (§5, Table
/// "DCQCN parameters" for 40 GbE): g = 1/256, alpha timer K = 55 µs, rate
/// increase timer T = 55 µs, byte counter B = 10 MB, F = 5 fast recovery
/// steps, R_AI = 40 Mb/s. The paper's text fixes R_HAI only by reference to
/// QCN, whose ratio is R_HAI = 10 R_AI (802.1Qau: 5 and 50 Mb/s), so 400 Mb/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RpParams {
    pub g: f64,
    pub alpha_timer_ns: u64,
    pub rate_timer_ns: u64,
    pub byte_counter: u64,
    pub f: u32,
    pub rai_bps: f64,
    pub rhai_bps: f64,
    pub min_rate_bps: f64,
    pub initial_alpha: f64,
}

impl Default for RpParams {
    fn default() -> Self {
        RpParams {
            g: 1.0 / 256.0,
            alpha_timer_ns: 55_000,
            rate_timer_ns: 55_000,
            byte_counter: 10 * 1024 * 1024,
            f: 5,
            rai_bps: 40e6,
            rhai_bps: 400e6,
            min_rate_bps: 10e6,
            initial_alpha: 1.0,
        }
    }
}

/// Which rate increase step a timer or byte counter event took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Cut,
    FastRecovery,
    AdditiveIncrease,
    HyperIncrease,
}

/// Reaction point of one QP.
#[derive(Debug, Clone)]
pub struct Rp {
    pub p: RpParams,
    pub line_bps: f64,
    /// R_C, the rate the QP is paced at.
    pub rc: f64,
    /// R_T, the target rate.
    pub rt: f64,
    pub alpha: f64,
    /// Rate increase events since the last cut, from the timer and the byte counter.
    pub t_count: u32,
    pub bc_count: u32,
    bytes: u64,
    /// Timers run only while the rate is below line rate (after a cut).
    next_alpha_ns: Option<u64>,
    next_rate_ns: Option<u64>,
}

impl Rp {
    pub fn new(p: RpParams, line_bps: f64) -> Rp {
        Rp {
            p,
            line_bps,
            rc: line_bps,
            rt: line_bps,
            alpha: p.initial_alpha,
            t_count: 0,
            bc_count: 0,
            bytes: 0,
            next_alpha_ns: None,
            next_rate_ns: None,
        }
    }

    /// A CNP arrived (DCQCN §3.1 "Algorithm at RP": R_T = R_C,
    /// R_C = R_C (1 − α/2), α = (1 − g) α + g; timer and byte counter reset).
    pub fn on_cnp(&mut self, now: u64) -> Step {
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(self.p.min_rate_bps);
        self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g;
        self.t_count = 0;
        self.bc_count = 0;
        self.bytes = 0;
        self.next_alpha_ns = Some(now + self.p.alpha_timer_ns);
        self.next_rate_ns = Some(now + self.p.rate_timer_ns);
        Step::Cut
    }

    pub fn next_timer(&self) -> Option<u64> {
        match (self.next_alpha_ns, self.next_rate_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`; returns the rate steps taken.
    pub fn on_timer(&mut self, now: u64) -> Vec<Step> {
        let mut steps = Vec::new();
        // "If no CNP arrives for K, α = (1 − g) α": the alpha timer restarts on
        // every CNP (on_cnp) and on expiry.
        while let Some(t) = self.next_alpha_ns.filter(|&t| t <= now) {
            self.alpha *= 1.0 - self.p.g;
            self.next_alpha_ns = Some(t + self.p.alpha_timer_ns);
        }
        while let Some(t) = self.next_rate_ns.filter(|&t| t <= now) {
            self.t_count += 1;
            steps.push(self.increase());
            self.next_rate_ns = Some(t + self.p.rate_timer_ns);
            if self.at_line_rate() {
                break;
            }
        }
        if self.at_line_rate() {
            self.next_alpha_ns = None;
            self.next_rate_ns = None;
        }
        steps
    }

    /// Bytes sent; the byte counter expires every B bytes.
    pub fn on_sent(&mut self, bytes: u64) -> Option<Step> {
        if self.next_rate_ns.is_none() {
            return None;
        }
        self.bytes += bytes;
        if self.bytes < self.p.byte_counter {
            return None;
        }
        self.bytes -= self.p.byte_counter;
        self.bc_count += 1;
        Some(self.increase())
    }

    fn at_line_rate(&self) -> bool {
        self.rc >= self.line_bps
    }

    /// DCQCN §3.1 rate increase, taken from QCN: fast recovery while both
    /// counters are below F (R_C = (R_T + R_C)/2); additive increase once
    /// one of them reaches F (R_T += R_AI first); hyper increase once both
    /// have (R_T += i·R_HAI, i = min(T, BC) − F + 1).
    fn increase(&mut self) -> Step {
        let f = self.p.f;
        let (lo, hi) = (
            self.t_count.min(self.bc_count),
            self.t_count.max(self.bc_count),
        );
        let step = if hi < f {
            Step::FastRecovery
        } else if lo < f {
            self.rt += self.p.rai_bps;
            Step::AdditiveIncrease
        } else {
            self.rt += (lo - f + 1) as f64 * self.p.rhai_bps;
            Step::HyperIncrease
        };
        self.rt = self.rt.min(self.line_bps);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.line_bps);
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_scopes() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        let mut qp = CnpLimiter::new(CnpScope::Qp, 50_000);
        assert!(qp.on_marked(0, 1, a));
        assert!(!qp.on_marked(10_000, 1, a));
        assert!(qp.on_marked(10_000, 2, a));
        assert!(qp.on_marked(50_000, 1, a));
        let mut ip = CnpLimiter::new(CnpScope::Ip, 50_000);
        assert!(ip.on_marked(0, 1, a));
        assert!(!ip.on_marked(1, 2, a));
        assert!(ip.on_marked(2, 3, b));
        let mut port = CnpLimiter::new(CnpScope::Port, 50_000);
        assert!(port.on_marked(0, 1, a));
        assert!(!port.on_marked(49_999, 2, b));
        assert!(port.on_marked(50_000, 2, b));
        let mut none = CnpLimiter::new(CnpScope::Port, 0);
        assert!(none.on_marked(5, 1, a) && none.on_marked(5, 1, a));
    }

    /// The trajectory worked by hand from §3.1 with a 10 Gb/s line, F = 5,
    /// R_AI = 40 Mb/s, R_HAI = 400 Mb/s, T = 55 µs and no byte counter.
    #[test]
    fn rate_trajectory_matches_hand_computed_values() {
        let p = RpParams {
            byte_counter: u64::MAX,
            ..RpParams::default()
        };
        let mut rp = Rp::new(p, 10e9);
        assert_eq!(rp.on_cnp(0), Step::Cut);
        // α = 1: R_C halves; α stays (1 − g)·1 + g = 1.
        assert_eq!(rp.rc, 5e9);
        assert_eq!(rp.rt, 10e9);
        assert_eq!(rp.alpha, 1.0);
        // First alpha and rate timers at 55 µs: α = 255/256, then fast recovery
        // R_C = (10 + 5)/2 = 7.5 Gb/s.
        assert_eq!(rp.on_timer(55_000), vec![Step::FastRecovery]);
        assert!((rp.alpha - 255.0 / 256.0).abs() < 1e-12);
        assert_eq!(rp.rc, 7.5e9);
        // Three more timers (110, 165, 220 µs): 8.75, 9.375, 9.6875 Gb/s.
        let steps = rp.on_timer(4 * 55_000);
        assert_eq!(steps, vec![Step::FastRecovery; 3]);
        assert_eq!(rp.rc, 9.6875e9);
        assert!((rp.alpha - (255.0f64 / 256.0).powi(4)).abs() < 1e-12);
        // The 5th timer (t_count = F) is additive: R_T = 10 G + 40 M, capped at
        // the line rate, R_C = (10 + 9.6875)/2.
        assert_eq!(rp.on_timer(275_000), vec![Step::AdditiveIncrease]);
        assert_eq!(rp.rt, 10e9);
        assert_eq!(rp.rc, 9.84375e9);
        // A second cut with α < 1 cuts less than half.
        let alpha = rp.alpha;
        let rc = rp.rc;
        rp.on_cnp(300_000);
        assert_eq!(rp.rt, rc);
        assert!((rp.rc - rc * (1.0 - alpha / 2.0)).abs() < 1.0);
        assert!((rp.alpha - ((1.0 - p.g) * alpha + p.g)).abs() < 1e-12);
    }

    #[test]
    fn additive_and_hyper_increase_follow_the_counters() {
        let p = RpParams {
            byte_counter: 1000,
            ..RpParams::default()
        };
        let mut rp = Rp::new(p, 100e9);
        rp.on_cnp(0);
        rp.rc = 1e9;
        rp.rt = 1e9;
        // Byte counter alone: 4 fast recovery steps then additive increase.
        for _ in 0..4 {
            assert_eq!(rp.on_sent(1000), Some(Step::FastRecovery));
        }
        assert_eq!(rp.on_sent(1000), Some(Step::AdditiveIncrease));
        assert_eq!(rp.rt, 1e9 + 40e6);
        // Timer reaches F too: hyper increase with i = 1, then 2.
        for _ in 0..4 {
            rp.on_timer(rp.next_rate_ns.unwrap());
        }
        let rt = rp.rt;
        assert_eq!(
            rp.on_timer(rp.next_rate_ns.unwrap()),
            vec![Step::HyperIncrease]
        );
        assert_eq!(rp.rt, rt + 400e6);
        let rt = rp.rt;
        assert_eq!(rp.on_sent(1000), Some(Step::HyperIncrease));
        assert_eq!(rp.rt, rt + 400e6);
        let rt = rp.rt;
        assert_eq!(
            rp.on_timer(rp.next_rate_ns.unwrap()),
            vec![Step::HyperIncrease]
        );
        assert_eq!(rp.rt, rt + 2.0 * 400e6);
    }

    #[test]
    fn timers_stop_at_line_rate() {
        let mut rp = Rp::new(RpParams::default(), 1e9);
        assert_eq!(rp.next_timer(), None);
        rp.on_cnp(0);
        rp.on_timer(100 * 55_000);
        assert_eq!(rp.rc, 1e9);
        assert_eq!(rp.next_timer(), None);
    }
}
