//! What a replay of one connection needs from its two records (seed 004
//! §3.4; issue 21 item 3), without I/O: which end opened it, each end's
//! socket calls at their times, and the network's actions on each end's
//! packets, addressed by their place in that end's series (the switch's
//! wire events: `sent_by` + `packet`).

use std::net::SocketAddr;

use crate::ipid;
use crate::record::{CallKind, ConnRecord, Event};

/// The first port of Linux's default ephemeral range
/// (net.ipv4.ip_local_port_range = 32768 60999).
const EPHEMERAL: u16 = 32768;

/// inet_sock_set_state's states an application's close leads to: it closed
/// first (FIN_WAIT1) or after the peer's FIN (LAST_ACK); include/net/tcp_states.h.
const TCP_FIN_WAIT1: u8 = 4;
const TCP_CLOSE: u8 = 7;
const TCP_LAST_ACK: u8 = 9;

/// One socket operation to repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Write this many bytes.
    Send(u64),
    /// Read exactly this many bytes (what the recorded call returned).
    Recv(u64),
    /// Read as the data comes until this many bytes are in: reads that
    /// kept up with the network (`CallKind::Drain`).
    Drain(u64),
    /// Close the socket; `after_peer`: the recorded close came after the
    /// peer's FIN (LAST_ACK), so the replay waits for that FIN first, as
    /// the application did (its read returned 0), whatever the clock says.
    Close { after_peer: bool },
}

/// An operation and when it was issued, in ns from the connection's first
/// recorded call (either end's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at_ns: u64,
    pub op: Op,
}

/// A connection's two records, the end that opened it first.
#[derive(Debug, Clone)]
pub struct Pair {
    pub client: ConnRecord,
    pub server: ConnRecord,
}

/// Why two records do not make a replayable connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("a record without its connection's addresses")]
    NoAddresses,
    #[error("the records are of different connections: {a} and {b}")]
    NotAPair { a: String, b: String },
}

impl Pair {
    /// Orders two records of one connection: the client is the end on an
    /// ephemeral port (records do not say who sent the SYN: the recorder
    /// follows a connection from its first packet after the handshake); of
    /// two such ends, or none, the higher port.
    pub fn of(a: ConnRecord, b: ConnRecord) -> Result<Pair, Error> {
        let (Some(al), Some(ar), Some(bl), Some(br)) = (a.local, a.remote, b.local, b.remote)
        else {
            return Err(Error::NoAddresses);
        };
        if al != br || ar != bl {
            return Err(Error::NotAPair {
                a: format!("{al} -> {ar}"),
                b: format!("{bl} -> {br}"),
            });
        }
        let client_a = match (al.port() >= EPHEMERAL, ar.port() >= EPHEMERAL) {
            (true, false) => true,
            (false, true) => false,
            _ => al.port() > ar.port(),
        };
        Ok(if client_a {
            Pair {
                client: a,
                server: b,
            }
        } else {
            Pair {
                client: b,
                server: a,
            }
        })
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.client.local.expect("checked in Pair::of")
    }

    pub fn server_addr(&self) -> SocketAddr {
        self.server.local.expect("checked in Pair::of")
    }

    /// Each end's operations (client, server), timed from the earlier of
    /// the two first calls: both records' times are the same host clock
    /// (CLOCK_MONOTONIC), so their order between the ends holds.
    pub fn steps(&self) -> (Vec<Step>, Vec<Step>) {
        let (c, s) = (ops(&self.client), ops(&self.server));
        let t0 = c.iter().chain(&s).map(|x| x.0).min().unwrap_or(0);
        let rebase = |v: Vec<(u64, Op)>| {
            v.into_iter()
                .map(|(t, op)| Step { at_ns: t - t0, op })
                .collect()
        };
        (rebase(c), rebase(s))
    }

