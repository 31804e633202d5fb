//! The RoCEv2 view of a trace: every RoCE packet with its BTH fields, split
//! into QP connections, and one pass of Lumina's go-back-N FSM (§4) over
//! each connection that the RoCE analyzers read. Works on wirelab traces
//! (switch metadata says which packets the switch dropped or corrupted) and
//! on anyone's capture (then every captured packet counts as delivered).

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;

use wirelab_roce::packet::{self, op, Kind, NakCode, Position, Syndrome};
use wirelab_roce::psn;
use wirelab_trace::Action;
use wirelab_trace::{Link, PacketRef, Trace};

use crate::Evidence;

#[derive(Debug, Clone)]
pub struct RPkt {
    pub frame: u64,
    pub mirror_seq: Option<u64>,
    pub ts: u64,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub opcode: u8,
    pub dqpn: u32,
    pub psn: u32,
    pub migreq: bool,
    pub syndrome: Option<Syndrome>,
    /// RETH DMA length (first write packet, read request), when captured.
    pub dma_len: Option<u32>,
    pub payload_len: u32,
    pub ecn: u8,
    /// Reached its receiver: not dropped by the switch.
    pub delivered: bool,
    /// The switch corrupted it: the receiver's ICRC check drops it.
    pub corrupted: bool,
    /// The switch's connection index (wirelab traces), else 0.
    pub conn: u32,
}

impl RPkt {
    pub fn evidence(&self) -> Evidence {
        Evidence {
            frame: self.frame,
            mirror_seq: self.mirror_seq,
        }
    }
    pub fn kind(&self) -> Kind {
        packet::kind(self.opcode)
    }
    /// Reached the receiver's transport (not dropped, ICRC intact).
    pub fn accepted(&self) -> bool {
        self.delivered && !self.corrupted
    }
}

/// Parses the RoCEv2 headers of one captured frame; tolerant of snap
/// length (the BTH must be there, the rest only if captured).
pub fn parse(link: Link, data: &[u8]) -> Option<RPkt> {
    let l3 = link.ipv4_offset(data)?;
    let ip = data.get(l3..)?;
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let ihl = (ip[0] & 0xf) as usize * 4;
    let udp = ip.get(ihl..)?;
    if udp.len() < 8 + packet::BTH_LEN
        || u16::from_be_bytes([udp[2], udp[3]]) != packet::ROCEV2_PORT
    {
        return None;
    }
    let b = packet::Bth::parse(&udp[8..])?;
    let rest = &udp[8 + packet::BTH_LEN..];
    let has_reth = matches!(
        b.opcode,
        op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM | op::READ_REQUEST
    );
    let dma_len = if has_reth && rest.len() >= 16 {
        Some(u32::from_be_bytes(rest[12..16].try_into().ok()?))
    } else {
        None
    };
    let aeth_at = if has_reth { 16 } else { 0 };
    let syndrome = matches!(
        b.opcode,
        op::ACKNOWLEDGE | op::READ_RESPONSE_FIRST | op::READ_RESPONSE_LAST | op::READ_RESPONSE_ONLY
    )
    .then(|| rest.get(aeth_at).map(|s| Syndrome::from_byte(*s)))
    .flatten();
    let ip_total = u16::from_be_bytes([ip[2], ip[3]]) as u32;
    let hdrs = ihl as u32
        + 8
        + packet::BTH_LEN as u32
        + packet::ICRC_LEN as u32
        + if has_reth { 16 } else { 0 }
        + if syndrome.is_some() { 4 } else { 0 }
        + if b.opcode == op::CNP { 16 } else { 0 };
    Some(RPkt {
        frame: 0,
        mirror_seq: None,
        ts: 0,
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        opcode: b.opcode,
        dqpn: b.dqpn,
        psn: b.psn,
        migreq: b.migreq,
        syndrome,
        dma_len,
        payload_len: ip_total.saturating_sub(hdrs).saturating_sub(b.pad as u32),
        ecn: ip[1] & 3,
        delivered: true,
        corrupted: false,
        conn: 0,
    })
}

