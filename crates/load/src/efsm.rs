//! The stateful responder's executor without I/O (Norma §4; issue 20):
//! what `bpf/efsm.bpf.c` does to one arriving packet, in Rust, so its
//! fixtures can be checked byte for byte and the control plane can
//! reason about a table before anything runs.
//!
//! Per flow (the peer's address and port, the local port) the executor
//! keeps Norma's state register (§4.2) and TCP's variables: the ISN,
//! SND.UNA, SND.NXT, RCV.NXT and the peer's window (RFC 793 §3.2). One
//! arriving packet:
//! 1. updates the variables (an in-order segment moves RCV.NXT, an ACK of
//!    new data moves SND.UNA);
//! 2. fires the first row of the flow's state whose condition holds;
//! 3. answers with the row's reply, built from the variables: headers
//!    from scratch, payload from the side's chunks (§4.3's templates);
//! 4. stores the next state, or forgets the flow (it ended, or went back
//!    to the first state).
//!
//! Like Norma's (Appendix A), an update is not atomic across CPUs: two
//! packets of one flow handled at once may race. The DUT's TCP sends one
//! flow's packets from one socket, so they rarely are.

use std::collections::HashMap;

pub use wirelab_spec::efsm::{flag, Reply, Row, Table};

/// The payload a `data` reply sends, in MSS-sized chunks: the first, the
/// ones in the middle (all alike) and the last, as the program's map
/// holds them (a 10 MB response is three chunks, not 7,000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    pub len: u64,
    pub mss: u16,
    /// [first, middle, last]; with one chunk all three are the same.
    pub chunks: [Vec<u8>; 3],
}

/// A body byte: a repeating line, so any segment of the middle is the
/// same bytes.
fn filler(i: usize) -> u8 {
    b"wirelab\n"[i % 8]
}

impl Payload {
    /// `head` then filler bytes up to `len` bytes in all; `head` fits in
    /// one segment.
    pub fn new(head: &[u8], len: u64, mss: u16) -> Payload {
        let m = usize::from(mss);
        assert!(head.len() <= m && head.len() as u64 <= len.max(head.len() as u64));
        let len = len.max(head.len() as u64);
        let byte = |o: u64| -> u8 {
            if (o as usize) < head.len() {
                head[o as usize]
            } else {
                filler(o as usize % m)
            }
        };
        let n = len.div_ceil(m as u64).max(1);
        let chunk = |k: u64| -> Vec<u8> {
            let lo = k * m as u64;
            let hi = (lo + m as u64).min(len);
            (lo..hi).map(byte).collect()
        };
        let first = chunk(0);
        let middle = if n > 2 { chunk(1) } else { first.clone() };
        let last = chunk(n - 1);
        Payload {
            len,
            mss,
            chunks: [first, middle, last],
        }
    }
    /// An HTTP/1.1 200 with a body of `body` bytes.
    pub fn http_response(body: u64, mss: u16) -> Payload {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {body}\r\nContent-Type: application/octet-stream\r\n\r\n"
        );
        Payload::new(head.as_bytes(), head.len() as u64 + body, mss)
    }
    pub fn chunks(&self) -> u64 {
        self.len.div_ceil(u64::from(self.mss)).max(1)
    }
    /// Chunk k's bytes.
    pub fn chunk(&self, k: u64) -> &[u8] {
        let n = self.chunks();
        if k == 0 {
            &self.chunks[0]
        } else if k + 1 == n {
            &self.chunks[2]
        } else {
            &self.chunks[1]
        }
    }
    /// The whole payload (tests).
    pub fn bytes(&self) -> Vec<u8> {
        (0..self.chunks())
            .flat_map(|k| self.chunk(k).to_vec())
            .collect()
    }
}

/// A side's settings (`struct wl_efsm_conf`).
#[derive(Debug, Clone)]
pub struct Side {
    pub table: Table,
    /// The side's address (IPv4, host order) and MAC are the arriving
    /// packet's destination; replies come from them.
    pub local_ip: u32,
    pub mss: u16,
    pub segments_per_ack: u8,
    pub payload: Option<Payload>,
    /// A server closes after its response: FIN on the last segment.
    pub fin_after_data: bool,
    /// A client's ports: slot s opens from base + s, then base + s + n,
    /// ... (n connections), wrapping within `range` (a multiple of n).
    pub port_base: u16,
    pub connections: u32,
    pub port_range: u32,
    /// Messages a flow sends before `requests_left` turns false (a
    /// client's requests per connection).
    pub requests: u32,
    /// The run is draining: no flow has requests left, and `reopen`
    /// sends no SYN.
    pub draining: bool,
}

