//! DETER's recording of hosts (issue 21): one recorder object per host
//! namespace on every interface there but `lo`, its reports assembled into
//! one record file per connection (wirelab_deter), written when the
//! connection has been idle for a while or the recording stops.
//!
//! It records any traffic, not only wirelab's workload: the namespaces may
//! be a lab's or a user's own (`wirelab record --netns`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wirelab_dataplane::recorder::{RecEvent, RecKey, RecState, Recorder};
use wirelab_deter::assemble::{Assembler, Ev, Final};
use wirelab_deter::record::{self, Call, CallKind, Event};

use crate::{During, Error};

/// Each host folder's file of the TCP settings that differ from the
/// kernel's defaults (`tcp_settings_changed`: sysctl name to value) and
/// its routes' options (`route_options`, `wirelab_netns::route_options`).
pub const SETTINGS: &str = "settings.json";

/// How hosts are recorded.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The folder for the records: one subfolder per host.
    pub out: PathBuf,
    /// Algorithm 1's bound on an inferred send time (ns).
    pub th_ns: u64,
    /// A connection with no packet for this long is written and forgotten
    /// (ns). A later packet of the same four-tuple starts a new record.
    pub idle_ns: u64,
}

struct Host {
    ns: String,
    rec: Recorder,
    asm: Assembler,
    /// How many records of each four-tuple were written (port reuse).
    written: BTreeMap<RecKey, u32>,
}

/// Hosts being recorded. Dropping it detaches everything (the links are
/// file descriptors); `stop` also writes what is still open.
pub struct HostRecorder {
    hosts: Vec<Host>,
    opts: RecordOptions,
    /// Records written so far, and bytes.
    pub files: usize,
    pub bytes: u64,
}

/// The interfaces of the calling thread's namespace, but `lo`.
fn interfaces() -> Result<Vec<(String, i32)>, nix::Error> {
    Ok(nix::net::if_::if_nameindex()?
        .iter()
        .filter(|i| i.name().to_bytes() != b"lo")
        .map(|i| (i.name().to_string_lossy().into_owned(), i.index() as i32))
        .collect())
}

impl HostRecorder {
    /// Starts recording in each namespace of `namespaces` (by name, as in
    /// /run/netns).
    pub fn start(namespaces: &[String], opts: RecordOptions) -> Result<HostRecorder, Error> {
        let mut hosts: Vec<Host> = Vec::new();
        let mut inodes = Vec::new();
        for (i, ns) in namespaces.iter().enumerate() {
            let inode = wirelab_netns::netns_inode(ns).during(format!("finding namespace {ns}"))?;
            inodes.push(inode);
            let mut rec =
                Recorder::load(opts.th_ns, false, i as u32, true).during("loading the recorder")?;
            let devs = wirelab_netns::in_netns(ns, || -> Result<usize, Error> {
                let devs = interfaces().during(format!("listing the interfaces of {ns}"))?;
                for (name, ifindex) in &devs {
                    rec.attach(*ifindex)
                        .during(format!("recording on {name} in {ns}"))?;
                }
                Ok(devs.len())
            })
            .during(format!("entering namespace {ns}"))??;
            if devs == 0 {
                return Err(Error::BadInput(format!(
                    "namespace {ns} has no interface to record on (only lo)"
                )));
            }
            let dir = opts.out.join(ns);
            std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
            // DETER Table 1's TCP parameters: what differs from the
            // kernel's defaults, which a replay sets again.
            let changed = wirelab_netns::tcp_settings_changed(ns)
                .during(format!("reading the TCP settings of {ns}"))?;
            let routes =
                wirelab_netns::route_options(ns).during(format!("reading the routes of {ns}"))?;
            let json = serde_json::json!({
                "namespace": ns,
                "tcp_settings_changed": changed,
                "route_options": routes,
            });
            write_atomic(
                &dir,
                SETTINGS,
                format!("{}\n", serde_json::to_string_pretty(&json).expect("a map")).as_bytes(),
            )?;
            hosts.push(Host {
                ns: ns.clone(),
                rec,
                asm: Assembler::new(ns),
                written: BTreeMap::new(),
            });
        }
        // The first host's probes record the socket calls and TCP events
        // of all of them (each call runs one program, however many hosts).
        if let Some(first) = hosts.first_mut() {
            for (i, &inode) in inodes.iter().enumerate() {
                first
                    .rec
                    .keep_netns(inode, i as u32)
                    .during(format!("recording the sockets of {}", namespaces[i]))?;
            }
            first
                .rec
                .attach_probes()
                .during("recording the socket calls and TCP events")?;
        }
        Ok(HostRecorder {
            hosts,
            opts,
            files: 0,
            bytes: 0,
        })
    }