/// A measured latency with its packets.
#[derive(Debug, Clone)]
pub struct Latency {
    pub ns: u64,
    pub psn_rel: u32,
    /// The lost packet's position in its message (1 = its first packet):
    /// the relative PSN Lumina's Figs. 8 and 9 plot latencies against.
    pub in_message: u32,
    pub read: bool,
    pub evidence: Vec<Evidence>,
}

/// A go-back-N rule broken.
#[derive(Debug, Clone)]
pub struct Broken {
    pub name: &'static str,
    pub rule: &'static str,
    pub message: String,
    pub evidence: Vec<Evidence>,
}

/// One QP connection and what the FSM found in it.
#[derive(Debug, Default)]
pub struct RConn {
    pub id: u32,
    pub requester: Option<Ipv4Addr>,
    pub responder: Option<Ipv4Addr>,
    /// The PSN of the first packet from each end (requester's: where
    /// relative PSNs count from).
    firsts: [Option<(Ipv4Addr, u32)>; 2],
    pub first_psn: Option<u32>,
    /// Path MTU seen: the largest data payload.
    pub mtu: u32,
    pub checks: u64,
    pub broken: Vec<Broken>,
    pub nack_generation: Vec<Latency>,
    pub nack_reaction: Vec<Latency>,
    /// Retransmission rounds nothing asked for (the local ACK timer), timed
    /// from when that timer started.
    pub timeouts: Vec<Latency>,
    /// Counts the FSM derives, per role, for the counter analyzer.
    pub out_of_sequence: i64,
    pub naks_delivered: i64,
    pub implied_naks: i64,
}

/// What the RoCE analyzers read: per connection, what the FSM found;
/// across them, what the CNP and counter analyzers count. Nothing per
/// packet, so it stays small whatever the capture's length.
#[derive(Debug, Default)]
pub struct RoceView {
    pub conns: Vec<RConn>,
    /// Every CNP, in trace order.
    pub cnps: Vec<RPkt>,
    /// CE-marked data and read responses that reached their receiver (a
    /// DCQCN notification point): (receiver, time, connection, sender).
    pub ce_marks: Vec<(Ipv4Addr, u64, u32, Ipv4Addr)>,
    /// The connection of a (destination, destination QPN): a CNP names
    /// the data sender's QP.
    pub qp_conn: BTreeMap<(Ipv4Addr, u32), u32>,
    /// Counts by address, for the counter analyzers.
    pub tally: BTreeMap<Ipv4Addr, RoceTally>,
    pub packets: u64,
    pub switch_metadata: bool,
}

/// The RoCE packets an address sent or received, as device and kernel
/// counters count them.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoceTally {
    /// CNPs it sent.
    pub cnps_from: i64,
    /// CNPs that reached it (accepted: delivered, ICRC intact).
    pub cnps_to: i64,
    /// CE-marked packets that reached it, accepted.
    pub marked_to: i64,
    /// CE-marked packets delivered to it, ICRC intact or not (the IP layer
    /// counts them before the transport's check).
    pub ce_delivered_to: i64,
    /// Packets the switch corrupted on their way to it.
    pub corrupted_to: i64,
}

impl RoceView {
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }
}

/// The RoCE view of a whole trace (two passes over it, as [`Survey`] and
/// [`Stream`] say).
pub fn build(trace: &Trace) -> RoceView {
    let mut survey = Survey::default();
    for p in &trace.packets {
        if let Some(r) = packet(&p.as_ref()) {
            survey.add(&r);
        }
    }
    let mut stream = survey.stream();
    for p in &trace.packets {
        if let Some(r) = packet(&p.as_ref()) {
            stream.add(&r);
        }
    }
    stream.finish()
}

