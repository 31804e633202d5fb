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
//!
//! The kernel of the lab machines sometimes skips a congestion-control
//! callback (`bpf/dctcp.bpf.c` says how and what the programs do about it);
//! [`Dctcp::repairs`] counts the repairs. The tests reproduce the fault
//! with [`SKIP_SSTHRESH_ENV`].

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

/// Fault injection for the tests: `WIRELAB_TEST_DCTCP_SKIP_SSTHRESH=N`
/// makes every N-th ssthresh() of the registration act as a call the
/// kernel skipped (no effect, a garbage threshold). Read at registration.
pub const SKIP_SSTHRESH_ENV: &str = "WIRELAB_TEST_DCTCP_SKIP_SSTHRESH";

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

/// [`SKIP_SSTHRESH_ENV`]'s value; 0 (no fault) when unset or not a number.
fn skip_ssthresh_every() -> u32 {
    std::env::var(SKIP_SSTHRESH_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The registration; the congestion control goes away with it.
pub struct Dctcp {
    _link: libbpf_rs::Link,
    skel: DctcpSkel<'static>,
}

// SAFETY: once registered, nothing is called on the skeleton or the link
// again; they are held, dropped (closing their fds, freeing the object),
// which libbpf allows from any thread, and the .bss mapping is read with
// volatile loads of a u64 ([`Dctcp::repairs`]), which any thread may do.
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
                    if let Some(r) = o.maps.rodata_data.as_deref_mut() {
                        r.skip_ssthresh_every = skip_ssthresh_every();
                    }
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
        Ok(Dctcp { _link: link, skel })
    }

    /// Windows the programs repaired after the kernel skipped one of their
    /// callbacks, over every socket since registration (`repair()` in
    /// `bpf/dctcp.bpf.c` says when and why).
    pub fn repairs(&self) -> u64 {
        self.skel
            .maps
            .bss_data
            .as_ref()
            // SAFETY: a u64 of the .bss mapping, alive with the skeleton;
            // the programs update it atomically, so a volatile read sees a
            // whole value.
            .map_or(0, |b| unsafe { std::ptr::read_volatile(&b.repairs) })
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
