//! The RoCE workload (Lumina §3.2): wirelab's RoCEv2 transport (`roce`,
//! sans-IO) driven in the host namespaces. One device per host (a NIC
//! port: the CNP limiter's "port" scope is this device), one QP per
//! connection end, real RoCEv2 packets to UDP 4791 with ECT(0) set, sent as
//! whole IPv4 packets from one raw socket per host (`tx_socket`) and read
//! from one UDP socket with the ECN field (IP_RECVTOS), the GID they were
//! sent to (IP_PKTINFO) and the kernel's receive time, in batches
//! (`BATCH`).
//!
//! Hand-off (Lumina §3.3): `prepare` creates the QPs with random QPNs and
//! initial PSNs and returns them; the control plane arms the switch; `run`
//! posts the work.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use wirelab_plan::{HostPlan, Plan};
use wirelab_roce::packet::{Ipv4Udp, ROCEV2_PORT};
use wirelab_roce::{Counters, Device, DeviceConfig, QpConfig, Rx, Status, Tx, WorkRequest};
use wirelab_spec::{Verb, Verbs};

use crate::{now_ns, ConnReport, Error, MessageReport, Stop};

/// Runtime metadata of one RoCE connection, reported to the control plane.
#[derive(Debug, Clone, Serialize)]
pub struct RoceMeta {
    pub id: u32,
    pub requester_qpn: u32,
    pub responder_qpn: u32,
    /// The requester's initial PSN: data packets of writes and sends, and the
    /// read responses of reads, are numbered from it.
    pub ipsn: u32,
    pub responder_ipsn: u32,
}

/// A host's device counters before and after the run (as NIC counters are
/// dumped around a Lumina run).
#[derive(Debug, Clone, Serialize)]
pub struct DeviceCounters {
    pub host: String,
    pub profile: String,
    pub before: Counters,
    pub after: Counters,
}

struct HostDev {
    host: usize,
    dev: Device,
    rx: UdpSocket,
    tx: Socket,
    /// (conn id, local QPN) of the connections this host requests on.
    requests: Vec<(u32, u32)>,
}

/// How long a device keeps polling after its last packet or post before
/// it sleeps in ppoll. An RNIC never sleeps, and perftest polls its
/// completion queue by default; a device that slept between packets paid
/// the VM's wake-up (tens of µs) on each arrival, and it shaped what was
/// measured: `specs/scalacn/write-bandwidth-against-local-and-remote-masks.yaml`
/// at 0 masks took 89-98 µs per 64-byte write and sent its 64 KiB writes
/// in clumps at 410-486 Mbit/s, faster with 100 masks in the switch
/// (562-684) because the switch's spacing kept the responder awake.
/// Polling for 200 µs, about three of the lab's round trips under load,
/// covers a conversation's gaps and not an idle wait (a timeout of
/// milliseconds sleeps as before).
const BUSY_POLL_NS: u64 = 200_000;

/// Device threads running now in this process (all labs): a device polls
/// only while they fit the CPUs, since a polling thread that shares a CPU
/// holds it from the others (parallel labs, `--jobs`; an incast's many
/// hosts) until the scheduler takes it away.
static DEVICES: AtomicUsize = AtomicUsize::new(0);

/// Counts a device thread while it lives.
struct Polling;

impl Polling {
    fn start() -> Polling {
        DEVICES.fetch_add(1, Ordering::SeqCst);
        Polling
    }

