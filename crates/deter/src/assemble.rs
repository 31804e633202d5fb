//! From what a recorder reports to each connection's record: the events
//! (only what was out of the ordinary) and, when the connection ends, the
//! state the events had not said yet (bpf/recorder.bpf.c in the
//! dataplane crate reports exactly these).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::ipid::IdCoder;
use crate::record::{
    Call, ConnRecord, Event, SO_RCVBUF, SO_SNDBUF, TCP_CONGESTION, TCP_CORK, TCP_NODELAY,
};
use crate::sample::recorded;

/// One report about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// Its first arrival.
    Start { id: u16, segs: u16 },
    /// An arrival out of sequence, after `run` in-sequence IDs.
    Arrive { run: u32, id: u16, segs: u16 },
    /// A run of arrivals, CE-marked or not, ended.
    Ce { run: u32, marked: bool },
    /// Algorithm 1 line 6: the sample and its final rec_range (gaps; `hi` =
    /// u64::MAX unbounded): the gap is chosen in order
    /// (`sample::recorded`, which takes the sample before's).
    Sample {
        index: u64,
        time_ns: u64,
        lo: u64,
        hi: u64,
    },
    /// A socket call at `t` (ns). Not numbered.
    Call { t: u64, call: Call },
    /// A kernel event at `t`, with the socket's `total_retrans` then when
    /// the event carries it. Not numbered.
    Kernel {
        t: u64,
        event: Event,
        retrans_total: Option<u32>,
    },
    /// The socket's congestion control, its name NUL-padded
    /// (`TCP_CONGESTION` in the record's settings; the last one seen is
    /// kept). Not numbered.
    CongControl([u8; 16]),
    /// The socket's buffers as the kernel keeps them, which of them the
    /// application set (`sk_userlocks`) and its Nagle bits
    /// (`tcp_sock.nonagle`); the last one seen is kept. Not numbered.
    SockOpts {
        rcvbuf: u32,
        sndbuf: u32,
        userlocks: u8,
        nonagle: u8,
    },
}

/// include/net/sock.h.
const SOCK_SNDBUF_LOCK: u8 = 1;
const SOCK_RCVBUF_LOCK: u8 = 2;
/// include/net/tcp.h.
const TCP_NAGLE_OFF: u8 = 1;
const TCP_NAGLE_CORK: u8 = 2;

/// The number of an event that is not numbered (calls, kernel events: they
/// carry their time).
pub const UNNUMBERED: u32 = u32::MAX;

/// TCP_CLOSE (include/net/tcp_states.h).
const TCP_CLOSE: u8 = 7;

/// What the events had not said when the connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Final {
    pub rx_run: u32,
    pub ce_run: u32,
    pub ce_marked: bool,
    pub tx_count: u64,
    /// Algorithm 1's open segment: s.index, s.time and rec_range.
    pub s_index: u64,
    pub s_time: u64,
    pub lo: u64,
    pub hi: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Reads that kept up and were not reported yet: the first one's
    /// time, their bytes and how many (`CallKind::Drain`).
    pub kept: Option<(u64, u64, u32)>,
}

#[derive(Debug, Default)]
struct Building {
    rec: ConnRecord,
    ids: IdCoder,
    /// The next event number to apply, and those that came early.
    next: u32,
    early: std::collections::BTreeMap<u32, Ev>,
    calls: Vec<(u64, Call)>,
    kernel: Vec<(u64, Event)>,
    /// The socket's `total_retrans` at the last event that carried it.
    retrans_total: Option<u32>,
    /// When the socket closed, if it did.
    closed: Option<u64>,
}

