//! The sender's view at the vantage point: what was sent (numbered as
//! Lumina §3.3 numbers data packets), what the receiver acknowledged
//! (cumulative ACK, SACK scoreboard, DSACK, duplicate ACKs), round-trip
//! samples, and for every retransmission what justified it (`Classify`).

use std::collections::VecDeque;

use wirelab_trace::{Action, Tcp};

use super::segmap::SegMap;
use super::{
    seq_le, seq_lt, AckEv, BaseRtt, Classify, ConnAnalysis, Covered, Reason, Retransmission,
    SegState, SEND_QUEUE_NS,
};
use crate::{Evidence, Options};

/// An ACK as it passed the vantage point.
pub(crate) struct AckIn<'a> {
    pub at: Evidence,
    pub tcp: &'a Tcp,
    pub ts: u64,
    /// The ISN: SACK blocks are made relative to it.
    pub base: u32,
    /// The relative cumulative ACK.
    pub ack: u32,
}

pub(crate) struct Sender {
    /// Largest round trip seen at the vantage point (bounds how long an
    /// ACK-triggered retransmission may take; see `Classify`).
    max_rtt: u64,
    min_data_rtt: u64,
    /// snd_nxt's high-water mark (relative).
    next_new: u32,
    first_tx: u32,
    /// First transmissions by relative sequence number.
    segs: SegMap,
    snd_una: u32,
    una_hist: Vec<(u64, u32)>,
    last_ack: Option<(u32, u16)>,
    acks: Vec<AckEv>,
    /// Latest timeout: (retransmission evidence, ts, recovery point, interval).
    last_timeout: Option<(Evidence, u64, u32, u64)>,
    rto_recovery_until: Option<(u32, u64)>,
    tlp_out: bool,
    /// The round trip of the handshake, seen at the vantage point.
    handshake_rtt: Option<u64>,
    last_data_ts: u64,
    /// The cumulative ACK before the oldest `una_hist` entry kept.
    una_floor: u32,
    /// Adjacent pairs in `acks` out of time order, out of ACK order.
    acks_disorder: (usize, usize),
    /// First transmissions below this (relative) were forgotten (`KEEP`).
    forgotten_below: Option<u32>,
    /// The last `RESENT` retransmissions.
    resent: VecDeque<Resent>,
    /// Retransmissions (first byte, time) no cumulative ACK has covered
    /// yet, oldest first, at most `RESENT` (`covers_resent`).
    uncovered: VecDeque<(u32, u64)>,
}

/// A recent retransmission (`RESENT`): bytes `rel..end` sent again at
/// `ts`, and the SACK that first covered them after that, (time, frame).
/// Kept apart from the segments because the bytes may never have been
/// seen sent (reordered ahead of the capture point), and then have none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resent {
    pub(crate) rel: u32,
    pub(crate) end: u32,
    pub(crate) ts: u64,
    pub(crate) sacked: Option<(u64, Evidence)>,
}

/// How many recent retransmissions a connection remembers as RACK signals
/// for the data sent before them (a recovery's repairs; older ones have
/// long been acknowledged or timed out).
const RESENT: usize = 256;

/// Whether `b` after `a` goes back in time, and back in cumulative ACK.
fn disorder(a: &AckEv, b: &AckEv) -> (usize, usize) {
    (usize::from(b.ts < a.ts), usize::from(seq_lt(b.ack, a.ack)))
}

/// How much history a connection keeps: its last `KEEP` ACKs, cumulative
/// ACK advances and acknowledged first transmissions (everything not yet
/// acknowledged is kept, and every ACK since the oldest of it was last
/// sent). A retransmission is judged on ACKs since its segment was last
/// sent and within a few round trips before it, so this changes no
/// verdict unless the sender goes back more than `KEEP` acknowledged
/// segments (about 12 MB of 1448-byte segments, twice the most Linux's
/// default `tcp_rmem` lets a receiver offer), which is then counted as a
/// forgotten retransmission, not judged. It keeps a connection's memory
/// bounded however long it runs: history beyond it is what a pass over a
/// long capture spent most of its memory, and a sixth of its time in page
/// faults, on (8 connections of 2M packets, 1 << 16: 208 MB; 1 << 13:
/// 61 MB).
pub const KEEP: usize = 1 << 13;

