//! One run, from spec to results folder (the steps in the crate docs).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wirelab_analyze::expect::Verdict as Claim;
use wirelab_analyze::report::Report;
use wirelab_analyze::{HostFacts, RunFacts};
use wirelab_capture::{Dumper, Integrity, PortCounts};
use wirelab_dataplane::ext::Extension;
use wirelab_dataplane::Switch;
use wirelab_netns::{in_netns, Lab};
use wirelab_plan::Plan;
use wirelab_spec::Spec;
use wirelab_workload::{ConnMeta, Finished, Stop};

use crate::capability::{self, Capability, Cx};
use crate::summary::{ConnSummary, HostSummary, Summary};
use crate::switch::{self, Mode};
use crate::{During, Error, Progress, RunOptions, RunOutput, Stage, Verdict};

type Counters = BTreeMap<String, BTreeMap<String, i64>>;

/// Runs one validated spec; `ext` is its discipline from
/// `build_extension`. Prints nothing; the lab is gone when this returns,
/// whatever it returns.
pub fn run(
    spec: &Spec,
    ext: Option<&Extension>,
    opts: &RunOptions,
    progress: &dyn Progress,
) -> Result<RunOutput, Error> {
    let run_id = opts.run_id.clone().unwrap_or_else(crate::new_run_id);
    let plan = wirelab_plan::plan(spec, &run_id, opts.seed.unwrap_or_else(rand::random))?;
    let dir = opts.out.join(format!("{}-{}", plan.name, plan.run_id));
    std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
    let plan_json = serde_json::to_vec_pretty(&plan).during("encoding the plan")?;
    std::fs::write(dir.join("plan.json"), plan_json).during("writing plan.json")?;
    let started = Instant::now();
    let mut caps = capability::for_plan(&plan, ext.is_some());
    let dctcp = crate::dctcp_for(&plan)?;
    let lab = Lab::up(&plan).during("bringing the lab up")?;
    let log = format!("lab up: {}\n", lab.namespaces().join(" "));
    opts.check_abort()?;
    progress.stage(&plan.run_id, Stage::LabUp);
    let switch = match switch::arm(&plan, &lab, Mode::Pipeline, &mut caps, ext) {
        Ok(s) => s,
        Err(e) => {
            // Bad input (a discipline the verifier refuses) leaves nothing
            // behind: not the lab (dropped on return), not the results.
            drop(lab);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    progress.stage(&plan.run_id, Stage::SwitchArmed);
    let results = dir.clone();
    let cx = Cx {
        plan: &plan,
        lab: &lab,
        switch: &switch,
        clock_offset: wirelab_capture::monotonic_to_realtime_ns(),
        results: Some(&results),
    };
    let mut run = Run {
        cx,
        caps,
        dctcp: dctcp.as_deref().map(|d| (d, d.repairs())),
        log,
        dir,
        started,
        opts,
        progress,
    };
    let out = run.go(spec);
    drop(run);
    drop(switch);
    drop(lab);
    out
}

struct Run<'a> {
    cx: Cx<'a>,
    caps: Vec<Box<dyn Capability>>,
    /// The DCTCP registration and its repair count before the run.
    dctcp: Option<(&'a wirelab_dataplane::dctcp::Dctcp, u64)>,
    log: String,
    dir: PathBuf,
    started: Instant,
    opts: &'a RunOptions,
    progress: &'a dyn Progress,
}

/// What was counted before the first packet.
struct Before {
    kernel_rx: Vec<u64>,
    counters: Counters,
    /// Each host's bottleneck drops so far (a lab may carry several runs).
    bottleneck_drops: Vec<u64>,
}

fn host_counters(plan: &Plan) -> Result<Counters, Error> {
    let mut out = BTreeMap::new();
    for h in &plan.hosts {
        let c = in_netns(&h.ns, wirelab_netns::counters::read_current)
            .during(format!("entering {}", h.ns))?
            .during(format!("reading kernel counters of {}", h.name))?;
        out.insert(h.name.clone(), c);
    }
    Ok(out)
}

impl Run<'_> {
    fn go(&mut self, spec: &Spec) -> Result<RunOutput, Error> {
        let (plan, switch) = (self.cx.plan, self.cx.switch);
        let before = Before {
            kernel_rx: self
                .cx
                .lab
                .switch_port_rx(plan)
                .during("reading port counters")?,
            counters: host_counters(plan)?,
            bottleneck_drops: self
                .cx
                .lab
                .bottleneck_drops(plan)
                .during("reading bottleneck drops")?,
        };
        let dumper =
            Dumper::start(switch, plan.capture_stall.as_std()).during("starting the capture")?;
        let stop = Stop {
            abort: self.opts.abort.clone(),
            deadline: Instant::now() + self.opts.timeout,
            limit: self.opts.timeout,
        };
        for c in &mut self.caps {
            c.start(&self.cx, &stop)?;
        }
        let handoff = handoff(
            &self.cx,
            &mut self.caps,
            &stop,
            &mut self.log,
            self.progress,
        );
        // Let the last packets (FIN/ACK) cross the switch before counting.
        std::thread::sleep(Duration::from_millis(50));
        let interrupted = self.opts.abort.load(Ordering::SeqCst);
        let (meta, finished) = match handoff {
            Ok(v) => v,
            Err(_) if interrupted => return Err(Error::Interrupted),
            Err(e) => return Err(e),
        };
        let (integrity, ports, trace_path) = self.capture(&before, dumper)?;
        let mut facts = facts(plan, &finished, &before.counters)?;
        let drops = self
            .cx
            .lab
            .bottleneck_drops(plan)
            .during("reading bottleneck drops")?;
        for ((h, after), before) in plan.hosts.iter().zip(drops).zip(&before.bottleneck_drops) {
            if after > *before {
                facts
                    .bottleneck_drops
                    .insert(h.name.clone(), after - before);
            }
        }
        for c in &mut self.caps {
            c.collect(&self.cx, &mut facts, &mut self.log)?;
        }
        let trace = wirelab_trace::read(&trace_path).during("reading the trace back")?;
        self.progress.stage(&plan.run_id, Stage::TraceWritten);
        let report = wirelab_analyze::report::build(
            &trace_path.display().to_string(),
            &trace,
            facts.options(wirelab_analyze::Options::default().min_rto_ns),
            Some(&facts),
            &spec.analyzers(wirelab_analyze::catalog()),
            &plan.expect,
            &|_| {},
        );
        self.progress.stage(&plan.run_id, Stage::Analyzed);
        let claims = claims(plan, &report);
        let workload_failed = finished.reports.iter().find_map(|r| r.error.clone());
        let failed = claims.iter().any(|v| !v.pass) || workload_failed.is_some();
        let verdict = Verdict::of(interrupted, integrity.valid, failed);
        let mut summary = self.summary(spec, &meta, finished, integrity, report, claims, &facts)?;
        (summary.verdict, summary.error) = (verdict.name(), workload_failed);
        let analysis = summary.analysis.clone();
        for c in &mut self.caps {
            c.summarize(&self.cx, &meta, &analysis, &mut summary)?;
        }
        let (runs, ns) = switch.prog_stats(false);
        summary.switch_kernel = (ns > 0).then(|| crate::summary::KernelCost {
            runs,
            ns,
            ns_per_run: ns as f64 / runs.max(1) as f64,
        });
        summary.dctcp_repairs = self.dctcp.map(|(d, before)| d.repairs() - before);
        summary.duration_ms = self.started.elapsed().as_millis() as u64;
        crate::results::write_run(&self.dir, &summary, &facts, &self.log, &ports)?;
        Ok(RunOutput {
            summary,
            facts,
            verdict,
            dir: self.dir.clone(),
        })
    }

    /// Counters first, then the drain: every packet counted has its record
    /// in the ring by then, so the trace can only be complete or honestly
    /// short (Lumina §3.5). Writes the trace.
    fn capture(
        &mut self,
        before: &Before,
        dumper: Dumper,
    ) -> Result<(Integrity, Vec<PortCounts>, PathBuf), Error> {
        let (plan, switch) = (self.cx.plan, self.cx.switch);
        let rx_after = self
            .cx
            .lab
            .switch_port_rx(plan)
            .during("reading port counters")?;
        let (counts, info) = switch::port_records(
            switch,
            plan.hosts.iter().enumerate().map(|(i, h)| {
                let n = rx_after[i] - before.kernel_rx[i];
                (h.port, format!("{}({})", h.switch_ifname, h.name), n, n)
            }),
        )?;
        let seq_issued = switch.mirror_seq().during("reading the mirror sequence")?;
        let records = dumper.finish().during("draining the capture")?;
        let integrity = wirelab_capture::check_integrity(&records, &counts, seq_issued);
        let path = self.dir.join("trace.pcapng");
        wirelab_capture::write_pcapng(&path, &records, &info, plan.snap_len, self.cx.clock_offset)
            .during(format!("writing {}", path.display()))?;
        Ok((integrity, counts, path))
    }

    #[allow(clippy::too_many_arguments)]
    fn summary(
        &self,
        spec: &Spec,
        meta: &[ConnMeta],
        finished: Finished,
        integrity: Integrity,
        analysis: Report,
        expect: Vec<Claim>,
        facts: &RunFacts,
    ) -> Result<Summary, Error> {
        let (plan, switch) = (self.cx.plan, self.cx.switch);
        Ok(Summary {
            schema: "wirelab.run/1",
            name: plan.name.clone(),
            description: spec.description.clone(),
            run_id: plan.run_id.clone(),
            results: self.dir.display().to_string(),
            verdict: "",
            duration_ms: 0,
            mtu: plan.mtu,
            hosts: hosts(plan),
            connections: connections(plan, switch, meta),
            events: Vec::new(),
            integrity,
            analysis,
            workload: finished.reports,
            expect,
            counters: facts.counters.clone(),
            roce: meta.iter().filter_map(|m| m.roce.clone()).collect(),
            device_counters: finished.device_counters,
            vaqm: Vec::new(),
            reaction_points: Vec::new(),
            flowtables: None,
            ovs: None,
            record: None,
            reorder: None,
            switch_kernel: None,
            dctcp_repairs: None,
            error: None,
        })
    }
}

/// The hand-off (Lumina §3.3), written once for every workload: the flows
/// the workload reports are armed, then its handshakes run, then the
/// capabilities are armed with the runtime metadata, then the messages go.
/// The engine never looks at the transport.
pub fn handoff(
    cx: &Cx,
    caps: &mut [Box<dyn Capability>],
    stop: &Stop,
    log: &mut String,
    progress: &dyn Progress,
) -> Result<(Vec<ConnMeta>, Finished), Error> {
    let plan = cx.plan;
    let check = || {
        if stop.abort.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        Ok(())
    };
    let mut wl = wirelab_workload::for_plan(plan);
    let flows = wl.prepare(plan).during("preparing the workload")?;
    switch::arm_flows(cx.switch, &flows)?;
    check()?;
    let meta = wl.connect(plan).during("connecting the workload")?;
    for m in &meta {
        log.push_str(&m.describe());
        log.push('\n');
    }
    for c in caps.iter_mut() {
        c.connected(cx, &meta, log)?;
    }
    check()?;
    progress.stage(&plan.run_id, Stage::Connected);
    // Capabilities that act while traffic runs get a thread each; the
    // workload runs here, and they stop when it is over.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (finished, during) = std::thread::scope(|s| {
        let handles: Vec<_> = caps
            .iter_mut()
            .filter(|c| c.acts_during())
            .map(|c| {
                let done = &done;
                s.spawn(move || c.during(cx, done))
            })
            .collect();
        let finished = wl.run(plan, stop);
        done.store(true, Ordering::SeqCst);
        let during: Result<(), Error> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (finished, during)
    });
    let finished = finished.during("running the workload")?;
    during?;
    progress.stage(&plan.run_id, Stage::WorkloadDone);
    Ok((meta, finished))
}

