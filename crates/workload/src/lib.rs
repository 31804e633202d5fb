//! The TCP workload (Lumina §3.2, over kernel sockets): connections between
//! requesters and responders, verbs `write` (the requester sends each message
//! and the responder returns an 8-byte completion) and `read` (the requester
//! sends an 8-byte request and the responder returns the message), tx depth
//! (outstanding messages per connection) and an optional barrier across
//! connections. It reports per-message completion times and goodput.
//!
//! Hand-off with the control plane happens in three steps so that the switch
//! is armed before the first packet of each phase: `prepare` creates the
//! listeners and the bound (not yet connected) requester sockets, whose
//! 5-tuples the plan already fixed; `connect` completes the handshakes and
//! returns runtime metadata (MSS); `run` sends the messages.

mod handoff;
pub mod load;
pub mod perftest;
pub mod qcn;
pub mod roce;
pub mod udp;

pub use handoff::{for_plan, Finished, Flow, Roce, Tcp, Udp, Workload};

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use wirelab_plan::{ConnPlan, HostPlan, Plan};
use wirelab_spec::Verb;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connection {conn}: {what}: {source}")]
    Io {
        conn: u32,
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Netns(#[from] wirelab_netns::Error),
    #[error("interrupted")]
    Interrupted,
    #[error("connection {conn}: no progress before the deadline ({secs}s)")]
    Deadline { conn: u32, secs: u64 },
}

/// CLOCK_MONOTONIC in ns: the clock the switch stamps packets with
/// (bpf_ktime_get_ns), so workload and trace times line up.
pub fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Runtime metadata of one connection, reported to the control plane.
#[derive(Debug, Clone, Serialize)]
pub struct ConnMeta {
    pub id: u32,
    pub requester: SocketAddrV4,
    pub responder: SocketAddrV4,
    /// MSS of the data sender's socket (TCP_MAXSEG once connected); for
    /// RoCE the path MTU (one PSN per payload of that size).
    pub data_mss: u32,
    /// RoCE: the QPNs and initial PSNs the devices chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce: Option<roce::RoceMeta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MessageReport {
    /// 1-based.
    pub message: u32,
    /// The message's verb (connections may combine verbs, RoCE only).
    pub verb: Verb,
    pub posted_ns: u64,
    pub completed_ns: u64,
    pub mct_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnReport {
    pub id: u32,
    pub messages: Vec<MessageReport>,
    pub expected_messages: u32,
    pub bytes: u64,
    /// Message bytes over the time from the first post to the last completion.
    pub goodput_bps: u64,
    /// The messages as perftest reports them (`ib_*_bw`, `ib_*_lat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perftest: Option<perftest::Perftest>,
    pub error: Option<String>,
    /// UDP: datagrams sent and received (a UDP message is complete when
    /// sent; what arrived is here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<udp::UdpStats>,
}

impl ConnReport {
    /// A connection's report from its completed messages: goodput is the
    /// message bytes over the time from the first post to the last completion.
    pub fn new(
        id: u32,
        expected_messages: u32,
        message_size: u64,
        mut messages: Vec<MessageReport>,
        error: Option<String>,
    ) -> ConnReport {
        messages.sort_by_key(|m| m.message);
        let bytes = messages.len() as u64 * message_size;
        let span = match (
            messages.iter().map(|m| m.posted_ns).min(),
            messages.iter().map(|m| m.completed_ns).max(),
        ) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        ConnReport {
            id,
            expected_messages,
            bytes,
            goodput_bps: if span > 0 {
                bytes * 8 * 1_000_000_000 / span
            } else {
                0
            },
            perftest: perftest::report(message_size, &messages),
            messages,
            error,
            udp: None,
        }
    }
}

fn ioe(conn: u32, what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        conn,
        what: what.to_string(),
        source,
    }
}

fn set_cc(sock: &Socket, host: &HostPlan, conn: u32) -> Result<(), Error> {
    // This kernel's default is bbr; the plan always names the algorithm.
    let cc = std::ffi::OsString::from(host.stack.congestion_control.kernel_name());
    nix::sys::socket::setsockopt(&sock.as_fd(), nix::sys::socket::sockopt::TcpCongestion, &cc)
        .map_err(|e| Error::Io {
            conn,
            what: format!("setting congestion control {:?}", cc),
            source: e.into(),
        })
}

/// The host's socket options (`stack.rcvbuf`, `sndbuf`, `nodelay`), on
/// a socket not yet connected or listening: the window scale a SYN
/// offers follows the receive buffer then (RFC 7323 §2.3). The buffers
/// are forced (SO_RCVBUFFORCE, SO_SNDBUFFORCE: wirelab runs as root), so
/// a replay gets the buffer its recording had whatever
/// net.core.rmem_max says.
fn set_options(sock: &Socket, host: &HostPlan, conn: u32) -> Result<(), Error> {
    use nix::sys::socket::{setsockopt, sockopt};
    let st = &host.stack;
    let size = |b: wirelab_spec::Bytes| usize::try_from(b.0).unwrap_or(usize::MAX);
    if let Some(b) = st.rcvbuf {
        setsockopt(&sock.as_fd(), sockopt::RcvBufForce, &size(b))
            .map_err(|e| ioe(conn, "SO_RCVBUFFORCE")(e.into()))?;
    }
    if let Some(b) = st.sndbuf {
        setsockopt(&sock.as_fd(), sockopt::SndBufForce, &size(b))
            .map_err(|e| ioe(conn, "SO_SNDBUFFORCE")(e.into()))?;
    }
    sock.set_nodelay(st.nodelay)
        .map_err(ioe(conn, "TCP_NODELAY"))
}

fn mss_of(s: &TcpStream, conn: u32) -> Result<u32, Error> {
    nix::sys::socket::getsockopt(&s.as_fd(), nix::sys::socket::sockopt::TcpMaxSeg).map_err(|e| {
        Error::Io {
            conn,
            what: "reading TCP_MAXSEG".into(),
            source: e.into(),
        }
    })
}

/// Sockets created in their namespaces, not yet connected.
pub struct Prepared {
    listeners: Vec<(usize, TcpListener)>,
    requesters: Vec<(u32, Socket, SocketAddrV4)>,
}

/// Creates listeners on every responder and bound requester sockets.
pub fn prepare(plan: &Plan) -> Result<Prepared, Error> {
    let mut listeners = Vec::new();
    let mut responders: Vec<usize> = plan.conns.iter().map(|c| c.responder).collect();
    responders.sort();
    responders.dedup();
    for r in responders {
        let h = &plan.hosts[r];
        let addr = SocketAddrV4::new(h.ip, wirelab_plan::SERVICE_PORT);
        let l = wirelab_netns::in_netns(&h.ns, || -> Result<TcpListener, Error> {
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                .map_err(ioe(0, "socket"))?;
            s.set_reuse_address(true).map_err(ioe(0, "SO_REUSEADDR"))?;
            set_cc(&s, h, 0)?;
            set_options(&s, h, 0)?;
            s.bind(&SocketAddr::V4(addr).into())
                .map_err(ioe(0, "bind listener"))?;
            s.listen(1024).map_err(ioe(0, "listen"))?;
            Ok(s.into())
        })??;
        listeners.push((r, l));
    }
    let mut requesters = Vec::new();
    for c in &plan.conns {
        let h = &plan.hosts[c.requester];
        let local = SocketAddrV4::new(h.ip, c.sport);
        let s = wirelab_netns::in_netns(&h.ns, || -> Result<Socket, Error> {
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                .map_err(ioe(c.id, "socket"))?;
            s.set_reuse_address(true)
                .map_err(ioe(c.id, "SO_REUSEADDR"))?;
            set_cc(&s, h, c.id)?;
            set_options(&s, h, c.id)?;
            s.bind(&SocketAddr::V4(local).into())
                .map_err(ioe(c.id, "bind"))?;
            Ok(s)
        })??;
        requesters.push((c.id, s, local));
    }
    Ok(Prepared {
        listeners,
        requesters,
    })
}

/// Connected sockets, both ends, by connection.
pub struct Connected {
    pairs: Vec<(u32, TcpStream, TcpStream)>,
    pub meta: Vec<ConnMeta>,
}

/// Completes every handshake (through the armed switch).
pub fn connect(plan: &Plan, p: Prepared) -> Result<Connected, Error> {
    let mut pairs = Vec::new();
    let mut meta = Vec::new();
    let Prepared {
        listeners,
        requesters,
    } = p;
    for (id, sock, local) in requesters {
        let c = &plan.conns[id as usize - 1];
        let rh = &plan.hosts[c.responder];
        let remote = SocketAddrV4::new(rh.ip, c.dport);
        sock.set_write_timeout(Some(Duration::from_secs(5))).ok();
        // connect(2) on an already-created socket needs no namespace: the
        // socket lives in the requester's namespace since socket(2).
        sock.connect_timeout(&SocketAddr::V4(remote).into(), Duration::from_secs(10))
            .map_err(ioe(id, "connect"))?;
        let req: TcpStream = sock.into();
        let listener = &listeners
            .iter()
            .find(|(h, _)| *h == c.responder)
            .expect("a listener per responder")
            .1;
        let (resp, peer) = listener.accept().map_err(ioe(id, "accept"))?;
        // Handshakes go one at a time, so this is the connection just
        // made: by its source port, and its address unless the flow
        // tables rewrite addresses (a NAT: the responder sees another).
        let natted = plan.flowtables.as_ref().is_some_and(|f| {
            f.tables
                .iter()
                .flatten()
                .flat_map(|m| &m.entries)
                .any(|e| e.set.src.is_some())
        });
        let ours = match peer {
            SocketAddr::V4(p) => p.port() == local.port() && (natted || *p.ip() == *local.ip()),
            SocketAddr::V6(_) => false,
        };
        if !ours {
            return Err(Error::Io {
                conn: id,
                what: format!("accepted {peer}, expected {local}"),
                source: std::io::Error::from(ErrorKind::InvalidData),
            });
        }
        // The accepted socket inherits the listener's buffers; Nagle is
        // set on it too, as the host's `nodelay` says.
        resp.set_nodelay(rh.stack.nodelay)
            .map_err(ioe(id, "TCP_NODELAY"))?;
        let data_mss = match c.tcp_verb() {
            Verb::Write | Verb::Send => mss_of(&req, id)?,
            Verb::Read => mss_of(&resp, id)?,
        };
        meta.push(ConnMeta {
            id,
            requester: local,
            responder: remote,
            data_mss,
            roce: None,
        });
        pairs.push((id, req, resp));
    }
    Ok(Connected { pairs, meta })
}

/// Shared stop conditions: Ctrl-C and a deadline.
#[derive(Clone)]
pub struct Stop {
    pub abort: Arc<AtomicBool>,
    pub deadline: Instant,
    pub limit: Duration,
}

impl Stop {
    /// Waits until `at` (a connection's `start`), checking the stop.
    fn wait_until(&self, at: Instant, conn: u32) -> Result<(), Error> {
        loop {
            self.check(conn)?;
            let now = Instant::now();
            if now >= at {
                return Ok(());
            }
            std::thread::sleep((at - now).min(POLL));
        }
    }

    fn check(&self, conn: u32) -> Result<(), Error> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        if Instant::now() > self.deadline {
            return Err(Error::Deadline {
                conn,
                secs: self.limit.as_secs(),
            });
        }
        Ok(())
    }
}

