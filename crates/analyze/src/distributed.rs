//! Distributed NetBump (seed 003 §3.2.2, §6.2.3, Figs. 6 and 11-13): bumps
//! that each forward part of the traffic into one downstream queue keep
//! their own estimate of it, from the packets they see and from the
//! updates their neighbours send: "tuples of individual packet lengths and
//! physical downstream switch and port IDs" (4 bytes per packet), sent per
//! packet or batched, arriving after a propagation delay, and merged "with
//! the algorithm in Fig. 5".
//!
//! This is the exchange as a pure model driven by a trace: each bump is a
//! leaky bucket with the switch's own integer arithmetic (`stage_vaqm.h`,
//! `wl_vq.h`), an outbox that sends a batch every `batch` packets, and an inbox applied
//! when an update arrives. Replaying a run's packets with their ingress
//! ports assigned to bumps gives each bump's estimate at every instant,
//! which is compared with the in-sync estimate (one bump seeing all, i.e.
//! the switch's own, Fig. 11) and with the real queue (Figs. 12-13). NetBump
//! measured Fig. 11 the same way: "we varied the timestamp interleaving of
//! two TCP iperf flows ... to simulate receiving delayed updates".

use std::collections::VecDeque;

const NS_PER_S: u128 = 1_000_000_000;

/// NetBump Fig. 5's leaky bucket, exactly as the switch keeps it: bytes,
/// the last update, and the part of a byte drained but not yet taken off
/// (in 1e-9 bytes); a bounded buffer leaves out what would not fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeakyBucket {
    pub rate_bytes_per_s: u64,
    pub buffer: u64,
    pub bytes: u64,
    pub last_ns: u64,
    pub frac: u64,
}

impl LeakyBucket {
    pub fn new(rate_bps: u64, buffer: u64) -> LeakyBucket {
        LeakyBucket {
            rate_bytes_per_s: rate_bps / 8,
            buffer,
            ..Default::default()
        }
    }

    /// The estimate drained to `now` (not stored): Fig. 5 lines 1-6.
    pub fn at(&self, now: u64) -> u64 {
        self.drained(now).0
    }

    fn drained(&self, now: u64) -> (u64, u64) {
        if self.last_ns == 0 || now <= self.last_ns || self.rate_bytes_per_s == 0 {
            return (self.bytes, self.frac);
        }
        let num = u128::from(now - self.last_ns) * u128::from(self.rate_bytes_per_s)
            + u128::from(self.frac);
        if num >= u128::from(self.bytes) * NS_PER_S {
            return (0, 0);
        }
        let d = (num / NS_PER_S) as u64;
        (self.bytes - d, (num - u128::from(d) * NS_PER_S) as u64)
    }

    /// Fig. 5 lines 1-8: drain to `now`, then add `len` if the buffer
    /// takes it. Returns whether it did.
    pub fn add(&mut self, now: u64, len: u64) -> bool {
        (self.bytes, self.frac) = self.drained(now);
        if now > self.last_ns {
            self.last_ns = now;
        }
        if self.buffer > 0 && self.bytes + len > self.buffer {
            return false;
        }
        self.bytes += len;
        true
    }
}

/// How the bumps exchange updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// From sending an update to its arrival at the neighbours.
    pub delay_ns: u64,
    /// Packets per update (1 = per packet).
    pub batch: u32,
}

/// One packet into the shared queue: when, how long, which bump saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub ts_ns: u64,
    pub len: u32,
    /// Index of the bump that forwards it; `None` = a bump nobody models
    /// (it reaches the queue and the in-sync estimate, but no update).
    pub bump: Option<usize>,
}

/// An update in flight: the lengths of a batch, due at `at_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Update {
    at_ns: u64,
    from: usize,
    lens: Vec<u32>,
}

/// Every bump's estimate, and the in-sync one, at each arrival (after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// Per arrival: the in-sync estimate (every packet in one bucket).
    pub in_sync: Vec<u64>,
    /// Per bump, per arrival: its estimate at that instant.
    pub bumps: Vec<Vec<u64>>,
    /// Per bump, at each of the `probes` instants (e.g. the real queue's
    /// samples): its estimate then.
    pub at_probes: Vec<Vec<u64>>,
    /// Update messages sent, and their bytes on the wire (4 per packet).
    pub updates: u64,
    pub update_bytes: u64,
}