/// A RoCEv2 packet of the capture, as the RoCE analyzers need it (no
/// bytes kept), or None for any other packet.
pub fn packet(p: &PacketRef) -> Option<RPkt> {
    let mut r = parse(p.link, p.data)?;
    r.frame = p.frame;
    r.ts = p.ts_ns;
    if let Some(m) = &p.meta {
        r.mirror_seq = Some(m.seq);
        r.ts = m.ts;
        r.conn = m.conn;
        r.delivered = !m.dropped();
        r.corrupted = m.event == Action::Corrupt;
    }
    Some(r)
}

/// Which connection a packet is: the switch's index when present;
/// otherwise one per (address pair, requester's destination QPN), paired
/// with the reverse direction in order of appearance. The same packets
/// in the same order give the same connections, so both passes agree.
#[derive(Debug, Default)]
struct Assign {
    by_key: BTreeMap<(u32, Ipv4Addr, Ipv4Addr, u32), usize>,
    reverse_of: BTreeMap<(Ipv4Addr, Ipv4Addr, u32), usize>,
    /// Connections so far.
    count: usize,
}

impl Assign {
    /// The index of `p`'s connection, and its id when `p` is its first
    /// packet; None for a CNP or a response to no request seen.
    fn conn_of(&mut self, p: &RPkt) -> Option<(usize, Option<u32>)> {
        if p.opcode == op::CNP {
            return None;
        }
        let request = matches!(p.kind(), Kind::Data | Kind::ReadRequest);
        let n = self.count;
        let key = if p.conn != 0 {
            (p.conn, Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, 0)
        } else if request {
            (0, p.src, p.dst, p.dqpn)
        } else {
            let &i = self
                .reverse_of
                .get(&(p.src, p.dst, p.dqpn))
                .or_else(|| self.reverse_of.get(&(p.src, p.dst, u32::MAX)))?;
            self.reverse_of.insert((p.src, p.dst, p.dqpn), i);
            return Some((i, None));
        };
        let i = *self.by_key.entry(key).or_insert(n);
        if i < n {
            return Some((i, None));
        }
        self.count += 1;
        if p.conn != 0 {
            return Some((i, Some(p.conn)));
        }
        self.reverse_of.entry((p.dst, p.src, u32::MAX)).or_insert(i);
        Some((i, Some(n as u32 + 1)))
    }
}

/// The first pass over a capture's RoCE packets: its connections, with
/// what the FSM must know before their first packet (which end is the
/// requester, the path MTU, the requester's first PSN).
#[derive(Debug, Default)]
pub struct Survey {
    assign: Assign,
    conns: Vec<RConn>,
    packets: u64,
}

impl Survey {
    pub fn add(&mut self, p: &RPkt) {
        self.packets += 1;
        let Some((i, new)) = self.assign.conn_of(p) else {
            return;
        };
        if let Some(id) = new {
            self.conns.push(RConn {
                id,
                ..Default::default()
            });
        }
        let c = &mut self.conns[i];
        if matches!(p.kind(), Kind::Data | Kind::ReadRequest) {
            c.requester.get_or_insert(p.src);
            c.responder.get_or_insert(p.dst);
            if p.kind() == Kind::Data {
                c.mtu = c.mtu.max(p.payload_len);
            }
        } else if p.kind() == Kind::ReadResponse {
            c.mtu = c.mtu.max(p.payload_len);
        }
        if !c.firsts.iter().flatten().any(|(a, _)| *a == p.src) {
            if let Some(slot) = c.firsts.iter_mut().find(|f| f.is_none()) {
                *slot = Some((p.src, p.psn));
            }
        }
    }

    /// RoCE packets seen.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The second pass, which runs the FSM.
    pub fn stream(self) -> Stream {
        let mut conns = self.conns;
        let fsms = conns
            .iter_mut()
            .map(|c| {
                c.first_psn = c
                    .firsts
                    .iter()
                    .flatten()
                    .find(|(a, _)| Some(*a) == c.requester)
                    .map(|(_, psn)| *psn);
                Fsm::new(c)
            })
            .collect();
        Stream {
            assign: Assign::default(),
            conns: conns
                .into_iter()
                .map(|c| RConn {
                    id: c.id,
                    requester: c.requester,
                    responder: c.responder,
                    first_psn: c.first_psn,
                    mtu: c.mtu,
                    ..Default::default()
                })
                .collect(),
            fsms,
            view: RoceView::default(),
        }
    }
}

