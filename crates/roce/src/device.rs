//! One RoCE device (an RNIC port) with its RC queue pairs, in the sans-IO
//! style: `handle_datagram(now, ..)`, `handle_timeout(now)`,
//! `poll_transmit(now)`, `poll_timeout()`, `poll_completion()`.
//!
//! Each QP is both a requester (the work it posts) and a responder (the
//! work its peer posts), as an RC QP is (IBTA §9.7). Go-back-N is the only
//! retransmission scheme (§9.7.5: the responder NAKs the first missing PSN
//! and drops what follows it; the requester resends from that PSN).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::Ipv4Addr;

use crate::profile::{Profile, COUNTERS};
use serde::Serialize;

use crate::dcqcn::{CnpLimiter, Rp, RpParams};
use crate::packet::{self, op, Bth, Ipv4Udp, Kind, NakCode, Packet, Position, Reth, Syndrome};
use crate::psn;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Send,
    Write,
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    pub id: u64,
    pub verb: Verb,
    pub len: u32,
    /// Remote virtual address for write/read.
    pub remote_va: u64,
    pub rkey: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Success,
    /// IBTA §9.7.6.1.3: the retry count ran out on local ACK timeouts.
    RetryExceeded,
    /// §9.7.5.2.8: the RNR retry count ran out.
    RnrRetryExceeded,
    /// The responder NAKed with an error other than a sequence error.
    RemoteError,
    /// Posted behind a request that failed (§10.8.3.3, QP in the error state).
    Flushed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Completion {
    pub qpn: u32,
    pub wr_id: u64,
    pub verb: Verb,
    pub status: Status,
    pub len: u32,
    /// True for a receive completion at the responder (a Send arrived).
    pub recv: bool,
    pub at_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("no QP {0:#x}")]
    NoQp(u32),
    #[error("QP {0:#x} is in the error state")]
    QpError(u32),
    #[error("message of {0} bytes exceeds 2^31")]
    TooLong(u32),
}

/// A datagram to send: UDP from `src:sport` to `dst:4791`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tx {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    /// The IP ECN field: ECT(0) = 0b10 for data and ACKs, 0 for CNPs.
    pub ecn: u8,
    pub bytes: Vec<u8>,
    /// Carries message data (send/write/read response): paced.
    pub data: bool,
}

/// A datagram received on UDP port 4791.
#[derive(Debug, Clone, Copy)]
pub struct Rx<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub ecn: u8,
    pub bytes: &'a [u8],
    /// When the port received it, if earlier than `now`: a NIC stamps
    /// packets on arrival, and its CNP limiter counts intervals between
    /// arrivals, however late the pipeline gets to them. The lab passes
    /// the kernel's receive timestamp.
    pub arrived: Option<u64>,
}

/// Device counters, under the names NVIDIA's `hw_counters` use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Counters(pub BTreeMap<String, u64>);

impl Counters {
    fn zero() -> Counters {
        Counters(COUNTERS.iter().map(|c| (c.to_string(), 0)).collect())
    }
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub profile: Profile,
    pub dcqcn_rp: bool,
    pub dcqcn_np: bool,
    pub min_time_between_cnps_ns: u64,
    pub adaptive_retransmission: bool,
    /// After a local ACK timeout, restart at the DCQCN minimum rate.
    pub slow_restart: bool,
    /// The port's line rate: data is paced at it, or at DCQCN's R_C.
    pub line_rate_bps: f64,
    pub rp: RpParams,
}