    /// The network's actions to re-apply: (the sender is the server, its
    /// packet's place, what the network did). A loss the server's record
    /// saw is a client packet, and the other way round. A late arrival
    /// (DETER §4's reordering) is overtaken by as many of its end's later
    /// packets as arrived before it.
    pub fn actions(&self) -> Vec<(bool, u64, NetAction)> {
        let mut out = Vec::new();
        for (from_server, at) in [(false, &self.server), (true, &self.client)] {
            let Some((_, codes)) = &at.rx else { continue };
            let a = ipid::arrivals(codes);
            out.extend(a.lost.iter().map(|o| (from_server, o + 1, NetAction::Drop)));
            out.extend(
                at.ce
                    .marked()
                    .into_iter()
                    .filter_map(|i| a.order.get(i as usize))
                    .map(|o| (from_server, o + 1, NetAction::Ce)),
            );
            let late: std::collections::BTreeSet<u64> = a.late.iter().copied().collect();
            for (p, &o) in a.order.iter().enumerate() {
                if !late.contains(&o) {
                    continue;
                }
                let overtaken_by = a.order[..p].iter().filter(|&&x| x > o).count();
                if overtaken_by > 0 {
                    out.push((from_server, o + 1, NetAction::Reorder(overtaken_by as u32)));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// What the network did to one packet, as a replay re-applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetAction {
    Drop,
    /// CE set (RFC 3168).
    Ce,
    /// Overtaken by this many of its end's later packets.
    Reorder(u32),
}

impl NetAction {
    /// The spec's words for it: its `action`, and `after` for a reorder.
    pub fn name(self) -> String {
        match self {
            NetAction::Drop => "drop".into(),
            NetAction::Ce => "ecn".into(),
            NetAction::Reorder(k) => format!("reorder after {k}"),
        }
    }
}

/// How far apart two records of one end put its packets' send times, each
/// from its own first socket call (or first packet, without calls: a
/// replay connects before its first call, so the handshake is not where
/// the two line up), from Algorithm 1's inferred times (each within th of
/// the truth): the median, the 99th percentile and the largest difference
/// over the packets both sent, in ns. None when either has no samples.
pub fn send_time_differences(a: &ConnRecord, b: &ConnRecord) -> Option<(u64, u64, u64)> {
    use crate::sample::infer;
    let origin = |r: &ConnRecord| -> Option<i128> {
        let first_call = r.calls.iter(r.start_ns).next().map(|c| c.0);
        Some(i128::from(first_call.or_else(|| infer(&r.tx_samples, 0))?))
    };
    let n = a.tx_packets.min(b.tx_packets);
    let (a0, b0) = (origin(a)?, origin(b)?);
    let mut d: Vec<u64> = (0..n)
        .filter_map(|i| {
            let x = i128::from(infer(&a.tx_samples, i)?) - a0;
            let y = i128::from(infer(&b.tx_samples, i)?) - b0;
            Some(u64::try_from(x.abs_diff(y)).unwrap_or(u64::MAX))
        })
        .collect();
    if d.is_empty() {
        return None;
    }
    d.sort_unstable();
    let at = |q: usize| d[((q * d.len()).div_ceil(100)).clamp(1, d.len()) - 1];
    Some((at(50), at(99), d[d.len() - 1]))
}

/// A record's calls as operations, with the application's close.
fn ops(r: &ConnRecord) -> Vec<(u64, Op)> {
    let mut v: Vec<(u64, Op)> = r
        .calls
        .iter(r.start_ns)
        .filter_map(|(t, c)| match c.kind {
            CallKind::Send if c.bytes > 0 => Some((t, Op::Send(c.bytes))),
            CallKind::Recv if c.bytes > 0 => Some((t, Op::Recv(c.bytes))),
            CallKind::Drain if c.bytes > 0 => Some((t, Op::Drain(c.bytes))),
            CallKind::Close => Some((t, Op::Close { after_peer: false })),
            _ => None,
        })
        .collect();
    if !v.iter().any(|x| matches!(x.1, Op::Close { .. })) {
        // Else the socket went to CLOSE at once: a RST, the application's
        // close with unread data (RFC 2525 §2.17) or the peer's; replayed
        // as a close at that time, so that neither end waits for the other.
        let closed = r
            .events
            .iter(r.start_ns)
            .find_map(|(t, e)| match e {
                Event::State(TCP_FIN_WAIT1) => Some((t, false)),
                Event::State(TCP_LAST_ACK) => Some((t, true)),
                _ => None,
            })
            .or_else(|| {
                r.events
                    .iter(r.start_ns)
                    .find_map(|(t, e)| (e == Event::State(TCP_CLOSE)).then_some((t, false)))
            });
        if let Some((t, after_peer)) = closed {
            v.push((t, Op::Close { after_peer }));
        }
    }
    v.sort_by_key(|x| x.0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipid::IdCoder;
    use crate::record::Call;

    fn rec(local: &str, remote: &str) -> ConnRecord {
        ConnRecord {
            host: "h".into(),
            local: Some(local.parse().unwrap()),
            remote: Some(remote.parse().unwrap()),
            start_ns: 1_000,
            ..Default::default()
        }
    }

    fn call(r: &mut ConnRecord, t: u64, kind: CallKind, bytes: u64) {
        let s = r.start_ns;
        r.calls.push(
            s,
            t,
            Call {
                kind,
                bytes,
                flags: 0,
            },
        );
    }

    #[test]
    fn the_end_on_an_ephemeral_port_is_the_client() {
        let c = rec("198.18.0.1:40001", "198.18.0.2:5001");
        let s = rec("198.18.0.2:5001", "198.18.0.1:40001");
        let p = Pair::of(s.clone(), c.clone()).unwrap();
        assert_eq!(p.client_addr().port(), 40001);
        assert_eq!(p.server_addr().port(), 5001);
        let p = Pair::of(c, s).unwrap();
        assert_eq!(p.client_addr().port(), 40001);
        let other = rec("198.18.0.2:5001", "198.18.0.1:40002");
        assert!(matches!(
            Pair::of(rec("198.18.0.1:40001", "198.18.0.2:5001"), other),
            Err(Error::NotAPair { .. })
        ));
    }

    #[test]
    fn steps_keep_both_ends_times_on_one_clock() {
        let mut c = rec("198.18.0.1:40001", "198.18.0.2:5001");
        let mut s = rec("198.18.0.2:5001", "198.18.0.1:40001");
        call(&mut c, 5_000_000, CallKind::Send, 14_480);
        call(&mut s, 5_300_000, CallKind::Recv, 1_448);
        call(&mut s, 5_400_000, CallKind::Drain, 13_032);
        call(&mut s, 5_500_000, CallKind::Send, 8);
        call(&mut c, 5_600_000, CallKind::Recv, 8);
        call(&mut s, 5_700_000, CallKind::Recv, 0); // EOF: not repeated
        c.events
            .push(c.start_ns, 5_650_000, Event::State(TCP_FIN_WAIT1));
        s.events
            .push(s.start_ns, 5_750_000, Event::State(TCP_LAST_ACK));
        let (cs, ss) = Pair::of(c, s).unwrap().steps();
        assert_eq!(
            cs,
            [
                Step {
                    at_ns: 0,
                    op: Op::Send(14_480)
                },
                Step {
                    at_ns: 600_000,
                    op: Op::Recv(8)
                },
                Step {
                    at_ns: 650_000,
                    op: Op::Close { after_peer: false }
                },
            ]
        );
        assert_eq!(
            ss,
            [
                Step {
                    at_ns: 300_000,
                    op: Op::Recv(1_448)
                },
                Step {
                    at_ns: 400_000,
                    op: Op::Drain(13_032)
                },
                Step {
                    at_ns: 500_000,
                    op: Op::Send(8)
                },
                Step {
                    at_ns: 750_000,
                    op: Op::Close { after_peer: true }
                },
            ]
        );
    }

    #[test]
    fn send_times_are_compared_from_each_records_first_packet() {
        use crate::sample::Sampler;
        let sampled = |times: &[u64]| {
            let mut s = Sampler::new(1);
            let mut out: Vec<_> = times
                .iter()
                .enumerate()
                .filter_map(|(i, &t)| s.sample(i as u64, t))
                .collect();
            out.extend(s.finish());
            ConnRecord {
                tx_packets: times.len() as u64,
                tx_samples: out,
                ..Default::default()
            }
        };
        // The same spacing 1 ms later: no difference.
        let a = sampled(&[1_000, 2_000, 3_000, 4_000]);
        let b = sampled(&[1_001_000, 1_002_000, 1_003_000, 1_004_000]);
        assert_eq!(send_time_differences(&a, &b), Some((0, 0, 0)));
        // The third packet 500 ns late, the fourth on time.
        let c = sampled(&[1_000, 2_000, 3_500, 4_000]);
        let (p50, p99, max) = send_time_differences(&a, &c).unwrap();
        assert_eq!((p50, p99, max), (0, 500, 500));
        assert_eq!(send_time_differences(&a, &ConnRecord::default()), None);
    }

    #[test]
    fn a_socket_closed_by_a_reset_closes_at_that_time() {
        let mut c = rec("198.18.0.1:40001", "198.18.0.2:5001");
        let mut s = rec("198.18.0.2:5001", "198.18.0.1:40001");
        call(&mut c, 5_000_000, CallKind::Send, 100);
        call(&mut s, 5_100_000, CallKind::Recv, 50);
        s.events
            .push(s.start_ns, 5_200_000, Event::State(TCP_CLOSE));
        c.events
            .push(c.start_ns, 5_300_000, Event::State(TCP_CLOSE));
        let (cs, ss) = Pair::of(c, s).unwrap().steps();
        assert_eq!(cs.last().unwrap().op, Op::Close { after_peer: false });
        assert_eq!(cs.last().unwrap().at_ns, 300_000);
        assert_eq!(ss.last().unwrap().op, Op::Close { after_peer: false });
        assert_eq!(ss.last().unwrap().at_ns, 200_000);
    }

    #[test]
    fn a_loss_seen_at_one_end_is_the_other_ends_packet() {
        let mut c = rec("198.18.0.1:40001", "198.18.0.2:5001");
        let mut s = rec("198.18.0.2:5001", "198.18.0.1:40001");
        // The server saw the client's IDs 100, 101, 103, 104: the 3rd lost;
        // the 4th arrival (ID 104, place 5) was CE-marked.
        let mut ids = IdCoder::default();
        for (id, ce) in [(100, false), (101, false), (103, false), (104, true)] {
            ids.arrive(id, 1);
            s.ce.push(ce);
        }
        s.rx = ids.finish();
        // The client saw the server's 1st, 2nd and 4th.
        let mut ids = IdCoder::default();
        for id in [7u16, 8, 10] {
            ids.arrive(id, 1);
            c.ce.push(false);
        }
        c.rx = ids.finish();
        let p = Pair::of(c, s).unwrap();
        assert_eq!(
            p.actions(),
            [
                (false, 3, NetAction::Drop),
                (false, 5, NetAction::Ce),
                (true, 3, NetAction::Drop)
            ]
        );
    }

    #[test]
    fn a_late_arrival_is_overtaken_by_what_came_before_it() {
        let c = rec("198.18.0.1:40001", "198.18.0.2:5001");
        let mut s = rec("198.18.0.2:5001", "198.18.0.1:40001");
        // The server got the client's IDs 100, 101, 103, 104, 105, 102,
        // 106: place 3 overtaken by places 4, 5 and 6.
        let mut ids = IdCoder::default();
        for id in [100u16, 101, 103, 104, 105, 102, 106] {
            ids.arrive(id, 1);
            s.ce.push(false);
        }
        s.rx = ids.finish();
        let p = Pair::of(c, s).unwrap();
        assert_eq!(p.actions(), [(false, 3, NetAction::Reorder(3))]);
    }
}