impl Building {
    /// A socket setting: the last value seen wins; None removes it.
    fn set(&mut self, name: &str, value: Option<String>) {
        let s = &mut self.rec.settings;
        match (s.iter().position(|x| x.0 == name), value) {
            (Some(i), Some(v)) => s[i].1 = v,
            (None, Some(v)) => s.push((name.into(), v)),
            (Some(i), None) => {
                s.remove(i);
            }
            (None, None) => {}
        }
    }

    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Start { id, segs } => self.ids.arrive(id, segs),
            Ev::Arrive { run, id, segs } => {
                self.ids.advance(run);
                self.ids.arrive(id, segs);
            }
            Ev::Ce { run, marked } => self.rec.ce.extend(marked, run),
            Ev::Sample {
                index,
                time_ns,
                lo,
                hi,
            } => {
                let prev = self.rec.tx_samples.last().map(|s| s.gap);
                let s = recorded(index, time_ns, lo, hi, prev);
                self.rec.tx_samples.push(s);
            }
            Ev::Call { t, call } => self.calls.push((t, call)),
            Ev::Kernel {
                t,
                event,
                retrans_total,
            } => {
                // The recorder reports a close twice (the state change and
                // the socket's destruction, in case one tracepoint run is
                // lost): the first one is the record's.
                let again = event == Event::State(TCP_CLOSE) && self.closed.is_some();
                if event == Event::State(TCP_CLOSE) && !again {
                    self.closed = Some(t);
                }
                if let Some(total) = retrans_total {
                    // What the kernel counted since the last total, beyond
                    // this event's own segments, no event showed. The
                    // first total seen is the base (a socket recorded from
                    // its handshake has 0 there).
                    let own = match event {
                        Event::Retransmit { segments, .. } => u32::from(segments),
                        _ => 0,
                    };
                    if let Some(last) = self.retrans_total {
                        let grew = total.wrapping_sub(last);
                        if (grew as i32) > 0 && grew > own {
                            self.kernel.push((t, Event::Unseen(grew - own)));
                        }
                    }
                    self.retrans_total = Some(total);
                }
                if !again {
                    self.kernel.push((t, event));
                }
            }
            Ev::CongControl(name) => {
                let value = String::from_utf8_lossy(&name)
                    .trim_end_matches('\0')
                    .to_string();
                self.set(TCP_CONGESTION, Some(value));
            }
            Ev::SockOpts {
                rcvbuf,
                sndbuf,
                userlocks,
                nonagle,
            } => {
                // DETER Table 1's settings: a buffer only when the
                // application set it (otherwise it is the kernel's
                // autotuning, not a setting), as the value it asked for
                // (the kernel keeps twice that, socket(7)); Nagle's bits
                // always, since a replay's sockets default otherwise.
                let asked = |locked: bool, v: u32| locked.then(|| (v / 2).to_string());
                self.set(SO_RCVBUF, asked(userlocks & SOCK_RCVBUF_LOCK != 0, rcvbuf));
                self.set(SO_SNDBUF, asked(userlocks & SOCK_SNDBUF_LOCK != 0, sndbuf));
                let bit = |b: u8| if nonagle & b != 0 { "1" } else { "0" }.to_string();
                self.set(TCP_NODELAY, Some(bit(TCP_NAGLE_OFF)));
                self.set(
                    TCP_CORK,
                    (nonagle & TCP_NAGLE_CORK != 0).then(|| bit(TCP_NAGLE_CORK)),
                );
            }
        }
    }
}

/// The connections of one host, being assembled.
#[derive(Debug, Default)]
pub struct Assembler {
    host: String,
    conns: HashMap<(SocketAddr, SocketAddr), Building>,
}

impl Assembler {
    pub fn new(host: &str) -> Assembler {
        Assembler {
            host: host.to_string(),
            conns: HashMap::new(),
        }
    }

    /// The connection's event number `seq` (they are applied in this
    /// order, which the order they were read in may not be: two CPUs
    /// report a connection's events independently).
    pub fn event(&mut self, local: SocketAddr, remote: SocketAddr, seq: u32, ev: Ev) {
        let b = self.conns.entry((local, remote)).or_default();
        if seq == UNNUMBERED {
            b.apply(ev);
            return;
        }
        // In order, as nearly all are: applied at once (the map's insert
        // and remove were most of a drain's time, 250 ns an event).
        if seq == b.next && b.early.is_empty() {
            b.apply(ev);
            b.next += 1;
            return;
        }
        b.early.insert(seq, ev);
        while let Some(ev) = b.early.remove(&b.next) {
            b.apply(ev);
            b.next += 1;
        }
    }

