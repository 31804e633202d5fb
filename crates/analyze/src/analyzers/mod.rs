//! The TCP analyzer set. Each is a pure function of the [`crate::Input`].

mod counters;
mod ecn;
mod flow;
mod latency;
mod recovery;
mod roce;
mod vaqm;

use crate::Analyzer;

pub use counters::Counters;
pub use ecn::Ecn;
pub use flow::Flow;
pub use latency::RetransmissionLatency;
pub use recovery::LossRecovery;
pub use vaqm::Vaqm;

/// Every analyzer, in report order.
pub fn all() -> Vec<Box<dyn Analyzer>> {
    vec![
        Box::new(LossRecovery),
        Box::new(RetransmissionLatency),
        Box::new(Ecn),
        Box::new(Counters),
        Box::new(Flow),
        Box::new(roce::GoBackN),
        Box::new(roce::RetransmissionLatency),
        Box::new(roce::Cnp),
        Box::new(roce::Counters),
        Box::new(Vaqm),
    ]
}

/// Timestamp of the last packet of the trace (obligations due after it are
/// not judged).
pub(crate) fn trace_end(input: &crate::Input) -> u64 {
    input
        .analysis
        .connections
        .iter()
        .filter_map(|c| c.last_ts_ns)
        .max()
        .unwrap_or(0)
}