/// History is cut back to `KEEP` entries once it reaches this many, in
/// one batch: short of `2 * KEEP`, so that the few entries added between
/// two cuts (the sends between two ACKs) never grow its storage, sized
/// `2 * KEEP` by doubling, to `4 * KEEP` (half the model's memory, and
/// its page faults a seventh of a one-million-packet analysis, `perf`).
const TRIM: usize = 2 * KEEP - KEEP / 4;

/// The most sequence space the history spans, whatever `KEEP` allows
/// (65536 super-packets of 64 KB would be 4 GB): sequence numbers wrap
/// after 2^32 bytes and compare correctly only within 2^31 (RFC 9293
/// §3.4), so a connection of any length keeps a history of at most 1 GB.
const SPAN: u32 = 1 << 30;

impl Sender {
    pub(crate) fn new(handshake_rtt_ns: Option<u64>) -> Sender {
        Sender {
            max_rtt: handshake_rtt_ns.unwrap_or(0),
            handshake_rtt: handshake_rtt_ns,
            min_data_rtt: u64::MAX,
            next_new: 1,
            first_tx: 0,
            segs: SegMap::default(),
            snd_una: 1,
            una_hist: Vec::new(),
            last_ack: None,
            acks: Vec::new(),
            last_timeout: None,
            rto_recovery_until: None,
            tlp_out: false,
            last_data_ts: 0,
            una_floor: 1,
            acks_disorder: (0, 0),
            forgotten_below: None,
            resent: VecDeque::new(),
            uncovered: VecDeque::new(),
        }
    }

    /// A SYN from the sender: sequence space starts over.
    pub(crate) fn restart(&mut self) {
        self.next_new = 1;
        self.snd_una = 1;
        self.uncovered.clear();
    }

    /// The trace joined mid-connection: number from the first byte seen.
    pub(crate) fn joined(&mut self) {
        self.snd_una = 1;
    }

    /// Bytes in flight: sent and not cumulatively acknowledged.
    pub(crate) fn flight(&self) -> u32 {
        self.next_new.wrapping_sub(self.snd_una)
    }

    fn rtt_sample(&mut self, out: &mut ConnAnalysis, rtt: u64) {
        out.rtt.push(rtt);
        self.max_rtt = self.max_rtt.max(rtt);
        self.min_data_rtt = self.min_data_rtt.min(rtt);
    }

    /// An ACK from the receiver. Returns whether it is a duplicate ACK.
    pub(crate) fn on_ack(&mut self, out: &mut ConnAnalysis, ack: &AckIn) -> bool {
        let &AckIn {
            tcp: t, ts, ack: a, ..
        } = ack;
        // RFC 5681 §2: a duplicate ACK carries no data, no SYN/FIN, the
        // same ACK and window as the last one, while data is outstanding.
        let dup = t.payload_len == 0
            && !t.fin
            && !t.rst
            && self.last_ack == Some((t.ack, t.window))
            && seq_lt(self.snd_una, self.next_new);
        let window_update = t.payload_len == 0
            && !t.fin
            && !t.rst
            && self
                .last_ack
                .is_some_and(|(a, w)| a == t.ack && w != t.window)
            && seq_lt(self.snd_una, self.next_new);
        self.last_ack = Some((t.ack, t.window));
        if seq_lt(self.snd_una, a) && seq_le(a, self.next_new) {
            // Cumulative progress: RTT sample from the newest segment it
            // covers that was never retransmitted.
            // Karn (RFC 6298 §3): never retransmitted; and not SACKed
            // before (then this ACK was held back by a hole, and the SACK
            // gave the sample).
            let sample = self
                .segs
                .range(..a)
                .next_back()
                .filter(|(_, s)| s.tx_count == 1 && !s.sacked && seq_le(s.end, a))
                .map(|(_, s)| ts.saturating_sub(s.first_ts));
            if let Some(rtt) = sample {
                self.rtt_sample(out, rtt);
            }
            self.covers_resent(out, ack.at, ts, a);
            out.bytes_acked += u64::from(a.wrapping_sub(self.snd_una));
            self.snd_una = a;
            self.una_hist.push((ts, a));
            out.last_ack_ts_ns = Some(ts);
            self.tlp_out = false;
            if self.rto_recovery_until.is_some_and(|(p, _)| seq_le(p, a)) {
                self.rto_recovery_until = None;
            }
            if self.last_timeout.is_some_and(|(_, _, p, _)| seq_lt(p, a)) {
                self.last_timeout = None;
            }
        } else if seq_lt(self.snd_una, a) {
            // Acknowledges bytes never seen sent: the capture missed them.
            // Follow the receiver.
            self.snd_una = a;
            self.una_hist.push((ts, a));
        }
        self.on_sacks(out, ack);
        let ev = AckEv {
            at: ack.at,
            ts,
            ack: a,
            dup,
            window_update,
        };
        if let Some(last) = self.acks.last() {
            let (t, k) = disorder(last, &ev);
            self.acks_disorder.0 += t;
            self.acks_disorder.1 += k;
        }
        self.acks.push(ev);
        self.forget();
        dup
    }