    /// Whether the process's device threads fit its CPUs (counted once:
    /// `available_parallelism` reads cgroup files, far too slow for the
    /// polling loop).
    fn fits() -> bool {
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cpus =
            *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        DEVICES.load(Ordering::Relaxed) <= cpus
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        DEVICES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the device sleeps in ppoll until a datagram or `wait_ns` from
/// now: not for a wait under 50 µs (the scheduler cannot wake it that
/// precisely: it spins), nor within BUSY_POLL_NS of its last activity
/// while the device threads fit the CPUs (it polls).
fn sleeps(wait_ns: u64, now: u64, last_active: u64, fits: bool) -> bool {
    let polling = fits && now < last_active.saturating_add(BUSY_POLL_NS);
    wait_ns > 50_000 && !polling
}

pub struct Prepared {
    hosts: Vec<HostDev>,
    pub meta: Vec<RoceMeta>,
}

fn ioe(conn: u32, what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        conn,
        what: what.to_string(),
        source,
    }
}

fn device_config(h: &HostPlan) -> Result<DeviceConfig, Error> {
    let r = &h.stack.roce;
    let profile = wirelab_spec::roce::load_profile(&r.profile).map_err(|e| Error::Io {
        conn: 0,
        what: format!("host {}: loading the RoCE profile", h.name),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
    })?;
    let mut c = DeviceConfig::new(profile);
    c.dcqcn_rp = r.dcqcn_rp;
    c.dcqcn_np = r.dcqcn_np;
    c.min_time_between_cnps_ns = r.min_time_between_cnps.0;
    c.adaptive_retransmission = r.adaptive_retransmission;
    c.slow_restart = r.slow_restart;
    c.line_rate_bps = r.line_rate.0 as f64;
    Ok(c)
}

/// The host's sending socket: one raw IPv4 socket (IPPROTO_RAW, so
/// IP_HDRINCL and send-only: it receives nothing, raw(7)) for every QP.
///
/// The transport writes the IP and UDP headers itself (`Ipv4Udp::header`):
/// DF set and IP ID 0, which Linux keeps for a DF packet without a
/// connected socket (ip_select_ident), so anyone can recompute the ICRC,
/// which covers the ID; the ECN field per packet (ECT(0) for data and
/// ACKs, not-ECT for CNPs, DCQCN §3) with no IP_TOS round trip; and a zero
/// UDP checksum (RoCEv2 relies on the ICRC, IBTA Annex A17.3), so a
/// corrupted payload reaches the transport. One socket lets a flush hand
/// the kernel every ready packet of every QP in one sendmmsg.
fn tx_socket() -> Result<Socket, Error> {
    Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .map_err(ioe(0, "creating the raw socket RoCE packets leave by"))
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, v: i32) -> std::io::Result<()> {
    // SAFETY: a valid fd and a pointer to an int of the stated length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Creates every QP (random QPNs and initial PSNs, as RNICs pick them) and
/// its sockets in the host namespaces.
pub fn prepare(plan: &Plan) -> Result<Prepared, Error> {
    // From the plan's seed: the same plan numbers its QPs and PSNs the
    // same way, so a run can be repeated exactly.
    let mut rng = rand::rngs::StdRng::seed_from_u64(plan.seed);
    let mut used = std::collections::HashSet::new();
    let mut qpn = |rng: &mut rand::rngs::StdRng| loop {
        let q = rng.gen_range(0x100..0x00ff_ffff);
        if used.insert(q) {
            return q;
        }
    };
    let mut meta = Vec::new();
    for c in &plan.conns {
        let (a, b) = (qpn(&mut rng), qpn(&mut rng));
        meta.push(RoceMeta {
            id: c.id,
            requester_qpn: a,
            responder_qpn: b,
            ipsn: rng.gen_range(0..0x0100_0000),
            responder_ipsn: rng.gen_range(0..0x0100_0000),
        });
    }
    let mut hosts: Vec<HostDev> = Vec::new();
    for (hi, h) in plan.hosts.iter().enumerate() {
        let mine: Vec<_> = plan
            .conns
            .iter()
            .filter(|c| c.requester == hi || c.responder == hi)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut dev = Device::new(device_config(h)?);
        let mut requests = Vec::new();
        let (rx, tx) =
            wirelab_netns::in_netns(&h.ns, || -> Result<(UdpSocket, Socket), Error> {
                for c in &mine {
                    let r = c.roce.expect("RoCE connection");
                    let m = &meta[c.id as usize - 1];
                    let req = c.requester == hi;
                    // Each end on the GID the plan gave this connection.
                    let (sport, local_qpn, remote_qpn, ipsn, remote_ipsn, local, remote) = if req {
                        (
                            r.requester_sport,
                            m.requester_qpn,
                            m.responder_qpn,
                            m.ipsn,
                            m.responder_ipsn,
                            c.requester_ip,
                            c.responder_ip,
                        )
                    } else {
                        (
                            r.responder_sport,
                            m.responder_qpn,
                            m.requester_qpn,
                            m.responder_ipsn,
                            m.ipsn,
                            c.responder_ip,
                            c.requester_ip,
                        )
                    };
                    dev.create_qp(QpConfig {
                        sport,
                        ipsn,
                        remote_ipsn,
                        mtu: r.mtu,
                        timeout: r.timeout,
                        retry_cnt: r.retry_cnt,
                        ..QpConfig::new(local_qpn, remote_qpn, local, remote)
                    });
                    if req {
                        requests.push((c.id, local_qpn));
                    } else {
                        // Lumina §3.2: the responder keeps a receive posted for every Send.
                        let sends = (0..c.messages)
                            .filter(|&k| c.verb.of(k) == Verb::Send)
                            .count();
                        if sends > 0 {
                            dev.post_recv(local_qpn, sends as u64).expect("QP exists");
                        }
                    }
                }
                // Every GID of the host: the wildcard address (the namespace has
                // only lab addresses), with IP_PKTINFO telling which one a
                // datagram was sent to.
                let rx = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, ROCEV2_PORT))
                    .map_err(ioe(0, "binding UDP 4791"))?;
                setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
                    .map_err(ioe(0, "IP_PKTINFO"))?;
                rx.set_nonblocking(true).map_err(ioe(0, "O_NONBLOCK"))?;
                // A deep receive queue, as an RNIC's RX buffer: with the default
                // 208 KiB a burst of marked traffic overflows it, and those losses
                // happen where the switch cannot see them (UdpRcvbufErrors).
                setsockopt_int(
                    rx.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    32 << 20,
                )
                .map_err(ioe(0, "SO_RCVBUFFORCE"))?;
                setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
                    .map_err(ioe(0, "IP_RECVTOS"))?;
                // The kernel's receive time of each datagram: the device's CNP
                // limiter judges intervals between arrivals, like a NIC's.
                setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
                    .map_err(ioe(0, "SO_TIMESTAMPNS"))?;
                Ok((rx, tx_socket()?))
            })??;
        hosts.push(HostDev {
            host: hi,
            dev,
            rx,
            tx,
            requests,
        });
    }
    Ok(Prepared { hosts, meta })
}

