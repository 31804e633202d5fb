//! A load test's life cycle (Norma, seed 002; `wirelab load`), on the run
//! engine's terms: the same options, progress, verdicts, interruption and
//! results folder as `run`, with a lab of its own shape, since the
//! tester's ports are cabled to the device under test as Norma's are, not
//! through the switch (whose capture of every packet would be the
//! bottleneck of a line-rate test):
//!
//! 1. the rate plan (§5.2: meter and cascaded units) and the template,
//!    from the spec alone: what cannot be sent is refused before anything
//!    exists;
//! 2. the tester lab up (`wirelab_netns::tester`), the DUT configured in
//!    its namespace; RFC 2544 §23's learning frames;
//! 3. the stream (`wirelab_workload::load`), one interval at a time, each
//!    line to the caller and to `intervals.jsonl` as it is measured;
//! 4. the DUT's own statistics into `dut/`, the claims, `summary.json`;
//! 5. the lab torn down on every way out.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use wirelab_dataplane::load::{Edit, EditMode};
use wirelab_load::rate;
use wirelab_load::template::{self, Template};
use wirelab_netns::tester::{self, TesterLab};
use wirelab_spec::load::{EditSpec, LoadSpec, Metric};
use wirelab_workload::load::{Outcome, Ports, Report, Stream, Timing};

use crate::{During, Error, RunOptions, Verdict};

/// What the control plane chose for the stream: printed before it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub dut: &'static str,
    pub frame_bytes: u32,
    pub requested_pps: f64,
    pub rate: rate::Plan,
    pub template: Template,
}

/// One claim of `expect:`, judged.
#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    pub claim: String,
    pub pass: bool,
    pub observed: String,
}