    /// The connection's record, once it ended (its events all given).
    pub fn finish(&mut self, local: SocketAddr, remote: SocketAddr, f: Final) -> ConnRecord {
        let mut b = self.conns.remove(&(local, remote)).unwrap_or_default();
        // Anything still out of order goes in by number (an event the ring
        // lost leaves a hole: counted by the recorder, not here).
        for (_, ev) in std::mem::take(&mut b.early) {
            b.apply(ev);
        }
        b.ids.advance(f.rx_run);
        b.rec.ce.extend(f.ce_marked, f.ce_run);
        if let Some((t, bytes, reads)) = f.kept {
            b.calls.push((
                t,
                Call {
                    kind: crate::record::CallKind::Drain,
                    bytes,
                    flags: reads,
                },
            ));
        }
        if f.tx_count > 0 {
            let prev = b.rec.tx_samples.last().map(|s| s.gap);
            b.rec
                .tx_samples
                .push(recorded(f.s_index, f.s_time, f.lo, f.hi, prev));
        }
        let mut r = b.rec;
        r.host = self.host.clone();
        r.local = Some(local);
        r.remote = Some(remote);
        b.calls.sort_by_key(|c| c.0);
        b.kernel.sort_by_key(|e| e.0);
        let times: Vec<u64> = b
            .calls
            .iter()
            .map(|c| c.0)
            .chain(b.kernel.iter().map(|e| e.0))
            .collect();
        // From the first packet or the first call or event, whichever came
        // first (a packet-less record: a connection over lo).
        r.start_ns = times
            .iter()
            .copied()
            .chain((f.first_ns > 0).then_some(f.first_ns))
            .min()
            .unwrap_or(0);
        r.end_ns = times.iter().copied().chain([f.last_ns]).max().unwrap_or(0);
        for &(t, c) in &b.calls {
            r.calls.push(r.start_ns, t, c);
        }
        for &(t, e) in &b.kernel {
            r.events.push(r.start_ns, t, e);
        }
        r.tx_packets = f.tx_count;
        r.rx = b.ids.finish();
        r
    }

    /// Connections with events and no record yet.
    pub fn open(&self) -> usize {
        self.conns.len()
    }

