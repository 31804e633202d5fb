//! The analysis report: what `wirelab analyze --json` prints and what a run
//! writes to `analysis.json`. Its JSON Schema is `docs/analysis.schema.json`
//! (`wirelab schema --analysis`); `schema` names the version, which changes
//! only when a field changes meaning or goes away (new fields may appear).

use schemars::JsonSchema;
use serde::Serialize;
use wirelab_trace::Trace;

use crate::expect::Verdict;
use crate::{model, run_analyzers, Analysis, AnalyzerReport, Input, Options, RunFacts};

pub const SCHEMA: &str = "wirelab.analysis/1";

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Report {
    /// `wirelab.analysis/1`.
    pub schema: &'static str,
    /// The trace file.
    pub source: String,
    /// The model: connections, retransmissions with their reasons, CE marks,
    /// the vantage point and its base round trips.
    #[serde(flatten)]
    pub analysis: Analysis,
    /// Findings, by analyzer.
    pub analyzers: Vec<AnalyzerReport>,
    /// The spec's `expect:` claims, when the trace comes from a run.
    pub expect: Vec<Verdict>,
}

impl Report {
    /// Violations over every analyzer.
    pub fn violations(&self) -> u64 {
        self.analyzers.iter().map(|a| a.violations).sum()
    }
}

/// Model, analyzers and (when there is a spec) its claims, over one trace.
/// `progress` hears how many packets were read into the model.
pub fn build(
    source: &str,
    trace: &Trace,
    opts: Options,
    facts: Option<&RunFacts>,
    analyzers: &[&str],
    expect: &[wirelab_spec::Expect],
    progress: &dyn Fn(u64),
) -> Report {
    let analysis = model::build(trace, opts, progress);
    let roce = crate::roce::build(trace);
    let input = Input {
        trace,
        analysis: &analysis,
        facts,
        opts,
        roce: &roce,
    };
    let reports = run_analyzers(&input, analyzers);
    let expect = crate::expect::evaluate(
        expect,
        &analysis,
        facts.unwrap_or(&RunFacts::default()),
        &reports,
    );
    Report {
        schema: SCHEMA,
        source: source.to_string(),
        analysis,
        analyzers: reports,
        expect,
    }
}

/// The JSON Schema of [`Report`].
pub fn json_schema() -> String {
    let s = schemars::schema_for!(Report);
    serde_json::to_string_pretty(&s).expect("a schema serializes") + "\n"
}
