//! Norma's stateful responder (bpf/efsm.bpf.c; issue 20): one tester
//! port's EFSM, a tc program on the port's ingress answering the DUT's
//! TCP. `wirelab_load::efsm` is the same executor without I/O; this
//! module carries its table, payload and settings to the kernel and
//! reads the counters back.

use libbpf_rs::{MapCore, MapFlags};
use wirelab_load::efsm::{Reply, Side, COUNTS, ROW_COUNTS};

use crate::object;
use crate::{bytes_of, map_err, Error};

mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/efsm.skel.rs"));
}
use skel::types;

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/efsm.bpf.o"));
const PROG: &str = "wl_efsm";

/// A chunk's largest payload (`WL_EFSM_SEG`).
pub const SEG: usize = types::wl_efsm_limits::WL_EFSM_SEG.0 as usize;

object::maps! {
    struct Maps { efsm_conf, efsm_chunks, efsm_flows, efsm_counts, fake_clock }
}

/// One side's responder: its object, configured, and attached or not.
pub struct Responder {
    maps: Maps,
    rows: usize,
    obj: libbpf_rs::Object,
}

/// RFC 1071's sum of `b` in the machine's byte order, folded to 16 bits,
/// as bpf_csum_diff (csum_partial) adds memory: the program adds it to
/// the headers' sum it computes the same way.
fn sum_native(b: &[u8]) -> u32 {
    let mut s: u64 = 0;
    for c in b.chunks(2) {
        s += u64::from(u16::from_ne_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u32
}

impl Responder {
    /// Loads the program; `test_clock` lets fixtures set the time.
    pub fn load(test_clock: bool) -> Result<Responder, Error> {
        let obj = object::load_with_rodata("efsm", OBJECT, |ro: &mut types::rodata| {
            ro.test_clock = test_clock as u8;
        })?;
        object::check_programs(&obj, &[PROG])?;
        Ok(Responder {
            maps: Maps::find(&obj)?,
            rows: 0,
            obj,
        })
    }

    /// Sets the side up: its table, payload and settings; replies leave
    /// by `ifindex` (0: fixtures, where the program's verdict is read and
    /// clones go nowhere).
    pub fn configure(&mut self, side: &Side, ifindex: u32) -> Result<(), Error> {
        let t = &side.table;
        if t.rows.len() > ROW_COUNTS {
            return Err(Error::Config(format!(
                "{} EFSM rows, the responder has {ROW_COUNTS}",
                t.rows.len()
            )));
        }
        let mut c = types::wl_efsm_conf {
            local_ip: side.local_ip.to_be(),
            ifindex,
            mss: side.mss,
            segments: side.segments_per_ack,
            fin_after_data: side.fin_after_data as u8,
            port_base: side.port_base,
            connections: side.connections,
            port_range: side.port_range,
            rows: t.rows.len() as u32,
            requests: side.requests,
            draining: side.draining as u32,
            ..Default::default()
        };
        for (raw, r) in c.row.iter_mut().zip(&t.rows) {
            raw.from = r.from;
            raw.flags_mask = r.flags_mask;
            raw.flags_value = r.flags_value;
            raw.payload = r.payload;
            raw.prefix_len = r.prefix_len;
            raw.all_acked = r.all_acked;
            raw.message_complete = r.message_complete;
            raw.requests_left = r.requests_left;
            raw.next = r.next;
            raw.forget = r.forget as u8;
            raw.prefix = r.prefix;
            raw.reply = match r.reply {
                Reply::None => types::wl_efsm_reply::WL_REPLY_NONE,
                Reply::Rst => types::wl_efsm_reply::WL_REPLY_RST,
                Reply::SynAck => types::wl_efsm_reply::WL_REPLY_SYNACK,
                Reply::Ack => types::wl_efsm_reply::WL_REPLY_ACK,
                Reply::Fin => types::wl_efsm_reply::WL_REPLY_FIN,
                Reply::Data => types::wl_efsm_reply::WL_REPLY_DATA,
                Reply::NextMessage => types::wl_efsm_reply::WL_REPLY_NEXT,
                Reply::Reopen => types::wl_efsm_reply::WL_REPLY_REOPEN,
            }
            .0 as u8;
        }
        if let Some(p) = &side.payload {
            if usize::from(p.mss) > SEG {
                return Err(Error::Config(format!(
                    "an MSS of {}, the responder's chunks hold {SEG}",
                    p.mss
                )));
            }
            c.payload_len = p.len;
            c.payload_chunks = p.chunks();
            for (i, ch) in p.chunks.iter().enumerate() {
                let mut raw = types::wl_efsm_chunk {
                    len: ch.len() as u32,
                    sum: sum_native(ch),
                    ..Default::default()
                };
                raw.bytes[..ch.len()].copy_from_slice(ch);
                self.maps
                    .efsm_chunks
                    .update(&(i as u32).to_ne_bytes(), bytes_of(&raw), MapFlags::ANY)
                    .map_err(map_err("writing the payload's chunks"))?;
            }
        }
        self.rows = t.rows.len();
        self.maps
            .efsm_conf
            .update(&0u32.to_ne_bytes(), bytes_of(&c), MapFlags::ANY)
            .map_err(map_err("configuring the responder"))
    }

    /// Attaches the program to `ifindex`'s tc ingress. The filter goes
    /// with the device (the lab's namespace). The caller must be in the
    /// device's namespace.
    pub fn attach(&self, ifindex: i32) -> Result<(), Error> {
        object::attach_tc_ingress(&object::program(&self.obj, PROG), ifindex)
    }

    /// Per row (in the table's order), then `wirelab_load::efsm::Count`s,
    /// summed over CPUs: the same layout as `efsm::Responder::counts`.
    pub fn counts(&self) -> Result<Vec<u64>, Error> {
        let mut out = Vec::with_capacity(self.rows + COUNTS);
        let keys = (0..self.rows).chain(ROW_COUNTS..ROW_COUNTS + COUNTS);
        for k in keys {
            out.push(object::per_cpu_sum(
                &self.maps.efsm_counts,
                k as u32,
                "reading the responder's counters",
            )?);
        }
        Ok(out)
    }

    /// The program's CPU time and runs so far, as the kernel counts them
    /// while `kernel.bpf_stats_enabled` is 1 (None: it is not).
    pub fn run_time(&self) -> Option<(u64, u64)> {
        let info = object::prog_info(&object::program(&self.obj, PROG))?;
        let on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
            .is_ok_and(|v| v.trim() == "1");
        (on || info.run_cnt > 0).then_some((info.run_time_ns, info.run_cnt))
    }

    /// Flows the side holds now.
    pub fn flows(&self) -> usize {
        self.maps.efsm_flows.keys().count()
    }

    /// Flows the side holds now with data or a FIN not yet acknowledged
    /// (an idle connection kept alive has none).
    pub fn busy_flows(&self) -> usize {
        let map = &self.maps.efsm_flows;
        map.keys()
            .filter_map(|k| map.lookup(&k, MapFlags::ANY).ok().flatten())
            .filter(|v| {
                let mut f = types::wl_efsm_flow::default();
                let n = v.len().min(std::mem::size_of_val(&f));
                // SAFETY: wl_efsm_flow is plain integers; at most its
                // size is copied from the map's value.
                unsafe {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), (&mut f as *mut _) as *mut u8, n)
                };
                f.snd_una != f.snd_nxt
            })
            .count()
    }

    /// Tests: runs the program once on `frame`; its verdict and the frame
    /// as it left (the last reply when there were several).
    pub fn test_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let mut out = vec![0u8; SEG + 256];
        let mut input = libbpf_rs::ProgramInput::default();
        input.data_in = Some(frame);
        input.data_out = Some(&mut out);
        let o = object::program(&self.obj, PROG)
            .test_run(input)
            .map_err(map_err("BPF_PROG_TEST_RUN"))?;
        let (rv, n) = (o.return_value, o.data.map_or(0, |d| d.len()));
        out.truncate(n);
        Ok((rv, out))
    }

    /// Tests: the program's clock reads `ns` (0: the real clock).
    pub fn set_test_clock(&self, ns: u64) -> Result<(), Error> {
        self.maps
            .fake_clock
            .update(&0u32.to_ne_bytes(), &ns.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("setting the test clock"))
    }
}