/// One flow's register (`struct wl_efsm_flow`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flow {
    pub state: u8,
    pub isn: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub rcv_nxt: u32,
    pub wnd: u16,
    /// Where the side's current message (payload) starts.
    pub base: u32,
    /// Where the peer's current message starts, and ends once its head
    /// was read (`END_KNOWN`).
    pub rcv_base: u32,
    pub msg_end: u32,
    /// Messages the side started (the first is the flow's first payload).
    pub msgs: u32,
    /// `END_KNOWN`, `FIN_SENT`.
    pub mflags: u8,
}

/// `Flow::mflags`: the peer's message's end is known.
pub const END_KNOWN: u8 = 1;
/// `Flow::mflags`: the side's FIN has left.
pub const FIN_SENT: u8 = 2;

/// Bytes of a message's first segment read for its head
/// (`WL_EFSM_SCAN`).
pub const SCAN: usize = 512;

/// The length of a message whose first segment's payload is `b`, from
/// its head (RFC 9112 §6.3): the head up to and with its blank line,
/// plus the Content-Length a response gives (the last one, names
/// compared without case). A request without one has no body. None: the
/// head does not end within the first [`SCAN`] bytes, or a response
/// gives no Content-Length (chunked, or delimited by the close), or one
/// of more than 9 digits.
///
/// A byte at a time, as `bpf/efsm.bpf.c`'s `wl_scan_byte` reads it.
pub fn message_len(b: &[u8]) -> Option<u32> {
    const NAME: &[u8] = b"content-length:";
    const END: &[u8] = b"\r\n\r\n";
    let (mut crlf, mut line_start, mut name, mut matching) = (0, true, 0, false);
    let (mut in_value, mut digits, mut len, mut have_len) = (false, 0u32, 0u32, false);
    let mut head = None;
    for (i, &c) in b.iter().take(SCAN).enumerate() {
        if line_start {
            matching = true;
            name = 0;
        }
        if matching {
            let lower = if c.is_ascii_uppercase() { c | 0x20 } else { c };
            if lower == NAME[name] {
                name += 1;
                if name == NAME.len() {
                    matching = false;
                    in_value = true;
                    (digits, len, have_len) = (0, 0, false);
                }
            } else {
                matching = false;
            }
        } else if in_value {
            if c.is_ascii_digit() {
                digits += 1;
                len = len.wrapping_mul(10).wrapping_add(u32::from(c - b'0'));
            } else if !((c == b' ' || c == b'\t') && digits == 0) {
                in_value = false;
                have_len = (1..=9).contains(&digits);
            }
        }
        line_start = c == b'\n';
        crlf = if c == END[crlf] {
            crlf + 1
        } else if c == b'\r' {
            1
        } else {
            0
        };
        if crlf == 4 {
            head = Some(i as u32 + 1);
            break;
        }
    }
    let head = head?;
    if have_len {
        Some(head + len)
    } else if b.starts_with(b"HTTP/") {
        None
    } else {
        Some(head)
    }
}

/// (peer address, peer port, local port), host order.
pub type Key = (u32, u16, u16);

/// Counters beyond the rows' (`enum wl_efsm_count`, after the rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Count {
    /// A packet no row of its state matched: dropped.
    Unmatched = 0,
    /// A segment not at RCV.NXT (out of order, duplicated or lost before).
    OutOfOrder,
    FlowsCreated,
    FlowsEnded,
    /// Payload bytes received in order.
    BytesReceived,
    SegmentsSent,
    BytesSent,
    /// A flow that could not be stored (the table was full).
    TableFull,
    /// The peer's messages that arrived whole (a client's: responses).
    MessagesReceived,
    /// The peer's messages whose end the head did not give (see
    /// [`message_len`]): they end with the connection.
    MessagesUndelimited,
}

/// Counters after the rows': `rows + Count as usize`.
pub const COUNTS: usize = 10;
/// Rows' counters (the largest table).
pub const ROW_COUNTS: usize = wirelab_spec::efsm::MAX_ROWS;

/// The ISN of a flow opened at `now`: RFC 793 §3.3's clock, one tick per
/// 4 µs (so a port used again later starts above its last sequence
/// numbers, which Linux's TIME-WAIT accepts a new SYN by).
pub fn clock_isn(now: u64) -> u32 {
    (now >> 12) as u32
}

/// The executor, with its flows and counters.
#[derive(Debug, Clone)]
pub struct Responder {
    pub side: Side,
    pub flows: HashMap<Key, Flow>,
    /// Per row (by index into `side.table.rows`), then [`Count`]s.
    pub counts: Vec<u64>,
}

