//! A run's results folder as analysis input: the run's facts, typed, in
//! `facts.json` (with the ground truth and the reaction points' rate
//! changes in their CSV files beside it). A run writes them
//! (`write`); `wirelab analyze` and the golden tests read them back
//! (`read`), the same type both ways.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Options, RunFacts};

/// The facts file of a results folder.
pub const FACTS_FILE: &str = "facts.json";
/// Its layout's version; a file of another version is not read.
pub const FACTS_SCHEMA: &str = "wirelab.facts/1";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: schema `{found}`, this wirelab reads `{FACTS_SCHEMA}`")]
    Schema { path: PathBuf, found: String },
    #[error("{path}: {source}")]
    Csv { path: PathBuf, source: csv::Error },
}

// Not `#[serde(flatten)]`: flattening buffers the content, and the
// integer-keyed maps (connection ids) then fail to read back.
#[derive(Serialize, Deserialize)]
struct FactsFile {
    schema: String,
    facts: RunFacts,
}

/// Writes `facts` into the results folder `dir`: `facts.json`, and the
/// queues' ground truth and the reaction points' changes as CSV when there
/// are any.
pub fn write(dir: &Path, facts: &RunFacts) -> Result<(), Error> {
    let truth: Vec<_> = facts
        .vaqm
        .iter()
        .flat_map(|q| q.truth.iter().copied())
        .collect();
    if !truth.is_empty() {
        let path = dir.join(crate::truth::TRUTH_FILE);
        crate::truth::write_csv(&path, &truth).map_err(|source| Error::Csv { path, source })?;
    }
    let points: Vec<_> = facts
        .qcn
        .iter()
        .flat_map(|r| r.points.iter().cloned())
        .collect();
    if !points.is_empty() {
        let path = dir.join(crate::rp::RP_FILE);
        crate::rp::write_csv(&path, &points).map_err(|source| Error::Csv { path, source })?;
    }
    let path = dir.join(FACTS_FILE);
    let file = FactsFile {
        schema: FACTS_SCHEMA.into(),
        facts: facts.clone(),
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    std::fs::write(&path, bytes).map_err(|source| Error::Io { path, source })
}

/// The facts of the results folder `dir`; `None` when it has none (a
/// capture from anywhere else). A damaged file is an error naming it.
pub fn read(dir: &Path) -> Result<Option<RunFacts>, Error> {
    let path = dir.join(FACTS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path, source }),
    };
    #[derive(Deserialize)]
    struct Head {
        schema: String,
    }
    let head: Head = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    if head.schema != FACTS_SCHEMA {
        return Err(Error::Schema {
            path,
            found: head.schema,
        });
    }
    let file: FactsFile = serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    let mut f = file.facts;
    let truth_path = dir.join(crate::truth::TRUTH_FILE);
    if truth_path.exists() {
        let truth = crate::truth::read_csv(&truth_path).map_err(|source| Error::Csv {
            path: truth_path,
            source,
        })?;
        for q in &mut f.vaqm {
            q.truth = truth.iter().filter(|p| p.vq == q.id).copied().collect();
        }
    }
    let rp_path = dir.join(crate::rp::RP_FILE);
    if rp_path.exists() {
        let points = crate::rp::read_csv(&rp_path).map_err(|source| Error::Csv {
            path: rp_path,
            source,
        })?;
        for r in &mut f.qcn {
            r.points = points
                .iter()
                .filter(|p| p.host == r.host)
                .cloned()
                .collect();
        }
    }
    Ok(Some(f))
}

/// The analysis options a results folder implies (`RunFacts::options`);
/// Linux defaults with `default_rto` for a folder without facts.
pub fn options(dir: &Path, default_rto: u64) -> Result<Options, Error> {
    Ok(match read(dir)? {
        Some(f) => f.options(default_rto),
        None => Options::for_hosts(std::iter::empty(), Some(default_rto)),
    })
}

impl Options {
    /// What the analysis may assume, from each host's (rto_min,
    /// net.ipv4.tcp_early_retrans): the smallest rto_min (`default_rto` when
    /// no host is given), TLP unless a host turns it off, and for wirelab's
    /// own RoCE device no slow-path bound and a wider timing slack.
    pub fn for_hosts(
        hosts: impl Iterator<Item = (Option<u64>, Option<String>)>,
        default_rto: Option<u64>,
    ) -> Options {
        let mut o = Options::default();
        let mut rto = None::<u64>;
        for (r, early_retrans) in hosts {
            // Hosts of a wirelab plan: their RoCE device is wirelab's own, a
            // user-space process sharing two cores with the lab, whose
            // answers took 72 µs to 2.2 ms in five runs of the same spec:
            // a latency bound would judge the scheduler, so latencies are
            // only measured (specs bound them with `expect:`).
            o.roce_slow_path_ns = None;
            o.roce_timing_slack_ns = crate::ROCE_TIMING_SLACK_USERSPACE_NS;
            o.roce_timer_start_slack_ns = crate::ROCE_TIMER_START_SLACK_LAB_NS;
            // The lab's kernels share the same two cores: `make test` runs
            // saw an out-of-order segment answered 4.1 ms late, a hole fill
            // 10.9 ms late, and a fast retransmission 4.4 ms after its loss
            // (170-300 µs in other runs). 30 ms stays below Linux's 40 ms
            // minimum delayed ACK, so a receiver that delays still stands out.
            o.ack_allowance_ns = o.ack_allowance_ns.max(crate::LAB_SCHEDULING_SLACK_NS);
            o.reaction_allowance_ns = o.reaction_allowance_ns.max(crate::LAB_SCHEDULING_SLACK_NS);
            let r = r.unwrap_or(o.min_rto_ns);
            rto = Some(rto.map_or(r, |x| x.min(r)));
            // tcp_early_retrans 3 and 4 enable TLP (ip-sysctl.rst).
            if early_retrans.is_some_and(|v| !matches!(v.trim(), "3" | "4")) {
                o.tlp = false;
            }
        }
        o.min_rto_ns = rto.or(default_rto).unwrap_or(o.min_rto_ns);
        o
    }
}
