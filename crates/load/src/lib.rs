//! Norma in software (seed 002; issue 20): the tester's control plane,
//! without I/O.
//!
//! - [`efsm`]: the stateful responder's executor (§4), what the eBPF
//!   program does to one packet;
//! - [`rate`]: the meter's interval and the cascaded "skip m after n"
//!   units that make a requested average rate, peak rate and burst size
//!   (§5.2), with a model of what they pass;
//! - [`hist`]: the latency histogram's log-linear buckets, shared with
//!   `bpf/load.bpf.c`, and its percentiles;
//! - [`shape`]: the burst pattern as it arrived: gaps inside bursts and
//!   periods between them, against the request;
//! - [`template`]: the frames the generator replicates, with the offsets
//!   its editor and stamp need;
//! - [`measure`]: one interval's figures from the version banks (§6.1)
//!   and the blind average delay (§6.2).

pub mod efsm;
pub mod hist;
pub mod measure;
pub mod rate;
pub mod shape;
pub mod template;
