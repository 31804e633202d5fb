//! The UDP workload: unresponsive senders paced at a fixed rate, as the
//! three UDP flows of NetBump's QCN experiment (seed 003 §6.3.3, Fig. 17).
//! Nothing here reacts to loss or marks; only a rate limiter on the path
//! (QCN's reaction point) slows a sender, by the backpressure of its
//! blocking socket.
//!
//! Each connection sends `messages × message_size` bytes in datagrams that
//! fill the MTU. The rate counts whole frames as the switch and a qdisc see
//! them (Ethernet header + IP + UDP + payload), so `rate: 100mbit` fills a
//! 100 Mbit/s bottleneck exactly. A message is complete when its last
//! datagram is sent (UDP has no acknowledgement); what arrived is counted
//! by the receiver.

use std::collections::HashMap;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wirelab_plan::Plan;
use wirelab_spec::Verb;

use crate::{ioe, now_ns, ConnReport, Error, MessageReport, Stop};

/// Headers around a UDP payload in a frame: Ethernet 14, IPv4 20, UDP 8.
const FRAME_OVERHEAD: u64 = 14 + 20 + 8;

/// What one connection's datagrams did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UdpStats {
    pub rate_bps: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// Receive times of the first and last datagram (CLOCK_MONOTONIC ns).
    pub first_rx_ns: u64,
    pub last_rx_ns: u64,
    /// Sends the kernel refused for lack of buffer space (ENOBUFS), retried.
    pub send_retries: u64,
}

/// A token bucket no deeper than `burst` bits: a sender that was held back
/// (by a rate limiter downstream) does not catch up above its rate.
struct Pacer {
    rate_bps: u64,
    burst_bits: u64,
    tokens_bits: u64,
    last: Instant,
}

impl Pacer {
    fn new(rate_bps: u64, frame_bits: u64) -> Pacer {
        // 1 ms of sending, at least two frames: short enough to keep the
        // rate, long enough that a sleep's overshoot costs nothing.
        let burst_bits = (rate_bps / 1000).max(2 * frame_bits);
        Pacer {
            rate_bps,
            burst_bits,
            tokens_bits: frame_bits,
            last: Instant::now(),
        }
    }

    /// Takes `bits` when the bucket has them; otherwise how long to wait.
    fn take(&mut self, bits: u64) -> Option<Duration> {
        let now = Instant::now();
        let earned = (now - self.last).as_nanos() as u64 * self.rate_bps / 1_000_000_000;
        if earned > 0 {
            self.tokens_bits = (self.tokens_bits + earned).min(self.burst_bits);
            self.last = now;
        }
        if self.tokens_bits >= bits {
            self.tokens_bits -= bits;
            return None;
        }
        let missing = bits - self.tokens_bits;
        Some(Duration::from_nanos(
            (missing * 1_000_000_000 / self.rate_bps.max(1)).max(20_000),
        ))
    }
}

fn bind(ns: &str, addr: SocketAddrV4, conn: u32) -> Result<UdpSocket, Error> {
    wirelab_netns::in_netns(ns, || -> Result<UdpSocket, Error> {
        let s = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .map_err(ioe(conn, "socket"))?;
        s.set_reuse_address(true)
            .map_err(ioe(conn, "SO_REUSEADDR"))?;
        // Room for a burst at the receiver: losses belong to the network.
        let _ = s.set_recv_buffer_size(8 << 20);
        s.bind(&std::net::SocketAddr::V4(addr).into())
            .map_err(ioe(conn, &format!("bind {addr}")))?;
        Ok(s.into())
    })?
}

/// Runs every connection of a `transport: udp` plan to the end, or until
/// the stop; one report per connection.
pub fn run(plan: &Plan, stop: &Stop) -> Result<Vec<ConnReport>, Error> {
    // One receiver per responder host, on the service port; datagrams are
    // told apart by their source port (the plan's per-connection sport).
    let mut responders: Vec<usize> = plan.conns.iter().map(|c| c.responder).collect();
    responders.sort();
    responders.dedup();
    let mut receivers = Vec::new();
    for r in responders {
        let h = &plan.hosts[r];
        let s = bind(
            &h.ns,
            SocketAddrV4::new(h.ip, wirelab_plan::SERVICE_PORT),
            0,
        )?;
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(ioe(0, "SO_RCVTIMEO"))?;
        receivers.push(s);
    }
    let mut senders = Vec::new();
    for c in &plan.conns {
        debug_assert_eq!(c.tcp_verb(), Verb::Write, "validated");
        let h = &plan.hosts[c.requester];
        let s = bind(&h.ns, SocketAddrV4::new(c.requester_ip, c.sport), c.id)?;
        s.connect(SocketAddrV4::new(c.responder_ip, c.dport))
            .map_err(ioe(c.id, "connect"))?;
        senders.push((c, s));
    }

    let senders_done = Arc::new(AtomicBool::new(false));
    let payload = u64::from(plan.mtu).saturating_sub(20 + 8).max(1);
    let started = Instant::now();
    let (reports, received) = std::thread::scope(|sc| {
        let rx: Vec<_> = receivers
            .iter()
            .map(|s| {
                let done = senders_done.clone();
                sc.spawn(move || receive(s, &done, stop))
            })
            .collect();
        let tx: Vec<_> = senders
            .iter()
            .map(|(c, s)| sc.spawn(move || send(c, s, payload, started, stop)))
            .collect();
        let reports: Vec<_> = tx
            .into_iter()
            .map(|t| t.join().expect("sender thread"))
            .collect();
        senders_done.store(true, Ordering::SeqCst);
        let mut received: HashMap<u16, (u64, u64, u64, u64)> = HashMap::new();
        for t in rx {
            for (port, v) in t.join().expect("receiver thread") {
                received.insert(port, v);
            }
        }
        (reports, received)
    });
    Ok(reports
        .into_iter()
        .map(|(mut r, sport)| {
            if let (Some(u), Some(&(n, bytes, first, last))) =
                (r.udp.as_mut(), received.get(&sport))
            {
                u.datagrams_received = n;
                u.bytes_received = bytes;
                u.first_rx_ns = first;
                u.last_rx_ns = last;
                // Goodput is what arrived, from the first send to the last
                // arrival (the messages' own span only says what was sent).
                let t0 = r
                    .messages
                    .iter()
                    .map(|m| m.posted_ns)
                    .min()
                    .unwrap_or(first);
                r.bytes = bytes;
                r.goodput_bps = (bytes * 8 * 1_000_000_000)
                    .checked_div(last.saturating_sub(t0))
                    .unwrap_or(0);
            } else if r.udp.is_some() {
                // Nothing arrived.
                r.bytes = 0;
                r.goodput_bps = 0;
            }
            r
        })
        .collect())
}