    /// Drops history beyond `KEEP` (see there), or spanning more than
    /// `SPAN` bytes, in batches (down to `KEEP` entries from `TRIM`, or
    /// `SPAN / 2`).
    fn forget(&mut self) {
        let newest = self.acks.last().map_or(0, |a| a.ack);
        let beyond = |ack: u32| newest.wrapping_sub(ack) > SPAN;
        let old = |ack: u32| newest.wrapping_sub(ack) > SPAN / 2;
        let cut = |len: usize, first_beyond: bool, by_span: &dyn Fn() -> usize| {
            if first_beyond {
                by_span().max(1)
            } else if len >= TRIM {
                len - KEEP
            } else {
                0
            }
        };
        let n = cut(
            self.acks.len(),
            self.acks.first().is_some_and(|a| beyond(a.ack)),
            &|| self.acks.partition_point(|a| old(a.ack)),
        );
        // Not the ACKs since the oldest data in flight was last sent: its
        // retransmission will be judged on them (a window wider than
        // `KEEP` segments).
        let n = if n > 0 && self.acks.first().is_some_and(|a| !beyond(a.ack)) {
            let una = self.snd_una;
            let sent = (self.segs.range(..=una).next_back())
                .filter(|(_, s)| seq_lt(una, s.end))
                .or_else(|| self.segs.range(una..).next())
                .map_or(u64::MAX, |(_, s)| s.last_tx_ts);
            n.min(self.acks.iter().take_while(|a| a.ts < sent).count())
        } else {
            n
        };
        if n > 0 {
            self.acks.drain(..n);
            self.acks_disorder = self.acks.windows(2).fold((0, 0), |(t, k), w| {
                let (dt, dk) = disorder(&w[0], &w[1]);
                (t + dt, k + dk)
            });
        }
        let n = cut(
            self.una_hist.len(),
            self.una_hist.first().is_some_and(|u| beyond(u.1)),
            &|| self.una_hist.partition_point(|u| old(u.1)),
        );
        if n > 0 {
            self.una_floor = self.una_hist[n - 1].1;
            self.una_hist.drain(..n);
        }
        // Only acknowledged segments are forgotten.
        let keep = if self.segs.len() >= TRIM {
            KEEP
        } else {
            usize::MAX
        };
        // Past `keep`, the acknowledged oldest go in one step: popped one
        // by one, each was read again long after it was written, a cache
        // miss per segment (2-8% of the analysis, three interleaved rounds
        // of `perf stat -r 20`).
        let excess = self.segs.len().saturating_sub(keep);
        if excess > 0
            && self
                .segs
                .first_key_value()
                .is_some_and(|(_, s)| seq_le(s.end, self.snd_una))
        {
            let n = excess.min(self.segs.ended_by(self.snd_una));
            if let Some(end) = self.segs.pop_n(n) {
                self.forgotten_below = Some(end);
            }
        }
        while self.segs.bytes() > SPAN || self.segs.len() > keep {
            match self.segs.first_key_value() {
                Some((_, s)) if seq_le(s.end, self.snd_una) => {
                    let end = s.end;
                    self.segs.pop_first();
                    self.forgotten_below = Some(end);
                }
                _ => break,
            }
        }
    }