/// An arriving packet's fields.
struct Seen {
    mac_src: [u8; 6],
    mac_dst: [u8; 6],
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    wnd: u16,
    payload: Vec<u8>,
}

fn parse(f: &[u8]) -> Option<Seen> {
    if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[14] != 0x45 || f[23] != 6 {
        return None;
    }
    let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
    let be32 = |o: usize| u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]]);
    let tot = usize::from(be16(16));
    let doff = usize::from(f[46] >> 4) * 4;
    if doff < 20 || 14 + tot > f.len() || 20 + doff > tot {
        return None;
    }
    Some(Seen {
        mac_dst: f[0..6].try_into().unwrap(),
        mac_src: f[6..12].try_into().unwrap(),
        src: be32(26),
        dst: be32(30),
        sport: be16(34),
        dport: be16(36),
        seq: be32(38),
        ack: be32(42),
        flags: f[47],
        wnd: be16(48),
        payload: f[34 + doff..14 + tot].to_vec(),
    })
}

/// A yes/no condition (0 not compared, 1 yes, 2 no) against `fact`.
fn tri(cond: u8, fact: bool) -> bool {
    match cond {
        1 => fact,
        2 => !fact,
        _ => true,
    }
}

/// RFC 1071's sum, folded to 16 bits (not complemented); odd lengths are
/// padded with a zero byte.
pub fn sum16(b: &[u8]) -> u32 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        s = (s & 0xffff) + (s >> 16);
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// One reply's header fields.
struct Out {
    sport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    mss_option: bool,
}

impl Responder {
    pub fn new(side: Side) -> Responder {
        let n = side.table.rows.len();
        Responder {
            side,
            flows: HashMap::new(),
            counts: vec![0; n + COUNTS],
        }
    }

    fn count(&mut self, c: Count, by: u64) {
        let n = self.side.table.rows.len();
        self.counts[n + c as usize] += by;
    }

    /// What `c` counted.
    pub fn counted(&self, c: Count) -> u64 {
        self.counts[self.side.table.rows.len() + c as usize]
    }