fn hosts(plan: &Plan) -> Vec<HostSummary> {
    plan.hosts
        .iter()
        .map(|h| HostSummary {
            name: h.name.clone(),
            ip: h.ip.to_string(),
            port: h.port,
            namespace: h.ns.clone(),
            congestion_control: h.stack.congestion_control.name().into(),
            bottleneck: h
                .bottleneck
                .map(|b| format!("{} buffer {}", b.rate, b.buffer)),
        })
        .collect()
}

fn connections(plan: &Plan, switch: &Switch, meta: &[ConnMeta]) -> Vec<ConnSummary> {
    plan.conns
        .iter()
        .map(|c| {
            let st = switch.conn_state(c.id).ok();
            ConnSummary {
                id: c.id,
                requester: format!("{}:{}", c.requester_ip, c.sport),
                responder: format!("{}:{}", c.responder_ip, c.dport),
                verb: c.verb.to_string(),
                messages: c.messages,
                message_size: c.message_size.0,
                tx_depth: c.tx_depth,
                data_mss: meta.iter().find(|m| m.id == c.id).map_or(0, |m| m.data_mss),
                data_isn: st.filter(|s| s.synced).map(|s| s.isn),
                tracking_cpu_moves: st.map_or(0, |s| s.cpu_moves),
            }
        })
        .collect()
}