    /// The stretches of `l..top` that no segment holds, each with the
    /// first transmission time of the segment seen above it (`now` above
    /// every one): the latest its bytes can have left.
    fn unseen(&self, l: u32, top: u32, now: u64) -> Vec<(u32, u32, u64)> {
        let mut out = Vec::new();
        let mut cursor = l;
        let from = self.segs.range(..=l).next_back().map_or(l, |(&k, _)| k);
        for (&k, s) in self.segs.range(from..) {
            if !seq_lt(cursor, top) {
                return out;
            }
            if seq_lt(cursor, k) {
                let to = if seq_lt(k, top) { k } else { top };
                out.push((cursor, to, s.first_ts));
            }
            if seq_lt(cursor, s.end) {
                cursor = s.end;
            }
        }
        if seq_lt(cursor, top) {
            out.push((cursor, top, now));
        }
        out
    }

    /// A retransmission of bytes at `rel` whose first transmission was
    /// forgotten (`KEEP`).
    pub(crate) fn forgot(&self, rel: u32) -> bool {
        self.forgotten_below.is_some_and(|f| seq_lt(rel, f))
    }

    /// SACK blocks (RFC 2018) and DSACK (RFC 2883 §4: the first block
    /// below the cumulative ACK, or inside the second block).
    fn on_sacks(&mut self, out: &mut ConnAnalysis, ack: &AckIn) {
        let &AckIn {
            at,
            tcp: t,
            ts,
            base,
            ack: a,
        } = ack;
        let sacks = t.sacks();
        for (n, &(l, r)) in sacks.iter().enumerate() {
            let (l, r) = (l.wrapping_sub(base), r.wrapping_sub(base));
            let is_dsack = n == 0
                && (seq_le(r, a)
                    || sacks.get(1).is_some_and(|&(l2, r2)| {
                        seq_le(l2.wrapping_sub(base), l) && seq_le(r, r2.wrapping_sub(base))
                    }));
            if is_dsack {
                out.dsacks.push(at);
                let packet = self.segs.range(..=l).next_back().map(|(_, s)| s.index);
                if let Some(r) = out
                    .retransmissions
                    .iter_mut()
                    .rev()
                    .find(|r| Some(r.packet) == packet)
                {
                    r.dsack.get_or_insert(at);
                }
                continue;
            }
            let mut samples = Vec::new();
            for (_, s) in self.segs.range_mut(l..) {
                if !seq_le(s.end, r) {
                    break;
                }
                if !s.sacked {
                    s.set_sacked(ts, at);
                    if s.tx_count == 1 {
                        samples.push(ts.saturating_sub(s.first_ts));
                    }
                }
            }
            for rtt in samples {
                self.rtt_sample(out, rtt);
            }
            for e in self.resent.iter_mut().filter(|e| e.sacked.is_none()) {
                if seq_le(l, e.rel) && seq_le(e.end, r) {
                    e.sacked = Some((ts, at));
                }
            }
            // SACKed bytes no segment holds: the capture missed their
            // transmission (tcpdump dropped it, or a frame was deleted).
            // New data goes out in sequence order, so they
            // left after every segment seen below them and before the
            // one seen above, or, above all data seen sent, before this
            // SACK. They are remembered as a repair sent at the latest
            // time it can have been: a RACK signal for what was seen sent
            // before it (RFC 8985 §6.2), so the capture's own loss is
            // never read as the sender's fault (the receiver's side
            // reports the gap). The receiver repeats the block until the
            // sender moves on: only its first SACK counts (later ones
            // would stretch "the latest time", and crowd real repairs out
            // of `RESENT`).
            for (from, to, sent) in self.unseen(l, r, ts) {
                let known = self
                    .resent
                    .iter()
                    .any(|e| e.sacked.is_some() && seq_le(e.rel, from) && seq_le(to, e.end));
                if !known {
                    self.push_resent(Resent {
                        rel: from,
                        end: to,
                        ts: sent,
                        sacked: Some((ts, at)),
                    });
                }
            }
        }
    }