const POLL: Duration = Duration::from_millis(100);

/// A barrier that gives up when the run stops or a party fails, instead of
/// waiting forever for a connection that will never arrive.
struct Barrier {
    parties: usize,
    state: Mutex<(usize, u64, bool)>, // (arrived, generation, broken)
    cv: Condvar,
}

impl Barrier {
    fn new(parties: usize) -> Barrier {
        Barrier {
            parties,
            state: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    fn wait(&self, conn: u32, stop: &Stop) -> Result<(), Error> {
        let mut g = self.state.lock().expect("barrier lock");
        let gen = g.1;
        g.0 += 1;
        if g.0 == self.parties {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        while g.1 == gen {
            if g.2 {
                return Err(Error::Io {
                    conn,
                    what: "barrier: another connection failed".into(),
                    source: ErrorKind::BrokenPipe.into(),
                });
            }
            if let Err(e) = stop.check(conn) {
                g.2 = true;
                self.cv.notify_all();
                return Err(e);
            }
            g = self.cv.wait_timeout(g, POLL).expect("barrier lock").0;
        }
        Ok(())
    }

    fn break_it(&self) {
        self.state.lock().expect("barrier lock").2 = true;
        self.cv.notify_all();
    }
}

/// Runs `op` on `buf[off..]` until the buffer is done, treating socket
/// timeouts as a chance to check for Ctrl-C and the deadline.
fn io_full(
    len: usize,
    conn: u32,
    stop: &Stop,
    what: &str,
    mut op: impl FnMut(usize) -> std::io::Result<usize>,
) -> Result<(), Error> {
    let mut off = 0;
    while off < len {
        match op(off) {
            Ok(0) => {
                return Err(Error::Io {
                    conn,
                    what: format!("{what}: peer closed early"),
                    source: ErrorKind::UnexpectedEof.into(),
                })
            }
            Ok(n) => off += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                stop.check(conn)?
            }
            Err(e) => return Err(ioe(conn, what)(e)),
        }
    }
    Ok(())
}

fn read_full(s: &mut TcpStream, buf: &mut [u8], conn: u32, stop: &Stop) -> Result<(), Error> {
    let len = buf.len();
    io_full(len, conn, stop, "read", |off| s.read(&mut buf[off..]))
}

/// A slow application's reads: at most `READ_CHUNK` bytes at a time, each
/// read no earlier than the bytes before it allow at `rate` (counted from
/// `since`, across messages), so the receive buffer fills and the window
/// closes when the sender is faster (DETER §5.1).
const READ_CHUNK: usize = 4 * 1024;

fn read_paced(
    s: &mut TcpStream,
    buf: &mut [u8],
    (rate, since, done): (wirelab_spec::BitsPerSec, Instant, &mut u64),
    conn: u32,
    stop: &Stop,
) -> Result<(), Error> {
    for chunk in buf.chunks_mut(READ_CHUNK) {
        let due = since + Duration::from_secs_f64(*done as f64 * 8.0 / rate.0 as f64);
        while let Some(wait) = due.checked_duration_since(Instant::now()) {
            stop.check(conn)?;
            std::thread::sleep(wait.min(POLL));
        }
        read_full(s, chunk, conn, stop)?;
        *done += chunk.len() as u64;
    }
    Ok(())
}

fn write_full(s: &mut TcpStream, buf: &[u8], conn: u32, stop: &Stop) -> Result<(), Error> {
    io_full(buf.len(), conn, stop, "write", |off| s.write(&buf[off..]))
}

fn pattern(size: u64, msg: u32) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_add(msg) as u8)
        .collect()
}

