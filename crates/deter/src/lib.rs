//! DETER in software (seed 004; issue 21): what a recorder keeps of a TCP
//! connection so that it can be replayed alone, without I/O.
//!
//! - [`sample`]: Algorithm 1, send times sampled by rate within `th`;
//! - [`ipid`]: the network's actions on arriving packets, from the gaps in
//!   their IP-IDs (Linux numbers a connected socket's packets
//!   consecutively, §4);
//! - [`record`]: one connection's record and its file format;
//! - [`replay`]: what a replay of a connection takes from its two records.

pub mod assemble;
pub mod ipid;
pub mod record;
pub mod replay;
pub mod sample;
