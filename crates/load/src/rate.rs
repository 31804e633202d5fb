//! Norma's multi-stage rate and burst control (seed 002 §5.2, Figure 4):
//! a meter, then cascaded units that each skip `m` packets after passing
//! `n`. The meter runs in whole nanoseconds per packet, so like a hardware
//! meter it cannot express every rate: it is set at or above the rate
//! asked for, and units trim the rest ("10.1 Gbps × 100/(1 + 100) =
//! 10 Gbps"). A burst is a unit too ("pass 1,000, skip 1,500" makes a
//! 10 Gbps peak a 4 Gbps average).

use serde::Serialize;

/// What a user asks for: an average rate, and optionally bursts of
/// `burst` packets sent at `peak_pps`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    pub pps: f64,
    pub burst: Option<Burst>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    pub packets: u32,
    pub peak_pps: f64,
}

/// One "skip m after passing n" unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Unit {
    pub pass: u32,
    pub skip: u32,
}

impl Unit {
    /// The share of its input it passes.
    pub fn fraction(&self) -> f64 {
        f64::from(self.pass) / (f64::from(self.pass) + f64::from(self.skip))
    }
}

/// What the control plane chose, and the rate it makes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The meter: one packet per `interval_ns`.
    pub interval_ns: u64,
    /// The cascade, in order: precision units first, then the burst unit
    /// (so a burst is exactly its packets long).
    pub units: Vec<Unit>,
    /// The burst unit's index in `units`, if any.
    pub burst_unit: Option<usize>,
    /// The rate these make (packets per second), exactly as a product of
    /// the meter and the units' fractions.
    pub pps: f64,
    /// (pps − requested) / requested.
    pub error: f64,
}

impl Plan {
    /// One line for the terminal: what was chosen.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "meter {} ns/packet ({:.6} Mpps)",
            self.interval_ns,
            1e3 / self.interval_ns as f64
        );
        for (i, u) in self.units.iter().enumerate() {
            let what = if Some(i) == self.burst_unit {
                "burst"
            } else {
                "trim"
            };
            s.push_str(&format!(", {what}: skip {} after {}", u.skip, u.pass));
        }
        s.push_str(&format!(
            " = {:.6} Mpps, {:+.1e} off the request",
            self.pps / 1e6,
            self.error
        ));
        s
    }
}

/// Why a request cannot be met.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    NotPositive,
    /// Faster than one packet per nanosecond.
    TooFast,
    /// A burst whose peak is below the average, or of no packets.
    BadBurst,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::NotPositive => "the rate must be above 0",
            Error::TooFast => "the meter cannot go faster than 1 packet per ns",
            Error::BadBurst => {
                "a burst needs at least 1 packet and a peak rate at least the average"
            }
        })
    }
}

impl std::error::Error for Error {}

/// Precision units are trimmed until the rate is this close.
const GOAL: f64 = 1e-9;

/// Chooses the meter and at most `units` units for `req`.
pub fn plan(req: Request, units: usize) -> Result<Plan, Error> {
    if !req.pps.is_finite() || req.pps <= 0.0 {
        return Err(Error::NotPositive);
    }
    let peak = match req.burst {
        Some(b) if b.packets == 0 || !b.peak_pps.is_finite() || b.peak_pps < req.pps => {
            return Err(Error::BadBurst)
        }
        Some(b) => b.peak_pps,
        None => req.pps,
    };
    // The meter at or above the peak: the largest whole interval.
    let interval_ns = (1e9 / peak).floor() as u64;
    if interval_ns == 0 {
        return Err(Error::TooFast);
    }
    let meter = 1e9 / interval_ns as f64;
    // The burst unit passes `packets`, then skips enough that the average
    // is at most the peak's share; skipping whole packets rounds down, so
    // the average stays at or above the request, for the trim to fix.
    let burst = req.burst.filter(|b| b.peak_pps > req.pps).map(|b| Unit {
        pass: b.packets,
        // A whole number lost to rounding (2.4999... for 2.5) is kept whole.
        skip: (f64::from(b.packets) * (b.peak_pps / req.pps - 1.0) + 1e-6).floor() as u32,
    });
    let burst = burst.filter(|u| u.skip > 0);
    let mut pps = meter * burst.map_or(1.0, |u| u.fraction());
    let mut out = Vec::new();
    let trims = units.saturating_sub(burst.is_some() as usize);
    // Each trim "skips 1 after n" with the smallest n that keeps the rate
    // at or above the request; the next trims what is left, more finely.
    while out.len() < trims {
        let g = req.pps / pps;
        if g >= 1.0 - GOAL {
            break;
        }
        let n = (g / (1.0 - g)).ceil();
        if n > f64::from(u32::MAX) {
            break;
        }
        let u = Unit {
            pass: n as u32,
            skip: 1,
        };
        pps *= u.fraction();
        out.push(u);
    }
    let burst_unit = burst.map(|u| {
        out.push(u);
        out.len() - 1
    });
    Ok(Plan {
        interval_ns,
        units: out,
        burst_unit,
        pps,
        error: (pps - req.pps) / req.pps,
    })
}