/// Datagrams one recvmmsg reads, and packets one sendmmsg sends, at most.
/// With a system call per packet the switch's CPU drains its backlog between
/// packets, so nearly every packet costs the sender an RPS IPI
/// (net_rps_send_ipi), a VM exit on these machines; sent in batches, most
/// find the backlog still scheduled (`wirelab run` of the bench's 16-QP
/// workload, 64 MiB: about 95k IPIs before, 33k-39k after).
const BATCH: usize = 32;

/// A datagram read from the RoCE socket.
struct Received {
    from: SocketAddrV4,
    /// The address it was sent to (IP_PKTINFO): one of the host's GIDs.
    to: Option<Ipv4Addr>,
    /// The IP TOS byte (IP_RECVTOS).
    tos: u8,
    /// The kernel's receive time (SO_TIMESTAMPNS), CLOCK_REALTIME ns.
    realtime_ns: Option<u64>,
}

/// Buffers for one recvmmsg of up to BATCH datagrams, each with its
/// sender's address and room for IP_TOS, IP_PKTINFO and SCM_TIMESTAMPNS.
struct RxBatch {
    slot: usize,
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_in>,
    /// u64 words: cmsghdr alignment.
    ctrl: Vec<[u64; 24]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl RxBatch {
    /// `link_mtu` bounds every datagram the host can receive.
    fn new(link_mtu: u32) -> RxBatch {
        let slot = (link_mtu as usize).max(1500);
        RxBatch {
            slot,
            bufs: vec![0; slot * BATCH],
            // SAFETY: plain C structs for which all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; BATCH],
            ctrl: vec![[0; 24]; BATCH],
            iovs: Vec::with_capacity(BATCH),
            hdrs: Vec::with_capacity(BATCH),
        }
    }

    /// Reads what waits (up to BATCH datagrams) without blocking; 0 when
    /// nothing does.
    fn recv(&mut self, fd: RawFd) -> std::io::Result<usize> {
        self.iovs.clear();
        self.hdrs.clear();
        for b in self.bufs.chunks_mut(self.slot) {
            self.iovs.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            });
        }
        for i in 0..BATCH {
            // SAFETY: all-zero is a valid msghdr; the pointers set below
            // stay valid for the call (the vectors are not resized).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_in).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; 24]>();
            self.hdrs.push(h);
        }
        // SAFETY: BATCH valid mmsghdrs pointing at live buffers.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }

    /// The i-th datagram of the last `recv`, or None when it was cut short
    /// (larger than the link MTU: not a packet the lab delivers).
    fn get(&self, i: usize) -> Option<(Received, &[u8])> {
        let h = &self.hdrs[i];
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return None;
        }
        let len = h.msg_len as usize;
        let mut tos = 0u8;
        let mut to = None;
        let mut realtime_ns = None;
        // SAFETY: walking the control messages the kernel wrote for this
        // datagram (msg_controllen was updated to what it wrote).
        unsafe {
            let msg = &h.msg_hdr;
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                    tos = *libc::CMSG_DATA(c);
                } else if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_PKTINFO
                {
                    let pi: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    to = Some(Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr)));
                } else if (*c).cmsg_level == libc::SOL_SOCKET
                    && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    realtime_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
        let from = &self.names[i];
        let from = SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr)),
            u16::from_be(from.sin_port),
        );
        let r = Received {
            from,
            to,
            tos,
            realtime_ns,
        };
        Some((r, &self.bufs[i * self.slot..i * self.slot + len]))
    }
}

/// CLOCK_MONOTONIC minus CLOCK_REALTIME, to put kernel receive timestamps
/// on the clock the device and the switch use.
fn realtime_to_monotonic() -> i128 {
    let real = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)
        .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
        .unwrap_or(0);
    now_ns() as i128 - real
}

/// Shared progress of the requesters, for the barrier and for knowing when
/// every host may stop.
struct Shared {
    /// Completed messages per connection (index id-1).
    completed: Mutex<Vec<u32>>,
    open: AtomicUsize,
}

struct ConnRun {
    id: u32,
    qpn: u32,
    verb: Verbs,
    size: u32,
    messages: u32,
    depth: u32,
    /// Monotonic ns before which the QP posts nothing (`start`, `stagger`).
    start_at: u64,
    posted: Vec<u64>,
    done: Vec<MessageReport>,
    error: Option<String>,
}

