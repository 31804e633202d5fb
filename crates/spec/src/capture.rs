//! `capture:`: what the switch mirrors and how much room the ring has.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Bytes, Invalid, Nanos, Spec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// Bytes kept of each packet.
    #[serde(default = "default_snap")]
    pub snap_len: u32,
    /// Size of the capture ring between the switch and the dumper.
    #[serde(default = "default_ring")]
    pub ring_size: Bytes,
    /// Fault injection into wirelab's own capture path: the dumper starts
    /// draining only after this long. With a small ring the run must come
    /// out INVALID; used to prove the integrity check.
    #[serde(default)]
    pub stall_dumper: Option<Nanos>,
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            snap_len: default_snap(),
            ring_size: default_ring(),
            stall_dumper: None,
        }
    }
}

fn default_snap() -> u32 {
    128
}
fn default_ring() -> Bytes {
    Bytes(16 << 20)
}

pub(crate) fn validate(s: &Spec) -> Result<(), Invalid> {
    if s.capture.snap_len < 64 || s.capture.snap_len > 1518 {
        return err(
            "capture.snap_len",
            format!("must be between 64 and 1518, got {}", s.capture.snap_len),
        );
    }
    let r = s.capture.ring_size.0;
    if !r.is_power_of_two() || !(4096..=(1 << 30)).contains(&r) {
        return err(
            "capture.ring_size",
            format!(
                "must be a power of two between 4KiB and 1GiB, got {}",
                s.capture.ring_size
            ),
        );
    }
    Ok(())
}