    /// Data `rel..end` sent at `ts`: its data packet index (Lumina §3.3:
    /// first transmissions are numbered 1, 2, ...; a retransmission takes
    /// the index of the first transmission that holds its first byte, 0 if
    /// none is known) and whether it is a first transmission.
    pub(crate) fn on_send(
        &mut self,
        rel: u32,
        end: u32,
        (ts, sent): (u64, u64),
        tx: (Evidence, Option<Action>),
    ) -> (u32, bool) {
        let first = seq_le(self.next_new, rel);
        let index = if first {
            self.first_tx += 1;
            self.segs
                .insert(rel, SegState::new(self.first_tx, end, (ts, sent), tx));
            self.first_tx
        } else {
            self.segs
                .range(..=rel)
                .next_back()
                .filter(|(_, s)| seq_lt(rel, s.end))
                .map_or(0, |(_, s)| s.index)
        };
        if !seq_le(end, self.next_new) {
            self.next_new = end;
        }
        (index, first)
    }

    /// Splits the first transmission that holds byte `at` (not as its
    /// first byte) in two, each part keeping the whole's history. The
    /// analysis works in bytes: a super-packet (offloads on) is resent in
    /// wire-sized pieces, and a retransmission may be repacketized, so
    /// each byte range that is resent keeps its own count, time of last
    /// transmission and SACK state.
    fn split(&mut self, at: u32) {
        let Some((&k, s)) = self.segs.range(..at).next_back() else {
            return;
        };
        if seq_lt(k, at) && seq_lt(at, s.end) {
            let tail = s.clone();
            self.segs.get_mut(k).expect("just found").end = at;
            self.segs.insert(at, tail);
        }
    }

