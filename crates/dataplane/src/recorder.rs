//! DETER's recorder (bpf/recorder.bpf.c; issue 21): tc programs on a
//! host's interface that follow each TCP connection's arrivals (IP-ID
//! gaps, CE) and departures (Algorithm 1's sampled send times). An object
//! of its own, outside the switch's path.

use std::net::{Ipv4Addr, SocketAddrV4};

use libbpf_rs::{AsRawLibbpf, MapCore, MapFlags};

use crate::object;
use crate::{bytes_of, from_bytes, map_err, Error};

mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/recorder.skel.rs"));
}
use skel::types;

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/recorder.bpf.o"));
const PROGS: [&str; 2] = ["wl_rec_in", "wl_rec_out"];
/// The socket-call and kernel-event tracepoints (tp_btf).
const PROBES: [&str; 6] = [
    "wl_rec_send",
    "wl_rec_recv",
    "wl_rec_retransmit",
    "wl_rec_cong_state",
    "wl_rec_state",
    "wl_rec_destroy",
];

object::maps! {
    struct Maps { rec_conns, rec_kept, rec_ring, rec_netns, fake_clock }
}

/// A connection as the recording host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecKey {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

impl RecKey {
    fn of(k: &types::wl_rec_key) -> RecKey {
        RecKey {
            local: SocketAddrV4::new(Ipv4Addr::from(k.local.to_ne_bytes()), u16::from_be(k.lport)),
            remote: SocketAddrV4::new(
                Ipv4Addr::from(k.remote.to_ne_bytes()),
                u16::from_be(k.rport),
            ),
        }
    }

    fn raw(&self) -> types::wl_rec_key {
        types::wl_rec_key {
            local: u32::from_ne_bytes(self.local.ip().octets()),
            remote: u32::from_ne_bytes(self.remote.ip().octets()),
            lport: self.local.port().to_be(),
            rport: self.remote.port().to_be(),
        }
    }
}

/// What the programs report (bpf/recorder.bpf.c `wl_rec_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecEvent {
    /// The connection's first arrival.
    Start { id: u16, segs: u16 },
    /// An arrival out of sequence, after `run` in-sequence IDs.
    Arrive { run: u32, id: u16, segs: u16 },
    /// A run of `run` arrivals, CE-marked or not, ended.
    Ce { run: u32, marked: bool },
    /// Algorithm 1 line 6: the sample with its final rec_range [lo, hi] (gaps; hi
    /// = u64::MAX unbounded): `wirelab_deter::sample::recorded` picks the
    /// gap.
    Sample {
        index: u64,
        time_ns: u64,
        lo: u64,
        hi: u64,
    },
    /// A socket call: sent (`recv` false) or received `bytes`, with its flags.
    Call { recv: bool, bytes: u64, flags: u32 },
    /// `reads` reads that kept up (each took all the data that had just
    /// arrived; `wl_rec_recv`), `bytes` in all, from the event's time.
    Kept { bytes: u64, reads: u32 },
    /// tcp:tcp_retransmit_skb: the segment's sequence number, and the
    /// socket's `tcp_reordering` (its duplicate-ACK threshold) and
    /// `sacked_out` (SACKed segments; without SACK, the duplicate ACKs it
    /// counted) as it sent it.
    Retransmit {
        seq: u32,
        /// The segments (MSS) the skb resent: `tcp_skb_pcount`.
        segments: u16,
        reordering: u32,
        sacked: u32,
        /// The socket's `total_retrans` with this one counted.
        total: u32,
    },
    /// tcp:tcp_cong_state_set.
    CongState(u8),
    /// sock:inet_sock_set_state (TCP_CLOSE is 7).
    State {
        old: u8,
        new: u8,
        total_retrans: u32,
    },
    /// The socket's congestion control, its name NUL-padded: on entering
    /// ESTABLISHED and on leaving it.
    CongControl([u8; 16]),
    /// The socket's buffers as the kernel keeps them (twice what
    /// setsockopt asked, socket(7)), which of them the application set
    /// (`sk_userlocks`: SOCK_SNDBUF_LOCK 1, SOCK_RCVBUF_LOCK 2), and
    /// `tcp_sock.nonagle` (TCP_NODELAY 1, TCP_CORK 2): at the same moments.
    SockOpts {
        rcvbuf: u32,
        sndbuf: u32,
        userlocks: u8,
        nonagle: u8,
    },
}