fn responder(c: &ConnPlan, mut s: TcpStream, stop: &Stop) -> Result<(), Error> {
    s.set_read_timeout(Some(POLL)).ok();
    s.set_write_timeout(Some(POLL)).ok();
    let size = c.message_size.0;
    let mut buf = vec![0u8; size as usize];
    let (since, mut read) = (Instant::now(), 0u64);
    for m in 1..=c.messages {
        match c.tcp_verb() {
            Verb::Write | Verb::Send => {
                match c.read_rate {
                    Some(r) => read_paced(&mut s, &mut buf, (r, since, &mut read), c.id, stop)?,
                    None => read_full(&mut s, &mut buf, c.id, stop)?,
                }
                write_full(&mut s, &u64::from(m).to_be_bytes(), c.id, stop)?;
            }
            Verb::Read => {
                let mut req = [0u8; 8];
                read_full(&mut s, &mut req, c.id, stop)?;
                let want = u64::from_be_bytes(req) as u32;
                write_full(&mut s, &pattern(size, want), c.id, stop)?;
            }
        }
    }
    // Wait for the requester's FIN so that the teardown is in the trace.
    let mut end = [0u8; 1];
    loop {
        match s.read(&mut end) {
            Ok(_) => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                stop.check(c.id)?
            }
            Err(_) => break,
        }
    }
    Ok(())
}