/// The second pass: each packet through its connection's FSM, and the
/// counts the CNP and counter analyzers need.
pub struct Stream {
    assign: Assign,
    /// The connections the survey found, in its order.
    conns: Vec<RConn>,
    fsms: Vec<Option<Fsm>>,
    view: RoceView,
}

impl Stream {
    pub fn add(&mut self, p: &RPkt) {
        let v = &mut self.view;
        v.packets += 1;
        v.switch_metadata |= p.mirror_seq.is_some();
        if p.opcode == op::CNP {
            v.tally.entry(p.src).or_default().cnps_from += 1;
            v.cnps.push(p.clone());
        }
        let to = v.tally.entry(p.dst).or_default();
        to.cnps_to += i64::from(p.opcode == op::CNP && p.accepted());
        to.marked_to += i64::from(p.accepted() && p.ecn == 3);
        to.ce_delivered_to += i64::from(p.delivered && p.ecn == 3);
        to.corrupted_to += i64::from(p.delivered && p.corrupted);
        // The same packets find the connections the survey found, in the
        // same order (a file changed between the passes could hold more).
        let Some((i, _)) = self.assign.conn_of(p) else {
            return;
        };
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        if p.accepted() && p.ecn == 3 && matches!(p.kind(), Kind::Data | Kind::ReadResponse) {
            v.ce_marks.push((p.dst, p.ts, c.id, p.src));
        }
        if p.kind() == Kind::Ack
            || p.kind() == Kind::ReadResponse
            || (c.requester == Some(p.dst) && p.kind() != Kind::Cnp)
        {
            v.qp_conn.insert((p.dst, p.dqpn), c.id);
        }
        if let Some(f) = &mut self.fsms[i] {
            f.step(c, p);
        }
    }

    pub fn finish(mut self) -> RoceView {
        for (c, f) in self.conns.iter_mut().zip(self.fsms) {
            if let Some(f) = f {
                f.end(c);
            }
        }
        self.conns.sort_by_key(|c| c.id);
        self.view.conns = self.conns;
        self.view
    }
}

fn npkts(len: u32, mtu: u32) -> u32 {
    if mtu == 0 {
        1
    } else {
        len.div_ceil(mtu).max(1)
    }
}

/// Lumina §4: the go-back-N specification as a state machine run over a
/// connection's packets as they come, for the responder (NAK the first
/// missing PSN, once, IBTA §9.7.5.1.2 / C9-106) and the requester (resend
/// from the NAKed PSN, in order, §9.7.5.2.2), with the read variant (a
/// gap in read responses is answered by a new read request from the
/// missing PSN). Its state is a few words and the messages and reads
/// still open, whatever the connection's length.
struct Fsm {
    req: Ipv4Addr,
    mtu: u32,
    /// The requester's first PSN: relative PSNs count from it.
    base: u32,
    epsn: Option<u32>,
    /// (expected PSN, time of the first packet past the gap, its
    /// evidence, NAKed)
    gap: Option<(u32, u64, Evidence, bool)>,
    next_new: Option<u32>,
    last_req_ts: Option<u64>,
    /// When the requester's local ACK timer started, as IBTA §9.7.6.1.3
    /// runs it: at a request sent with the timer idle, again at every ACK
    /// or in-sequence read response (forward progress), and at each
    /// timeout's retransmission.
    timer_from: Option<u64>,
    /// The last ACK seen at the switch, and when the timer had started
    /// before it restarted it: a resend of a PSN that ACK covered was sent
    /// before the requester read the ACK (it is still on its way, or
    /// waiting in the host), so its timer still ran from that earlier
    /// start.
    last_ack: Option<(u32, Option<u64>)>,
    last_req_psn: Option<u32>,
    /// A NAK that reached the requester: (PSN, time, evidence).
    restart: Option<(u32, u64, Evidence)>,
    resend_next: Option<u32>,
    /// Reads: outstanding response ranges, the next expected response,
    /// and an open implied NAK (expected PSN, time, evidence).
    reads: VecDeque<(u32, u32)>,
    rexp: Option<u32>,
    read_gap: Option<(u32, u64, Evidence)>,
    /// The expected response PSN of a gap not yet filled: one implied NAK
    /// per gap, however many later responses arrive before the fill.
    read_gap_open: Option<u32>,
    /// Relative PSNs where messages start (first transmissions of a FIRST
    /// or ONLY packet, or a read request), increasing; the last `OPEN`.
    starts: VecDeque<u32>,
}