    /// One arriving frame at `now`: its replies, in order (empty: none,
    /// or not the side's). `None`: not a TCP packet for this side's
    /// address (the program passes it to the stack).
    pub fn receive(&mut self, frame: &[u8], now: u64) -> Option<Vec<Vec<u8>>> {
        let p = parse(frame)?;
        if p.dst != self.side.local_ip {
            return None;
        }
        let key = (p.src, p.sport, p.dport);
        let plen = p.payload.len() as u32;
        let syn = u32::from(p.flags & flag::SYN != 0);
        let fin = u32::from(p.flags & flag::FIN != 0);
        let known = self.flows.get(&key).copied();
        // Whether this packet brought new data in order, and completed
        // the peer's message.
        let (mut fresh, mut completed) = (false, false);
        // 1. The variables.
        let mut f = match known {
            Some(mut f) => {
                if p.seq == f.rcv_nxt {
                    // The first segment of the peer's message: its head
                    // says where it ends.
                    if plen > 0 && p.seq == f.rcv_base && f.mflags & END_KNOWN == 0 {
                        match message_len(&p.payload) {
                            Some(n) => {
                                f.msg_end = f.rcv_base.wrapping_add(n);
                                f.mflags |= END_KNOWN;
                            }
                            None => self.count(Count::MessagesUndelimited, 1),
                        }
                    }
                    f.rcv_nxt = f.rcv_nxt.wrapping_add(plen + fin);
                    fresh = plen > 0;
                    self.count(Count::BytesReceived, u64::from(plen));
                    if f.mflags & END_KNOWN != 0 && f.rcv_nxt.wrapping_sub(f.msg_end) as i32 >= 0 {
                        // The next message starts where this one ends.
                        completed = true;
                        f.rcv_base = f.msg_end;
                        f.mflags &= !END_KNOWN;
                        self.count(Count::MessagesReceived, 1);
                    }
                } else if plen + fin > 0 {
                    self.count(Count::OutOfOrder, 1);
                }
                let ahead = p.ack.wrapping_sub(f.snd_una);
                if p.flags & flag::ACK != 0
                    && ahead > 0
                    && ahead <= f.snd_nxt.wrapping_sub(f.snd_una)
                {
                    f.snd_una = p.ack;
                }
                f.wnd = p.wnd;
                f
            }
            None => {
                let isn = if p.flags & (flag::SYN | flag::ACK) == flag::SYN {
                    clock_isn(now)
                } else {
                    p.ack.wrapping_sub(1)
                };
                let una = if p.flags & flag::ACK != 0 { p.ack } else { isn };
                if p.flags & (flag::SYN | flag::ACK) != flag::SYN {
                    self.count(Count::BytesReceived, u64::from(plen));
                }
                Flow {
                    state: 0,
                    isn,
                    snd_una: una,
                    snd_nxt: una,
                    rcv_nxt: p.seq.wrapping_add(plen + syn + fin),
                    wnd: p.wnd,
                    base: isn.wrapping_add(1),
                    rcv_base: p.seq.wrapping_add(syn),
                    msg_end: 0,
                    msgs: 1,
                    mflags: 0,
                }
            }
        };
        let left = !self.side.draining && f.msgs < self.side.requests;
        // 2. The first row of the state that matches.
        let all_acked = p.flags & flag::ACK != 0 && p.ack == f.snd_nxt;
        let t = &self.side.table;
        let hit = t.rows.iter().position(|r| {
            r.from == f.state
                && p.flags & r.flags_mask == r.flags_value
                && match r.payload {
                    1 => plen == 0,
                    2 => plen > 0,
                    _ => true,
                }
                && (r.prefix_len == 0
                    || p.payload.get(..usize::from(r.prefix_len))
                        == Some(&r.prefix[..usize::from(r.prefix_len)]))
                && tri(r.all_acked, all_acked)
                && tri(r.message_complete, completed)
                && tri(r.requests_left, left)
        });
        let Some(i) = hit else {
            self.count(Count::Unmatched, 1);
            return Some(Vec::new());
        };
        let row = t.rows[i].clone();
        self.counts[i] += 1;
        // 3. The reply.
        let mut outs: Vec<(Out, Option<(u64, u32)>)> = Vec::new();
        // A reply from the port the packet came to, without options.
        let out = |seq: u32, ack: u32, flags: u8| Out {
            sport: p.dport,
            seq,
            ack,
            flags,
            mss_option: false,
        };
        match row.reply {
            Reply::None => {}
            Reply::Rst => {
                let o = if p.flags & flag::ACK != 0 {
                    out(p.ack, 0, flag::RST)
                } else {
                    out(
                        0,
                        p.seq.wrapping_add(plen + syn + fin),
                        flag::RST | flag::ACK,
                    )
                };
                outs.push((o, None));
            }
            Reply::SynAck => {
                let o = Out {
                    mss_option: true,
                    ..out(f.isn, f.rcv_nxt, flag::SYN | flag::ACK)
                };
                outs.push((o, None));
                f.snd_nxt = f.isn.wrapping_add(1);
            }
            Reply::Ack => outs.push((out(f.snd_nxt, f.rcv_nxt, flag::ACK), None)),
            Reply::Fin if f.mflags & FIN_SENT != 0 => {
                outs.push((out(f.snd_nxt, f.rcv_nxt, flag::ACK), None));
            }
            Reply::Fin => {
                outs.push((out(f.snd_nxt, f.rcv_nxt, flag::FIN | flag::ACK), None));
                f.snd_nxt = f.snd_nxt.wrapping_add(1);
                f.mflags |= FIN_SENT;
            }
            Reply::Data | Reply::NextMessage => {
                let pl = self
                    .side
                    .payload
                    .as_ref()
                    .expect("validated: a data reply has a payload");
                let mss = u64::from(pl.mss);
                let sent_whole = u64::from(f.snd_nxt.wrapping_sub(f.base)) >= pl.len;
                if row.reply == Reply::NextMessage
                    && sent_whole
                    && fresh
                    && f.mflags & FIN_SENT == 0
                {
                    f.base = f.snd_nxt;
                    f.msgs += 1;
                }
                for _ in 0..self.side.segments_per_ack {
                    let off = u64::from(f.snd_nxt.wrapping_sub(f.base));
                    if off >= pl.len {
                        break;
                    }
                    let len = (pl.len - off).min(mss) as u32;
                    if f.snd_nxt.wrapping_add(len).wrapping_sub(f.snd_una) > u32::from(f.wnd) {
                        break;
                    }
                    let last = off + u64::from(len) == pl.len;
                    let fin = last && self.side.fin_after_data;
                    let flags = flag::ACK | flag::PSH | if fin { flag::FIN } else { 0 };
                    outs.push((out(f.snd_nxt, f.rcv_nxt, flags), Some((off / mss, len))));
                    f.snd_nxt = f.snd_nxt.wrapping_add(len + u32::from(fin));
                    if fin {
                        f.mflags |= FIN_SENT;
                    }
                }
            }
            Reply::Reopen => {
                // The old connection's last word: the ACK of its FIN.
                if fin > 0 {
                    outs.push((out(f.snd_nxt, f.rcv_nxt, flag::ACK), None));
                }
                let s = &self.side;
                let slot = u32::from(p.dport.wrapping_sub(s.port_base));
                let next = (slot + s.connections) % s.port_range;
                let o = Out {
                    sport: s.port_base.wrapping_add(next as u16),
                    mss_option: true,
                    ..out(clock_isn(now), 0, flag::SYN)
                };
                if !s.draining {
                    outs.push((o, None));
                }
            }
        }
        // 4. The register.
        let keep = row.next != 0 && !row.forget;
        match (known.is_some(), keep) {
            (false, true) => {
                self.count(Count::FlowsCreated, 1);
                f.state = row.next;
                self.flows.insert(key, f);
            }
            (true, false) => {
                self.count(Count::FlowsEnded, 1);
                self.flows.remove(&key);
            }
            (true, true) => {
                f.state = row.next;
                self.flows.insert(key, f);
            }
            (false, false) => {}
        }
        let mut frames = Vec::new();
        let mut bytes = 0;
        for (o, data) in &outs {
            let payload: &[u8] = match data {
                Some((k, len)) => {
                    let pl = self.side.payload.as_ref().unwrap();
                    &pl.chunk(*k)[..*len as usize]
                }
                None => &[],
            };
            frames.push(self.frame(&p, o, payload));
            bytes += payload.len() as u64;
        }
        self.count(Count::SegmentsSent, outs.len() as u64);
        self.count(Count::BytesSent, bytes);
        Some(frames)
    }

