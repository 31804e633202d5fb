//! The ground-truth probes (bpf/truth.bpf.c): qdisc tracepoints in an object
//! of their own, sharing the switch's virtual queues and test clock by fd.

use std::os::fd::AsFd;

use libbpf_rs::{MapCore, MapFlags};

use crate::object;
use crate::{bytes_of, map_err, Error};

/// The truth object's generated skeleton, for its BTF types only.
mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/truth.skel.rs"));
}
pub(crate) use skel::types;

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/truth.bpf.o"));
const PROGS: [&str; 2] = ["wl_truth_enqueue", "wl_truth_dequeue"];

object::maps! {
    struct Maps { truth_ring, truth_ports }
}

/// The probes, attached while this lives.
pub(crate) struct Truth {
    links: Vec<libbpf_rs::Link>,
    maps: Maps,
    /// Dropped before `obj`, which owns the mapping.
    bss: object::Section<types::bss>,
    _obj: libbpf_rs::Object,
}

impl Truth {
    /// Loads the probes onto the switch `switch`'s maps and attaches them.
    pub(crate) fn load(switch: &libbpf_rs::Object, test_clock: bool) -> Result<Truth, Error> {
        let (res, log) = crate::with_libbpf_log(|| open_and_load(switch, test_clock));
        let obj = res.map_err(|e| match e {
            Error::Load { source, .. } => Error::Load { source, log },
            e => e,
        })?;
        object::check_programs(&obj, &PROGS)?;
        let mut links = Vec::new();
        for name in PROGS {
            let link = object::program(&obj, name)
                .attach()
                .map_err(map_err("attaching the qdisc tracepoints (ground truth)"))?;
            links.push(link);
        }
        Ok(Truth {
            links,
            maps: Maps::find(&obj)?,
            bss: object::Section::of(&obj, ".bss")?,
            _obj: obj,
        })
    }

    /// Samples the root qdisc of `ifindex` in the namespace with inode
    /// `netns` next to virtual queue `vq`.
    pub(crate) fn watch(&self, netns: u32, ifindex: u32, vq: u32) -> Result<(), Error> {
        let k = types::wl_truth_port { netns, ifindex };
        self.maps
            .truth_ports
            .update(bytes_of(&k), &vq.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("watching the qdisc of ifindex {ifindex}")))
    }

    pub(crate) fn ring_handle(&self) -> Result<libbpf_rs::MapHandle, Error> {
        libbpf_rs::MapHandle::try_from(&self.maps.truth_ring)
            .map_err(map_err("duplicating the truth ring fd"))
    }

    /// Samples the ring had no room for.
    pub(crate) fn lost(&self) -> u64 {
        // SAFETY (the closure): a field address inside the section.
        self.bss
            .read(|b| unsafe { std::ptr::addr_of!((*b).truth_lost) })
    }
}

impl Drop for Truth {
    fn drop(&mut self) {
        self.links.clear(); // detach before the object goes
    }
}

fn open_and_load(switch: &libbpf_rs::Object, test_clock: bool) -> Result<libbpf_rs::Object, Error> {
    let load = |source| Error::Load {
        source,
        log: String::new(),
    };
    let mut open = object::open("truth", OBJECT).map_err(load)?;
    object::edit_section(&mut open, ".rodata", |ro: &mut types::rodata| {
        ro.test_clock = test_clock as u8;
    })?;
    // The switch's own queues and clock, not copies.
    for name in ["vqs", "fake_clock"] {
        let shared = object::map_handle(switch, name)?;
        object::open_map(&mut open, name)?
            .reuse_fd(shared.as_fd())
            .map_err(load)?;
    }
    open.load().map_err(load)
}