    /// A retransmission of bytes `rel..end`, data packet `index` (iteration
    /// `iter`), at `ts`: classified by what the sender could know
    /// (`Classify`) about its first bytes, and recorded on every byte it
    /// resends.
    pub(crate) fn on_resend(
        &mut self,
        out: &mut ConnAnalysis,
        tx: (Evidence, Option<Action>),
        (ts, sent): (u64, u64),
        (rel, end): (u32, u32),
        (index, iter): (u32, u32),
        opts: Options,
    ) {
        self.split(rel);
        self.split(end);
        let s = self
            .segs
            .range(..=rel)
            .next_back()
            .map(|(&k, s)| (k, s.clone()))
            .expect("index > 0 has a segment");
        // The how-manieth time these bytes are resent.
        let nth = s.1.tx_count;
        let ctx = Classify {
            ts,
            start: s.0,
            seg: &s.1,
            segs: &self.segs,
            acks: &self.acks,
            acks_ordered: (self.acks_disorder.0 == 0, self.acks_disorder.1 == 0),
            una_hist: &self.una_hist,
            una_floor: self.una_floor,
            next_new: self.next_new,
            smss: out.smss,
            max_rtt: self.max_rtt,
            // The least the sender's smoothed RTT can be: its first
            // sample is the handshake's, and a mean never goes below the
            // least of its samples. A connection opened on an idle path
            // and used once a queue had built probes on that (a run's
            // probes came 4.4 ms after a 9 ms path's data: PTO = 2 SRTT
            // plus 2 ms, Linux's TCP_TIMEOUT_MIN_US).
            min_rtt: match (self.min_data_rtt, self.handshake_rtt) {
                (u64::MAX, _) => self.max_rtt,
                (data, Some(hs)) => data.min(hs),
                (data, None) => data,
            },
            sender_side: out.base_rtt.sender_side_ns,
            opts,
            last_data_ts: self.last_data_ts,
            tlp_out: self.tlp_out,
            rto_recovery: self.rto_recovery_until,
            resent: &self.resent,
        };
        let (reason, trigger, flags) = ctx.classify();
        let crossed = if flags.0 { None } else { ctx.covering_ack() };
        // The timer runs from the later of the last transmission and the
        // last ACK of new data (RFC 6298 §5.3; Linux re-arms it in tcp_ack
        // only when data was acknowledged, FLAG_SET_XMIT_TIMER). A window
        // update or a duplicate ACK leaves it running: counted from a slow
        // reader's window updates, a backed-off timeout looked shorter
        // than the one before it (a false `no-backoff`). Transmissions are
        // timed when the sender released them, where the packets say: a
        // retransmission that reached the capture point late would
        // lengthen its timer's interval and shorten the next one.
        let last_ack = self.una_hist.last().map_or(0, |u| u.0);
        let rto_ns = (reason == Reason::Timeout)
            .then(|| sent.saturating_sub(s.1.last_sent_ts.max(last_ack)));
        // Backed off from the timeout before, if that one fired while this
        // data was out and nothing new was acknowledged since: an ACK of
        // new data gives an RTT sample (with timestamps, even for
        // retransmitted data, RFC 7323 §4) and Linux then starts the
        // backoff over (tcp_ack_update_rtt: "RFC6298: only reset backoff
        // on valid RTT measurement"). A congested run saw timeouts of 207
        // and then 205 ms across such ACKs, flagged `no-backoff`.
        let backoff_of = match (rto_ns, self.last_timeout) {
            (Some(_), Some((e, pts, _, rto))) if pts >= s.1.first_ts && last_ack < pts => {
                Some((e, rto))
            }
            _ => None,
        };
        if let Some(rto) = rto_ns {
            self.last_timeout = Some((tx.0, ts, self.next_new, rto));
            self.rto_recovery_until = Some((self.next_new, ts));
        }
        if reason == Reason::Tlp {
            self.tlp_out = true;
        }
        out.retransmissions.push(Retransmission {
            packet: index,
            seq: rel,
            nth,
            iteration: iter,
            at: tx.0,
            ts_ns: ts,
            previous: s.1.last_tx().0,
            previous_event: s.1.last_tx().1,
            since_loss_ns: ts.saturating_sub(s.1.last_tx_ts),
            recovery: reason.recovery(),
            reason,
            trigger: trigger.map(|a| a.at),
            trigger_ts_ns: trigger.map(|a| a.ts),
            already_acked: flags.0,
            crossed_ack: crossed.map(|a| a.at),
            crossed_ns: crossed.map(|a| ts.saturating_sub(a.ts)),
            already_sacked: flags.1,
            dsack: None,
            rto_ns,
            duplicate_acks: matches!(reason, Reason::Timeout | Reason::DupAcks)
                .then(|| ctx.duplicate_acks()),
            covered: None,
            backoff_of,
            captured_after: None,
        });
        self.remember_resend(rel, end, ts, out.base_rtt.sender_side_ns);
        // Bytes acknowledged before it was sent have been covered already:
        // no later ACK answers it.
        if !flags.0 {
            if self.uncovered.len() == RESENT {
                self.uncovered.pop_front();
            }
            self.uncovered.push_back((rel, ts));
        }
        // Every byte this sends was sent again now (a retransmission can
        // span several first transmissions: Linux collapses small ones).
        for (_, st) in self
            .segs
            .range_mut(s.0..)
            .take_while(|(&k, _)| seq_lt(k, end))
        {
            st.last_tx_ts = ts;
            st.last_sent_ts = sent;
            st.set_last_tx(tx);
            st.tx_count += 1;
        }
    }

