//! The analysis report: what `wirelab analyze --json` prints and what a run
//! writes to `analysis.json`. Its JSON Schema is `docs/analysis.schema.json`
//! (`wirelab schema --analysis`); `schema` names the version, which changes
//! only when a field changes meaning or goes away (new fields may appear).

use schemars::JsonSchema;
use serde::Serialize;
use std::path::Path;

use wirelab_trace::{before_first_packet, Reader, Trace};

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
    assemble(
        source, analysis, &roce, trace, facts, analyzers, expect, opts,
    )
}

/// The analyzers and the claims over a model.
#[allow(clippy::too_many_arguments)]
fn assemble(
    source: &str,
    analysis: Analysis,
    roce: &crate::roce::RoceView,
    trace: &Trace,
    facts: Option<&RunFacts>,
    analyzers: &[&str],
    expect: &[wirelab_spec::Expect],
    opts: Options,
) -> Report {
    let input = Input {
        trace,
        analysis: &analysis,
        facts,
        opts,
        roce,
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

/// Where a streamed analysis is: the pass (1, or 2 for RoCE and for the
/// connections whose direction the first guessed wrong), the
/// file's bytes read in it, the file's size.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub pass: u8,
    pub bytes: u64,
    pub total: u64,
}

/// The analysis of a capture file read as a stream, in one pass (two
/// when it holds RoCE, whose FSM needs each QP's requester, MTU and first
/// PSN first, or when a TCP connection's direction was guessed wrong, see
/// [`model::Model`]), never held whole: memory is per connection,
/// whatever the file's size. A trace of the switch's virtual queues (a
/// run's, bounded by its run) is read into memory instead: the vAQM
/// analyzer replays the queues from every packet. `threads`
/// build connections on that many worker threads (0: on this one; see
/// [`model::Model::threads`]).
pub fn stream(
    path: &Path,
    opts: Options,
    facts: Option<&RunFacts>,
    analyzers: &[&str],
    threads: usize,
    progress: &dyn Fn(Progress),
) -> Result<Report, wirelab_trace::Error> {
    let name = path.display().to_string();
    let open = || -> Result<Reader<'static>, wirelab_trace::Error> {
        let file = std::fs::File::open(path).map_err(|source| wirelab_trace::Error::Open {
            path: name.clone(),
            source,
        })?;
        Reader::new(file).map_err(|e| wirelab_trace::Error::at(&name, e))
    };
    let total = std::fs::metadata(path).map_or(0, |m| m.len());
    let tell = |pass, r: &Reader| {
        progress(Progress {
            pass,
            bytes: r.file_bytes(),
            total,
        })
    };
    // The first pass: the TCP model, and the RoCE survey (which end of
    // each QP connection is the requester, its path MTU, its first PSN:
    // the go-back-N FSM needs them from the first packet on).
    // (packets read, damage), or None for a trace of virtual queues.
    let mut model = model::Model::new(opts);
    model.threads(threads);
    let mut survey = crate::roce::Survey::default();
    let first = {
        let mut r = open()?;
        // The vAQM analyzer replays the switch's queues from every packet:
        // a trace with virtual queues (or a run whose facts name them) is
        // read whole; any other, wirelab's too, streams.
        let mut queues = facts.is_some_and(|f| !f.vaqm.is_empty() || !f.qcn.is_empty());
        while let Some(p) = r.next() {
            if queues || p.meta.is_some_and(|m| m.vq > 0 || m.cnm > 0) {
                queues = true;
                break;
            }
            // RoCE rides on UDP: a TCP packet is not parsed again for it.
            if !model.add(&p) {
                if let Some(rp) = crate::roce::packet(&p) {
                    survey.add(&rp);
                }
            }
            if p.frame % 8192 == 0 {
                tell(1, &r);
            }
        }
        if r.frames() == 0 {
            if let Some(d) = r.damage() {
                return Err(wirelab_trace::Error::at(
                    &name,
                    before_first_packet(d, r.compressed()),
                ));
            }
        }
        (!queues).then(|| (r.frames(), r.damage().cloned()))
    };
    let Some((frames, damage)) = first else {
        drop(model);
        let trace = wirelab_trace::read(path)?;
        return Ok(build(&name, &trace, opts, facts, analyzers, &[], &|_| {}));
    };
    let finished = model.finish(damage.as_ref());
    // A second pass when the capture holds RoCE (its FSM), or a TCP
    // connection whose direction the first guessed wrong.
    let mut again = match &finished {
        model::Finished::Again(again) => Some(again.model()),
        model::Finished::Done(_) => None,
    };
    let mut stream = (survey.packets() > 0).then(|| survey.stream());
    if again.is_some() || stream.is_some() {
        let mut r = open()?;
        while let Some(p) = r.next() {
            // Without a TCP pass to make, every packet goes to the RoCE
            // parser, which turns down anything not UDP at its first bytes.
            let tcp = again.as_mut().is_some_and(|m| m.add(&p));
            if let (false, Some(s)) = (tcp, &mut stream) {
                if let Some(rp) = crate::roce::packet(&p) {
                    s.add(&rp);
                }
            }
            if p.frame % 8192 == 0 {
                tell(2, &r);
            }
        }
        if r.frames() != frames {
            // A capture still being written, or replaced: the two passes
            // would describe different files.
            return Err(wirelab_trace::Error::Format {
                path: name,
                detail: format!(
                    "the file changed while it was read ({frames} packets on the first pass, {} on the second); analyze a finished capture",
                    r.frames()
                ),
            });
        }
    }
    let analysis = match finished {
        model::Finished::Done(a) => a,
        model::Finished::Again(first) => {
            let model = again.expect("made above");
            let model::Finished::Done(redone) = model.finish(damage.as_ref()) else {
                unreachable!("a second pass is told each connection's direction")
            };
            first.complete(redone)
        }
    };
    let roce = stream.map(crate::roce::Stream::finish).unwrap_or_default();
    Ok(assemble(
        &name,
        analysis,
        &roce,
        &Trace::default(),
        facts,
        analyzers,
        &[],
        opts,
    ))
}

/// The JSON Schema of [`Report`].
pub fn json_schema() -> String {
    let s = schemars::schema_for!(Report);
    serde_json::to_string_pretty(&s).expect("a schema serializes") + "\n"
}
