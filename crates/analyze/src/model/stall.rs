//! The sender waiting on its receiver, the causes DETER's Table 2 names
//! beside losses: a zero receive window (the application not reading), an
//! ACK the receiver held back (a delayed ACK, RFC 1122 §4.2.3.2; DETER
//! §2.1 and §5.1), and a restart from the initial window after the sender
//! was idle (RFC 5681 §4.1, RFC 2861; Linux's tcp_slow_start_after_idle).
//! Each is seen on the wire, at any vantage point, without the hosts.

use schemars::JsonSchema;
use serde::Serialize;

use super::seq_le;
use crate::Evidence;

/// A receive window of zero, from the ACK that closed it to the one that
/// opened it again (None: still closed when the capture ended).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ZeroWindow {
    pub from: Evidence,
    pub to: Option<Evidence>,
    pub ns: u64,
}

/// An ACK that answered the newest data packet late: the sender had sent
/// nothing after that packet and waited for it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HeldAck {
    /// The data packet, and the ACK that covered it.
    pub data: Evidence,
    pub ack: Evidence,
    /// From the data passing the vantage point to the ACK passing it,
    /// beyond the receiver side's base round trip.
    pub held_ns: u64,
}

/// The sender resumed after an idle period longer than the minimum RTO.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IdleRestart {
    /// Its first data packet after the idle period.
    pub first: Evidence,
    pub idle_ns: u64,
    /// Segments first sent in the round trip after the idle period, and
    /// the most it had in flight before it.
    pub segments: u32,
    pub before: u32,
    /// It sent more after that round trip: it had data waiting, so the
    /// round trip's segments were its window, not all it had to send.
    pub more_after: bool,
}

/// The sender held back by the receiver's window (DETER §5.1's slow
/// reader, §5.3's small receive buffer): data packets after which no
/// full segment fitted in the window the receiver last advertised, and
/// how long the sender then waited before it sent again.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct WindowLimited {
    pub times: u64,
    pub waited_ns: u64,
    pub first: Option<Evidence>,
    /// The largest window the receiver advertised (bytes).
    pub largest_window: u32,
}

/// An ACK held this long beyond the round trip was released by the
/// receiver's delayed-ACK timer: Linux's is at least 40 ms (TCP_DELACK_MIN,
/// HZ/25), and half of it leaves room for a round trip that grew.
pub const HELD_NS: u64 = 20_000_000;

#[derive(Debug, Default)]
pub(crate) struct Stalls {
    /// Since when the window has been zero.
    zero_since: Option<(Evidence, u64)>,
    /// The newest data packet: where, when, its end (relative).
    newest: Option<(Evidence, u64, u32)>,
    last_data_ts: Option<u64>,
    /// The restart being measured (its index) and the end of its first
    /// packet: the ACK of that ends its round trip.
    restart: Option<(usize, u32)>,
    /// The restart measured last, until the sender sends again or idles.
    measured: Option<usize>,
    /// The most bytes in flight so far.
    max_flight: u32,
    /// The receiver's window shift (RFC 7323 §2.3: only when both SYNs
    /// carried the option; 0 when one did not), None while unknown (the
    /// handshake not seen): no window is judged then.
    pub(crate) shift: Option<u8>,
    /// The window the receiver advertised last (bytes).
    rwnd: Option<u32>,
    /// The sender filled that window at this time.
    full_since: Option<u64>,
}

impl Stalls {
    /// A data packet from the sender: `first` transmission or not, with
    /// the bytes in flight before it and after it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_data(
        &mut self,
        out: &mut Vec<IdleRestart>,
        limited: &mut WindowLimited,
        (at, ts): (Evidence, u64),
        end: u32,
        first: bool,
        (flight_before, flight_after): (u32, u32),
        smss: u32,
        min_rto_ns: u64,
    ) {
        if first {
            let idle = self.last_data_ts.map(|t| ts.saturating_sub(t));
            match idle {
                Some(idle) if flight_before == 0 && idle >= min_rto_ns => {
                    out.push(IdleRestart {
                        first: at,
                        idle_ns: idle,
                        segments: 0,
                        before: self.max_flight.div_ceil(smss.max(1)),
                        more_after: false,
                    });
                    self.restart = Some((out.len() - 1, end));
                    self.measured = None;
                }
                _ => {
                    if let Some(i) = self.measured.take() {
                        out[i].more_after = true;
                    }
                }
            }
            if let Some((i, _)) = self.restart {
                out[i].segments += 1;
            }
        }
        if self.restart.is_none() {
            self.max_flight = self.max_flight.max(flight_after);
        }
        // The wait the last full window caused ends with this packet.
        if let Some(t0) = self.full_since.take() {
            limited.waited_ns += ts.saturating_sub(t0);
        }
        if let Some(w) = self.rwnd {
            if flight_after.saturating_add(smss) > w {
                limited.times += 1;
                limited.first.get_or_insert(at);
                self.full_since = Some(ts);
            }
        }
        self.newest = Some((at, ts, end));
        self.last_data_ts = Some(ts);
    }

    /// An ACK from the receiver with its (unscaled) window: zero is zero
    /// at any scale.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ack(
        &mut self,
        zero: &mut Vec<ZeroWindow>,
        held: &mut Vec<HeldAck>,
        limited: &mut WindowLimited,
        (at, ts): (Evidence, u64),
        ack: u32,
        window: u16,
        round_trip_ns: u64,
    ) {
        if let Some(shift) = self.shift {
            let w = u32::from(window) << shift.min(14);
            self.rwnd = Some(w);
            limited.largest_window = limited.largest_window.max(w);
        }
        match (window, self.zero_since) {
            (0, None) => self.zero_since = Some((at, ts)),
            (w, Some((from, t0))) if w > 0 => {
                zero.push(ZeroWindow {
                    from,
                    to: Some(at),
                    ns: ts.saturating_sub(t0),
                });
                self.zero_since = None;
            }
            _ => {}
        }
        if let Some((_, end)) = self.restart {
            if seq_le(end, ack) {
                self.measured = self.restart.take().map(|r| r.0);
            }
        }
        if let Some((data, t, end)) = self.newest {
            if seq_le(end, ack) {
                let late = ts.saturating_sub(t).saturating_sub(round_trip_ns);
                if late >= HELD_NS {
                    held.push(HeldAck {
                        data,
                        ack: at,
                        held_ns: late,
                    });
                }
                self.newest = None;
            }
        }
    }

    /// The capture ended: a window still closed is closed until then.
    pub(crate) fn finish(&mut self, zero: &mut Vec<ZeroWindow>, last_ts: u64) {
        if let Some((from, t0)) = self.zero_since.take() {
            zero.push(ZeroWindow {
                from,
                to: None,
                ns: last_ts.saturating_sub(t0),
            });
        }
    }
}

impl WindowLimited {
    pub fn is_none(&self) -> bool {
        self.times == 0
    }
}