/// How many message starts and read ranges a connection's FSM keeps: far
/// more than the requests a QP may have outstanding (its initiator depth,
/// at most 255 reads; IBTA §9.7.7), so a loss is always placed in its
/// message and a response in its read.
const OPEN: usize = 4096;

/// The position in its message (1 = the first packet) of relative PSN `r`.
fn in_message(starts: &VecDeque<u32>, r: u32) -> u32 {
    r + 1 - starts.iter().rev().find(|s| **s <= r).copied().unwrap_or(1)
}

impl Fsm {
    /// The FSM of a connection whose requester is known (what the first
    /// pass over the capture found: requester, path MTU, first PSN).
    fn new(c: &RConn) -> Option<Fsm> {
        let req = c.requester?;
        Some(Fsm {
            req,
            mtu: c.mtu,
            base: c.first_psn.unwrap_or(0),
            epsn: None,
            gap: None,
            next_new: None,
            last_req_ts: None,
            timer_from: None,
            last_ack: None,
            last_req_psn: None,
            restart: None,
            resend_next: None,
            reads: VecDeque::new(),
            rexp: None,
            read_gap: None,
            read_gap_open: None,
            starts: VecDeque::new(),
        })
    }

    /// The connection's next packet.
    fn step(&mut self, c: &mut RConn, p: &RPkt) {
        let (req, mtu, base) = (self.req, self.mtu, self.base);
        let rel = |p: u32| psn::diff(p, base).max(0) as u32 + 1;
        if p.opcode != op::CNP && !p.migreq {
            // Lumina §6.2.3: IBTA §9.2.4 says MigReq is 1 in the migrated state,
            // where an RC QP starts; E810 sent 0 and a CX5 peer discarded packets.
            if !c
                .broken
                .iter()
                .any(|b| b.name == "migreq-clear" && b.message.contains(&p.src.to_string()))
            {
                c.broken.push(Broken {
                    name: "migreq-clear",
                    rule: "IBTA §9.2.4: MigReq shall be 1 (an RC QP starts in the Migrated state)",
                    message: format!("{} sends packets with MigReq = 0", p.src),
                    evidence: vec![p.evidence()],
                });
            }
        }
        c.checks += 1;
        let from_req = p.src == req;
        // A read response restarts the timer only when it is the one
        // expected (forward progress); one past a gap does not (below).
        if !from_req && p.accepted() && p.kind() == Kind::Ack {
            self.last_ack = Some((p.psn, self.timer_from));
            self.timer_from = Some(p.ts);
        }
        // A PSN an ACK at the switch covered: a resend round may skip it
        // (IBTA §9.7.5.2.2 resends what is not acknowledged), and a round
        // cut short by that ACK is not a skipped resend. Seen when a
        // timeout raced the ACK of the packets it resent.
        let acked = |w: u32| self.last_ack.is_some_and(|(a, _)| psn::le(w, a));
        match (from_req, p.kind()) {
            (true, Kind::Data) | (true, Kind::ReadRequest) => {
                let n = if p.kind() == Kind::ReadRequest {
                    npkts(p.dma_len.unwrap_or(0), mtu)
                } else {
                    1
                };
                let is_new = self.next_new.is_none_or(|nn| psn::le(nn, p.psn));
                // Requester: after a NAK, the first resent packet is the NAKed one.
                // A NAK seen at the switch while a resend round runs: the
                // round's next packets, in order, may have been queued before
                // the requester read it. They continue the round; the
                // reaction is the restart that follows (IBTA §9.7.5.2.2 sets
                // no deadline; `slow-nack-reaction` measures it). Seen with
                // a flow-table slow path dropping a round's packets.
                let continues = !is_new
                    && self.resend_next == Some(p.psn)
                    && self.restart.as_ref().is_some_and(|(r, _, _)| *r != p.psn);
                if continues {
                    self.resend_next = Some(psn::add(p.psn, n));
                } else if !is_new {
                    if let Some((r, t, ev)) = self.restart.take() {
                        if p.psn == r {
                            c.nack_reaction.push(Latency {
                                ns: p.ts.saturating_sub(t),
                                psn_rel: rel(r),
                                in_message: in_message(&self.starts, rel(r)),
                                read: false,
                                evidence: vec![ev, p.evidence()],
                            });
                        } else {
                            c.broken.push(Broken {
                            name: "wrong-restart",
                            rule: "IBTA §9.7.5.2.2: on a NAK sequence error the requester resends from the PSN the NAK carries",
                            message: format!("NAK for relative PSN {} but the requester resent {} first", rel(r), rel(p.psn)),
                            evidence: vec![ev, p.evidence()],
                        });
                        }
                        self.resend_next = Some(psn::add(p.psn, n));
                    } else if p.kind() == Kind::ReadRequest
                        && self.read_gap.as_ref().is_some_and(|g| g.0 == p.psn)
                    {
                        let (e, t, ev) = self.read_gap.take().unwrap();
                        c.nack_generation.push(Latency {
                            ns: p.ts.saturating_sub(t),
                            psn_rel: rel(e),
                            in_message: in_message(&self.starts, rel(e)),
                            read: true,
                            evidence: vec![ev, p.evidence()],
                        });
                        self.resend_next = Some(psn::add(p.psn, n));
                    } else if let Some(want) = self
                        .resend_next
                        .filter(|w| psn::lt(*w, p.psn))
                        .filter(|w| !acked(*w))
                    {
                        c.broken.push(Broken {
                        name: "resend-skipped",
                        rule: "IBTA §9.7.5.2.2 (go-back-N): every packet from the restart PSN on is resent, in order",
                        message: format!("resent relative PSN {} after skipping {}", rel(p.psn), rel(want)),
                        evidence: vec![p.evidence()],
                    });
                        self.resend_next = Some(psn::add(p.psn, n));
                    } else if self.resend_next == Some(p.psn) {
                        self.resend_next = Some(psn::add(p.psn, n));
                    } else if self.last_req_psn.is_some_and(|l| psn::le(p.psn, l)) {
                        // A new round nothing asked for: the local ACK timer.
                        // It ends the open read gap too: a response missing
                        // again in the new round is a new implied NAK (the
                        // requester NAKs a missing PSN once until it arrives
                        // or the timer fires, as the responder NAKs a write
                        // gap once, IBTA C9-106; found by `wirelab fuzz` on a
                        // read whose response was dropped every time).
                        if p.kind() == Kind::ReadRequest {
                            self.read_gap = None;
                            self.read_gap_open = None;
                        }
                        let started = match self.last_ack {
                            Some((a, before)) if psn::le(p.psn, a) => before,
                            _ => self.timer_from,
                        };
                        if let Some(t) = started.or(self.last_req_ts) {
                            c.timeouts.push(Latency {
                                ns: p.ts.saturating_sub(t),
                                psn_rel: rel(p.psn),
                                in_message: in_message(&self.starts, rel(p.psn)),
                                read: p.kind() == Kind::ReadRequest,
                                evidence: vec![p.evidence()],
                            });
                        }
                        self.resend_next = Some(psn::add(p.psn, n));
                        self.timer_from = Some(p.ts);
                    }
                } else {
                    // A new request ends a resend round, which must have
                    // reached it.
                    if let Some(want) = self
                        .resend_next
                        .take()
                        .filter(|w| *w != p.psn)
                        .filter(|w| !acked(*w))
                    {
                        c.broken.push(Broken {
                        name: "resend-skipped",
                        rule: "IBTA §9.7.5.2.2 (go-back-N): every packet from the restart PSN on is resent, in order",
                        message: format!("sent new relative PSN {} before resending {}", rel(p.psn), rel(want)),
                        evidence: vec![p.evidence()],
                    });
                    }
                    self.next_new = Some(psn::add(p.psn, n));
                    if p.kind() == Kind::ReadRequest
                        || matches!(packet::position(p.opcode), Position::First | Position::Only)
                    {
                        if self.starts.len() == OPEN {
                            self.starts.pop_front();
                        }
                        self.starts.push_back(rel(p.psn));
                    }
                    if p.kind() == Kind::ReadRequest {
                        if self.reads.len() == OPEN {
                            self.reads.pop_front();
                        }
                        self.reads.push_back((p.psn, psn::add(p.psn, n)));
                    }
                }
                self.last_req_ts = Some(p.ts);
                self.last_req_psn = Some(p.psn);
                self.timer_from.get_or_insert(p.ts);
                // Responder: in-order, out-of-sequence or duplicate.
                if p.accepted() {
                    // The responder expects the requester's first PSN: a
                    // lost first packet opens a gap like any other.
                    let e = *self.epsn.get_or_insert(base);
                    let d = psn::diff(p.psn, e);
                    if d == 0 {
                        self.epsn = Some(psn::add(p.psn, n));
                        if let Some((ge, _, ev, naked)) = self.gap.take() {
                            if !naked {
                                c.broken.push(Broken {
                                name: "nak-missing",
                                rule: "IBTA §9.7.5.1.2: a request past the expected PSN is answered by a NAK sequence error",
                                message: format!("relative PSN {} went missing and the responder never NAKed it", rel(ge)),
                                evidence: vec![ev, p.evidence()],
                            });
                            }
                        }
                    } else if d > 0 {
                        c.out_of_sequence += 1;
                        if self.gap.is_none() {
                            self.gap = Some((e, p.ts, p.evidence(), false));
                        }
                    }
                }
            }
            (false, Kind::Ack) => {
                if let Some(Syndrome::Nak(NakCode::SequenceError)) = p.syndrome {
                    match &mut self.gap {
                    Some((e, t, ev, naked)) if !*naked => {
                        if p.psn == *e {
                            c.nack_generation.push(Latency { ns: p.ts.saturating_sub(*t), psn_rel: rel(*e), in_message: in_message(&self.starts, rel(*e)), read: false, evidence: vec![*ev, p.evidence()] });
                        } else {
                            c.broken.push(Broken {
                                name: "nak-wrong-psn",
                                rule: "IBTA §9.7.5.1.2: the NAK carries the expected PSN",
                                message: format!("NAK for relative PSN {} but the responder expected {}", rel(p.psn), rel(*e)),
                                evidence: vec![*ev, p.evidence()],
                            });
                        }
                        *naked = true;
                    }
                    Some(_) => {
                        c.broken.push(Broken {
                            name: "nak-repeated",
                            rule: "IBTA C9-106: one NAK per sequence error, until the expected request arrives",
                            message: format!("a second NAK for relative PSN {}", rel(p.psn)),
                            evidence: vec![p.evidence()],
                        });
                    }
                    None => c.broken.push(Broken {
                        name: "nak-unjustified",
                        rule: "IBTA §9.7.5.1.2: a NAK sequence error answers a request past the expected PSN",
                        message: format!("NAK for relative PSN {} with no sequence error at the responder", rel(p.psn)),
                        evidence: vec![p.evidence()],
                    }),
                }
                    if p.accepted() {
                        c.naks_delivered += 1;
                        self.restart = Some((p.psn, p.ts, p.evidence()));
                    }
                }
            }
            (false, Kind::ReadResponse) if p.accepted() => {
                let mut e = match self.rexp {
                    Some(e) => e,
                    None => match self.reads.front() {
                        Some(r) => r.0,
                        None => return,
                    },
                };
                // Skip to the read range that holds the expected PSN.
                if !self
                    .reads
                    .iter()
                    .any(|r| psn::le(r.0, e) && psn::lt(e, r.1))
                {
                    if let Some(r) = self.reads.iter().find(|r| psn::le(e, r.0)) {
                        e = r.0;
                    }
                }
                let d = psn::diff(p.psn, e);
                if d == 0 {
                    self.timer_from = Some(p.ts);
                    self.rexp = Some(psn::add(e, 1));
                    self.read_gap = None;
                    self.read_gap_open = None;
                } else if d > 0 {
                    self.rexp = Some(e);
                    if self.read_gap_open != Some(e) {
                        c.implied_naks += 1;
                        self.read_gap_open = Some(e);
                        self.read_gap = Some((e, p.ts, p.evidence()));
                    }
                } else {
                    self.rexp = Some(e);
                }
            }
            _ => {}
        }
    }