    /// Reads what the recorders reported and writes the records of
    /// connections idle since `idle_ns` before `now_ns` (CLOCK_MONOTONIC).
    pub fn poll(&mut self, now_ns: u64) -> Result<(), Error> {
        self.drain()?;
        let idle = self.opts.idle_ns;
        self.write_where(|s| now_ns.saturating_sub(s.last_ns) >= idle, Some(now_ns))
    }

    /// Writes every record and stops (the links go with `self`).
    pub fn stop(mut self) -> Result<(usize, u64, u64), Error> {
        self.drain()?;
        self.write_where(|_| true, None)?;
        let lost = self
            .hosts
            .iter()
            .map(|h| h.rec.lost() + h.rec.full() + h.rec.missed())
            .sum();
        Ok((self.files, self.bytes, lost))
    }

    /// The recorders' programs, over all hosts: (name, runs, kernel ns),
    /// counted only while the kernel's BPF run-time statistics are on.
    pub fn kernel_time(&self) -> Vec<(&'static str, u64, u64)> {
        let mut all: Vec<(&'static str, u64, u64)> = Vec::new();
        for (n, r, t) in self.hosts.iter().flat_map(|h| h.rec.kernel_time()) {
            match all.iter_mut().find(|p| p.0 == n) {
                Some(p) => (p.1, p.2) = (p.1 + r, p.2 + t),
                None => all.push((n, r, t)),
            }
        }
        all
    }

    /// Connections followed now, over all hosts.
    pub fn open(&self) -> usize {
        self.hosts.iter().map(|h| h.rec.conns().len()).sum()
    }

    fn drain(&mut self) -> Result<(), Error> {
        // Read first, then assembled: the first host's ring holds every
        // host's socket calls and TCP events.
        let mut got = Vec::new();
        for h in &self.hosts {
            h.rec
                .drain(|host, k, seq, t, e| got.push((host, k, seq, t, e)))
                .during(format!("reading the recorder of {}", h.ns))?;
        }
        for (host, k, seq, t, e) in got {
            let Some(h) = self.hosts.get_mut(host as usize) else {
                continue;
            };
            let ev = match e {
                RecEvent::Start { id, segs } => Ev::Start { id, segs },
                RecEvent::Arrive { run, id, segs } => Ev::Arrive { run, id, segs },
                RecEvent::Ce { run, marked } => Ev::Ce { run, marked },
                RecEvent::Sample {
                    index,
                    time_ns,
                    lo,
                    hi,
                } => Ev::Sample {
                    index,
                    time_ns,
                    lo,
                    hi,
                },
                RecEvent::Kept { bytes, reads } => Ev::Call {
                    t,
                    call: Call {
                        kind: CallKind::Drain,
                        bytes,
                        flags: reads,
                    },
                },
                RecEvent::Call { recv, bytes, flags } => Ev::Call {
                    t,
                    call: Call {
                        kind: if recv { CallKind::Recv } else { CallKind::Send },
                        bytes,
                        flags,
                    },
                },
                RecEvent::Retransmit {
                    seq,
                    segments,
                    reordering,
                    sacked,
                    total,
                } => Ev::Kernel {
                    t,
                    event: Event::Retransmit {
                        seq,
                        segments,
                        reordering,
                        sacked,
                    },
                    retrans_total: Some(total),
                },
                RecEvent::CongState(c) => Ev::Kernel {
                    t,
                    event: Event::CongState(c),
                    retrans_total: None,
                },
                RecEvent::State {
                    new, total_retrans, ..
                } => Ev::Kernel {
                    t,
                    event: Event::State(new),
                    retrans_total: Some(total_retrans),
                },
                RecEvent::CongControl(name) => Ev::CongControl(name),
                RecEvent::SockOpts {
                    rcvbuf,
                    sndbuf,
                    userlocks,
                    nonagle,
                } => Ev::SockOpts {
                    rcvbuf,
                    sndbuf,
                    userlocks,
                    nonagle,
                },
            };
            h.asm.event(k.local.into(), k.remote.into(), seq, ev);
        }
        Ok(())
    }

    /// Writes the records of the connections whose per-packet state is
    /// `done`, then those with no such state whose socket closed an idle
    /// period before `now_ns` (or all that remain, with `now_ns` None).
    fn write_where(
        &mut self,
        done: impl Fn(&RecState) -> bool,
        now_ns: Option<u64>,
    ) -> Result<(), Error> {
        // Forgotten first, then drained: every event reported up to then
        // is in the ring. (A packet in between starts the next record of
        // the four-tuple; its events, if any, land in this one.)
        // Each host's connections are read once (a read is two system
        // calls a connection, and this runs every 100 ms); those still
        // followed are the ones not forgotten here.
        let mut ended = Vec::new();
        let mut followed = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let mut kept = std::collections::BTreeSet::new();
            for (k, s) in h.rec.conns() {
                if done(&s) {
                    h.rec.forget(&k);
                    ended.push((i, k, s));
                } else {
                    kept.insert(k);
                }
            }
            followed.push(kept);
        }
        if !ended.is_empty() {
            self.drain()?;
        }
        let idle = self.opts.idle_ns;
        for (i, h) in self.hosts.iter().enumerate() {
            let followed = &followed[i];
            for (local, remote) in h
                .asm
                .closed(now_ns.unwrap_or(0), if now_ns.is_some() { idle } else { 0 })
            {
                let (std::net::SocketAddr::V4(l), std::net::SocketAddr::V4(r)) = (local, remote)
                else {
                    continue;
                };
                let k = RecKey {
                    local: l,
                    remote: r,
                };
                if !followed.contains(&k) && !ended.iter().any(|e| e.0 == i && e.1 == k) {
                    ended.push((i, k, RecState::default()));
                }
            }
        }
        for (i, k, s) in ended {
            // Reads that kept up since the socket's last send or read
            // that did not: the probes' recorder (the first) holds them.
            let kept = self.hosts[0].rec.take_kept(i as u32, &k);
            let h = &mut self.hosts[i];
            let r = h.asm.finish(
                k.local.into(),
                k.remote.into(),
                Final {
                    rx_run: s.rx_run,
                    ce_run: s.ce_run,
                    ce_marked: s.ce_marked,
                    tx_count: s.tx_count,
                    s_index: s.s_index,
                    s_time: s.s_time,
                    lo: s.lo,
                    hi: s.hi,
                    first_ns: s.first_ns,
                    last_ns: s.last_ns,
                    kept,
                },
            );
            let n = h.written.entry(k).or_default();
            *n += 1;
            let name = file_name(&k, *n);
            let bytes = write_atomic(&self.opts.out.join(&h.ns), &name, &record::encode(&r))?;
            self.files += 1;
            self.bytes += bytes;
        }
        Ok(())
    }
}