    /// A reply to `p` (`bpf/efsm.bpf.c`'s build_reply): Ethernet with the
    /// addresses swapped, IPv4 (ID 0, DF, TTL 64), TCP with the MSS
    /// option on SYNs and a window of 65535.
    fn frame(&self, p: &Seen, o: &Out, payload: &[u8]) -> Vec<u8> {
        let tcp_len = if o.mss_option { 24 } else { 20 };
        let tot = 20 + tcp_len + payload.len();
        let mut f = Vec::with_capacity(14 + tot);
        f.extend_from_slice(&p.mac_src);
        f.extend_from_slice(&p.mac_dst);
        f.extend_from_slice(&[0x08, 0x00]);
        let ip_at = f.len();
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(tot as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&p.dst.to_be_bytes());
        f.extend_from_slice(&p.src.to_be_bytes());
        let ck = !fold(sum16(&f[ip_at..ip_at + 20]));
        f[ip_at + 10..ip_at + 12].copy_from_slice(&ck.to_be_bytes());
        let tcp_at = f.len();
        f.extend_from_slice(&o.sport.to_be_bytes());
        f.extend_from_slice(&p.sport.to_be_bytes());
        f.extend_from_slice(&o.seq.to_be_bytes());
        f.extend_from_slice(&o.ack.to_be_bytes());
        f.push(((tcp_len / 4) as u8) << 4);
        f.push(o.flags);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        if o.mss_option {
            f.extend_from_slice(&[2, 4]);
            f.extend_from_slice(&self.side.mss.to_be_bytes());
        }
        f.extend_from_slice(payload);
        let mut pseudo = Vec::with_capacity(12);
        pseudo.extend_from_slice(&p.dst.to_be_bytes());
        pseudo.extend_from_slice(&p.src.to_be_bytes());
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((tcp_len + payload.len()) as u16).to_be_bytes());
        let s = sum16(&pseudo) + sum16(&f[tcp_at..tcp_at + tcp_len]) + sum16(payload);
        let ck = !fold(s);
        f[tcp_at + 16..tcp_at + 18].copy_from_slice(&ck.to_be_bytes());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
    use wirelab_spec::efsm::{builtin, compile, EfsmRef};

    const CLIENT: [u8; 4] = [198, 18, 1, 2];
    const SERVER: [u8; 4] = [198, 18, 2, 2];

    fn server(segments: u8, body: u64) -> Responder {
        let table = compile(&EfsmRef::Builtin("http-server".into()), "x").unwrap();
        Responder::new(Side {
            table,
            local_ip: u32::from_be_bytes(SERVER),
            mss: 1460,
            segments_per_ack: segments,
            payload: Some(Payload::http_response(body, 1460)),
            fin_after_data: true,
            port_base: 0,
            connections: 0,
            port_range: 1,
            requests: 1,
            draining: false,
        })
    }

