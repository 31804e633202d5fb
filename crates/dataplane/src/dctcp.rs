//! DCTCP for the lab's end hosts (`bpf/dctcp.bpf.c`): a BPF struct_ops
//! congestion control registered while a [`Dctcp`] lives. Congestion
//! controls are a kernel-wide list, so once registered every namespace's
//! sockets can select it by name (`TCP_CONGESTION`); dropping the last
//! guard unregisters it.
//!
//! Each process registers its own, named `wl_dctcp_<pid>`
//! (`wirelab_spec::topology::dctcp_kernel_name`), and its runs share that
//! one registration ([`Dctcp::shared`]): a campaign's parallel labs are
//! threads of one process, and two processes must not depend on each
//! other's. The link goes with the process, so a killed one leaves
//! nothing registered.

use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex, Weak};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use wirelab_spec::CongestionControl;

use crate::Error;

mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/dctcp.skel.rs"));
}
use skel::{DctcpSkel, DctcpSkelBuilder};

/// The name this process's sockets select it by
/// (`wirelab_spec::topology::dctcp_kernel_name`).
pub fn name() -> &'static str {
    CongestionControl::Dctcp.kernel_name()
}

/// The wirelab DCTCPs registered now, any process's.
pub fn registered_names() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .split_whitespace()
        .filter(|c| CongestionControl::from_kernel_name(c) == Some(CongestionControl::Dctcp))
        .map(str::to_string)
        .collect()
}

/// Whether this process's DCTCP is registered now.
pub fn registered() -> bool {
    registered_names().iter().any(|n| n == name())
}

/// The registration; the congestion control goes away with it.
pub struct Dctcp {
    _link: libbpf_rs::Link,
    _skel: DctcpSkel<'static>,
}

// SAFETY: once registered, nothing is called on the skeleton or the link
// again; they are only held, and dropped (closing their fds, freeing the
// object), which libbpf allows from any thread.
unsafe impl Send for Dctcp {}
unsafe impl Sync for Dctcp {}

/// The process's registration while some run holds it.
static SHARED: Mutex<Weak<Dctcp>> = Mutex::new(Weak::new());

impl Dctcp {
    /// Loads and registers this process's DCTCP under [`name`]; the
    /// verifier log is in the error.
    pub fn register() -> Result<Dctcp, Error> {
        // As with the switch: the skeleton borrows its storage for its whole
        // life, and a process registers this once per use.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let (res, log) = crate::with_libbpf_log(|| {
            DctcpSkelBuilder::default()
                .open(storage)
                .and_then(|mut o| {
                    let ops = o.struct_ops.wl_dctcp_mut();
                    ops.name = [0; 16];
                    for (d, s) in ops.name.iter_mut().take(15).zip(name().bytes()) {
                        *d = s as i8;
                    }
                    o.load()
                })
                .and_then(|mut s| {
                    let link = s.maps.wl_dctcp.attach_struct_ops()?;
                    Ok((s, link))
                })
        });
        let (skel, link) = res.map_err(|source| Error::Load { source, log })?;
        Ok(Dctcp {
            _link: link,
            _skel: skel,
        })
    }

    /// This process's registration, made by the first caller and shared
    /// until the last holder drops it (parallel runs of one process).
    pub fn shared() -> Result<Arc<Dctcp>, Error> {
        let mut held = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = held.upgrade() {
            return Ok(d);
        }
        let d = Arc::new(Dctcp::register()?);
        *held = Arc::downgrade(&d);
        Ok(d)
    }
}