/// The facts of the run that the plan and the workload give; the
/// capabilities add theirs (`Capability::collect`).
fn facts(plan: &Plan, finished: &Finished, before: &Counters) -> Result<RunFacts, Error> {
    let after = host_counters(plan)?;
    let counters = plan
        .hosts
        .iter()
        .map(|h| {
            let d = wirelab_netns::counters::delta(&before[&h.name], &after[&h.name]);
            (h.name.clone(), d)
        })
        .collect();
    let reports = &finished.reports;
    Ok(RunFacts {
        hosts: plan
            .hosts
            .iter()
            .map(|h| HostFacts {
                name: h.name.clone(),
                rto_min_ns: h.stack.rto_min.map(|r| r.0),
                early_retrans: h
                    .stack
                    .all_sysctls()
                    .into_iter()
                    .find(|(k, _)| k == "net.ipv4.tcp_early_retrans")
                    .map(|(_, v)| v),
            })
            .collect(),
        completed: reports
            .iter()
            .map(|r| (r.id, (r.messages.len() as u32, r.expected_messages)))
            .collect(),
        mct_ns: reports
            .iter()
            .map(|r| (r.id, r.messages.iter().map(|m| m.mct_ns).collect()))
            .collect(),
        counters,
        addresses: plan
            .hosts
            .iter()
            .map(|h| (h.name.clone(), IpAddr::V4(h.ip)))
            .collect(),
        ports: plan
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.port))
            .collect(),
        gids: plan
            .hosts
            .iter()
            .filter(|h| h.gids.len() > 1)
            .map(|h| {
                (
                    h.name.clone(),
                    h.gids.iter().map(|g| IpAddr::V4(*g)).collect(),
                )
            })
            .collect(),
        device_counters: wirelab_workload::roce::deltas(&finished.device_counters),
        cnp_interval_ns: plan
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.stack.roce.min_time_between_cnps.0))
            .collect(),
        roce_retransmit: plan
            .conns
            .iter()
            .filter_map(|c| {
                let r = c.roce?;
                let t = wirelab_roce::local_ack_timeout_ns(r.timeout)?;
                Some((c.id, (t, r.retry_cnt as u32)))
            })
            .collect(),
        roce_profile: plan
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.stack.roce.profile.clone()))
            .collect(),
        vaqm: Vec::new(),
        qcn: Vec::new(),
        // Read around the capture, in `Run::go`.
        bottleneck_drops: BTreeMap::new(),
    })
}

/// The spec's claims, plus one failed claim per analyzer that found a
/// violation the spec makes no claim about (a test of a stack known to
/// break a rule says how it breaks it).
fn claims(plan: &Plan, report: &Report) -> Vec<Claim> {
    let mut out = report.expect.clone();
    for an in &report.analyzers {
        let claimed = plan.expect.iter().any(|x| {
            x.finding
                .as_deref()
                .is_some_and(|f| f.split('.').next() == Some(an.name))
        });
        let first = an
            .findings
            .iter()
            .find(|f| f.kind == wirelab_analyze::Kind::Violation);
        if let (false, Some(f)) = (claimed, first) {
            out.push(Claim {
                claim: format!("{}: no violations", an.name),
                pass: false,
                observed: format!("{} violations: {}", an.violations, f.message),
            });
        }
    }
    out
}