/// Replays `arrivals` (in time order) through `n` bumps exchanging updates
/// as `x` says; `probes` (in time order) are extra instants to read every
/// bump's estimate at.
pub fn replay(
    arrivals: &[Arrival],
    n: usize,
    rate_bps: u64,
    buffer: u64,
    x: Exchange,
    probes: &[u64],
) -> Replay {
    let mut sync = LeakyBucket::new(rate_bps, buffer);
    let mut own = vec![LeakyBucket::new(rate_bps, buffer); n];
    let mut outbox: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut flight: VecDeque<Update> = VecDeque::new();
    let mut out = Replay {
        in_sync: Vec::with_capacity(arrivals.len()),
        bumps: vec![Vec::with_capacity(arrivals.len()); n],
        at_probes: vec![Vec::with_capacity(probes.len()); n],
        updates: 0,
        update_bytes: 0,
    };
    let mut next_probe = 0;
    // Applies every update due by `t` (a constant delay keeps them in
    // sending order), each as one arrival of its bytes at its due time.
    let deliver = |t: u64, flight: &mut VecDeque<Update>, own: &mut Vec<LeakyBucket>| {
        while flight.front().is_some_and(|u| u.at_ns <= t) {
            let u = flight.pop_front().expect("checked");
            for (b, q) in own.iter_mut().enumerate() {
                if b != u.from {
                    for &len in &u.lens {
                        q.add(u.at_ns, u64::from(len));
                    }
                }
            }
        }
    };
    for a in arrivals {
        while next_probe < probes.len() && probes[next_probe] < a.ts_ns {
            let t = probes[next_probe];
            deliver(t, &mut flight, &mut own);
            for (b, q) in own.iter().enumerate() {
                out.at_probes[b].push(q.at(t));
            }
            next_probe += 1;
        }
        deliver(a.ts_ns, &mut flight, &mut own);
        // The in-sync bucket is the switch's: what does not fit is left out.
        let fits = sync.add(a.ts_ns, u64::from(a.len));
        out.in_sync.push(sync.bytes);
        if let Some(b) = a.bump.filter(|&b| b < n) {
            own[b].add(a.ts_ns, u64::from(a.len));
            // An update reports what reached the queue (NetBump: lengths
            // of the packets forwarded into it); a tail-dropped packet is
            // not one (the estimating neighbour cannot know it, but the
            // forwarding bump's buffer check can).
            if fits {
                outbox[b].push(a.len);
            }
            if outbox[b].len() >= x.batch.max(1) as usize {
                let lens = std::mem::take(&mut outbox[b]);
                out.updates += 1;
                out.update_bytes += 4 * lens.len() as u64;
                flight.push_back(Update {
                    at_ns: a.ts_ns + x.delay_ns,
                    from: b,
                    lens,
                });
                // With no delay the neighbours know at once.
                deliver(a.ts_ns, &mut flight, &mut own);
            }
        }
        for (b, q) in own.iter().enumerate() {
            out.bumps[b].push(q.at(a.ts_ns));
        }
    }
    while next_probe < probes.len() {
        let t = probes[next_probe];
        deliver(t, &mut flight, &mut own);
        for (b, q) in own.iter().enumerate() {
            out.at_probes[b].push(q.at(t));
        }
        next_probe += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// 8 Mbit/s = 1 byte per µs.
    fn a(t_us: u64, bump: usize) -> Arrival {
        Arrival {
            ts_ns: 1_000_000 + t_us * US,
            len: 1000,
            bump: Some(bump),
        }
    }

    #[test]
    fn the_bucket_drains_at_its_rate_and_keeps_the_fraction() {
        let mut q = LeakyBucket::new(8_000_000, 0);
        q.add(1_000_000, 1000);
        assert_eq!(q.at(1_000_000 + 300 * US), 700);
        // 1 µs of 1000 steps of 1 ns drain exactly 1 byte in all.
        let mut t = 1_000_000;
        for _ in 0..1000 {
            t += 1;
            q.add(t, 0);
        }
        assert_eq!(q.bytes, 999);
        assert_eq!(q.at(1_000_000 + 2000 * US), 0);
        let mut b = LeakyBucket::new(8_000_000, 1500);
        assert!(b.add(1, 1000));
        assert!(!b.add(1, 1000), "the buffer takes one");
        assert_eq!(b.bytes, 1000);
    }

    #[test]
    fn with_no_delay_every_bump_knows_what_the_in_sync_bucket_knows() {
        let arr: Vec<Arrival> = (0..20).map(|i| a(i * 100, (i % 2) as usize)).collect();
        let r = replay(
            &arr,
            2,
            8_000_000,
            0,
            Exchange {
                delay_ns: 0,
                batch: 1,
            },
            &[],
        );
        assert_eq!(r.bumps[0], r.in_sync);
        assert_eq!(r.bumps[1], r.in_sync);
        assert_eq!((r.updates, r.update_bytes), (20, 80));
    }

    #[test]
    fn a_delayed_update_arrives_late_and_then_agrees() {
        // Bump 0 sends at 0, bump 1 at 100 µs; updates take 250 µs.
        let arr = [a(0, 0), a(100, 1), a(500, 0)];
        let probes = [1_000_000 + 200 * US, 1_000_000 + 400 * US];
        let r = replay(
            &arr,
            2,
            8_000_000,
            0,
            Exchange {
                delay_ns: 250 * US,
                batch: 1,
            },
            &probes,
        );
        // In sync after each: 1000; 1000 - 100 + 1000 = 1900; 1900 - 400 + 1000 = 2500.
        assert_eq!(r.in_sync, vec![1000, 1900, 2500]);
        // Bump 0 does not know bump 1's packet until 350 µs.
        assert_eq!(r.bumps[0], vec![1000, 900, 2500]);
        // Bump 1 hears of bump 0's at 250 µs (850 + 1000), and not yet of
        // its 500 µs packet: 1850 - 250 = 1600 at 500 µs.
        assert_eq!(r.bumps[1], vec![0, 1000, 1600]);
        // At 200 µs bump 0 has drained to 800, bump 1 holds 900; at 400 µs
        // both have merged: bump 0 got 1000 at 350 (650 + 1000 - 50 = 1600),
        // bump 1 got 1000 at 250 (850 + 1000 - 150 = 1700).
        assert_eq!(r.at_probes[0], vec![800, 1600]);
        assert_eq!(r.at_probes[1], vec![900, 1700]);
    }

    #[test]
    fn batching_holds_updates_until_the_batch_is_full() {
        let arr: Vec<Arrival> = (0..4).map(|i| a(i * 10, 0)).collect();
        let r = replay(
            &arr,
            2,
            8_000_000,
            0,
            Exchange {
                delay_ns: 0,
                batch: 4,
            },
            &[],
        );
        // The observer (bump 1) knows nothing until the 4th packet.
        assert_eq!(r.bumps[1], vec![0, 0, 0, 4000]);
        assert_eq!(r.bumps[0], r.in_sync);
        assert_eq!((r.updates, r.update_bytes), (1, 16));
    }
}