fn requester(
    c: &ConnPlan,
    mut s: TcpStream,
    stop: &Stop,
    barrier: Option<&Barrier>,
    rounds: u32,
) -> Result<Vec<MessageReport>, Error> {
    s.set_read_timeout(Some(POLL)).ok();
    s.set_write_timeout(Some(POLL)).ok();
    let size = c.message_size.0;
    let depth = c.tx_depth;
    let mut posted: std::collections::VecDeque<(u32, u64)> = Default::default();
    let mut done = Vec::new();
    let mut next = 1u32;
    let mut buf = vec![0u8; size as usize];
    let post = |s: &mut TcpStream,
                m: u32,
                posted: &mut std::collections::VecDeque<(u32, u64)>|
     -> Result<(), Error> {
        posted.push_back((m, now_ns()));
        match c.tcp_verb() {
            Verb::Write | Verb::Send => write_full(s, &pattern(size, m), c.id, stop),
            Verb::Read => write_full(s, &u64::from(m).to_be_bytes(), c.id, stop),
        }
    };
    let mut complete = |s: &mut TcpStream,
                        posted: &mut std::collections::VecDeque<(u32, u64)>|
     -> Result<(), Error> {
        match c.tcp_verb() {
            Verb::Write | Verb::Send => {
                let mut ack = [0u8; 8];
                read_full(s, &mut ack, c.id, stop)?;
            }
            Verb::Read => read_full(s, &mut buf, c.id, stop)?,
        }
        let t = now_ns();
        let (m, p) = posted
            .pop_front()
            .expect("a completion answers a posted message");
        done.push(MessageReport {
            message: m,
            verb: c.tcp_verb(),
            posted_ns: p,
            completed_ns: t,
            mct_ns: t - p,
        });
        Ok(())
    };
    match barrier {
        // Lumina §3.2: the next round is posted only after every connection
        // completed the current one; a round is tx_depth messages.
        Some(b) => {
            for _ in 0..rounds {
                let n = depth.min(c.messages + 1 - next);
                for _ in 0..n {
                    post(&mut s, next, &mut posted)?;
                    next += 1;
                }
                for _ in 0..n {
                    complete(&mut s, &mut posted)?;
                }
                b.wait(c.id, stop)?;
            }
        }
        None => {
            while next <= c.messages || !posted.is_empty() {
                while next <= c.messages && (posted.len() as u32) < depth {
                    post(&mut s, next, &mut posted)?;
                    next += 1;
                }
                complete(&mut s, &mut posted)?;
            }
        }
    }
    drop(complete);
    Ok(done)
}