/// The cascade as the generator runs it: whether each meter slot leaves.
#[derive(Debug, Clone)]
pub struct Cascade {
    units: Vec<Unit>,
    pos: Vec<u32>,
}

impl Cascade {
    pub fn new(units: &[Unit]) -> Cascade {
        Cascade {
            units: units.to_vec(),
            pos: vec![0; units.len()],
        }
    }

    /// The next meter slot: passed by every unit? A unit sees only what
    /// the ones before it passed (Figure 4).
    pub fn pass(&mut self) -> bool {
        for (u, p) in self.units.iter().zip(self.pos.iter_mut()) {
            let at = *p;
            *p = if at + 1 >= u.pass + u.skip { 0 } else { at + 1 };
            if at >= u.pass {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norma_s_two_examples() {
        // §5.2: pass 1,000, skip 1,500 of a 10 Gbit/s peak is a
        // 4 Gbit/s average, in bursts of 1,000 (here in packets: 1518 B
        // frames, 10 Gbit/s is 823,452 pps at 1518+20 bytes on the wire).
        let peak = 10e9 / (1538.0 * 8.0);
        let p = plan(
            Request {
                pps: peak * 0.4,
                burst: Some(Burst {
                    packets: 1000,
                    peak_pps: peak,
                }),
            },
            4,
        )
        .unwrap();
        let b = p.units[p.burst_unit.unwrap()];
        assert_eq!((b.pass, b.skip), (1000, 1500));
        assert_eq!(p.burst_unit, Some(p.units.len() - 1));
        assert!(p.error.abs() < 1e-9, "{p:?}");
        // A rate the meter cannot make exactly: 3 Mpps is 333.3 ns.
        let p = plan(
            Request {
                pps: 3e6,
                burst: None,
            },
            4,
        )
        .unwrap();
        assert_eq!(p.interval_ns, 333);
        assert_eq!(p.units[0], Unit { pass: 999, skip: 1 });
        assert!(p.error.abs() < 1e-9 && p.error >= 0.0, "{p:?}");
    }

    #[test]
    fn every_rate_within_a_billionth_with_three_trims() {
        let mut worst: f64 = 0.0;
        for i in 0..2000 {
            // 10 kpps to ~30 Mpps, not round.
            let pps = 1e4 * 1.004_f64.powi(i) * 1.000_037;
            let p = plan(Request { pps, burst: None }, 3).unwrap();
            assert!(p.units.iter().all(|u| u.skip == 1 && u.pass >= 1));
            assert!(p.error >= -1e-12, "{pps}: {p:?}");
            worst = worst.max(p.error.abs());
        }
        assert!(worst < 1e-8, "worst {worst}");
        // One unit alone leaves at most what one skip in n can fix.
        let p = plan(
            Request {
                pps: 2_999_999.0,
                burst: None,
            },
            1,
        )
        .unwrap();
        assert!(p.error.abs() < 1e-5, "{p:?}");
    }

    #[test]
    fn the_cascade_passes_its_fraction_and_bursts_are_whole() {
        let p = plan(
            Request {
                pps: 1e6,
                burst: Some(Burst {
                    packets: 8,
                    peak_pps: 2.5e6,
                }),
            },
            4,
        )
        .unwrap();
        let mut c = Cascade::new(&p.units);
        let slots = 2_000_000u64;
        let mut passed = 0u64;
        let mut run = 0u32;
        let mut runs = std::collections::BTreeMap::new();
        for _ in 0..slots {
            if c.pass() {
                passed += 1;
                run += 1;
            } else if run > 0 {
                *runs.entry(run).or_insert(0u32) += 1;
                run = 0;
            }
        }
        let want = slots as f64 * p.interval_ns as f64 * 1e-9 * 1e6;
        assert!((passed as f64 - want).abs() <= 8.0, "{passed} vs {want}");
        // Every burst is 8 packets back to back at the peak, except where a
        // trim's skip falls inside one (it never adds a packet).
        assert!(runs.keys().all(|&r| r <= 8), "{runs:?}");
        let eights = runs.get(&8).copied().unwrap_or(0);
        let all: u32 = runs.values().sum();
        assert!(eights as f64 > 0.9 * all as f64, "{runs:?}");
    }

    #[test]
    fn bad_requests_are_refused() {
        assert_eq!(
            plan(
                Request {
                    pps: 0.0,
                    burst: None
                },
                2
            ),
            Err(Error::NotPositive)
        );
        assert_eq!(
            plan(
                Request {
                    pps: f64::NAN,
                    burst: None
                },
                2
            ),
            Err(Error::NotPositive)
        );
        assert_eq!(
            plan(
                Request {
                    pps: 2e9,
                    burst: None
                },
                2
            ),
            Err(Error::TooFast)
        );
        let b = |packets, peak_pps| Request {
            pps: 1e6,
            burst: Some(Burst { packets, peak_pps }),
        };
        assert_eq!(plan(b(0, 2e6), 2), Err(Error::BadBurst));
        assert_eq!(plan(b(4, 0.5e6), 2), Err(Error::BadBurst));
    }
}
