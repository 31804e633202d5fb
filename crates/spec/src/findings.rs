//! The vocabulary `expect:` uses to name analyzer findings, and the amounts
//! it compares them with. It lives here, not in the analyzers, because it is
//! part of the spec language: a spec naming an unknown finding is rejected
//! before anything runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::{BitsPerSec, Bytes, Nanos};

/// The analyzers a spec can turn on (`analyzers:`; all by default).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum AnalyzerName {
    /// RFC 5681/6675/8985/6298 conformance of receiver and sender.
    LossRecovery,
    /// Per loss: NACK generation, reaction, timeout (Lumina Fig. 5).
    RetransmissionLatency,
    /// CE marks, their echo and the sender's CWR (RFC 3168).
    Ecn,
    /// Kernel counters against what the trace proves (Lumina §6.2.4).
    Counters,
    /// MCT, goodput, RTT samples, flight size.
    Flow,
    /// RoCE: Lumina's go-back-N FSM for requester and responder, with reads.
    RoceGoBackN,
    /// RoCE: per loss, NACK generation and reaction, and timeouts (Lumina Figs. 5, 8, 9).
    RoceRetransmissionLatency,
    /// RoCE: CNPs against each limiter scope and the configured interval (Lumina §6.3).
    RoceCnp,
    /// RoCE: device counters against what the trace proves (Lumina §6.2.4).
    RoceCounters,
    /// Virtual queues (NetBump): marks and drops against the discipline,
    /// the estimate against the real queue.
    Vaqm,
}

impl AnalyzerName {
    pub const ALL: [AnalyzerName; 10] = [
        AnalyzerName::LossRecovery,
        AnalyzerName::RetransmissionLatency,
        AnalyzerName::Ecn,
        AnalyzerName::Counters,
        AnalyzerName::Flow,
        AnalyzerName::RoceGoBackN,
        AnalyzerName::RoceRetransmissionLatency,
        AnalyzerName::RoceCnp,
        AnalyzerName::RoceCounters,
        AnalyzerName::Vaqm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AnalyzerName::LossRecovery => "loss-recovery",
            AnalyzerName::RetransmissionLatency => "retransmission-latency",
            AnalyzerName::Ecn => "ecn",
            AnalyzerName::Counters => "counters",
            AnalyzerName::Flow => "flow",
            AnalyzerName::RoceGoBackN => "roce-go-back-n",
            AnalyzerName::RoceRetransmissionLatency => "roce-retransmission-latency",
            AnalyzerName::RoceCnp => "roce-cnp",
            AnalyzerName::RoceCounters => "roce-counters",
            AnalyzerName::Vaqm => "vaqm",
        }
    }

    pub fn from_name(s: &str) -> Option<AnalyzerName> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// What a finding's value measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Nanos,
    Bytes,
    BitsPerSec,
    Count,
}