/// A replayed connection's two ends' operations (requester, responder),
/// from the records the plan names (decoded once already, when the spec
/// was loaded).
fn replay_steps(
    c: &ConnPlan,
    r: &wirelab_spec::ReplayCalls,
) -> Result<
    (
        Vec<wirelab_deter::replay::Step>,
        Vec<wirelab_deter::replay::Step>,
    ),
    Error,
> {
    let read = |p: &std::path::Path| -> Result<wirelab_deter::record::ConnRecord, Error> {
        let bytes = std::fs::read(p).map_err(ioe(c.id, &format!("reading {}", p.display())))?;
        wirelab_deter::record::decode(&bytes).map_err(|d| Error::Io {
            conn: c.id,
            what: format!("{}: {d}", p.display()),
            source: ErrorKind::InvalidData.into(),
        })
    };
    let pair = wirelab_deter::replay::Pair {
        client: read(&r.requester)?,
        server: read(&r.responder)?,
    };
    Ok(pair.steps())
}

/// One end of a replayed connection: its recorded calls at their times
/// from `begin` (DETER §3.4), then the peer's FIN awaited so the teardown
/// is in the trace and no unread byte turns the close into a RST.
fn scripted(
    c: &ConnPlan,
    mut s: TcpStream,
    steps: &[wirelab_deter::replay::Step],
    begin: Instant,
    stop: &Stop,
) -> Result<(), Error> {
    use wirelab_deter::replay::Op;
    s.set_read_timeout(Some(POLL)).ok();
    s.set_write_timeout(Some(POLL)).ok();
    let mut buf = Vec::new();
    let mut closed = false;
    for st in steps {
        // Every call at its recorded time. A read is recorded when it
        // returned (sock_recv_length): for a reader blocked in read() that
        // is when the data came, which the replay's timed sends repeat, so
        // reading then changes nothing; for a slow reader (DETER §5.1) it
        // is when the application took the data, which is what fills the
        // receive buffer and closes the window, and the replay must not
        // read sooner.
        stop.wait_until(begin + Duration::from_nanos(st.at_ns), c.id)?;
        match st.op {
            Op::Send(n) => write_full(&mut s, &pattern(n, 0), c.id, stop)?,
            Op::Recv(n) => {
                buf.resize(n as usize, 0);
                read_full(&mut s, &mut buf, c.id, stop)?
            }
            // Reads that kept up: each took what had just arrived, so
            // reads of whatever is there, as it comes, until all of it
            // is in (at most what the socket can hold a read).
            Op::Drain(n) => {
                buf.resize(n.min(1 << 20) as usize, 0);
                let cap = buf.len() as u64;
                io_full(n as usize, c.id, stop, "replayed reads", |off| {
                    let want = (n - off as u64).min(cap) as usize;
                    s.read(&mut buf[..want])
                })?
            }
            Op::Close { after_peer } => {
                if after_peer {
                    until_eof(&mut s, c.id, stop)?;
                }
                s.shutdown(std::net::Shutdown::Write).ok();
                closed = true;
            }
        }
    }
    // A record that ends without a close (the recording stopped first):
    // close now, or both ends would wait for the other's FIN.
    if !closed {
        s.shutdown(std::net::Shutdown::Write).ok();
    }
    until_eof(&mut s, c.id, stop)
}