    fn seg(flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(CLIENT, SERVER, 64)
            .tcp(40000, 8080, seq, 65535);
        let b = if flags & flag::SYN != 0 { b.syn() } else { b };
        let b = if flags & flag::ACK != 0 {
            b.ack(ack)
        } else {
            b
        };
        let b = if flags & flag::FIN != 0 { b.fin() } else { b };
        let b = if flags & flag::RST != 0 { b.rst() } else { b };
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    /// (flags, seq, ack, payload length) of a reply, its checksums checked.
    fn read(f: &[u8]) -> (u8, u32, u32, usize) {
        let s = SlicedPacket::from_ethernet(f).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &s.net else {
            panic!("not IPv4")
        };
        let Some(TransportSlice::Tcp(t)) = &s.transport else {
            panic!("not TCP")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        let want = t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap();
        assert_eq!(t.checksum(), want, "TCP checksum");
        assert_eq!(h.source, SERVER);
        (
            f[47],
            t.sequence_number(),
            t.acknowledgment_number(),
            t.payload().len(),
        )
    }

    #[test]
    fn an_http_exchange_runs_every_server_transition_once() {
        let mut r = server(2, 4000);
        let len = r.side.payload.as_ref().unwrap().len as u32;
        let out = r.receive(&seg(flag::SYN, 100, 0, &[]), 1 << 20).unwrap();
        assert_eq!(out.len(), 1);
        let (fl, isn, ack, n) = read(&out[0]);
        assert_eq!((fl, ack, n), (flag::SYN | flag::ACK, 101, 0));
        assert_eq!(isn, clock_isn(1 << 20));
        assert_eq!(&out[0][54..58], &[2, 4, 0x05, 0xb4], "MSS option 1460");
        let get = b"GET / HTTP/1.1\r\n\r\n";
        let out = r.receive(&seg(flag::ACK, 101, isn + 1, get), 0).unwrap();
        // Two segments for the ACK that carried the GET.
        assert_eq!(out.len(), 2);
        let (fl0, s0, a0, n0) = read(&out[0]);
        let (_, s1, _, n1) = read(&out[1]);
        assert_eq!(
            (fl0, s0, a0, n0),
            (flag::ACK | flag::PSH, isn + 1, 101 + get.len() as u32, 1460)
        );
        assert_eq!((s1, n1), (isn + 1 + 1460, 1460));
        assert!(out[0][54..].starts_with(b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n"));
        // The ACK of both: the last segment, with FIN.
        let rcv = 101 + get.len() as u32;
        let out = r
            .receive(&seg(flag::ACK, rcv, isn + 1 + 2920, &[]), 0)
            .unwrap();
        assert_eq!(out.len(), 1);
        let (fl, s, _, n) = read(&out[0]);
        assert_eq!(
            (fl, s, n as u32),
            (
                flag::ACK | flag::PSH | flag::FIN,
                isn + 1 + 2920,
                len - 2920
            )
        );
        // The peer's ACK of everything, then its FIN: ACKed, flow gone.
        let end = isn + 1 + len + 1;
        assert!(r
            .receive(&seg(flag::ACK, rcv, end, &[]), 0)
            .unwrap()
            .is_empty());
        let out = r
            .receive(&seg(flag::FIN | flag::ACK, rcv, end, &[]), 0)
            .unwrap();
        let (fl, s, a, _) = read(&out[0]);
        assert_eq!((fl, s, a), (flag::ACK, end, rcv + 1));
        assert!(r.flows.is_empty());
        // The bytes sent are the payload's.
        assert_eq!(r.counted(Count::BytesSent), u64::from(len));
        assert_eq!(r.counted(Count::FlowsCreated), 1);
        assert_eq!(r.counted(Count::FlowsEnded), 1);
    }

    #[test]
    fn an_unknown_flows_packet_gets_a_reset_and_a_reset_gets_nothing() {
        let mut r = server(1, 10);
        let out = r.receive(&seg(flag::ACK, 5, 77, b"x"), 0).unwrap();
        let (fl, s, _, _) = read(&out[0]);
        assert_eq!((fl, s), (flag::RST, 77));
        assert!(r.receive(&seg(flag::RST, 5, 0, &[]), 0).unwrap().is_empty());
        assert!(r.flows.is_empty());
    }

    #[test]
    fn a_closed_window_holds_the_data_back() {
        let mut r = server(4, 100_000);
        let out = r.receive(&seg(flag::SYN, 1, 0, &[]), 0).unwrap();
        let (_, isn, _, _) = read(&out[0]);
        let mut get = seg(flag::ACK, 2, isn + 1, b"GET / HTTP/1.1\r\n\r\n");
        // A window of 3000 bytes: two full segments fit, the third not.
        get[48..50].copy_from_slice(&3000u16.to_be_bytes());
        let out = r.receive(&get, 0).unwrap();
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn the_payload_is_its_chunks() {
        let p = Payload::http_response(10_000, 1460);
        let b = p.bytes();
        assert_eq!(b.len() as u64, p.len);
        assert!(b.starts_with(b"HTTP/1.1 200 OK"));
        // Any middle segment is the middle chunk.
        assert_eq!(&b[1460 * 3..1460 * 4], p.chunk(3));
        let small = Payload::http_response(10, 1460);
        assert_eq!(small.chunks(), 1);
        assert_eq!(small.bytes().len() as u64, small.len);
    }

    #[test]
    fn a_client_reopens_from_its_slots_next_port() {
        let table = compile(&EfsmRef::Builtin("http-client".into()), "x").unwrap();
        let req = b"GET / HTTP/1.1\r\n\r\n";
        let mut r = Responder::new(Side {
            table,
            local_ip: u32::from_be_bytes(SERVER),
            mss: 1460,
            segments_per_ack: 2,
            payload: Some(Payload::new(req, req.len() as u64, 1460)),
            fin_after_data: false,
            port_base: 8000,
            connections: 10,
            port_range: 100,
            requests: 1,
            draining: false,
        });
        // Our SYN was ISN 999 from port 8080 (slot 0's ... any port).
        let out = r
            .receive(&seg(flag::SYN | flag::ACK, 5000, 1000, &[]), 0)
            .unwrap();
        let (fl, s, a, n) = read(&out[0]);
        assert_eq!(
            (fl, s, a, n),
            (flag::ACK | flag::PSH, 1000, 5001, req.len())
        );
        let after = 1000 + req.len() as u32;
        let out = r
            .receive(&seg(flag::ACK, 5001, after, b"HTTP/1.1 200 OK\r\n\r\n"), 0)
            .unwrap();
        let (fl, _, a, _) = read(&out[0]);
        assert_eq!((fl, a), (flag::ACK, 5001 + 19));
        let out = r
            .receive(&seg(flag::FIN | flag::ACK, 5020, after, &[]), 0)
            .unwrap();
        let (fl, s, a, _) = read(&out[0]);
        assert_eq!((fl, s, a), (flag::FIN | flag::ACK, after, 5021));
        let out = r
            .receive(&seg(flag::ACK, 5021, after + 1, &[]), 1 << 30)
            .unwrap();
        let (fl, s, _, _) = read(&out[0]);
        assert_eq!((fl, s), (flag::SYN, clock_isn(1 << 30)));
        // Port 8080 is slot 80 of range 100: next is 8000 + (80 + 10) % 100.
        assert_eq!(u16::from_be_bytes([out[0][34], out[0][35]]), 8090);
        assert!(r.flows.is_empty());
    }

    #[test]
    fn a_message_ends_where_its_head_says() {
        let resp = b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 4000\r\n\r\nbody";
        assert_eq!(message_len(resp), Some(resp.len() as u32 - 4 + 4000));
        // haproxy's HTX writes names in lower case; spaces before the value.
        let lower = b"HTTP/1.1 200 OK\r\ncontent-length:   12\r\nx-a: b\r\n\r\n";
        assert_eq!(message_len(lower), Some(lower.len() as u32 + 12));
        // A request without a length has no body.
        let get = b"GET / HTTP/1.1\r\nHost: wirelab\r\n\r\n";
        assert_eq!(message_len(get), Some(get.len() as u32));
        // A response without one ends with the connection; so does one
        // whose head is longer than the scan, or whose length is absurd.
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            None
        );
        let mut long = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX: ".to_vec();
        long.resize(SCAN, b'y');
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(message_len(&long), None);
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890\r\n\r\n"),
            None
        );
        // Names match whole, from a line's start only.
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nX-Content-Length: 5\r\n\r\n"),
            None
        );
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nContent\rLength: 5\r\n\r\n"),
            None
        );
        // The head so far, without its blank line: not yet known.
        assert_eq!(
            message_len(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"),
            None
        );
    }

    /// A client and a server executor wired back to back: every frame one
    /// sends, the other receives, until `until` holds or nothing moves.
    fn wire(
        c: &mut Responder,
        s: &mut Responder,
        syn: Vec<u8>,
        until: impl Fn(&Responder) -> bool,
    ) {
        let mut to_server = vec![syn];
        let mut to_client: Vec<Vec<u8>> = Vec::new();
        let mut now = 1u64 << 32;
        for _ in 0..10_000 {
            if until(c) || (to_server.is_empty() && to_client.is_empty()) {
                return;
            }
            now += 1 << 20;
            for f in std::mem::take(&mut to_server) {
                to_client.extend(s.receive(&f, now).expect("for the server"));
            }
            for f in std::mem::take(&mut to_client) {
                to_server.extend(c.receive(&f, now).expect("for the client"));
            }
        }
        panic!("the exchange did not end");
    }

    #[test]
    fn a_kept_alive_connection_carries_its_requests_then_closes_and_opens_again() {
        let req = b"GET / HTTP/1.1\r\nHost: wirelab\r\n\r\n";
        let mut c = Responder::new(Side {
            table: compile(&EfsmRef::Builtin("http-client".into()), "x").unwrap(),
            local_ip: u32::from_be_bytes(CLIENT),
            mss: 1460,
            segments_per_ack: 2,
            payload: Some(Payload::new(req, req.len() as u64, 1460)),
            fin_after_data: false,
            port_base: 40000,
            connections: 1,
            port_range: 100,
            requests: 3,
            draining: false,
        });
        let mut s = server(2, 4000);
        s.side.fin_after_data = false;
        let len = s.side.payload.as_ref().unwrap().len;
        let syn = || {
            let mut f = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(CLIENT, SERVER, 64)
                .tcp(40000, 8080, 7, 65535)
                .syn()
                .write(&mut f, &[])
                .unwrap();
            f
        };
        let row = |r: &Responder, from: &str, reply: Reply| -> u64 {
            let t = &r.side.table;
            (0..t.rows.len())
                .filter(|&i| t.states[t.rows[i].from as usize] == from && t.rows[i].reply == reply)
                .map(|i| r.counts[i])
                .sum()
        };
        // Two whole connections: each three requests, answered whole,
        // then our FIN, the server's, and a new SYN.
        wire(&mut c, &mut s, syn(), |c| {
            row(c, "fin-wait", Reply::Reopen) == 2
        });
        assert_eq!(c.counted(Count::MessagesReceived), 6, "responses whole");
        assert_eq!(c.counted(Count::MessagesUndelimited), 0);
        assert_eq!(
            row(&c, "requested", Reply::NextMessage),
            4,
            "second and third requests"
        );
        assert_eq!(row(&c, "requested", Reply::Fin), 2, "the client closes");
        assert_eq!(s.counted(Count::MessagesReceived), 6, "requests, whole");
        assert_eq!(row(&s, "sending", Reply::NextMessage), 4);
        assert_eq!(
            s.counted(Count::BytesSent),
            6 * len,
            "each response sent once, whole"
        );
        assert_eq!(c.counted(Count::BytesReceived), 6 * len);
        assert_eq!(
            c.counted(Count::OutOfOrder) + s.counted(Count::OutOfOrder),
            0
        );
        // The server answered our FIN with its own and forgot the flow.
        assert_eq!(row(&s, "sending", Reply::Fin), 2);
        assert!(
            s.flows.is_empty(),
            "the third connection's SYN is still on the wire"
        );

        // Draining: the response in flight is the last; the client
        // closes, ACKs the server's FIN, and opens nothing again.
        c.side.draining = true;
        s.flows.clear();
        c.flows.clear();
        let before = c.counted(Count::MessagesReceived);
        wire(&mut c, &mut s, syn(), |_| false);
        assert_eq!(c.counted(Count::MessagesReceived), before + 1);
        assert_eq!(row(&c, "fin-wait", Reply::Reopen), 3, "the close, ACKed");
        assert!(c.flows.is_empty() && s.flows.is_empty(), "both ends closed");
    }

    #[test]
    fn the_syn_flood_responder_keeps_no_flow() {
        let e = builtin("syn-flood").unwrap();
        let table = compile(&EfsmRef::Table(e), "x").unwrap();
        let mut r = Responder::new(Side {
            table,
            local_ip: u32::from_be_bytes(SERVER),
            mss: 1460,
            segments_per_ack: 1,
            payload: None,
            fin_after_data: false,
            port_base: 0,
            connections: 0,
            port_range: 1,
            requests: 1,
            draining: false,
        });
        for k in 0..100 {
            let out = r.receive(&seg(flag::SYN, k, 0, &[]), 0).unwrap();
            let (fl, _, a, _) = read(&out[0]);
            assert_eq!((fl, a), (flag::RST | flag::ACK, k + 1));
        }
        assert!(r.flows.is_empty());
    }
}
