//! The RoCE workload (Lumina §3.2): wirelab's RoCEv2 transport (`roce`,
//! sans-IO) driven over UDP sockets in the host namespaces. One device per
//! host (a NIC port: the CNP limiter's "port" scope is this device), one QP
//! per connection end, real RoCEv2 packets on UDP 4791 with ECT(0) set and
//! the ECN field read back on receipt (IP_TOS / IP_RECVTOS).
//!
//! Hand-off (Lumina §3.3): `prepare` creates the QPs with random QPNs and
//! initial PSNs and returns them; the control plane arms the switch; `run`
//! posts the work.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rand::Rng;
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};
use wirelab_plan::{HostPlan, Plan};
use wirelab_roce::packet::ROCEV2_PORT;
use wirelab_roce::{Counters, Device, DeviceConfig, QpConfig, Rx, Status, WorkRequest};
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
    tx: HashMap<u16, (Socket, u8)>,
    /// (conn id, local QPN) of the connections this host requests on.
    requests: Vec<(u32, u32)>,
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

/// A socket bound to `ip:sport` that sends with DF set, so Linux writes IP
/// ID 0 and the ICRC can be recomputed by anyone (roce::packet::Ipv4Udp),
/// and with the UDP checksum off (SO_NO_CHECK): RoCEv2 carries 0 there and
/// relies on the ICRC, so a corrupted payload reaches the transport.
fn tx_socket(ip: Ipv4Addr, sport: u16, conn: u32) -> Result<Socket, Error> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(ioe(conn, "creating a RoCE socket"))?;
    s.set_reuse_address(true)
        .map_err(ioe(conn, "SO_REUSEADDR"))?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(ip, sport)).into())
        .map_err(ioe(conn, "binding a QP's UDP source port"))?;
    setsockopt_int(
        s.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
    .map_err(ioe(conn, "IP_MTU_DISCOVER"))?;
    setsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
        .map_err(ioe(conn, "SO_NO_CHECK"))?;
    setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, 2)
        .map_err(ioe(conn, "IP_TOS"))?;
    Ok(s)
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
    let mut rng = rand::thread_rng();
    let mut used = std::collections::HashSet::new();
    let mut qpn = || loop {
        let q = rng.gen_range(0x100..0x00ff_ffff);
        if used.insert(q) {
            return q;
        }
    };
    let mut meta = Vec::new();
    for c in &plan.conns {
        let (a, b) = (qpn(), qpn());
        let mut r = rand::thread_rng();
        meta.push(RoceMeta {
            id: c.id,
            requester_qpn: a,
            responder_qpn: b,
            ipsn: r.gen_range(0..0x0100_0000),
            responder_ipsn: r.gen_range(0..0x0100_0000),
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
        let mut tx = HashMap::new();
        let mut requests = Vec::new();
        let rx = wirelab_netns::in_netns(&h.ns, || -> Result<UdpSocket, Error> {
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
                tx.insert(sport, (tx_socket(local, sport, c.id)?, 2));
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
            Ok(rx)
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

/// A datagram read from the RoCE socket.
struct Received {
    len: usize,
    from: SocketAddrV4,
    /// The address it was sent to (IP_PKTINFO): one of the host's GIDs.
    to: Option<Ipv4Addr>,
    /// The IP TOS byte (IP_RECVTOS).
    tos: u8,
    /// The kernel's receive time (SO_TIMESTAMPNS), CLOCK_REALTIME ns.
    realtime_ns: Option<u64>,
}

/// recvmsg with the IP TOS byte and the receive time; None when nothing waits.
fn recv_tos(fd: RawFd, buf: &mut [u8]) -> std::io::Result<Option<Received>> {
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for IP_TOS, IP_PKTINFO and SCM_TIMESTAMPNS, aligned for cmsghdr.
    let mut cbuf = [0u64; 24];
    // SAFETY: msghdr points at live buffers of the stated sizes for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_in).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    let mut tos = 0u8;
    let mut to = None;
    let mut realtime_ns = None;
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                tos = *libc::CMSG_DATA(c);
            } else if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_PKTINFO {
                let pi: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                to = Some(Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr)));
            } else if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                realtime_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr)),
        u16::from_be(from.sin_port),
    );
    Ok(Some(Received {
        len: n as usize,
        from,
        to,
        tos,
        realtime_ns,
    }))
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
                posted: Vec::new(),
                done: Vec::new(),
                error: None,
            }
        })
        .collect();
    let by_qpn: HashMap<u32, usize> = conns.iter().enumerate().map(|(i, c)| (c.qpn, i)).collect();
    let mut buf = vec![0u8; 65536];
    let fd = h.rx.as_raw_fd();
    let mut linger_until: Option<u64> = None;
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
        for c in conns.iter_mut().filter(|c| c.error.is_none()) {
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
            }
        }
        h.dev.handle_timeout(now);
        flush(&mut h, now);
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
        // spin, since the scheduler cannot wake us that precisely.
        let wait = h
            .dev
            .poll_timeout()
            .map_or(1_000_000, |t| t.saturating_sub(now_ns()))
            .min(1_000_000);
        if wait > 50_000 {
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
        }
        let offset = realtime_to_monotonic();
        while let Ok(Some(r)) = recv_tos(fd, &mut buf) {
            let rx = Rx {
                src: *r.from.ip(),
                dst: r.to.unwrap_or(host.ip),
                sport: r.from.port(),
                ecn: r.tos & 3,
                bytes: &buf[..r.len],
                arrived: r.realtime_ns.map(|t| (t as i128 + offset).max(0) as u64),
            };
            let t = now_ns();
            h.dev.handle_datagram(t, rx);
            // ACKs, NAKs and CNPs leave as soon as they are decided, not after
            // the whole burst is read: the trace times them at the switch.
            flush(&mut h, t);
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

/// Sends everything the device has ready at `now`.
fn flush(h: &mut HostDev, now: u64) {
    while let Some(tx) = h.dev.poll_transmit(now) {
        let Some((s, tos)) = h.tx.get_mut(&tx.sport) else {
            continue;
        };
        if *tos != tx.ecn {
            let _ = setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, tx.ecn as i32);
            *tos = tx.ecn;
        }
        let to = SocketAddr::V4(SocketAddrV4::new(tx.dst, ROCEV2_PORT));
        // A full socket buffer is a loss the transport recovers from.
        let _ = s.send_to(&tx.bytes, &to.into());
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