    /// Bytes `rel..end` sent again at `ts` (remembered as a RACK signal for
    /// data sent before them, `Classify`).
    ///
    /// If a SACK covered them shortly before, too recently for the sender
    /// to surely have read it (within its side of the round trip and its
    /// transmit queue, the bound `already_sacked` uses), the sender may
    /// read it only after this repair: a socket busy in `sendmsg` takes its
    /// ACKs from the backlog that late. Linux then takes the SACK as the
    /// repair's delivery (tcp_rack_advance stamps a SACKed segment with its
    /// latest transmission), and RACK marks lost what was sent before the
    /// repair (RFC 8985 §6.2). So that SACK is kept as the repair's, held
    /// from the repair's own time. A dumpcap at the receiver of a real
    /// transfer (CI, 2026-11-27) had a repair resent 73 us after itself
    /// for exactly this, and it was called unjustified.
    pub(crate) fn remember_resend(&mut self, rel: u32, end: u32, ts: u64, sender_side_ns: u64) {
        let recent = |t: u64| t.saturating_add(sender_side_ns + SEND_QUEUE_NS) > ts;
        let seen = self
            .segs
            .range(..=rel)
            .next_back()
            .filter(|(_, s)| seq_lt(rel, s.end))
            .and_then(|(_, s)| s.sacked_ts().zip(s.sack_at()));
        let unseen = || {
            self.resent
                .iter()
                .rev()
                .filter(|e| seq_le(e.rel, rel) && seq_le(end, e.end))
                .find_map(|e| e.sacked)
        };
        let pending = seen
            .or_else(unseen)
            .filter(|&(t, _)| t <= ts && recent(t))
            .map(|(_, at)| (ts, at));
        self.push_resent(Resent {
            rel,
            end,
            ts,
            sacked: pending,
        });
    }

    /// The cumulative ACK `a`, passing at `ts`, covers the retransmissions
    /// of `snd_una..a` that no ACK covered before: each learns when
    /// (`Covered`), and the hole this ACK closes.
    fn covers_resent(&mut self, out: &mut ConnAnalysis, at: Evidence, ts: u64, a: u32) {
        if self.uncovered.is_empty() {
            return;
        }
        let una = self.snd_una;
        let segments = a.wrapping_sub(una).div_ceil(out.smss.max(1));
        self.uncovered.retain(|&(rel, sent)| {
            if !seq_lt(rel, a) || sent > ts {
                return true;
            }
            if let Some(r) = out
                .retransmissions
                .iter_mut()
                .rev()
                .take_while(|r| r.ts_ns >= sent)
                .find(|r| r.ts_ns == sent && r.covered.is_none())
            {
                r.covered = Some(Covered {
                    at,
                    after_ns: ts - sent,
                    segments,
                });
            }
            false
        });
    }

    fn push_resent(&mut self, e: Resent) {
        if self.resent.len() == RESENT {
            self.resent.pop_front();
        }
        self.resent.push_back(e);
    }

    /// A data packet left at `ts` (the tail-loss probe's clock).
    pub(crate) fn sent(&mut self, ts: u64) {
        self.last_data_ts = ts;
    }

    /// What the sender's view adds once the connection is read.
    pub(crate) fn finish(&self, out: &mut ConnAnalysis) {
        out.first_transmissions = self.first_tx;
        // The receiver's side is also sampled by every data packet and its
        // ACK; the smallest sample beats the handshake's (a SYN takes the
        // slow path through the stack).
        if self.min_data_rtt != u64::MAX {
            if out.base_rtt.source.is_empty() {
                out.base_rtt = BaseRtt {
                    sender_side_ns: 0,
                    receiver_side_ns: self.min_data_rtt,
                    source: "data",
                };
            } else if self.min_data_rtt < out.base_rtt.receiver_side_ns {
                out.base_rtt.receiver_side_ns = self.min_data_rtt;
                out.base_rtt.source = "handshake and data";
            }
        }
        // The sender's side keeps the handshake's figure: new data that
        // follows an ACK need not be clocked out by it, so data-path samples
        // can be arbitrarily small, and the classifier relies on this side
        // not being underestimated (an ACK counts as known to the sender
        // only a sender-side round trip after it passed).
    }
}
