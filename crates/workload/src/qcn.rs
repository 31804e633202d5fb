//! QCN reaction points in the lab: NetBump's "second bump upstream" (seed
//! 003 §4.3, §6.3.3) on each listed host's link into the switch.
//!
//! - Shaping: this kernel has no fq (no EDT pacing) and no netem, so the
//!   limiter is an htb class on the host's link (`tc ... htb rate R ceil
//!   R`): it queues and sends at R, and a sender whose packets wait there
//!   blocks on its socket, so the host really sends slower (shaping, not
//!   policing: nothing is dropped to enforce R).
//! - Feedback: the switch's CNMs (EtherType 0x22E9) arrive on that link; an
//!   AF_PACKET socket in the host's namespace reads them.
//! - Byte counter: the frames the link sent, read from the namespace's
//!   `/proc/net/dev` (opened once inside it).
//! - The rate machine is `wirelab_qcn::rp` (no I/O); every change it makes
//!   is logged, and the class's rate is changed through one long-lived
//!   `tc -batch -` process per host, so a change costs a pipe write, not a
//!   fork.
//!
//! Every loop is bounded by the run's stop (its deadline and Ctrl-C) and by
//! `finish`, which also removes nothing: the lab's namespaces take the htb
//! with them.

use std::io::{Read, Seek, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use wirelab_plan::{HostPlan, Plan, RpPlan};
use wirelab_qcn::cnm::Cnm;
use wirelab_qcn::rp::{Change, ReactionPoint};

use crate::{now_ns, Error, Stop};

/// What one reaction point did during the run.
#[derive(Debug, Clone, Serialize)]
pub struct RpReport {
    pub host: String,
    /// CNMs received, and frames on 0x22E9 that did not parse.
    pub cnms: u64,
    pub bad_cnms: u64,
    /// Every change of the rate machine, oldest first.
    #[serde(skip)]
    pub changes: Vec<Change>,
    pub rate_changes: u64,
    /// The limiter's rate at the end, and the lowest it went.
    pub final_rate_bps: u64,
    pub min_rate_bps: u64,
    /// Frames the link sent while the reaction point watched it.
    pub frames: u64,
    /// What the `tc -batch` process said on stderr, if anything.
    pub tc_errors: String,
}

pub struct ReactionPoints {
    done: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<RpReport, Error>>>,
}

fn ioe(host: &str, what: &str) -> impl FnOnce(std::io::Error) -> Error {
    let what = format!("reaction point on {host}: {what}");
    move |source| Error::Io {
        conn: 0,
        what,
        source,
    }
}

/// One frame per round: htb's default (rate / r2q) is far above a frame at
/// these rates, which tc warns about and which lets a class burst.
const QUANTUM: &str = "1514";

fn tc_rate(bps: u64) -> String {
    format!("{bps}bit")
}

/// Puts the htb limiter on each reaction point's link (at its line rate)
/// and starts the reaction points.
pub fn start(plan: &Plan, stop: &Stop) -> Result<ReactionPoints, Error> {
    // Built first, so that a failure half-way stops (on drop) the
    // reaction points already running.
    let mut rps = ReactionPoints {
        done: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
    };
    for rp in &plan.reaction_points {
        let h = plan.hosts[rp.host].clone();
        let dev = h.ifname.clone();
        let line = tc_rate(rp.params.line_rate);
        wirelab_netns::run(
            "tc",
            &[
                "-n", &h.ns, "qdisc", "replace", "dev", &dev, "root", "handle", "1:", "htb",
                "default", "1",
            ],
        )
        .map_err(wirelab_netns::Error::from)?;
        wirelab_netns::run(
            "tc",
            &[
                "-n", &h.ns, "class", "add", "dev", &dev, "parent", "1:", "classid", "1:1", "htb",
                "rate", &line, "ceil", &line, "quantum", QUANTUM,
            ],
        )
        .map_err(wirelab_netns::Error::from)?;
        // The CNM socket and the counters file are opened inside the host's
        // namespace and keep to it whichever thread reads them.
        let (sock, netdev) = wirelab_netns::in_netns(&h.ns, || -> Result<_, Error> {
            let proto = socket2::Protocol::from(i32::from(wirelab_qcn::cnm::ETHERTYPE.to_be()));
            let s = socket2::Socket::new(socket2::Domain::PACKET, socket2::Type::RAW, Some(proto))
                .map_err(ioe(&h.name, "AF_PACKET socket"))?;
            s.set_read_timeout(Some(Duration::from_millis(1)))
                .map_err(ioe(&h.name, "SO_RCVTIMEO"))?;
            let f = std::fs::File::open("/proc/thread-self/net/dev")
                .map_err(ioe(&h.name, "opening /proc/net/dev"))?;
            Ok((s, f))
        })??;
        let tc = Command::new("tc")
            .args(["-n", &h.ns, "-force", "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(ioe(&h.name, "starting tc -batch"))?;
        let rp = rp.clone();
        let (done, stop) = (rps.done.clone(), stop.clone());
        rps.threads.push(std::thread::spawn(move || {
            react(&h, &rp, sock, netdev, tc, &done, &stop)
        }));
    }
    Ok(rps)
}

impl ReactionPoints {
    /// Stops every reaction point; their reports.
    pub fn finish(mut self) -> Result<Vec<RpReport>, Error> {
        self.done.store(true, Ordering::SeqCst);
        std::mem::take(&mut self.threads)
            .into_iter()
            .map(|t| t.join().expect("reaction point thread"))
            .collect()
    }
}

impl Drop for ReactionPoints {
    /// A run that fails stops its reaction points too.
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// Frames sent by `dev`, from a `/proc/net/dev` table.
fn tx_frames(table: &str, dev: &str) -> Option<u64> {
    table.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        // rx: bytes packets errs drop fifo frame compressed multicast, then tx: bytes packets.
        rest.split_whitespace().nth(9)?.parse().ok()
    })
}

fn react(
    h: &HostPlan,
    rp: &RpPlan,
    sock: socket2::Socket,
    mut netdev: std::fs::File,
    mut tc: Child,
    done: &AtomicBool,
    stop: &Stop,
) -> Result<RpReport, Error> {
    let mut machine = ReactionPoint::new(rp.params);
    let mut report = RpReport {
        host: h.name.clone(),
        cnms: 0,
        bad_cnms: 0,
        changes: Vec::new(),
        rate_changes: 0,
        final_rate_bps: rp.params.line_rate,
        min_rate_bps: rp.params.line_rate,
        frames: 0,
        tc_errors: String::new(),
    };
    let mut read_frames = || -> Result<u64, Error> {
        let mut t = String::new();
        netdev
            .rewind()
            .map_err(ioe(&h.name, "rewinding /proc/net/dev"))?;
        netdev
            .read_to_string(&mut t)
            .map_err(ioe(&h.name, "reading /proc/net/dev"))?;
        tx_frames(&t, &h.ifname).ok_or_else(|| Error::Io {
            conn: 0,
            what: format!(
                "reaction point on {}: no {} in /proc/net/dev",
                h.name, h.ifname
            ),
            source: std::io::ErrorKind::NotFound.into(),
        })
    };
    let mut last_frames = read_frames()?;
    let mut applied = rp.params.line_rate;
    let mut stdin = tc.stdin.take().expect("piped");
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    while !done.load(Ordering::SeqCst)
        && !stop.abort.load(Ordering::Relaxed)
        && std::time::Instant::now() < stop.deadline
    {
        let mut changes = Vec::new();
        if let Ok(n) = sock.recv(&mut buf) {
            // SAFETY: recv initialised the first n bytes of buf.
            let frame = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, n) };
            match Cnm::parse(frame) {
                Ok(c) if c.quantised_fb > 0 => {
                    report.cnms += 1;
                    changes.push(machine.on_cnm(now_ns(), c.quantised_fb));
                }
                _ => report.bad_cnms += 1,
            }
        }
        let f = read_frames()?;
        if f > last_frames {
            report.frames += f - last_frames;
            changes.extend(machine.on_frames(now_ns(), f - last_frames));
            last_frames = f;
        }
        if changes.is_empty() {
            continue;
        }
        report.rate_changes += changes.len() as u64;
        report.changes.extend(changes);
        let r = machine.rate_bps();
        report.min_rate_bps = report.min_rate_bps.min(r);
        if r != applied {
            let rate = tc_rate(r);
            writeln!(
                stdin,
                "class change dev {} parent 1: classid 1:1 htb rate {rate} ceil {rate} quantum {QUANTUM}",
                h.ifname
            )
            .map_err(ioe(&h.name, "writing to tc -batch"))?;
            stdin
                .flush()
                .map_err(ioe(&h.name, "writing to tc -batch"))?;
            applied = r;
        }
    }
    // CNMs delivered before the run ended and not yet read (the loop was
    // reading the counters or writing to tc when they came): the socket
    // holds them, and they count as received. Not acted on: the senders
    // have stopped. A make test run's reaction point read 34 of the 35
    // the switch sent. Bounded: the read times out within 1 ms once the
    // socket is empty, and nothing sends any more.
    for _ in 0..100_000 {
        let Ok(n) = sock.recv(&mut buf) else { break };
        // SAFETY: recv initialised the first n bytes of buf.
        let frame = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, n) };
        match Cnm::parse(frame) {
            Ok(c) if c.quantised_fb > 0 => report.cnms += 1,
            _ => report.bad_cnms += 1,
        }
    }
    report.final_rate_bps = machine.rate_bps();
    drop(stdin);
    let out = tc
        .wait_with_output()
        .map_err(ioe(&h.name, "waiting for tc -batch"))?;
    report.tc_errors = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_frames_reads_the_packets_column_of_the_transmit_half() {
        let t = "Inter-|   Receive                                                |  Transmit\n \
                 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                 lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  \
                 wl-h1: 1234567    890    0    0    0     0          0         0  9876543    4321    0    0    0     0       0          0\n";
        assert_eq!(tx_frames(t, "wl-h1"), Some(4321));
        assert_eq!(tx_frames(t, "lo"), Some(0));
        assert_eq!(tx_frames(t, "eth9"), None);
    }
}