/// A connection's state in the kernel: what the events have not said yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecState {
    /// Events reported so far (numbered 0..events).
    pub events: u32,
    pub rx_started: bool,
    pub rx_run: u32,
    pub ce_run: u32,
    pub ce_marked: bool,
    pub tx_count: u64,
    pub s_index: u64,
    pub s_time: u64,
    pub lo: u64,
    pub hi: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// What the ring's callback has read and `drain` has not yet handed on.
type Got = std::sync::Arc<std::sync::Mutex<Vec<types::wl_rec_event>>>;

pub struct Recorder {
    /// Dropped first: detached before the object goes.
    links: Vec<(i32, libbpf_rs::Link)>,
    /// Built once: building it maps the ring, 150-200 µs, which every
    /// read paid when it was built per read (a run reads each host's
    /// ring twice every 100 ms).
    ring: libbpf_rs::RingBuffer<'static>,
    got: Got,
    maps: Maps,
    bss: object::Section<types::bss>,
    obj: libbpf_rs::Object,
}

impl Recorder {
    /// Loads the programs with Algorithm 1's bound `th_ns`; `test_clock`
    /// lets fixtures set the time (`set_test_clock`). `host` is the index
    /// this recorder's tc events carry; with `by_netns`, its probes keep
    /// only the sockets of the namespaces given to `keep_netns`, as their
    /// hosts', else every socket, as `host`'s.
    pub fn load(
        th_ns: u64,
        test_clock: bool,
        host: u32,
        by_netns: bool,
    ) -> Result<Recorder, Error> {
        let obj = object::load_with_rodata("recorder", OBJECT, |ro: &mut types::rodata| {
            ro.th_ns = th_ns;
            ro.sample_shift = wirelab_deter::sample::grid_shift(th_ns);
            ro.test_clock = test_clock as u8;
            ro.self_host = host;
            ro.netns_filter = by_netns as u8;
        })?;
        object::check_programs(&obj, &PROGS)?;
        object::check_programs(&obj, &PROBES)?;
        let maps = Maps::find(&obj)?;
        let got = Got::default();
        let sink = got.clone();
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&maps.rec_ring, move |d: &[u8]| {
            if let Some(e) = from_bytes::<types::wl_rec_event>(d) {
                sink.lock().expect("not poisoned").push(e);
            }
            0
        })
        .map_err(map_err("reading the recorder's ring"))?;
        let ring = b.build().map_err(map_err("reading the recorder's ring"))?;
        Ok(Recorder {
            links: Vec::new(),
            ring,
            got,
            maps,
            bss: object::Section::of(&obj, ".bss")?,
            obj,
        })
    }

    /// Records on `ifindex` (tcx ingress and egress, after whatever else
    /// is there) until `detach` or until this is dropped: the links are
    /// file descriptors, so a killed process leaves nothing attached. The
    /// caller must be in the device's namespace.
    pub fn attach(&mut self, ifindex: i32) -> Result<(), Error> {
        for name in PROGS {
            let prog = object::program(&self.obj, name);
            let opts = libbpf_rs::libbpf_sys::bpf_tcx_opts {
                sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tcx_opts>() as _,
                ..Default::default()
            };
            // SAFETY: a loaded program of an object self owns, and opts
            // sized as libbpf expects; a non-null result is a link we own.
            let link = unsafe {
                libbpf_rs::libbpf_sys::bpf_program__attach_tcx(
                    prog.as_libbpf_object().as_ptr(),
                    ifindex,
                    &opts,
                )
            };
            let link = std::ptr::NonNull::new(link).ok_or_else(|| Error::Attach {
                ifindex,
                source: libbpf_rs::Error::from(std::io::Error::last_os_error()),
            })?;
            // SAFETY: as above; Link destroys it when dropped.
            self.links
                .push((ifindex, unsafe { libbpf_rs::Link::from_ptr(link) }));
        }
        Ok(())
    }

    /// The probes keep the sockets of namespace `inode` as host `host`'s
    /// (with `by_netns` at `load`).
    pub fn keep_netns(&self, inode: u32, host: u32) -> Result<(), Error> {
        self.maps
            .rec_netns
            .update(&inode.to_ne_bytes(), &host.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("keeping a namespace's sockets"))
    }

    /// Records the socket calls and TCP events of the namespaces given to
    /// `keep_netns` too (tracepoints, kept until this is dropped). One
    /// recorder's probes serve every host: attach them once.
    pub fn attach_probes(&mut self) -> Result<(), Error> {
        for name in PROBES {
            let link = object::program(&self.obj, name)
                .attach()
                .map_err(map_err(format!("attaching the tracepoint program {name}")))?;
            self.links.push((0, link));
        }
        Ok(())
    }

    /// Stops recording on `ifindex`.
    pub fn detach(&mut self, ifindex: i32) {
        self.links.retain(|(i, _)| *i != ifindex);
    }

    /// The devices recorded on.
    pub fn attached(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.links.iter().map(|l| l.0).filter(|&i| i != 0).collect();
        v.dedup();
        v
    }

    /// Tests: runs the arrival (`egress` false) or departure program on
    /// one frame; returns its verdict.
    pub fn test_run(&self, egress: bool, frame: &[u8]) -> Result<u32, Error> {
        let mut input = libbpf_rs::ProgramInput::default();
        input.data_in = Some(frame);
        let o = object::program(&self.obj, PROGS[usize::from(egress)])
            .test_run(input)
            .map_err(map_err("BPF_PROG_TEST_RUN"))?;
        Ok(o.return_value)
    }

    /// Tests: the programs' clock reads `ns` (0: the real clock).
    pub fn set_test_clock(&self, ns: u64) -> Result<(), Error> {
        self.maps
            .fake_clock
            .update(&0u32.to_ne_bytes(), &ns.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("setting the test clock"))
    }

    /// Reads every event waiting in the ring, with its host (`load`,
    /// `keep_netns`), its connection's event number (u32::MAX: not
    /// numbered) and time: the ring's order can differ from the numbers
    /// when two CPUs reported (see `wirelab_deter::assemble`).
    pub fn drain(
        &self,
        mut f: impl FnMut(u32, RecKey, u32, u64, RecEvent),
    ) -> Result<usize, Error> {
        self.ring
            .consume()
            .map_err(map_err("reading the recorder's ring"))?;
        let events = std::mem::take(&mut *self.got.lock().expect("not poisoned"));
        for e in &events {
            let ev = match e.kind {
                1 => RecEvent::Start {
                    id: e.a as u16,
                    segs: e.b as u16,
                },
                2 => RecEvent::Arrive {
                    run: e.a as u32,
                    id: e.b as u16,
                    segs: e.c as u16,
                },
                3 => RecEvent::Ce {
                    run: e.a as u32,
                    marked: e.b != 0,
                },
                4 => RecEvent::Sample {
                    index: e.a,
                    time_ns: e.b,
                    lo: e.c,
                    hi: e.d,
                },
                5 if e.a == 2 => RecEvent::Kept {
                    bytes: e.b,
                    reads: e.c as u32,
                },
                5 => RecEvent::Call {
                    recv: e.a == 1,
                    bytes: e.b,
                    flags: e.c as u32,
                },
                6 => match e.a {
                    1 => RecEvent::Retransmit {
                        seq: e.b as u32,
                        segments: (e.b >> 32) as u16,
                        reordering: e.c as u32,
                        sacked: (e.c >> 32) as u32,
                        total: e.d as u32,
                    },
                    2 => RecEvent::CongState(e.b as u8),
                    3 => RecEvent::State {
                        old: e.b as u8,
                        new: e.c as u8,
                        total_retrans: e.d as u32,
                    },
                    4 => {
                        let mut name = [0u8; 16];
                        name[..8].copy_from_slice(&e.b.to_le_bytes());
                        name[8..].copy_from_slice(&e.c.to_le_bytes());
                        RecEvent::CongControl(name)
                    }
                    5 => RecEvent::SockOpts {
                        rcvbuf: e.b as u32,
                        sndbuf: (e.b >> 32) as u32,
                        userlocks: e.c as u8,
                        nonagle: (e.c >> 8) as u8,
                    },
                    _ => continue,
                },
                _ => continue,
            };
            f(e.host, RecKey::of(&e.key), e.seq, e.ts, ev);
        }
        Ok(events.len())
    }

    /// The connections followed now, with their state.
    pub fn conns(&self) -> Vec<(RecKey, RecState)> {
        self.maps
            .rec_conns
            .keys()
            .filter_map(|k| {
                let raw: types::wl_rec_key = from_bytes(&k)?;
                let key = RecKey::of(&raw);
                Some((key, self.state(&key)?))
            })
            .collect()
    }

    /// One connection's state.
    pub fn state(&self, key: &RecKey) -> Option<RecState> {
        let v = self
            .maps
            .rec_conns
            // BPF_F_LOCK: a copy taken under the connection's lock.
            .lookup(bytes_of(&key.raw()), MapFlags::LOCK)
            .ok()??;
        let c: types::wl_rec_conn = from_bytes(&v)?;
        Some(RecState {
            events: c.ev_seq,
            rx_started: c.rx_started != 0,
            rx_run: c.rx_run,
            ce_run: c.ce_run,
            ce_marked: c.ce_state != 0,
            tx_count: c.tx_count,
            s_index: c.s_index,
            s_time: c.s_time,
            lo: c.lo,
            hi: c.hi,
            first_ns: c.first_ns,
            last_ns: c.last_ns,
        })
    }

    /// Takes host `host`'s connection `key`'s reads that kept up and were
    /// not reported yet (an event reports them at the socket's next send
    /// or read that did not keep up): the first one's time, their bytes
    /// and how many.
    /// Only the recorder whose probes are attached has them.
    pub fn take_kept(&self, host: u32, key: &RecKey) -> Option<(u64, u64, u32)> {
        let k = types::wl_rec_kept_key {
            key: key.raw(),
            host,
        };
        let v = self
            .maps
            .rec_kept
            .lookup(bytes_of(&k), MapFlags::ANY)
            .ok()??;
        let v: types::wl_rec_kept = from_bytes(&v)?;
        let _ = self.maps.rec_kept.delete(bytes_of(&k));
        Some((v.start, v.bytes, v.reads))
    }

    /// Forgets a connection (its record was written).
    pub fn forget(&self, key: &RecKey) {
        let _ = self.maps.rec_conns.delete(bytes_of(&key.raw()));
    }

    /// Runs of each of the recorder's programs and the kernel time spent
    /// in it: (name, runs, ns), counted only while `RunTimeStats` is held.
    pub fn kernel_time(&self) -> Vec<(&'static str, u64, u64)> {
        self.infos()
            .into_iter()
            .map(|(n, p)| (n, p.run_cnt, p.run_time_ns))
            .collect()
    }

    /// Runs of the recorder's programs the kernel skipped: a tracepoint
    /// program is not run again on a CPU where it is already running
    /// (`bpf_prog_info.recursion_misses`), so what it would have reported
    /// is missing from the records.
    pub fn missed(&self) -> u64 {
        self.infos()
            .into_iter()
            .map(|(_, p)| p.recursion_misses)
            .sum()
    }

    /// The kernel's information on each of the recorder's programs.
    fn infos(&self) -> Vec<(&'static str, libbpf_rs::libbpf_sys::bpf_prog_info)> {
        PROGS
            .iter()
            .chain(PROBES.iter())
            .filter_map(|n| Some((*n, object::prog_info(&object::program(&self.obj, n))?)))
            .collect()
    }

    /// Connections not followed because the map was full.
    pub fn full(&self) -> u64 {
        // SAFETY (the closure): a field address inside the section.
        self.bss
            .read(|b| unsafe { std::ptr::addr_of!((*b).rec_full) })
    }

    /// Events the ring had no room for.
    pub fn lost(&self) -> u64 {
        // SAFETY (the closure): a field address inside the section.
        self.bss
            .read(|b| unsafe { std::ptr::addr_of!((*b).rec_lost) })
    }
}