/// `<local>-<remote>[.n].deter`: the connection seen from its host, as
/// DETER names its files.
fn file_name(k: &RecKey, n: u32) -> String {
    let again = if n > 1 {
        format!(".{n}")
    } else {
        String::new()
    };
    format!("{}-{}{again}.{}", k.local, k.remote, record::EXTENSION)
}

/// Writes `bytes` to `dir/name` through a temporary name and a rename, so
/// a reader (or a kill) never sees half a file.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<u64, Error> {
    use std::io::Write;
    let mut t =
        tempfile::NamedTempFile::new_in(dir).during(format!("writing in {}", dir.display()))?;
    t.write_all(bytes)
        .and_then(|_| t.as_file().sync_data())
        .during(format!("writing {name}"))?;
    t.persist(dir.join(name))
        .map_err(|e| e.error)
        .during(format!("writing {name}"))?;
    Ok(bytes.len() as u64)
}

/// What a run's recording wrote (`summary.json` `record`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecordSummary {
    /// The folder, relative to the results folder.
    pub folder: String,
    pub records: usize,
    pub bytes: u64,
    /// Events or connections the recorders had no room for, and program
    /// runs the kernel skipped (`Recorder::missed`): records incomplete
    /// or missing.
    pub incomplete: u64,
}