    /// The connection's end: what is still open is broken.
    fn end(self, c: &mut RConn) {
        let rel = |p: u32| psn::diff(p, self.base).max(0) as u32 + 1;
        if let Some((ge, _, ev, false)) = self.gap {
            c.broken.push(Broken {
                name: "nak-missing",
                rule: "IBTA §9.7.5.1.2: a request past the expected PSN is answered by a NAK sequence error",
                message: format!("relative PSN {} went missing and no NAK followed before the trace ended", rel(ge)),
                evidence: vec![ev],
            });
        }
        if let Some((e, _, ev)) = self.read_gap {
            c.broken.push(Broken {
                name: "read-not-reissued",
                rule: "IBTA §9.7.5.2.2: a gap in read responses is answered by a read request from the missing PSN",
                message: format!("read response at relative PSN {} went missing and the read was not re-issued", rel(e)),
                evidence: vec![ev],
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(frame: u64, src: Ipv4Addr, dst: Ipv4Addr, opcode: u8, psn: u32) -> RPkt {
        RPkt {
            frame,
            mirror_seq: None,
            ts: frame * 1000,
            src,
            dst,
            opcode,
            dqpn: 0x11,
            psn,
            migreq: true,
            syndrome: (opcode == op::ACKNOWLEDGE).then_some(Syndrome::Ack { credits: 0 }),
            dma_len: Some(1024),
            payload_len: 1024,
            ecn: 0,
            delivered: true,
            corrupted: false,
            conn: 0,
        }
    }

    /// A long healthy write stream keeps the FSM's state at its bound and
    /// the view free of per-packet records: memory does not grow with
    /// the capture.
    #[test]
    fn a_long_connection_is_analyzed_in_bounded_state() {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let n = 3 * OPEN as u32;
        let pkts: Vec<RPkt> = (0..n)
            .flat_map(|k| {
                let f = 2 * u64::from(k);
                [
                    pkt(f + 1, a, b, op::WRITE_ONLY, 100 + k),
                    pkt(f + 2, b, a, op::ACKNOWLEDGE, 100 + k),
                ]
            })
            .collect();
        let mut survey = Survey::default();
        pkts.iter().for_each(|p| survey.add(p));
        let mut stream = survey.stream();
        let mut most = 0;
        for p in &pkts {
            stream.add(p);
            let f = stream.fsms[0].as_ref().expect("a requester");
            most = most.max(f.starts.len() + f.reads.len());
        }
        assert_eq!(most, OPEN, "message starts kept");
        let v = stream.finish();
        assert_eq!(v.conns.len(), 1);
        let c = &v.conns[0];
        assert!(c.broken.is_empty(), "{:?}", c.broken);
        assert_eq!(c.checks, 2 * u64::from(n));
        assert_eq!(c.first_psn, Some(100));
        assert!(v.cnps.is_empty() && v.ce_marks.is_empty());
        assert_eq!(v.packets, 2 * u64::from(n));
    }
}