/// Every finding `expect:` can name, `analyzer.name`, with its unit.
/// Violations are counted (`loss-recovery.unjustified-retransmission` is how
/// many there were); `<analyzer>.violations` counts them all.
pub const FINDINGS: &[(&str, Unit)] = &[
    ("loss-recovery.violations", Unit::Count),
    ("loss-recovery.ooo-not-acked", Unit::Count),
    ("loss-recovery.unjustified-retransmission", Unit::Count),
    ("loss-recovery.late-retransmission", Unit::Count),
    ("loss-recovery.acked-data-retransmitted", Unit::Count),
    ("loss-recovery.sacked-data-retransmitted", Unit::Count),
    ("loss-recovery.no-backoff", Unit::Count),
    ("loss-recovery.dsack", Unit::Count),
    ("retransmission-latency.nack-generation", Unit::Nanos),
    ("retransmission-latency.reaction", Unit::Nanos),
    ("retransmission-latency.timeout", Unit::Nanos),
    ("retransmission-latency.total", Unit::Nanos),
    ("ecn.violations", Unit::Count),
    ("ecn.ce-not-echoed", Unit::Count),
    ("ecn.ece-without-cwr", Unit::Count),
    ("ecn.echo-latency", Unit::Nanos),
    ("ecn.cwr-latency", Unit::Nanos),
    ("counters.violations", Unit::Count),
    ("counters.counter-disagrees", Unit::Count),
    ("flow.mct", Unit::Nanos),
    ("flow.goodput", Unit::BitsPerSec),
    ("flow.fairness", Unit::Count),
    ("flow.rtt", Unit::Nanos),
    ("flow.flight", Unit::Bytes),
    ("flow.retransmissions", Unit::Count),
    ("roce-go-back-n.violations", Unit::Count),
    ("roce-go-back-n.nak-missing", Unit::Count),
    ("roce-go-back-n.nak-wrong-psn", Unit::Count),
    ("roce-go-back-n.nak-repeated", Unit::Count),
    ("roce-go-back-n.nak-unjustified", Unit::Count),
    ("roce-go-back-n.wrong-restart", Unit::Count),
    ("roce-go-back-n.resend-skipped", Unit::Count),
    ("roce-go-back-n.read-not-reissued", Unit::Count),
    ("roce-go-back-n.migreq-clear", Unit::Count),
    ("roce-retransmission-latency.nack-generation", Unit::Nanos),
    (
        "roce-retransmission-latency.read-nack-generation",
        Unit::Nanos,
    ),
    ("roce-retransmission-latency.nack-reaction", Unit::Nanos),
    ("roce-retransmission-latency.timeout", Unit::Nanos),
    ("roce-retransmission-latency.violations", Unit::Count),
    (
        "roce-retransmission-latency.slow-nack-generation",
        Unit::Count,
    ),
    (
        "roce-retransmission-latency.slow-read-nack-generation",
        Unit::Count,
    ),
    (
        "roce-retransmission-latency.slow-nack-reaction",
        Unit::Count,
    ),
    (
        "roce-retransmission-latency.timeout-below-minimum",
        Unit::Count,
    ),
    (
        "roce-retransmission-latency.retries-exceed-retry-cnt",
        Unit::Count,
    ),
    ("roce-cnp.violations", Unit::Count),
    ("roce-cnp.cnp-missing", Unit::Count),
    ("roce-cnp.cnp-excess", Unit::Count),
    ("roce-cnp.cnps", Unit::Count),
    ("roce-cnp.interval", Unit::Nanos),
    ("roce-cnp.limiter-per-qp", Unit::Count),
    ("roce-cnp.limiter-per-ip", Unit::Count),
    ("roce-cnp.limiter-per-port", Unit::Count),
    ("roce-counters.violations", Unit::Count),
    ("roce-counters.counter-disagrees", Unit::Count),
    ("vaqm.violations", Unit::Count),
    ("vaqm.wrong-decision", Unit::Count),
    ("vaqm.queue", Unit::Bytes),
    ("vaqm.marks", Unit::Count),
    ("vaqm.drops", Unit::Count),
    ("vaqm.overflows", Unit::Count),
    ("vaqm.red-average", Unit::Bytes),
    ("vaqm.error", Unit::Bytes),
    ("vaqm.real-queue", Unit::Bytes),
    ("vaqm.cnms", Unit::Count),
    ("vaqm.qcn-feedback", Unit::Count),
    ("vaqm.send-rate", Unit::BitsPerSec),
    ("vaqm.rp-rate", Unit::BitsPerSec),
    ("vaqm.cnm-lost", Unit::Count),
    ("vaqm.replay-mismatch", Unit::Count),
    ("vaqm.distributed-error", Unit::Bytes),
    ("vaqm.distributed-truth-error", Unit::Bytes),
];

pub fn unit_of(finding: &str) -> Option<Unit> {
    FINDINGS
        .iter()
        .find(|(n, _)| *n == finding)
        .map(|(_, u)| *u)
}

/// How the values of a finding are combined before the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stat {
    /// Each value must satisfy the bounds (the default).
    Every,
    Min,
    Max,
    Mean,
    P50,
    P99,
    /// How many values there are.
    Count,
}

/// A number, or a quantity with a unit (`100us`, `64KiB`, `1gbit`, `10%`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Amount {
    Number(f64),
    Text(String),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Number(n) => write!(f, "{n}"),
            Amount::Text(t) => f.write_str(t),
        }
    }
}

impl Amount {
    /// The amount in the unit's base (ns, bytes, bit/s, count).
    pub fn value_in(&self, unit: Unit) -> Result<f64, String> {
        match (self, unit) {
            (Amount::Number(n), Unit::Count | Unit::Bytes) => Ok(*n),
            (Amount::Number(n), _) => Err(format!(
                "`{n}` needs a unit ({})",
                match unit {
                    Unit::Nanos => "e.g. 100us, 2ms",
                    _ => "e.g. 100mbit, 1gbit",
                }
            )),
            (Amount::Text(t), Unit::Count) => t
                .parse::<f64>()
                .map_err(|_| format!("`{t}` is not a count")),
            (Amount::Text(t), Unit::Nanos) => t.parse::<Nanos>().map(|n| n.0 as f64),
            (Amount::Text(t), Unit::Bytes) => t.parse::<Bytes>().map(|n| n.0 as f64),
            (Amount::Text(t), Unit::BitsPerSec) => t.parse::<BitsPerSec>().map(|n| n.0 as f64),
        }
    }

    /// A tolerance: a percentage of `of`, or an absolute amount.
    pub fn tolerance(&self, unit: Unit, of: f64) -> Result<f64, String> {
        if let Amount::Text(t) = self {
            if let Some(p) = t.strip_suffix('%') {
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{t}` is not a percentage"))?;
                return Ok(of.abs() * p / 100.0);
            }
        }
        self.value_in(unit)
    }
}