fn drive(
    plan: &Plan,
    mut h: HostDev,
    shared: &Shared,
    stop: &Stop,
) -> (Vec<ConnRun>, DeviceCounters) {
    let host = &plan.hosts[h.host];
    let before = h.dev.counters().clone();
    let started = now_ns();
    let mut conns: Vec<ConnRun> = h
        .requests
        .iter()
        .map(|&(id, qpn)| {
            let c = &plan.conns[id as usize - 1];
            ConnRun {
                id,
                qpn,
                verb: c.verb.clone(),
                size: c.message_size.0 as u32,
                messages: c.messages,
                depth: c.tx_depth,
                start_at: started + c.start.0,
                posted: Vec::new(),
                done: Vec::new(),
                error: None,
            }
        })
        .collect();
    let by_qpn: HashMap<u32, usize> = conns.iter().enumerate().map(|(i, c)| (c.qpn, i)).collect();
    let mut batch = RxBatch::new(plan.mtu);
    let fd = h.rx.as_raw_fd();
    let mut linger_until: Option<u64> = None;
    // When the device last sent, received or posted (busy polling).
    let mut last_active = 0u64;
    let _polling = Polling::start();
    loop {
        let now = now_ns();
        // Completions first: a message completed by the datagrams just read
        // frees its slot in the tx depth now, not after the next wait.
        reap(&mut h, &mut conns, &by_qpn, shared);
        // Post within tx depth and, with a barrier, only into the round every
        // connection has reached (Lumina §3.2 barrier-sync).
        let floor_round = if plan.barrier {
            let done = shared.completed.lock().unwrap();
            plan.conns
                .iter()
                .map(|c| done[c.id as usize - 1] / c.tx_depth)
                .min()
                .unwrap_or(0)
        } else {
            u32::MAX
        };
        for c in conns
            .iter_mut()
            .filter(|c| c.error.is_none() && now >= c.start_at)
        {
            while (c.posted.len() as u32) < c.messages
                && c.posted.len() - c.done.len() < c.depth as usize
                && (c.posted.len() as u32 / c.depth) <= floor_round
            {
                let m = c.posted.len() as u64;
                let wr = WorkRequest {
                    id: m + 1,
                    verb: match c.verb.of(m as u32) {
                        Verb::Send => wirelab_roce::Verb::Send,
                        Verb::Write => wirelab_roce::Verb::Write,
                        Verb::Read => wirelab_roce::Verb::Read,
                    },
                    len: c.size,
                    remote_va: 0x1000_0000 + m * c.size as u64,
                    rkey: 0x1234,
                };
                if let Err(e) = h.dev.post_send(c.qpn, wr) {
                    c.error = Some(e.to_string());
                    shared.open.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
                c.posted.push(now);
                last_active = now;
            }
        }
        h.dev.handle_timeout(now);
        if flush(&mut h) > 0 {
            last_active = now;
        }
        reap(&mut h, &mut conns, &by_qpn, shared);
        if shared.open.load(Ordering::SeqCst) == 0 {
            // Every requester is done; give the last ACKs a moment to leave.
            let until = *linger_until.get_or_insert(now + 2_000_000);
            if now >= until {
                break;
            }
        }
        if let Err(e) = stop.check(0) {
            for c in conns
                .iter_mut()
                .filter(|c| c.error.is_none() && (c.done.len() as u32) < c.messages)
            {
                c.error = Some(e.to_string());
            }
            break;
        }
        // Wait for a datagram or the transport's next deadline; below 50 µs
        // spin, since the scheduler cannot wake us that precisely, and
        // within BUSY_POLL_NS of the last packet poll as an RNIC does.
        let wait = h
            .dev
            .poll_timeout()
            .map_or(1_000_000, |t| t.saturating_sub(now_ns()))
            .min(1_000_000)
            .min(
                // A QP still waiting for its start wakes the loop then.
                conns
                    .iter()
                    .filter(|c| c.posted.is_empty() && c.start_at > now)
                    .map(|c| c.start_at - now)
                    .min()
                    .unwrap_or(u64::MAX),
            );
        if sleeps(wait, now_ns(), last_active, Polling::fits()) {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: wait as i64,
            };
            // SAFETY: one valid pollfd and a timespec, no signal mask.
            unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        } else if wait > 50_000 {
            // Polling: the CPU goes to any other thread that wants it
            // (the capture's dumper, the other host's device, the run's
            // own), as the scheduler would not give it before the end of
            // this thread's slice. Three sweeps of the ScalaCN grid
            // without it fitted the write latency at 93.2-99.2%, three
            // with it at 97.8-98.7% (README, the ScalaCN section).
            std::thread::yield_now();
        }
        let offset = realtime_to_monotonic();
        loop {
            let n = batch.recv(fd).unwrap_or(0);
            if n > 0 {
                last_active = now_ns();
            }
            for i in 0..n {
                let Some((r, bytes)) = batch.get(i) else {
                    continue;
                };
                let rx = Rx {
                    src: *r.from.ip(),
                    dst: r.to.unwrap_or(host.ip),
                    sport: r.from.port(),
                    ecn: r.tos & 3,
                    bytes,
                    arrived: r.realtime_ns.map(|t| (t as i128 + offset).max(0) as u64),
                };
                let t = now_ns();
                h.dev.handle_datagram(t, rx);
                // ACKs, NAKs and CNPs leave as soon as they are decided, not
                // after the whole batch is handled: the trace times them at
                // the switch.
                flush(&mut h);
            }
            if n < BATCH {
                break;
            }
        }
    }
    let counters = DeviceCounters {
        host: host.name.clone(),
        profile: host.stack.roce.profile.clone(),
        before,
        after: h.dev.counters().clone(),
    };
    (conns, counters)
}

