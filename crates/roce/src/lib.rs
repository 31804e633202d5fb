//! wirelab's RoCEv2 RC transport, sans I/O: the caller hands in datagrams
//! and the time, and takes out datagrams, completions and the next deadline
//! (DESIGN.md: "handle_packet(now, bytes), handle_timeout(now),
//! poll_transmit(now)"). The lab driver runs it in the host namespaces
//! (whole IPv4 packets out of a raw socket, UDP 4791 in); tests run it on
//! virtual time.

pub mod dcqcn;
pub mod device;
pub mod packet;
pub mod profile;
pub mod psn;
pub mod sim;

pub use device::{
    local_ack_timeout_ns, Completion, Counters, Device, DeviceConfig, PostError, QpConfig, Rx,
    Status, Tx, Verb, WorkRequest,
};
pub use profile::{CnpScope, Profile};