    /// Connections whose socket closed at least `idle_ns` before `now_ns`
    /// (all of them with `idle_ns` = 0): those the per-packet state may
    /// never end (a connection over `lo`, where nothing is recorded on the
    /// wire).
    pub fn closed(&self, now_ns: u64, idle_ns: u64) -> Vec<(SocketAddr, SocketAddr)> {
        self.conns
            .iter()
            .filter(|(_, b)| {
                idle_ns == 0
                    || b.closed
                        .is_some_and(|t| now_ns.saturating_sub(t) >= idle_ns)
            })
            .map(|(k, _)| *k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipid::arrivals;
    use crate::sample::Sample;

    #[test]
    fn events_and_the_final_state_make_the_record() {
        let (l, r): (SocketAddr, SocketAddr) = (
            "198.18.0.2:5201".parse().unwrap(),
            "198.18.0.1:40000".parse().unwrap(),
        );
        let mut a = Assembler::new("b");
        // Read out of order: applied by number.
        a.event(
            l,
            r,
            1,
            Ev::Arrive {
                run: 4,
                id: 17,
                segs: 1,
            },
        );
        a.event(l, r, 0, Ev::Start { id: 10, segs: 1 });
        a.event(
            l,
            r,
            2,
            Ev::Ce {
                run: 6,
                marked: false,
            },
        );
        a.event(
            l,
            r,
            3,
            Ev::Sample {
                index: 0,
                time_ns: 100_000,
                lo: 1024,
                hi: 1024,
            },
        );
        let call = Call {
            kind: crate::record::CallKind::Recv,
            bytes: 128,
            flags: 0,
        };
        a.event(l, r, UNNUMBERED, Ev::Call { t: 70_000, call });
        a.event(
            l,
            r,
            UNNUMBERED,
            Ev::Kernel {
                t: 40_000,
                event: Event::State(1),
                retrans_total: Some(0),
            },
        );
        a.event(
            l,
            r,
            UNNUMBERED,
            Ev::Kernel {
                t: 990_000,
                event: Event::State(TCP_CLOSE),
                retrans_total: Some(0),
            },
        );
        assert_eq!(a.closed(1_000_000, 100_000), []);
        assert_eq!(a.closed(1_090_000, 100_000), [(l, r)]);
        assert_eq!(a.open(), 1);
        let rec = a.finish(
            l,
            r,
            Final {
                rx_run: 3,
                ce_run: 3,
                ce_marked: true,
                tx_count: 9,
                s_index: 5,
                s_time: 900_000,
                lo: 2048,
                hi: 4096,
                first_ns: 50_000,
                last_ns: 1_000_000,
                // Reads that kept up from 80 µs, not reported by an event
                // when the connection ended: the record has them.
                kept: Some((80_000, 3_000, 2)),
            },
        );
        assert_eq!(a.open(), 0);
        let (first, codes) = rec.rx.clone().unwrap();
        assert_eq!(first, 10);
        let got = arrivals(&codes);
        // 10..=14 in sequence, 15 and 16 skipped, 17, then 18..=20.
        assert_eq!(got.lost, [5, 6]);
        assert_eq!(got.order.len(), 9);
        assert_eq!(rec.ce.marked(), [6, 7, 8]);
        assert_eq!(rec.tx_samples.len(), 2);
        assert_eq!(
            rec.tx_samples[1],
            Sample {
                index: 5,
                time_ns: 900_000,
                // Of [2048, 4096], the gap whose change from the sample
                // before's (1024) has the most trailing zeros.
                gap: 1024 + 2048
            }
        );
        // The first kernel event (40 µs) came before the first packet (50).
        assert_eq!(
            (rec.host.as_str(), rec.tx_packets, rec.start_ns, rec.end_ns),
            ("b", 9, 40_000, 1_000_000)
        );
        let drain = Call {
            kind: crate::record::CallKind::Drain,
            bytes: 3_000,
            flags: 2,
        };
        assert_eq!(
            rec.calls.iter(rec.start_ns).collect::<Vec<_>>(),
            [(70_000, call), (80_000, drain)]
        );
        assert_eq!(
            rec.events.iter(rec.start_ns).collect::<Vec<_>>(),
            [
                (40_000, Event::State(1)),
                (990_000, Event::State(TCP_CLOSE))
            ]
        );
    }

    /// The socket's options: a buffer only when the application locked it,
    /// as the value it asked for; Nagle always; the last report wins (at
    /// ESTABLISHED an autotuned buffer, at close the one set since).
    #[test]
    fn socket_options_are_the_ones_the_application_set() {
        let (l, r): (SocketAddr, SocketAddr) = (
            "198.18.0.2:5201".parse().unwrap(),
            "198.18.0.1:40000".parse().unwrap(),
        );
        let mut a = Assembler::new("b");
        let opts = |rcvbuf, userlocks, nonagle| Ev::SockOpts {
            rcvbuf,
            sndbuf: 46_080,
            userlocks,
            nonagle,
        };
        a.event(l, r, UNNUMBERED, opts(131_072, 0, 0));
        // Finishing a connection takes it out of the assembler.
        let rec = |a: &mut Assembler| a.finish(l, r, Final::default()).settings;
        let got = rec(&mut a);
        assert_eq!(got, [(TCP_NODELAY.to_string(), "0".to_string())]);
        // SO_RCVBUF 10 MB asked (the kernel keeps 20), NODELAY and CORK.
        a.event(l, r, UNNUMBERED, opts(131_072, 0, 1));
        a.event(l, r, UNNUMBERED, opts(20_971_520, SOCK_RCVBUF_LOCK, 3));
        let got = rec(&mut a);
        assert_eq!(
            got,
            [
                (TCP_NODELAY.to_string(), "1".to_string()),
                (SO_RCVBUF.to_string(), "10485760".to_string()),
                (TCP_CORK.to_string(), "1".to_string()),
            ]
        );
        // Both buffers locked; uncorked again by close.
        a.event(l, r, UNNUMBERED, opts(8192, SOCK_RCVBUF_LOCK, 3));
        a.event(
            l,
            r,
            UNNUMBERED,
            opts(8192, SOCK_RCVBUF_LOCK | SOCK_SNDBUF_LOCK, 1),
        );
        let got = rec(&mut a);
        assert!(
            got.contains(&(SO_SNDBUF.to_string(), "23040".to_string())),
            "{got:?}"
        );
        assert!(
            got.contains(&(SO_RCVBUF.to_string(), "4096".to_string())),
            "{got:?}"
        );
        assert!(!got.iter().any(|s| s.0 == TCP_CORK), "{got:?}");
    }

    /// Retransmissions the kernel counted (tcp_sock.total_retrans, carried
    /// by retransmissions and state changes) that no event showed become
    /// `Unseen`, at the event that revealed them; the first total seen is
    /// the base.
    #[test]
    fn the_sockets_own_count_shows_retransmissions_no_event_showed() {
        let (l, r): (SocketAddr, SocketAddr) = (
            "198.18.0.1:40000".parse().unwrap(),
            "198.18.0.2:5201".parse().unwrap(),
        );
        let mut a = Assembler::new("a");
        let rtx = |t: u64, seq: u32, segments: u16, total: u32| Ev::Kernel {
            t,
            event: Event::Retransmit {
                seq,
                segments,
                reordering: 3,
                sacked: 0,
            },
            retrans_total: Some(total),
        };
        let state = |t: u64, s: u8, total: u32| Ev::Kernel {
            t,
            event: Event::State(s),
            retrans_total: Some(total),
        };
        a.event(l, r, UNNUMBERED, state(1_000, 1, 0));
        a.event(l, r, UNNUMBERED, rtx(2_000, 100, 1, 1));
        // Two segments in one skb: nothing unseen.
        a.event(l, r, UNNUMBERED, rtx(3_000, 200, 2, 3));
        // 3 -> 6 with one segment of its own: two came without an event.
        a.event(l, r, UNNUMBERED, rtx(4_000, 300, 1, 6));
        a.event(
            l,
            r,
            UNNUMBERED,
            Ev::Kernel {
                t: 4_500,
                event: Event::CongState(4),
                retrans_total: None,
            },
        );
        // One more after the last event, shown by the close.
        a.event(l, r, UNNUMBERED, state(5_000, TCP_CLOSE, 7));
        // The socket's destruction says it closed again: not a second
        // close, and nothing unseen.
        a.event(l, r, UNNUMBERED, state(5_100, TCP_CLOSE, 7));
        let f = Final {
            first_ns: 0,
            last_ns: 6_000,
            ..Final::default()
        };
        let rec = a.finish(l, r, f);
        let got: Vec<Event> = rec.events.iter(rec.start_ns).map(|e| e.1).collect();
        let unseen: Vec<u32> = got
            .iter()
            .filter_map(|e| match e {
                Event::Unseen(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(unseen, [2, 1], "{got:?}");
        // Each where it was found: before the event that showed it.
        assert_eq!(got[3], Event::Unseen(2), "{got:?}");
        assert!(
            matches!(got[4], Event::Retransmit { seq: 300, .. }),
            "{got:?}"
        );
        assert_eq!(got[got.len() - 2], Event::Unseen(1), "{got:?}");
        assert_eq!(got.last(), Some(&Event::State(TCP_CLOSE)), "{got:?}");
        assert_eq!(rec.events.iter(rec.start_ns).count(), 8, "{got:?}");
        // A record starting mid-connection takes its first total as base.
        let mut a = Assembler::new("a");
        a.event(l, r, UNNUMBERED, rtx(2_000, 100, 1, 40));
        a.event(l, r, UNNUMBERED, state(5_000, TCP_CLOSE, 40));
        let rec = a.finish(l, r, f);
        assert!(
            !rec.events
                .iter(rec.start_ns)
                .any(|e| matches!(e.1, Event::Unseen(_))),
            "{:?}",
            rec.events
        );
    }
}
