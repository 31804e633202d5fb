//! DCTCP for the lab's end hosts (`bpf/dctcp.bpf.c`): a BPF struct_ops
//! congestion control registered while a [`Dctcp`] lives. Congestion
//! controls are a kernel-wide list, so once registered every namespace's
//! sockets can select it by name (`TCP_CONGESTION`); dropping the guard
//! unregisters it.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};

use crate::Error;

mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/dctcp.skel.rs"));
}
use skel::{DctcpSkel, DctcpSkelBuilder};

/// The name sockets select it by.
pub const NAME: &str = "wl_dctcp";

/// Whether a congestion control named `wl_dctcp` is registered now (by
/// this process or another run).
pub fn registered() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .is_ok_and(|a| a.split_whitespace().any(|c| c == NAME))
}

/// The registration; the congestion control goes away with it.
pub struct Dctcp {
    _link: libbpf_rs::Link,
    _skel: DctcpSkel<'static>,
}

impl Dctcp {
    /// Loads and registers `wl_dctcp`; the verifier log is in the error.
    pub fn register() -> Result<Dctcp, Error> {
        // As with the switch: the skeleton borrows its storage for its whole
        // life, and a run registers this at most once.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let (res, log) = crate::with_libbpf_log(|| {
            DctcpSkelBuilder::default()
                .open(storage)
                .and_then(|o| o.load())
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
}
