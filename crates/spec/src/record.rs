//! `record:`: DETER's recording of every host of the run (seed 004;
//! issue 21): one record per TCP connection in the results folder's
//! `record/<host>/`, as `wirelab record` writes for hosts a user made.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Invalid, Nanos, Spec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Algorithm 1's bound on an inferred send time (DETER §3.3: 5 µs).
    #[serde(default = "default_th")]
    pub th: Nanos,
    /// A connection with no packet for this long is written.
    #[serde(default = "default_idle")]
    pub idle: Nanos,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            th: default_th(),
            idle: default_idle(),
        }
    }
}

fn default_th() -> Nanos {
    Nanos(5_000)
}

fn default_idle() -> Nanos {
    Nanos(2_000_000_000)
}

pub(crate) fn validate(s: &Spec) -> Result<(), Invalid> {
    let Some(r) = &s.record else {
        return Ok(());
    };
    if !(1..=10_000_000).contains(&r.th.0) {
        return err(
            "record.th",
            format!("must be between 1ns and 10ms, got {}", r.th),
        );
    }
    if !(10_000_000..=3_600_000_000_000).contains(&r.idle.0) {
        return err(
            "record.idle",
            format!("must be between 10ms and 1h, got {}", r.idle),
        );
    }
    Ok(())
}