impl DeviceConfig {
    pub fn new(profile: Profile) -> DeviceConfig {
        DeviceConfig {
            profile,
            dcqcn_rp: true,
            dcqcn_np: true,
            // NVIDIA's default min_time_between_cnps.
            min_time_between_cnps_ns: 4_000,
            adaptive_retransmission: false,
            slow_restart: false,
            line_rate_bps: 10e9,
            rp: RpParams::default(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct QpConfig {
    pub qpn: u32,
    pub remote_qpn: u32,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    /// UDP source port of this QP's packets (RoCEv2 uses it for ECMP entropy).
    pub sport: u16,
    /// First PSN this QP sends (its requester's initial PSN).
    pub ipsn: u32,
    /// First PSN the peer sends (this responder's initial expected PSN).
    pub remote_ipsn: u32,
    /// Path MTU: payload bytes per packet, 256..=4096 (IBTA §9.6.2).
    pub mtu: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = infinite (§9.7.6.1.3).
    pub timeout: u8,
    /// Retries after a local ACK timeout (0..=7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK; 7 = infinite (§9.7.5.2.8).
    pub rnr_retry: u8,
    /// The RNR timer code this responder asks for (Table 45).
    pub min_rnr_timer: u8,
    /// Also set AckReq on every n-th packet of a long message (0 = only the last).
    pub ack_req_every: u32,
}

impl QpConfig {
    /// An RC QP between `local` and `remote` with Lumina's defaults: path MTU
    /// 1024, timeout 14, retry_cnt 7, infinite RNR retries, the shortest RNR
    /// timer, AckReq on the last packet only, PSNs from 0, UDP source port
    /// 49152 + QPN.
    pub fn new(qpn: u32, remote_qpn: u32, local: Ipv4Addr, remote: Ipv4Addr) -> QpConfig {
        QpConfig {
            qpn,
            remote_qpn,
            local,
            remote,
            sport: 49152u16.wrapping_add(qpn as u16),
            ipsn: 0,
            remote_ipsn: 0,
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            ack_req_every: 0,
        }
    }

    pub fn timeout_ns(&self) -> Option<u64> {
        local_ack_timeout_ns(self.timeout)
    }
}

/// IBTA §9.7.6.1.3: the local ACK timeout is 4.096 µs × 2^timeout, and
/// timeout 0 means the timer is off.
pub fn local_ack_timeout_ns(timeout: u8) -> Option<u64> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

struct Wqe {
    wr: WorkRequest,
    first_psn: u32,
    npkts: u32,
    /// Read: response packets received in order.
    read_got: u32,
}

impl Wqe {
    fn end(&self) -> u32 {
        psn::add(self.first_psn, self.npkts)
    }
    fn contains(&self, p: u32) -> bool {
        psn::le(self.first_psn, p) && psn::lt(p, self.end())
    }
}

#[derive(Clone, Copy)]
enum RewindCause {
    Nak,
    ImpliedNak,
}

struct ReadResp {
    psn: u32,
    end: u32,
    va: u64,
    remaining: u32,
    first: bool,
}

struct Qp {
    c: QpConfig,
    // Requester.
    sq: VecDeque<Wqe>,
    next_psn: u32,
    tx_psn: u32,
    una: u32,
    retries_left: u32,
    rnr_left: u32,
    timer: Option<u64>,
    timeouts_in_row: u32,
    rewind: Option<(u64, u32, RewindCause)>,
    hold_until: u64,
    read_nak_for: Option<u32>,
    sent_since_ackreq: u32,
    error: bool,
    // Responder.
    epsn: u32,
    msn: u32,
    nak_outstanding: bool,
    recv_posted: u64,
    /// Bytes of the send being received, for its receive completion.
    recv_bytes: u32,
    reads: VecDeque<ReadResp>,
    // Both.
    /// ACKs, NAKs and CNPs: (due time, packet, IP ECN field). ACKs and NAKs
    /// go out ECT(0) (2), CNPs Not-ECT (0); the transmit path also uses the
    /// field to tell them apart.
    ctrl: VecDeque<(u64, Vec<u8>, u8)>,
    rp: Rp,
    pace_next: u64,
}

fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// Deterministic payload bytes: a function of the remote address, so a
/// retransmission carries the same bytes as the original.
fn fill(va: u64) -> impl Fn(usize) -> u8 {
    move |i| (va.wrapping_add(i as u64) as u8) ^ 0x5a
}

pub struct Device {
    pub cfg: DeviceConfig,
    qps: HashMap<u32, Qp>,
    order: Vec<u32>,
    rr: usize,
    limiter: CnpLimiter,
    counters: Counters,
    completions: VecDeque<Completion>,
    /// A shared slow path discards what arrives until then (profile
    /// `shared_slow_path`).
    stalled_until: u64,
}

impl Device {
    pub fn new(cfg: DeviceConfig) -> Device {
        let interval = cfg
            .min_time_between_cnps_ns
            .max(cfg.profile.cnp_hidden_interval.0);
        Device {
            limiter: CnpLimiter::new(cfg.profile.cnp_scope, interval),
            cfg,
            qps: HashMap::new(),
            order: Vec::new(),
            rr: 0,
            counters: Counters::zero(),
            completions: VecDeque::new(),
            stalled_until: 0,
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counts unless the profile says this counter is broken (Lumina §6.2.4).
    fn count(&mut self, name: &str) {
        if self.cfg.profile.frozen_counters.iter().any(|c| c == name) {
            return;
        }
        // Every counter exists from the start (Counters::zero); the entry
        // API would allocate the key on every packet.
        match self.counters.0.get_mut(name) {
            Some(v) => *v += 1,
            None => {
                self.counters.0.insert(name.to_string(), 1);
            }
        }
    }

    pub fn create_qp(&mut self, c: QpConfig) {
        let retries = self.retry_budget(&c);
        let qp = Qp {
            sq: VecDeque::new(),
            next_psn: c.ipsn & psn::MASK,
            tx_psn: c.ipsn & psn::MASK,
            una: c.ipsn & psn::MASK,
            retries_left: retries,
            rnr_left: c.rnr_retry as u32,
            timer: None,
            timeouts_in_row: 0,
            rewind: None,
            hold_until: 0,
            read_nak_for: None,
            sent_since_ackreq: 0,
            error: false,
            epsn: c.remote_ipsn & psn::MASK,
            msn: 0,
            nak_outstanding: false,
            recv_posted: 0,
            recv_bytes: 0,
            reads: VecDeque::new(),
            ctrl: VecDeque::new(),
            rp: Rp::new(self.cfg.rp, self.cfg.line_rate_bps),
            pace_next: 0,
            c,
        };
        self.order.push(c.qpn);
        self.qps.insert(c.qpn, qp);
    }

    pub fn post_send(&mut self, qpn: u32, wr: WorkRequest) -> Result<(), PostError> {
        let qp = self.qps.get_mut(&qpn).ok_or(PostError::NoQp(qpn))?;
        if qp.error {
            return Err(PostError::QpError(qpn));
        }
        if wr.len > 1 << 31 {
            return Err(PostError::TooLong(wr.len));
        }
        let n = npkts(wr.len, qp.c.mtu);
        qp.sq.push_back(Wqe {
            wr,
            first_psn: qp.next_psn,
            npkts: n,
            read_got: 0,
        });
        qp.next_psn = psn::add(qp.next_psn, n);
        Ok(())
    }

    /// Posts `n` receive WQEs (each takes one incoming Send).
    pub fn post_recv(&mut self, qpn: u32, n: u64) -> Result<(), PostError> {
        let qp = self.qps.get_mut(&qpn).ok_or(PostError::NoQp(qpn))?;
        qp.recv_posted += n;
        Ok(())
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The PSN a QP sends next and the number of posted requests not yet
    /// completed (for drivers and tests).
    pub fn qp_state(&self, qpn: u32) -> Option<(u32, usize, bool)> {
        self.qps.get(&qpn).map(|q| (q.tx_psn, q.sq.len(), q.error))
    }

    /// The DCQCN reaction point of a QP (rates in bit/s).
    pub fn rp(&self, qpn: u32) -> Option<&Rp> {
        self.qps.get(&qpn).map(|q| &q.rp)
    }

    fn bth(&self, opcode: u8, dqpn: u32, p: u32, ack_req: bool) -> Bth {
        Bth {
            opcode,
            se: false,
            migreq: self.cfg.profile.migreq,
            pad: 0,
            tver: 0,
            pkey: packet::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dqpn,
            ack_req,
            psn: p,
        }
    }

    fn ack(&self, qp: &Qp, s: Syndrome, p: u32) -> Vec<u8> {
        packet::build(
            self.bth(op::ACKNOWLEDGE, qp.c.remote_qpn, p, false),
            None,
            Some((s, qp.msn)),
            0,
            |_| 0,
        )
    }

    // ---------------------------------------------------------------- receive

    pub fn handle_datagram(&mut self, now: u64, rx: Rx) {
        if now < self.stalled_until {
            // Lumina §6.2.2: the stalled pipeline drops at the port, before
            // any QP sees the packet.
            self.count("rx_discards_phy");
            return;
        }
        let h = Ipv4Udp::lab(rx.src, rx.dst, rx.sport);
        // Annex A17.8: a packet whose ICRC does not match is dropped silently.
        if !packet::icrc_ok_ipv4(&h, rx.bytes) {
            self.count("rx_icrc_encapsulated");
            return;
        }
        let Ok(pkt) = Packet::parse(rx.bytes) else {
            return;
        };
        self.count("rx_roce_packets");
        let qpn = pkt.bth.dqpn;
        if !self.qps.contains_key(&qpn) {
            return;
        }
        if pkt.bth.opcode == op::CNP {
            if self.cfg.dcqcn_rp {
                self.count("rp_cnp_handled");
                self.qps.get_mut(&qpn).unwrap().rp.on_cnp(now);
            } else {
                self.count("rp_cnp_ignored");
            }
            return;
        }
        // DCQCN notification point (§3.1): CE-marked RoCE packets.
        if rx.ecn == 3 {
            self.count("np_ecn_marked_roce_packets");
            let at = rx.arrived.map_or(now, |a| a.min(now));
            if self.cfg.dcqcn_np && self.limiter.on_marked(at, qpn, rx.src) {
                let qp = &self.qps[&qpn];
                let mut b = self.bth(op::CNP, qp.c.remote_qpn, 0, false);
                // Annex A17.9.3: a CNP has its BECN bit set and P_Key as the QP's.
                b.becn = true;
                let cnp = packet::build(b, None, None, 0, |_| 0);
                self.qps
                    .get_mut(&qpn)
                    .unwrap()
                    .ctrl
                    .push_back((now, cnp, 0));
                self.count("np_cnp_sent");
            }
        }
        match packet::kind(pkt.bth.opcode) {
            Kind::Data | Kind::ReadRequest => self.responder_rx(now, qpn, &pkt),
            Kind::Ack => self.requester_ack(now, qpn, &pkt),
            Kind::ReadResponse => self.requester_read_response(now, qpn, &pkt),
            Kind::Cnp | Kind::Other => {}
        }
    }

    /// IBTA §9.7.5.1: the responder checks the PSN against its expected PSN.
    fn responder_rx(&mut self, now: u64, qpn: u32, pkt: &Packet) {
        let mtu = self.qps[&qpn].c.mtu;
        let nack_delay = self.cfg.profile.nack_generation.0;
        let p = pkt.bth.psn;
        let d = psn::diff(p, self.qps[&qpn].epsn);
        if d > 0 {
            // §9.7.5.1.2 "PSN sequence error": NAK the expected PSN, once until
            // it arrives (C9-106: the responder shall not NAK again for the
            // packets that follow in the same error).
            self.count("out_of_sequence");
            let qp = self.qps.get_mut(&qpn).unwrap();
            if !qp.nak_outstanding {
                qp.nak_outstanding = true;
                let epsn = qp.epsn;
                let nak = self.ack(&self.qps[&qpn], Syndrome::Nak(NakCode::SequenceError), epsn);
                self.qps
                    .get_mut(&qpn)
                    .unwrap()
                    .ctrl
                    .push_back((now + nack_delay, nak, 2));
            }
            return;
        }
        if d < 0 {
            // §9.7.5.1.1 duplicate: re-execute a read, re-acknowledge the rest.
            self.count("duplicate_request");
            let qp = self.qps.get_mut(&qpn).unwrap();
            if pkt.bth.opcode == op::READ_REQUEST {
                let r = pkt.reth.expect("parsed");
                qp.reads.retain(|x| psn::lt(x.psn, p));
                if let Some(last) = qp.reads.back_mut() {
                    if psn::lt(p, last.end) {
                        last.end = p;
                    }
                }
                qp.reads.push_back(ReadResp {
                    psn: p,
                    end: psn::add(p, npkts(r.len, mtu)),
                    va: r.va,
                    remaining: r.len,
                    first: true,
                });
            } else if pkt.bth.ack_req {
                let last = psn::add(qp.epsn, psn::MASK);
                let ack = self.ack(&self.qps[&qpn], Syndrome::Ack { credits: 31 }, last);
                self.qps
                    .get_mut(&qpn)
                    .unwrap()
                    .ctrl
                    .push_back((now, ack, 2));
            }
            return;
        }
        let opc = pkt.bth.opcode;
        let pos = packet::position(opc);
        let is_send = opc <= op::SEND_ONLY_IMM;
        if is_send && matches!(pos, Position::First | Position::Only) {
            if self.qps[&qpn].recv_posted == 0 {
                // §9.7.5.2.8: no receive WQE — RNR NAK, the PSN is not consumed.
                self.count("out_of_buffer");
                let t = self.qps[&qpn].c.min_rnr_timer;
                let nak = self.ack(&self.qps[&qpn], Syndrome::RnrNak { timer: t }, p);
                self.qps
                    .get_mut(&qpn)
                    .unwrap()
                    .ctrl
                    .push_back((now, nak, 2));
                return;
            }
            self.qps.get_mut(&qpn).unwrap().recv_posted -= 1;
        }
        if opc == op::READ_REQUEST {
            self.count("rx_read_requests");
        } else if matches!(pos, Position::Last | Position::Only) {
            self.count(if is_send {
                "rx_send_requests"
            } else {
                "rx_write_requests"
            });
        }
        let qp = self.qps.get_mut(&qpn).unwrap();
        qp.nak_outstanding = false;
        if opc == op::READ_REQUEST {
            let r = pkt.reth.expect("parsed");
            let n = npkts(r.len, mtu);
            qp.reads.push_back(ReadResp {
                psn: p,
                end: psn::add(p, n),
                va: r.va,
                remaining: r.len,
                first: true,
            });
            qp.epsn = psn::add(p, n);
            qp.msn = (qp.msn + 1) & psn::MASK;
            return;
        }
        qp.epsn = psn::add(p, 1);
        if is_send {
            if matches!(pos, Position::First | Position::Only) {
                qp.recv_bytes = 0;
            }
            qp.recv_bytes += pkt.payload.len() as u32;
        }
        if matches!(pos, Position::Last | Position::Only) {
            qp.msn = (qp.msn + 1) & psn::MASK;
            if is_send {
                self.completions.push_back(Completion {
                    qpn,
                    wr_id: qp.msn as u64,
                    verb: Verb::Send,
                    status: Status::Success,
                    len: qp.recv_bytes,
                    recv: true,
                    at_ns: now,
                });
            }
        }
        // §9.7.6.1.1: an ACK is due for a request with AckReq set; the rest
        // are coalesced into it (an ACK covers every PSN up to its own).
        if pkt.bth.ack_req {
            let ack = self.ack(&self.qps[&qpn], Syndrome::Ack { credits: 31 }, p);
            self.qps
                .get_mut(&qpn)
                .unwrap()
                .ctrl
                .push_back((now, ack, 2));
        }
    }

    /// Everything before `upto` is acknowledged: complete what is done, and
    /// detect reads whose responses are missing though later PSNs were
    /// acknowledged (IBTA §9.7.5.2.2, "implied NAK").
    fn acked_before(&mut self, now: u64, qpn: u32, upto: u32) {
        let read_delay = self.cfg.profile.read_nack_generation.0;
        let timeout = self.timeout_for(&self.qps[&qpn]);
        let budget = self.retry_budget(&self.qps[&qpn].c);
        let qp = self.qps.get_mut(&qpn).unwrap();
        // Anything up to the highest PSN ever assigned may be acknowledged,
        // also after a go-back-N rewound tx_psn below it.
        if psn::lt(qp.una, upto) && psn::le(upto, qp.next_psn) {
            qp.una = upto;
            if psn::lt(qp.tx_psn, upto) {
                qp.tx_psn = upto;
            }
            // §9.7.6.1.3: forward progress resets the retry counter and
            // restarts the timer for what is still outstanding.
            qp.retries_left = budget;
            qp.timeouts_in_row = 0;
            qp.timer = if qp.una != qp.tx_psn {
                timeout.map(|t| now + t)
            } else {
                None
            };
        }
        let mut implied = None;
        for w in &qp.sq {
            if w.wr.verb == Verb::Read && w.read_got < w.npkts && psn::le(w.end(), upto) {
                implied = Some(psn::add(w.first_psn, w.read_got));
                break;
            }
        }
        if let Some(e) = implied {
            self.implied_nak(now, qpn, e, read_delay);
        }
        self.complete_front(now, qpn);
    }

    /// Retries after local ACK timeouts: the configured count, plus what an
    /// adaptive-retransmission profile adds when the host turns it on.
    fn retry_budget(&self, c: &QpConfig) -> u32 {
        c.retry_cnt as u32
            + match (
                &self.cfg.profile.adaptive_retransmission,
                self.cfg.adaptive_retransmission,
            ) {
                (Some(a), true) => a.extra_retries,
                _ => 0,
            }
    }

    fn implied_nak(&mut self, now: u64, qpn: u32, e: u32, delay: u64) {
        let qp = self.qps.get_mut(&qpn).unwrap();
        if qp.read_nak_for == Some(e) {
            return;
        }
        qp.read_nak_for = Some(e);
        qp.una = e;
        self.count("implied_nak_seq_err");
        if let Some(sp) = &self.cfg.profile.shared_slow_path {
            let open = self
                .qps
                .values()
                .filter(|q| q.read_nak_for.is_some())
                .count();
            if open >= sp.recoveries as usize {
                self.stalled_until = self.stalled_until.max(now + sp.stall.0);
            }
        }
        self.schedule_rewind(now + delay, qpn, e, RewindCause::ImpliedNak);
    }

    fn schedule_rewind(&mut self, at: u64, qpn: u32, to: u32, cause: RewindCause) {
        let qp = self.qps.get_mut(&qpn).unwrap();
        match qp.rewind {
            Some((t, p, _)) if t <= at && psn::le(p, to) => {}
            _ => qp.rewind = Some((at, to, cause)),
        }
    }

    fn complete_front(&mut self, now: u64, qpn: u32) {
        let qp = self.qps.get_mut(&qpn).unwrap();
        while let Some(w) = qp.sq.front() {
            let done = match w.wr.verb {
                Verb::Read => w.read_got >= w.npkts,
                _ => psn::le(w.end(), qp.una),
            };
            if !done {
                break;
            }
            let w = qp.sq.pop_front().unwrap();
            self.completions.push_back(Completion {
                qpn,
                wr_id: w.wr.id,
                verb: w.wr.verb,
                status: Status::Success,
                len: w.wr.len,
                recv: false,
                at_ns: now,
            });
        }
        if qp.sq.is_empty() || qp.una == qp.tx_psn {
            qp.timer = None;
        }
    }

    fn requester_ack(&mut self, now: u64, qpn: u32, pkt: &Packet) {
        let Some((syn, _msn)) = pkt.aeth else { return };
        let p = pkt.bth.psn;
        match syn {
            Syndrome::Ack { .. } => self.acked_before(now, qpn, psn::add(p, 1)),
            Syndrome::Nak(NakCode::SequenceError) => {
                // §9.7.5.2.2: every PSN before the NAK's was executed; resend
                // from it (go-back-N).
                let qp = &self.qps[&qpn];
                if psn::lt(p, qp.una) || psn::lt(qp.tx_psn, p) {
                    return; // stale
                }
                self.count("packet_seq_err");
                self.acked_before(now, qpn, p);
                let delay = self.cfg.profile.nack_reaction.0;
                self.schedule_rewind(now + delay, qpn, p, RewindCause::Nak);
            }
            Syndrome::RnrNak { timer } => {
                self.acked_before(now, qpn, p);
                let qp = self.qps.get_mut(&qpn).unwrap();
                if qp.c.rnr_retry != 7 {
                    if qp.rnr_left == 0 {
                        self.count("rnr_nak_retry_err");
                        self.fail(now, qpn, Status::RnrRetryExceeded);
                        return;
                    }
                    qp.rnr_left -= 1;
                }
                qp.hold_until = now + packet::rnr_timer_ns(timer);
                if psn::lt(p, qp.tx_psn) {
                    qp.tx_psn = p;
                }
            }
            Syndrome::Nak(_) | Syndrome::Reserved(_) => self.fail(now, qpn, Status::RemoteError),
        }
    }

    fn requester_read_response(&mut self, now: u64, qpn: u32, pkt: &Packet) {
        let p = pkt.bth.psn;
        let read_delay = self.cfg.profile.read_nack_generation.0;
        let qp = self.qps.get_mut(&qpn).unwrap();
        let Some(w) = qp
            .sq
            .iter_mut()
            .find(|w| w.wr.verb == Verb::Read && w.read_got < w.npkts)
        else {
            return;
        };
        let e = psn::add(w.first_psn, w.read_got);
        let d = psn::diff(p, e);
        if d < 0 {
            return; // duplicate response
        }
        if d > 0 {
            // A response is missing: the requester re-issues the read from the
            // missing offset (§9.7.5.2.2 implied NAK; Lumina §6.1).
            self.implied_nak(now, qpn, e, read_delay);
            return;
        }
        w.read_got += 1;
        if qp.read_nak_for == Some(e) {
            qp.read_nak_for = None;
        }
        if let Some((_, to, RewindCause::ImpliedNak)) = qp.rewind {
            if to == e {
                qp.rewind = None;
            }
        }
        // A read response acknowledges every earlier PSN and this one.
        self.acked_before(now, qpn, psn::add(p, 1));
    }

    fn fail(&mut self, now: u64, qpn: u32, status: Status) {
        let qp = self.qps.get_mut(&qpn).unwrap();
        qp.error = true;
        qp.timer = None;
        qp.rewind = None;
        let mut first = true;
        let mut out = Vec::new();
        while let Some(w) = qp.sq.pop_front() {
            out.push(Completion {
                qpn,
                wr_id: w.wr.id,
                verb: w.wr.verb,
                status: if first { status } else { Status::Flushed },
                len: w.wr.len,
                recv: false,
                at_ns: now,
            });
            first = false;
        }
        qp.tx_psn = qp.next_psn;
        self.count("req_cqe_error");
        self.completions.extend(out);
    }

    // ---------------------------------------------------------------- timers

    /// The earliest time at which `handle_timeout` or `poll_transmit` has
    /// something to do; None when idle.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut at = |x: u64| t = Some(t.map_or(x, |t: u64| t.min(x)));
        for qp in self.qps.values() {
            if let Some(x) = qp.timer {
                at(x);
            }
            if let Some((x, _, _)) = qp.rewind {
                at(x);
            }
            if let Some(x) = qp.rp.next_timer() {
                at(x);
            }
            for (due, _, _) in &qp.ctrl {
                at(*due);
            }
            if qp.has_data() {
                at(qp.pace_next.max(qp.hold_until));
            }
        }
        t
    }

    pub fn handle_timeout(&mut self, now: u64) {
        // Called for every packet sent: index rather than clone the order.
        for i in 0..self.order.len() {
            let qpn = self.order[i];
            let qp = self.qps.get_mut(&qpn).unwrap();
            qp.rp.on_timer(now);
            if let Some((t, to, _)) = qp.rewind {
                if t <= now {
                    qp.rewind = None;
                    if psn::lt(to, qp.tx_psn) {
                        qp.tx_psn = to;
                    }
                }
            }
            let expired = qp.timer.is_some_and(|t| t <= now);
            if !expired {
                continue;
            }
            // §9.7.6.1.3: the local ACK timer expired with requests outstanding.
            self.count("local_ack_timeout_err");
            let adaptive = self.cfg.adaptive_retransmission
                && self.cfg.profile.adaptive_retransmission.is_some();
            if adaptive {
                self.count("roce_adp_retrans");
            }
            let qp = self.qps.get_mut(&qpn).unwrap();
            if qp.retries_left == 0 {
                self.fail(now, qpn, Status::RetryExceeded);
                continue;
            }
            qp.retries_left -= 1;
            qp.timeouts_in_row += 1;
            qp.timer = None;
            qp.tx_psn = qp.una;
            qp.rewind = None;
            qp.read_nak_for = None;
            if self.cfg.slow_restart {
                let qp = self.qps.get_mut(&qpn).unwrap();
                qp.rp.on_cnp(now);
                qp.rp.rc = qp.rp.p.min_rate_bps;
                self.count("roce_slow_restart");
            }
        }
    }

    fn timeout_for(&self, qp: &Qp) -> Option<u64> {
        if self.cfg.adaptive_retransmission {
            if let Some(a) = &self.cfg.profile.adaptive_retransmission {
                let i = (qp.timeouts_in_row as usize).min(a.timeouts.len() - 1);
                return Some(a.timeouts[i].0);
            }
        }
        qp.c.timeout_ns()
    }

    // ---------------------------------------------------------------- transmit

    pub fn poll_transmit(&mut self, now: u64) -> Option<Tx> {
        self.handle_timeout(now);
        let n = self.order.len();
        for k in 0..n {
            let qpn = self.order[(self.rr + k) % n];
            if let Some(tx) = self.qp_transmit(now, qpn) {
                self.rr = (self.rr + k + 1) % n;
                return Some(tx);
            }
        }
        None
    }

    fn qp_transmit(&mut self, now: u64, qpn: u32) -> Option<Tx> {
        let qp = self.qps.get_mut(&qpn).unwrap();
        // Responses leave in PSN order (IBTA §9.7.5.1): an ACK or NAK (tag 2)
        // waits for the read responses queued before it; a CNP (tag 0) does not.
        let reads_pending = !qp.reads.is_empty();
        if let Some(i) = qp
            .ctrl
            .iter()
            .position(|(due, _, tag)| *due <= now && !(*tag == 2 && reads_pending))
        {
            let (_, mut bytes, ecn) = qp.ctrl.remove(i).unwrap();
            let c = qp.c;
            packet::seal_ipv4(&Ipv4Udp::lab(c.local, c.remote, c.sport), &mut bytes);
            self.count("tx_roce_packets");
            return Some(Tx {
                src: c.local,
                dst: c.remote,
                sport: c.sport,
                ecn,
                bytes,
                data: false,
            });
        }
        if qp.pace_next > now || !qp.has_data() {
            return None;
        }
        let bytes = if !qp.reads.is_empty() {
            self.read_response(qpn)
        } else if qp.hold_until <= now && psn::lt(qp.tx_psn, qp.next_psn) && !qp.error {
            self.request(now, qpn)
        } else {
            return None;
        };
        let qp = self.qps.get_mut(&qpn).unwrap();
        let mut bytes = bytes;
        let c = qp.c;
        packet::seal_ipv4(&Ipv4Udp::lab(c.local, c.remote, c.sport), &mut bytes);
        // Pace at R_C (DCQCN) or the line rate; the wire carries Ethernet,
        // IP and UDP headers too (14 + 20 + 8 + 4 FCS).
        let rate = if self.cfg.dcqcn_rp {
            qp.rp.rc
        } else {
            self.cfg.line_rate_bps
        };
        let wire = (bytes.len() + 46) as f64 * 8.0;
        qp.pace_next = qp.pace_next.max(now) + (wire * 1e9 / rate) as u64;
        qp.rp.on_sent(bytes.len() as u64);
        self.count("tx_roce_packets");
        Some(Tx {
            src: c.local,
            dst: c.remote,
            sport: c.sport,
            ecn: 2,
            bytes,
            data: true,
        })
    }

    fn read_response(&mut self, qpn: u32) -> Vec<u8> {
        let qp = self.qps.get_mut(&qpn).unwrap();
        let mtu = qp.c.mtu;
        let r = qp.reads.front_mut().unwrap();
        let len = r.remaining.min(mtu);
        let last = r.remaining <= mtu;
        let opcode = match (r.first, last) {
            (true, true) => op::READ_RESPONSE_ONLY,
            (true, false) => op::READ_RESPONSE_FIRST,
            (false, false) => op::READ_RESPONSE_MIDDLE,
            (false, true) => op::READ_RESPONSE_LAST,
        };
        let (p, va) = (r.psn, r.va);
        r.first = false;
        r.psn = psn::add(r.psn, 1);
        r.va += len as u64;
        r.remaining -= len;
        if last || r.psn == r.end {
            qp.reads.pop_front();
        }
        let aeth =
            (opcode != op::READ_RESPONSE_MIDDLE).then_some((Syndrome::Ack { credits: 31 }, qp.msn));
        let bth = self.bth(opcode, self.qps[&qpn].c.remote_qpn, p, false);
        packet::build(bth, None, aeth, len as usize, fill(va))
    }

    fn request(&mut self, now: u64, qpn: u32) -> Vec<u8> {
        let timeout = self.timeout_for(&self.qps[&qpn]);
        let qp = &self.qps[&qpn];
        let mtu = qp.c.mtu;
        let w = qp
            .sq
            .iter()
            .find(|w| w.contains(qp.tx_psn))
            .expect("tx_psn inside a posted request");
        let off = psn::diff(qp.tx_psn, w.first_psn) as u32;
        let at = off as u64 * mtu as u64;
        let va = w.wr.remote_va + at;
        let remaining = w.wr.len - at as u32;
        let (bytes, next) = if w.wr.verb == Verb::Read {
            // §9.7.5.2.2 / Lumina §6.1: a read is resumed by a new read request
            // for the rest of the message, at the PSN of the first missing response.
            let reth = Reth {
                va,
                rkey: w.wr.rkey,
                len: remaining,
            };
            let b = packet::build(
                self.bth(op::READ_REQUEST, qp.c.remote_qpn, qp.tx_psn, true),
                Some(reth),
                None,
                0,
                |_| 0,
            );
            (b, w.end())
        } else {
            let first = off == 0;
            let last = off + 1 == w.npkts;
            let send = w.wr.verb == Verb::Send;
            let opcode = match (send, first, last) {
                (true, true, true) => op::SEND_ONLY,
                (true, true, false) => op::SEND_FIRST,
                (true, false, false) => op::SEND_MIDDLE,
                (true, false, true) => op::SEND_LAST,
                (false, true, true) => op::WRITE_ONLY,
                (false, true, false) => op::WRITE_FIRST,
                (false, false, false) => op::WRITE_MIDDLE,
                (false, false, true) => op::WRITE_LAST,
            };
            let every = qp.c.ack_req_every;
            let ack_req = last || (every > 0 && qp.sent_since_ackreq + 1 >= every);
            // IBTA §9.3.2: RETH on the first packet, DMA length = the message's.
            let reth = (!send && first).then_some(Reth {
                va: w.wr.remote_va,
                rkey: w.wr.rkey,
                len: w.wr.len,
            });
            let len = remaining.min(mtu) as usize;
            let b = packet::build(
                self.bth(opcode, qp.c.remote_qpn, qp.tx_psn, ack_req),
                reth,
                None,
                len,
                fill(va),
            );
            (b, psn::add(qp.tx_psn, 1))
        };
        let ack_req = Bth::parse(&bytes).is_some_and(|b| b.ack_req);
        let qp = self.qps.get_mut(&qpn).unwrap();
        qp.sent_since_ackreq = if ack_req { 0 } else { qp.sent_since_ackreq + 1 };
        qp.tx_psn = next;
        if qp.timer.is_none() {
            qp.timer = timeout.map(|t| now + t);
        }
        bytes
    }
}

impl Qp {
    fn has_data(&self) -> bool {
        !self.reads.is_empty() || (!self.error && psn::lt(self.tx_psn, self.next_psn))
    }
}