/// `summary.json` of a load test.
#[derive(Debug, Clone, Serialize)]
pub struct LoadSummary {
    pub schema: &'static str,
    pub name: String,
    pub description: Option<String>,
    pub run_id: String,
    pub results: String,
    pub verdict: &'static str,
    pub setup: Setup,
    /// The run's totals and figures; its intervals are in intervals.jsonl.
    pub outcome: OutcomeSummary,
    pub expect: Vec<Claim>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutcomeSummary {
    pub intervals: usize,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a load test produced.
pub struct LoadOutput {
    pub summary: LoadSummary,
    pub verdict: Verdict,
    pub dir: PathBuf,
}

/// The rate plan and the template for `spec`, without touching the host.
/// The template's addresses are the lab's; its MACs are filled in when
/// the lab exists.
pub fn setup(spec: &LoadSpec) -> Result<(Setup, Vec<Edit>, Vec<u32>), Error> {
    let req = rate::Request {
        pps: spec.pps(),
        burst: spec.stream.burst.as_ref().map(|b| rate::Burst {
            packets: b.packets,
            peak_pps: spec.peak_pps().unwrap_or(spec.pps()),
        }),
    };
    let plan = rate::plan(req, wirelab_spec::load::UNITS)
        .map_err(|e| Error::BadInput(format!("stream: {e}")))?;
    let tm = template(spec, [0; 6], [0; 6], spec.dut.kind.routes())?;
    let (edits, table) = edits(&spec.stream.edits);
    Ok((
        Setup {
            dut: spec.dut.kind.name(),
            frame_bytes: spec.stream.size,
            requested_pps: spec.pps(),
            rate: plan,
            template: tm,
        },
        edits,
        table,
    ))
}

fn template(
    spec: &LoadSpec,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    routed: bool,
) -> Result<Template, Error> {
    template::udp(
        &template::Udp {
            src_mac,
            dst_mac,
            src: "198.18.1.2".parse().expect("an address"),
            dst: if routed { "198.18.2.2" } else { "198.18.1.3" }
                .parse()
                .expect("an address"),
            sport: spec.stream.sport,
            dport: spec.stream.dport,
        },
        spec.template_len(),
    )
    .map_err(|e| Error::BadInput(format!("stream.size: {e}")))
}

/// The spec's edits in the generator's terms, and the indirect tables'
/// values laid end to end.
fn edits(specs: &[EditSpec]) -> (Vec<Edit>, Vec<u32>) {
    let mut table = Vec::new();
    let out = specs
        .iter()
        .map(|e| {
            let (offset, width) = e.field.place();
            let mut x = Edit {
                offset,
                width,
                mode: EditMode::Step,
                carry_from: e.carry.map(|c| c as u8),
                rand_bits: 0,
                table: 0,
                lo: 0,
                hi: 0,
                step: 1,
            };
            if let Some(s) = e.step {
                (x.lo, x.hi, x.step) = (s.from, s.to, s.by);
            } else if let Some(t) = &e.table {
                x.mode = EditMode::Indirect;
                x.table = table.len() as u16;
                (x.lo, x.hi) = (0, t.len() as u32 - 1);
                table.extend_from_slice(t);
            } else if let Some(r) = e.random {
                x.mode = EditMode::Random;
                // The low bits random, the rest 0 (App. C 4).
                x.hi = ((1u64 << r.bits) - 1) as u32;
            } else if let Some(r) = e.ranged {
                x.mode = EditMode::Ranged;
                (x.lo, x.hi) = (r.from, r.to);
                // App. C 5: r of k bits with 2^k <= l, the largest such k.
                let l = u64::from(r.to - r.from) + 1;
                x.rand_bits = (63 - l.leading_zeros()) as u8;
            }
            x
        })
        .collect();
    (out, table)
}

/// Runs the load test `spec`; `each` gets every interval as it is
/// measured. Prints nothing; the lab is gone when this returns, whatever
/// it returns.
pub fn run(
    spec: &LoadSpec,
    opts: &RunOptions,
    mut each: impl FnMut(&Setup, &Report),
) -> Result<LoadOutput, Error> {
    let started = std::time::Instant::now();
    let (mut setup, edits, table) = setup(spec)?;
    let run_id = opts.run_id.clone().unwrap_or_else(crate::new_run_id);
    let name = spec.name.clone().unwrap_or_else(|| "load".into());
    let dir = opts.out.join(format!("{name}-{run_id}"));
    std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
    let write = |file: &str, bytes: &[u8]| -> Result<(), Error> {
        let p = dir.join(file);
        std::fs::write(&p, bytes).during(format!("writing {}", p.display()))
    };
    write(
        "spec.json",
        &serde_json::to_vec_pretty(spec).during("encoding the spec")?,
    )?;
    opts.check_abort()?;
    let lab = TesterLab::up(
        &run_id,
        spec.dut.kind,
        spec.ports.mtu,
        spec.dut.egress.as_ref(),
    )
    .during("bringing the tester's lab up")?;
    opts.check_abort()?;
    lab.learn().during("sending the learning frames")?;
    setup.template = template(spec, lab.tx_mac, lab.next_hop_mac, spec.dut.kind.routes())?;
    let stream = Stream {
        template: setup.template.clone(),
        rate: setup.rate.clone(),
        edits,
        table,
        dport: spec.stream.dport,
    };
    let ports = Ports {
        tx_ns: lab.tx_ns.clone(),
        tx_dev: tester::TX_DEV.into(),
        rx_ns: lab.rx_ns.clone(),
        rx_dev: tester::RX_DEV.into(),
        tx_peer: Some((lab.dut_ns.clone(), tester::DUT_IN.into())),
    };
    let timing = Timing {
        duration: spec.duration.as_std(),
        interval: spec.interval.as_std(),
        grace: spec.grace.as_std().max(Duration::from_millis(1)),
    };
    let path = dir.join("intervals.jsonl");
    let mut lines = std::fs::File::create(&path).during(format!("creating {}", path.display()))?;
    let mut line_err = None;
    let outcome = wirelab_workload::load::run(&ports, &stream, timing, &opts.abort, |r| {
        each(&setup, r);
        // Written as measured: an interrupted run keeps what it measured.
        let r = serde_json::to_string(r)
            .map_err(std::io::Error::other)
            .and_then(|l| writeln!(lines, "{l}"));
        if let Err(e) = r {
            line_err.get_or_insert(e);
        }
    });
    if let Some(e) = line_err {
        return Err(e).during(format!("writing {}", path.display()));
    }
    let outcome = outcome.during("running the stream")?;
    std::fs::create_dir_all(dir.join("dut")).during("creating dut/")?;
    for (file, text) in lab.dut_statistics() {
        write(&format!("dut/{file}"), text.as_bytes())?;
    }
    drop(lab);
    let interrupted = opts.abort.load(Ordering::SeqCst);
    let expect = claims(spec, &outcome);
    let verdict = Verdict::of(interrupted, true, expect.iter().any(|c| !c.pass));
    let summary = LoadSummary {
        schema: "wirelab.load/1",
        name,
        description: spec.description.clone(),
        run_id,
        results: dir.display().to_string(),
        verdict: verdict.name(),
        setup,
        outcome: OutcomeSummary {
            intervals: outcome.intervals.len(),
            outcome,
        },
        expect,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    // The intervals are in intervals.jsonl already.
    let mut v = serde_json::to_value(&summary).during("encoding the summary")?;
    if let Some(o) = v.get_mut("outcome").and_then(|o| o.as_object_mut()) {
        o.remove("intervals");
        o.insert("intervals".into(), summary.outcome.intervals.into());
    }
    write(
        "summary.json",
        &serde_json::to_vec_pretty(&v).during("encoding the summary")?,
    )?;
    Ok(LoadOutput {
        summary,
        verdict,
        dir,
    })
}

/// A metric's value over the run (None: the run did not measure it, as
/// latency when nothing arrived).
pub fn metric(m: Metric, o: &Outcome) -> Option<f64> {
    let lost = o.sent as f64 - o.received as f64;
    let lat = o.latency.as_ref();
    match m {
        Metric::Lost => Some(lost),
        Metric::LossRatio => (o.sent > 0).then(|| lost / o.sent as f64),
        Metric::RateError => o.rate_error.map(f64::abs),
        Metric::ReceivedPps => o.received_pps,
        Metric::LatencyP50 => lat.map(|l| l.p50 as f64),
        Metric::LatencyP99 => lat.map(|l| l.p99 as f64),
        Metric::LatencyP999 => lat.map(|l| l.p999 as f64),
        Metric::LatencyMax => lat.map(|l| l.max as f64),
        Metric::Late => Some(o.late as f64),
    }
}

fn claims(spec: &LoadSpec, o: &Outcome) -> Vec<Claim> {
    spec.expect
        .iter()
        .map(|x| {
            let (lo, hi) = x.bounds();
            let v = metric(x.metric, o);
            let pass = v.is_some_and(|v| {
                !matches!(lo, Some(lo) if v < lo) && !matches!(hi, Some(hi) if v > hi)
            });
            let observed = match (v, x.metric.unit()) {
                (None, _) => "not measured".into(),
                (Some(v), wirelab_spec::Unit::Nanos) => {
                    format!("{}", wirelab_spec::Nanos(v as u64))
                }
                (Some(v), _) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
                (Some(v), _) => format!("{v:.3e}"),
            };
            Claim {
                claim: x.describe(),
                pass,
                observed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_become_the_generators_terms() {
        let s = wirelab_spec::load::parse(
            "dut: {kind: router}
stream:
  size: 128
  pps: 1000
  edits:
    - {field: udp.sport, step: {from: 1000, to: 1999, by: 2}}
    - {field: ipv4.src, table: [7, 8, 9], carry: 0}
    - {field: ipv4.tos, random: {bits: 3}}
    - {field: ipv4.dst, ranged: {from: 10, to: 1009}}
",
        )
        .unwrap();
        let (setup, e, table) = setup(&s).unwrap();
        assert_eq!(setup.template.bytes.len(), 124);
        assert_eq!(table, vec![7, 8, 9]);
        assert_eq!(
            (e[0].offset, e[0].width, e[0].lo, e[0].hi, e[0].step),
            (34, 2, 1000, 1999, 2)
        );
        assert_eq!(
            (e[1].mode, e[1].carry_from, e[1].lo, e[1].hi),
            (EditMode::Indirect, Some(0), 0, 2)
        );
        assert_eq!(
            (e[2].mode, e[2].hi, e[2].offset, e[2].width),
            (EditMode::Random, 7, 15, 1)
        );
        // l = 1000: k = 9, the largest with 2^k <= l (Norma's Fig. 13 case).
        assert_eq!(
            (e[3].mode, e[3].rand_bits, e[3].lo, e[3].hi),
            (EditMode::Ranged, 9, 10, 1009)
        );
        assert_eq!(setup.rate.interval_ns, 1_000_000);
    }
}