/// Counts datagrams per source port until the senders are done and the
/// path has drained (200 ms without a datagram), or the stop.
fn receive(
    s: &UdpSocket,
    senders_done: &AtomicBool,
    stop: &Stop,
) -> HashMap<u16, (u64, u64, u64, u64)> {
    let mut per: HashMap<u16, (u64, u64, u64, u64)> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut quiet_since = Instant::now();
    loop {
        match s.recv_from(&mut buf) {
            Ok((n, from)) => {
                let t = now_ns();
                let e = per.entry(from.port()).or_insert((0, 0, t, t));
                e.0 += 1;
                e.1 += n as u64;
                e.3 = t;
                quiet_since = Instant::now();
            }
            Err(_) => {
                // Timeout (or an ICMP error): check whether to stop.
                if stop.abort.load(Ordering::Relaxed) || Instant::now() > stop.deadline {
                    return per;
                }
                if senders_done.load(Ordering::SeqCst)
                    && quiet_since.elapsed() > Duration::from_millis(200)
                {
                    return per;
                }
            }
        }
    }
}

/// Sends one connection's bytes at its rate; its report and source port.
fn send(
    c: &wirelab_plan::ConnPlan,
    s: &UdpSocket,
    payload: u64,
    started: Instant,
    stop: &Stop,
) -> (ConnReport, u16) {
    let rate = c.rate.map_or(1_000_000, |r| r.0);
    let size = c.message_size.0;
    let total = size * u64::from(c.messages);
    let mut stats = UdpStats {
        rate_bps: rate,
        ..Default::default()
    };
    let mut messages = Vec::new();
    let mut error = None;
    let buf = vec![0x5au8; payload as usize];
    if let Err(e) = stop.wait_until(started + c.start.as_std(), c.id) {
        error = Some(e.to_string());
    }
    let mut pacer = Pacer::new(rate, (payload + FRAME_OVERHEAD) * 8);
    let mut sent = 0u64;
    let mut posted = now_ns();
    while error.is_none() && sent < total {
        if let Err(e) = stop.check(c.id) {
            error = Some(e.to_string());
            break;
        }
        // A datagram never spans two messages: the next starts on a boundary.
        let len = (total - sent).min(payload).min(size - sent % size);
        if let Some(wait) = pacer.take((len + FRAME_OVERHEAD) * 8) {
            std::thread::sleep(wait);
            continue;
        }
        if sent % size == 0 {
            posted = now_ns();
        }
        match s.send(&buf[..len as usize]) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOBUFS) => {
                stats.send_retries += 1;
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            // The receiver's ICMP port unreachable, before it bound: retry.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                error = Some(format!("send: {e}"));
                break;
            }
        }
        stats.datagrams_sent += 1;
        sent += len;
        if sent % size == 0 {
            let done = now_ns();
            messages.push(MessageReport {
                message: (sent / size) as u32,
                verb: Verb::Write,
                posted_ns: posted,
                completed_ns: done,
                mct_ns: done.saturating_sub(posted),
            });
        }
    }
    let mut r = ConnReport::new(c.id, c.messages, size, messages, error);
    r.udp = Some(stats);
    (r, c.sport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_sends_a_burst_then_waits_for_its_rate() {
        // 12 Mbit/s, 1500-byte frames (12000 bits): one per ms.
        let mut p = Pacer::new(12_000_000, 12_000);
        assert_eq!(p.burst_bits, 24_000, "at least two frames");
        assert!(p.take(12_000).is_none(), "starts with one frame of tokens");
        let w = p.take(12_000).expect("then waits");
        assert!(
            w <= Duration::from_millis(1) && w >= Duration::from_micros(900),
            "{w:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
        // 50 ms idle earn 50 frames, but the bucket holds two.
        assert!(p.take(12_000).is_none());
        assert!(p.take(12_000).is_none());
        assert!(p.take(12_000).is_some());
    }
}