/// `record:` as a capability of the run engine: recorders on every host
/// from just before the workload's first packet, records of idle connections written
/// while the workload runs, the rest once it is over.
pub struct Recording {
    opts: wirelab_spec::record::Record,
    rec: Option<HostRecorder>,
    summary: Option<RecordSummary>,
}

impl Recording {
    pub fn new(opts: &wirelab_spec::record::Record) -> Recording {
        Recording {
            opts: opts.clone(),
            rec: None,
            summary: None,
        }
    }
}

/// CLOCK_MONOTONIC, the recorders' clock (bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

impl crate::capability::Capability for Recording {
    fn name(&self) -> &'static str {
        "record"
    }

    fn start(
        &mut self,
        cx: &crate::capability::Cx,
        _stop: &wirelab_workload::Stop,
    ) -> Result<(), Error> {
        // A benchmark's run keeps no files, so it records nothing.
        let Some(results) = cx.results else {
            return Ok(());
        };
        // The kernel's defaults, from the switch's namespace: wirelab sets
        // no TCP sysctl there.
        wirelab_netns::tcp_defaults_from(&cx.plan.switch_ns)
            .during("reading the kernel's TCP defaults in the switch's namespace")?;
        let hosts: Vec<String> = cx.plan.hosts.iter().map(|h| h.ns.clone()).collect();
        let opts = RecordOptions {
            out: results.join("record"),
            th_ns: self.opts.th.0,
            idle_ns: self.opts.idle.0,
        };
        self.rec = Some(HostRecorder::start(&hosts, opts)?);
        Ok(())
    }

    fn acts_during(&self) -> bool {
        true
    }

    fn during(
        &mut self,
        _cx: &crate::capability::Cx,
        done: &std::sync::atomic::AtomicBool,
    ) -> Result<(), Error> {
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if let Some(r) = &mut self.rec {
                r.poll(monotonic_ns())?;
            }
        }
        Ok(())
    }

    fn collect(
        &mut self,
        _cx: &crate::capability::Cx,
        _facts: &mut wirelab_analyze::RunFacts,
        _log: &mut String,
    ) -> Result<(), Error> {
        if let Some(r) = self.rec.take() {
            let (records, bytes, incomplete) = r.stop()?;
            self.summary = Some(RecordSummary {
                folder: "record".into(),
                records,
                bytes,
                incomplete,
            });
        }
        Ok(())
    }

    fn summarize(
        &mut self,
        _cx: &crate::capability::Cx,
        _meta: &[wirelab_workload::ConnMeta],
        _analysis: &wirelab_analyze::report::Report,
        summary: &mut crate::summary::Summary,
    ) -> Result<(), Error> {
        summary.record = self.summary.take();
        Ok(())
    }
}