/// Reads (and drops) until the peer's FIN.
fn until_eof(s: &mut TcpStream, conn: u32, stop: &Stop) -> Result<(), Error> {
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                stop.check(conn)?
            }
            Err(_) => return Ok(()),
        }
    }
}

/// Sends every message; returns one report per connection, in id order.
/// A connection that fails reports its error; the others go on.
pub fn run(plan: &Plan, conns: Connected, stop: &Stop) -> Vec<ConnReport> {
    let rounds = plan
        .conns
        .iter()
        .map(|c| c.messages.div_ceil(c.tx_depth))
        .max()
        .unwrap_or(0);
    let barrier = plan.barrier.then(|| Barrier::new(plan.conns.len()));
    let (begin, begin_ns) = (Instant::now(), now_ns());
    let mut reports: Vec<ConnReport> = std::thread::scope(|sc| {
        let handles: Vec<_> = conns
            .pairs
            .into_iter()
            .map(|(id, req, resp)| {
                let c = &plan.conns[id as usize - 1];
                if let Some(rp) = &c.replay {
                    let (mine, theirs, failed) = match replay_steps(c, rp) {
                        Ok((mine, theirs)) => (mine, theirs, None),
                        Err(e) => (Vec::new(), Vec::new(), Some(e)),
                    };
                    let r = sc.spawn(move || scripted(c, resp, &theirs, begin, stop));
                    let q = sc.spawn(move || {
                        if let Some(e) = failed {
                            return Err(e);
                        }
                        scripted(c, req, &mine, begin, stop)?;
                        // The whole exchange is the one message.
                        let (posted_ns, completed_ns) =
                            (begin_ns + mine.first().map_or(0, |s| s.at_ns), now_ns());
                        Ok(vec![MessageReport {
                            message: 1,
                            verb: Verb::Write,
                            posted_ns,
                            completed_ns,
                            mct_ns: completed_ns.saturating_sub(posted_ns),
                        }])
                    });
                    return (c, q, r);
                }
                let barrier = barrier.as_ref();
                let r = sc.spawn(move || responder(c, resp, stop));
                let q = sc.spawn(move || {
                    // With a barrier every connection takes part in every
                    // round; one with fewer messages idles through the rest.
                    let own = c.messages.div_ceil(c.tx_depth);
                    // A delayed start (never with a barrier: validated).
                    let at = begin + Duration::from_nanos(c.start.0);
                    let mut res = stop
                        .wait_until(at, c.id)
                        .and_then(|()| requester(c, req, stop, barrier, own));
                    if let Some(b) = barrier {
                        match res {
                            Ok(_) => {
                                for _ in own..rounds {
                                    if let Err(e) = b.wait(c.id, stop) {
                                        res = Err(e);
                                        break;
                                    }
                                }
                            }
                            Err(_) => b.break_it(),
                        }
                    }
                    res
                });
                (c, q, r)
            })
            .collect();
        handles
            .into_iter()
            .map(|(c, q, r)| {
                let q = q.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                let r = r.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                let (messages, error) = match (q, r) {
                    (Ok(m), Ok(())) => (m, None),
                    (Ok(m), Err(e)) => (m, Some(format!("responder: {e}"))),
                    (Err(e), _) => (Vec::new(), Some(e.to_string())),
                };
                ConnReport::new(c.id, c.messages, c.message_size.0, messages, error)
            })
            .collect()
    });
    reports.sort_by_key(|r| r.id);
    reports
}