/// Takes the device's completions into the connections' reports.
fn reap(h: &mut HostDev, conns: &mut [ConnRun], by_qpn: &HashMap<u32, usize>, shared: &Shared) {
    while let Some(done) = h.dev.poll_completion() {
        if done.recv {
            continue;
        }
        let Some(&i) = by_qpn.get(&done.qpn) else {
            continue;
        };
        let c = &mut conns[i];
        if done.status != Status::Success {
            if c.error.is_none() {
                c.error = Some(format!(
                    "message {} completed with {:?}",
                    done.wr_id, done.status
                ));
                shared.open.fetch_sub(1, Ordering::SeqCst);
            }
            continue;
        }
        let m = done.wr_id as usize - 1;
        let posted = c.posted[m];
        c.done.push(MessageReport {
            message: done.wr_id as u32,
            verb: c.verb.of(done.wr_id as u32 - 1),
            posted_ns: posted,
            completed_ns: done.at_ns,
            mct_ns: done.at_ns - posted,
        });
        shared.completed.lock().unwrap()[c.id as usize - 1] += 1;
        if c.done.len() as u32 == c.messages {
            shared.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Sends everything the device has ready, BATCH packets per system call.
/// The clock is read again for every packet: the pacer releases a packet
/// when its time has come (one wire time after the last at the line or
/// DCQCN rate), and building a batch takes time, so a QP's packets at a
/// high rate fill a batch while those at a low rate still leave one by one.
fn flush(h: &mut HostDev) -> usize {
    let mut sent = 0;
    loop {
        let mut txs = Vec::with_capacity(BATCH);
        while txs.len() < BATCH {
            match h.dev.poll_transmit(now_ns()) {
                Some(tx) => txs.push(tx),
                None => break,
            }
        }
        if txs.is_empty() {
            return sent;
        }
        send_batch(h.tx.as_raw_fd(), &txs);
        sent += txs.len();
        if txs.len() < BATCH {
            return sent;
        }
    }
}

/// One sendmmsg of whole IPv4 packets: the headers `tx_socket` explains,
/// then the transport's bytes.
fn send_batch(fd: RawFd, txs: &[Tx]) {
    let heads: Vec<Vec<u8>> = txs
        .iter()
        .map(|t| Ipv4Udp::lab(t.src, t.dst, t.sport).header(t.ecn, t.bytes.len()))
        .collect();
    // raw(7): the route is looked up for the address given here; the header
    // carries the same one.
    let mut addrs: Vec<libc::sockaddr_in> = txs
        .iter()
        .map(|t| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(t.dst).to_be(),
            },
            sin_zero: [0; 8],
        })
        .collect();
    let mut iovs: Vec<[libc::iovec; 2]> = heads
        .iter()
        .zip(txs)
        .map(|(hd, t)| {
            [
                libc::iovec {
                    iov_base: hd.as_ptr() as *mut libc::c_void,
                    iov_len: hd.len(),
                },
                libc::iovec {
                    iov_base: t.bytes.as_ptr() as *mut libc::c_void,
                    iov_len: t.bytes.len(),
                },
            ]
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .zip(addrs.iter_mut())
        .map(|(iov, a)| {
            // SAFETY: all-zero is a valid msghdr; the pointers set here stay
            // valid until sendmmsg returns (nothing is resized meanwhile).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (a as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            m
        })
        .collect();
    let mut i = 0;
    while i < msgs.len() {
        // SAFETY: msgs[i..] are valid mmsghdrs over live buffers.
        let r = unsafe { libc::sendmmsg(fd, msgs[i..].as_mut_ptr(), (msgs.len() - i) as u32, 0) };
        // sendmmsg stops at the first packet the kernel refuses (a full
        // socket buffer): that one is a loss the transport recovers from,
        // the rest still go.
        i += if r > 0 { r as usize } else { 1 };
    }
}

/// Posts every message and runs the devices until all requesters are done
/// (or the run stops). Reports per connection, in id order, and each host's
/// device counters.
pub fn run(plan: &Plan, p: Prepared, stop: &Stop) -> (Vec<ConnReport>, Vec<DeviceCounters>) {
    let shared = Shared {
        completed: Mutex::new(vec![0; plan.conns.len()]),
        open: AtomicUsize::new(plan.conns.len()),
    };
    let results: Vec<(Vec<ConnRun>, DeviceCounters)> = std::thread::scope(|sc| {
        let handles: Vec<_> = p
            .hosts
            .into_iter()
            .map(|h| sc.spawn(|| drive(plan, h, &shared, stop)))
            .collect();
        handles
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut reports = Vec::new();
    let mut counters = Vec::new();
    for (conns, c) in results {
        counters.push(c);
        for c in conns {
            reports.push(ConnReport::new(
                c.id,
                c.messages,
                c.size as u64,
                c.done,
                c.error,
            ));
        }
    }
    reports.sort_by_key(|r| r.id);
    counters.sort_by(|a, b| a.host.cmp(&b.host));
    (reports, counters)
}

/// Device counter deltas per host, for the summary and the counter analyzer.
pub fn deltas(c: &[DeviceCounters]) -> BTreeMap<String, BTreeMap<String, i64>> {
    c.iter()
        .map(|d| {
            let m = d
                .after
                .0
                .iter()
                .map(|(k, v)| (k.clone(), *v as i64 - d.before.get(k) as i64))
                .collect();
            (d.host.clone(), m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's wait: it polls through a conversation's gaps, as an
    /// RNIC does, and sleeps when idle longer or when its threads would
    /// share CPUs.
    #[test]
    fn a_device_polls_after_activity_and_sleeps_when_idle_or_crowded() {
        let t = 10_000_000;
        // Just sent or received: a long wait (a retransmit timer) is polled.
        assert!(!sleeps(1_000_000, t, t - 1_000, true));
        assert!(!sleeps(1_000_000, t, t - (BUSY_POLL_NS - 1), true));
        // Idle for the whole window: it sleeps until a datagram comes.
        assert!(sleeps(1_000_000, t, t - BUSY_POLL_NS, true));
        // Never active (a responder before its first packet).
        assert!(sleeps(1_000_000, t, 0, true));
        // More device threads than CPUs: it sleeps even right after a packet.
        assert!(sleeps(1_000_000, t, t - 1_000, false));
        // A deadline under 50 µs is always spun for.
        assert!(!sleeps(50_000, t, 0, false));
        assert!(!sleeps(49_999, t, 0, true));
    }
}
