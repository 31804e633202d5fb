//! One `wirelab run`: lab up -> switch armed -> workload -> capture ->
//! integrity -> analysis -> expectations -> results folder -> lab down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use wirelab_analyze::expect::{RunFacts, Verdict};
use wirelab_analyze::report::Report;
use wirelab_analyze::truth::{TruthEvent, TruthPoint, VqFacts};
use wirelab_analyze::Evidence;
use wirelab_capture::{Dumper, Integrity, PortCounts, PortInfo, TruthDumper};
use wirelab_dataplane::ext::Extension;
use wirelab_dataplane::{Action, Config, Discipline, FlowKey, Switch, Track, VqConfig};
use wirelab_netns::{in_netns, Lab};
use wirelab_plan::{Plan, Target};
use wirelab_spec::Spec;
use wirelab_workload::ConnReport;

use crate::code;

pub struct Options {
    pub out: PathBuf,
    pub timeout: Duration,
    pub abort: Arc<AtomicBool>,
}

pub fn require_root() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("this needs root (network namespaces and BPF); run it with sudo");
    }
    Ok(())
}

#[derive(Debug, Serialize)]
pub struct HostSummary {
    pub name: String,
    pub ip: String,
    pub port: u32,
    pub namespace: String,
    pub congestion_control: String,
    pub bottleneck: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ConnSummary {
    pub id: u32,
    pub requester: String,
    pub responder: String,
    pub verb: String,
    pub messages: u32,
    pub message_size: u64,
    pub tx_depth: u32,
    /// Runtime metadata reported by the workload and the switch.
    pub data_mss: u32,
    pub data_isn: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct EventSummary {
    pub id: u32,
    pub conn: u32,
    pub target: String,
    pub iteration: String,
    pub action: String,
    /// The switch's data packet index the event was armed at (0 = all).
    pub armed_index: u32,
    pub hits: u64,
    pub hit: Vec<Evidence>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    /// Version of this document's layout.
    pub schema: &'static str,
    pub name: String,
    pub description: Option<String>,
    pub run_id: String,
    pub results: String,
    pub verdict: &'static str,
    pub duration_ms: u64,
    pub mtu: u32,
    pub hosts: Vec<HostSummary>,
    pub connections: Vec<ConnSummary>,
    pub events: Vec<EventSummary>,
    pub integrity: Integrity,
    pub analysis: Report,
    pub workload: Vec<ConnReport>,
    pub expect: Vec<Verdict>,
    pub counters: BTreeMap<String, BTreeMap<String, i64>>,
    /// RoCE: the QPNs and initial PSNs each connection used.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roce: Vec<wirelab_workload::roce::RoceMeta>,
    /// RoCE: each host's device counters before and after the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_counters: Vec<wirelab_workload::roce::DeviceCounters>,
    /// vAQM: each virtual queue as the switch left it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vaqm: Vec<VqSummary>,
    /// QCN: what each reaction point received and did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reaction_points: Vec<wirelab_workload::qcn::RpReport>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct VqSummary {
    pub id: u32,
    /// The host whose switch port the queue emulates.
    pub port: Option<String>,
    pub destinations: Vec<String>,
    pub rate: String,
    pub discipline: String,
    pub packets: u64,
    pub marks: u64,
    pub drops: u64,
    /// Marks that fell on Not-ECT packets: RED dropped them, DCTCP let
    /// them pass unmarked.
    pub unmarkable: u64,
    pub bytes_at_end: u64,
    /// Updates from a different CPU than the one before (should be 0: the
    /// lab runs the switch on one CPU and the stage takes no lock).
    pub cpu_moves: u64,
    /// Packets that found the emulated buffer full (left out of the estimate).
    pub overflows: u64,
    /// QCN: frames the congestion point sampled (the CNMs it sent are the
    /// trace's `cnm=` packets, and each reaction point's count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qcn_samples: Option<u64>,
}

pub struct Outcome {
    pub summary: Summary,
    pub code: u8,
}

fn new_run_id() -> String {
    let r: u32 = rand::random();
    format!("{:06x}", r & 0xff_ffff)
}

fn check_abort(abort: &AtomicBool) -> Result<()> {
    if abort.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

fn host_counters(plan: &Plan) -> Result<BTreeMap<String, BTreeMap<String, i64>>> {
    let mut out = BTreeMap::new();
    for h in &plan.hosts {
        let c = in_netns(&h.ns, wirelab_netns::counters::read_current)?
            .with_context(|| format!("reading kernel counters of {}", h.name))?;
        out.insert(h.name.clone(), c);
    }
    Ok(out)
}

fn target_text(t: Target) -> String {
    match t {
        Target::All => "all".into(),
        Target::Index(i) => format!("packet {i}"),
        Target::InMessage { message, packet } => format!("message {message} packet {packet}"),
    }
}

fn dp_action(a: wirelab_spec::Action, edit: Option<wirelab_spec::Edit>) -> Action {
    match a {
        wirelab_spec::Action::Drop => Action::Drop,
        wirelab_spec::Action::Ecn => Action::Ecn,
        wirelab_spec::Action::Corrupt => Action::Corrupt,
        // Validation made sure an edit names its field.
        wirelab_spec::Action::Edit => match edit.map(|e| e.migreq) {
            Some(0) => Action::MigReqClear,
            _ => Action::MigReqSet,
        },
    }
}

fn vaqm_summary(plan: &Plan, switch: &Switch) -> Result<Vec<VqSummary>> {
    let ext = plan
        .vaqm_extension
        .as_deref()
        .and_then(|p| p.file_name())
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    plan.vaqm
        .iter()
        .map(|q| VqSummary::of(q, switch, &ext))
        .collect()
}

impl VqSummary {
    /// Queue `q` as the switch left it; `ext` names the user discipline's
    /// file, if the queue runs one.
    pub(crate) fn of(q: &wirelab_plan::VqPlan, switch: &Switch, ext: &str) -> Result<VqSummary> {
        let st = switch.vq_state(q.id)?;
        let discipline = match vq_config(q).discipline {
            Discipline::None => "estimate only".to_string(),
            Discipline::Dctcp { k_bytes } => format!("dctcp K {k_bytes}B"),
            Discipline::Red {
                min_bytes,
                max_bytes,
                w_q,
                max_p,
                drop,
            } => format!(
                "red {min_bytes}B..{max_bytes}B w_q {w_q} max_p {max_p} {}",
                if drop { "drop" } else { "mark" }
            ),
            Discipline::Qcn(p) => format!(
                "qcn Q_eq {}B w {} fb_max {} p {:.3}..{:.3}",
                p.q_eq,
                p.w,
                p.fb_max,
                p.p_min as f64 / wirelab_qcn::cp::P_ONE as f64,
                p.p_max as f64 / wirelab_qcn::cp::P_ONE as f64
            ),
            Discipline::Extension { .. } => format!(
                "extension {ext} {:?}",
                q.extension.as_deref().unwrap_or_default()
            ),
        };
        Ok(VqSummary {
            id: q.id,
            port: q.port.as_ref().map(|p| p.1.clone()),
            destinations: q.destinations.iter().map(|d| d.to_string()).collect(),
            rate: q.rate.to_string(),
            discipline,
            packets: st.pkts,
            marks: st.marks,
            drops: st.drops,
            unmarkable: st.unmarkable,
            bytes_at_end: st.bytes,
            cpu_moves: st.cpu_moves,
            overflows: st.overflows,
            qcn_samples: q.qcn.as_ref().map(|_| st.samples),
        })
    }
}

/// Each switch port's counters next to what the kernel counted into it
/// (the integrity check), and its name and counts for the pcapng: from
/// (port, name, kernel rx packets).
pub(crate) fn port_records(
    switch: &Switch,
    ports: impl Iterator<Item = (u32, String, u64)>,
) -> Result<(Vec<PortCounts>, Vec<PortInfo>)> {
    let mut counts = Vec::new();
    let mut info = Vec::new();
    for (port, name, kernel_rx) in ports {
        let c = switch.counters(port)?;
        counts.push(PortCounts {
            port,
            kernel_rx,
            switch_rx: c.rx_pkts,
            mirrored: c.mirrored,
            mirror_lost: c.mirror_lost,
        });
        info.push(PortInfo {
            port,
            name,
            received: c.rx_pkts,
            lost: c.mirror_lost,
        });
    }
    Ok((counts, info))
}

/// A run's verdict and exit code: an interruption first, then an
/// incomplete trace, then any failed claim.
pub(crate) fn verdict(interrupted: bool, valid: bool, failed: bool) -> (&'static str, u8) {
    if interrupted {
        ("INTERRUPTED", code::INTERRUPTED)
    } else if !valid {
        ("INVALID", code::INVALID)
    } else if failed {
        ("FAIL", code::EXPECT_FAILED)
    } else {
        ("PASS", code::OK)
    }
}

/// A planned virtual queue in the switch's terms.
pub(crate) fn vq_config(q: &wirelab_plan::VqPlan) -> VqConfig {
    let discipline = if let Some(p) = &q.extension {
        let mut params = [0; wirelab_dataplane::EXT_PARAMS];
        params[..p.len()].copy_from_slice(p); // at most 8: validated
        Discipline::Extension { params }
    } else if let Some(d) = &q.dctcp {
        Discipline::Dctcp { k_bytes: d.k.0 }
    } else if let Some(c) = &q.qcn {
        Discipline::Qcn(wirelab_qcn::cp::CpParams {
            q_eq: c.q_eq.0,
            w: u64::from(c.w),
            fb_max: u64::from(c.fb_max),
            p_min: wirelab_qcn::cp::prob(c.p_min),
            p_max: wirelab_qcn::cp::prob(c.p_max),
        })
    } else if let Some(r) = &q.red {
        Discipline::Red {
            min_bytes: r.min.0,
            max_bytes: r.max.0,
            w_q: r.w_q,
            max_p: r.max_p,
            drop: r.action == wirelab_spec::vaqm::RedAction::Drop,
        }
    } else {
        Discipline::None
    };
    VqConfig {
        rate_bps: q.rate.0,
        buffer_bytes: q.buffer.map_or(0, |b| b.0),
        discipline,
    }
}

/// Loads the switch, fills its port, forwarding and connection tables and
/// attaches it to every switch port (`forward_only`: the benchmark baseline).
/// (host index, virtual queue) of each queue whose port has a real
/// bottleneck behind it: the ground truth the `vaqm` analyzer compares
/// the estimate with (NetBump §6.2.2).
fn truth_watches(plan: &Plan) -> Vec<(usize, u32)> {
    plan.vaqm
        .iter()
        .filter_map(|q| {
            let (port, _) = q.port.as_ref()?;
            let h = plan.hosts.iter().position(|h| h.port == *port)?;
            plan.hosts[h].bottleneck.as_ref()?;
            Some((h, q.id))
        })
        .collect()
}

/// Compiles the spec's own vAQM discipline (`vaqm.extension`) and links it
/// with the switch, before anything touches the host: a discipline that
/// does not compile fails the run with clang's file:line diagnostics.
pub fn build_extension(spec: &Spec) -> Result<Option<Extension>> {
    let Some(src) = spec.vaqm.as_ref().and_then(|v| v.extension.as_ref()) else {
        return Ok(None);
    };
    let work = tempfile::tempdir().context("creating a directory to build the discipline in")?;
    let e = wirelab_dataplane::ext::build(src, work.path())
        .map_err(|e| anyhow::anyhow!("vaqm.extension: {e}"))?;
    Ok(Some(e))
}

pub fn arm_switch(
    plan: &Plan,
    lab: &Lab,
    forward_only: bool,
    ext: Option<&Extension>,
) -> Result<Switch> {
    let watches = if forward_only {
        Vec::new()
    } else {
        truth_watches(plan)
    };
    let ext = ext.filter(|_| !forward_only);
    let switch = Switch::load_with(
        Config {
            snap_len: plan.snap_len,
            ring_bytes: plan.ring_bytes as u32,
            max_conn: plan.conns.len() as u32,
            vaqm: !plan.vaqm.is_empty(),
            test_clock: false,
            // Every switch port is steered to one CPU (Lab::up), so the
            // pipeline is serial; VqState::cpu_moves verifies it per run.
            vaqm_lock: false,
            truth: !watches.is_empty(),
            extension: ext.is_some(),
        },
        ext,
    )
    .with_context(|| match ext {
        // The verifier checks the discipline with the pipeline: its log
        // names the hook ("Validating wl_ext_process() ...").
        Some(e) => format!(
            "loading the switch with the discipline {}",
            e.source.display()
        ),
        None => "loading the switch".into(),
    })?;
    if !watches.is_empty() {
        let netns = wirelab_netns::netns_inode(&plan.switch_ns)?;
        for (h, vq) in &watches {
            switch.watch_qdisc(netns, lab.switch_ifindex[*h], *vq)?;
        }
    }
    for (i, h) in plan.hosts.iter().enumerate() {
        let ifindex = lab.switch_ifindex[i];
        switch.add_port(ifindex, h.port)?;
        switch.add_fwd(h.mac, ifindex, h.port)?;
    }
    for q in &plan.vaqm {
        switch.set_vq(q.id, &vq_config(q))?;
        if let Some((port, _)) = &q.port {
            switch.vq_for_port(*port, q.id)?;
        }
        for d in &q.destinations {
            switch.vq_for_dst(*d, q.id)?;
        }
    }
    // RoCE connections are armed once their QPs exist (arm_roce_flows).
    for c in plan.conns.iter().filter(|c| c.roce.is_none()) {
        let (rq, rs) = (&plan.hosts[c.requester], &plan.hosts[c.responder]);
        let fwd = FlowKey {
            saddr: rq.ip,
            daddr: rs.ip,
            sport: c.sport,
            dport: c.dport,
        };
        let rev = FlowKey {
            saddr: rs.ip,
            daddr: rq.ip,
            sport: c.dport,
            dport: c.sport,
        };
        switch.add_flow(fwd, c.id, c.requester_sends_data())?;
        switch.add_flow(rev, c.id, c.responder_sends_data())?;
    }
    in_netns(&plan.switch_ns, || -> Result<()> {
        for ifindex in &lab.switch_ifindex {
            if forward_only {
                switch.attach_forward_only(*ifindex as i32)?;
            } else {
                switch.attach_ingress(*ifindex as i32)?;
            }
        }
        Ok(())
    })??;
    Ok(switch)
}

/// Arms RoCE connections from the QPNs and initial PSNs the workload chose
/// (Lumina §3.3, Fig. 2: srcIP, dstIP, dstQPN identify a QP connection).
pub fn arm_roce_flows(
    plan: &Plan,
    switch: &Switch,
    meta: &[wirelab_workload::roce::RoceMeta],
) -> Result<()> {
    for (c, m) in plan.conns.iter().zip(meta) {
        let (rq, rs) = (c.requester_ip, c.responder_ip);
        // Data flows towards the responder for send/write, and back for read
        // (both ways for a combination), numbered from the requester's
        // initial PSN either way: a read request takes one PSN per response
        // packet and the responses carry those PSNs (IBTA §9.7).
        let ipsn = m.ipsn;
        let (to_rs, to_rq) = match (c.requester_sends_data(), c.responder_sends_data()) {
            (true, true) => (Track::First { ipsn }, Track::Second { ipsn }),
            (true, false) => (Track::First { ipsn }, Track::No),
            (false, _) => (Track::No, Track::First { ipsn }),
        };
        switch.add_roce_flow(rq, rs, m.responder_qpn, c.id, to_rs)?;
        switch.add_roce_flow(rs, rq, m.requester_qpn, c.id, to_rq)?;
    }
    Ok(())
}

/// Arms the plan's events with the runtime MSS of each connection.
pub fn arm_events(
    plan: &Plan,
    switch: &Switch,
    meta: &[wirelab_workload::ConnMeta],
    log: &mut String,
) -> Result<()> {
    if plan.events.iter().any(|e| e.edit.is_some()) {
        let deltas: Vec<u32> = (0..wirelab_dataplane::ICRC_SHIFTS)
            .map(wirelab_roce::packet::migreq_icrc_delta)
            .collect();
        switch.set_icrc_migreq_table(&deltas)?;
    }
    for e in &plan.events {
        let conn = &plan.conns[e.conn as usize - 1];
        let mss = meta[e.conn as usize - 1].data_mss;
        let index = e.resolve_index(conn, mss);
        switch.add_event(
            e.conn,
            index,
            e.iteration,
            dp_action(e.action, e.edit),
            e.id,
        )?;
        log.push_str(&format!(
            "event {} armed: conn {} index {} iteration {} {}\n",
            e.id,
            e.conn,
            index,
            e.iteration,
            e.action.name()
        ));
    }
    Ok(())
}

/// Runs one spec; `ext` is its discipline from `build_extension`.
pub fn run(spec: &Spec, ext: Option<&Extension>, opts: &Options) -> Result<Outcome> {
    let started = Instant::now();
    let plan = wirelab_plan::plan(spec, &new_run_id());
    let dir = opts.out.join(format!("{}-{}", plan.name, plan.run_id));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("plan.json"), serde_json::to_vec_pretty(&plan)?)?;
    let mut log = String::new();

    // DCTCP end hosts: the struct_ops congestion control is kernel-wide and
    // lives as long as this guard (unless another run already holds it).
    let _dctcp = dctcp_for(&plan)?;
    let lab = Lab::up(&plan).context("bringing the lab up")?;
    log.push_str(&format!("lab up: {}\n", lab.namespaces().join(" ")));
    check_abort(&opts.abort)?;

    let switch = match arm_switch(&plan, &lab, false, ext) {
        Ok(s) => s,
        Err(e) => {
            // Bad input (a discipline the verifier refuses) leaves nothing
            // behind: not the lab (dropped on return), not the results.
            drop(lab);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let kernel_rx_before = lab.switch_port_rx(&plan)?;
    let counters_before = host_counters(&plan)?;
    let clock_offset = wirelab_capture::monotonic_to_realtime_ns();
    let dumper = Dumper::start(&switch, plan.capture_stall.as_std())?;
    let truth = if switch.config().truth {
        Some(TruthDumper::start(&switch)?)
    } else {
        None
    };

    // Hand-off (Lumina §3.3): 5-tuples are armed, then the handshakes run,
    // then the events are armed with the runtime MSS, then the messages go.
    let stop = wirelab_workload::Stop {
        abort: opts.abort.clone(),
        deadline: Instant::now() + opts.timeout,
        limit: opts.timeout,
    };
    let mut roce_meta = Vec::new();
    let mut device_counters = Vec::new();
    // QCN reaction points limit their hosts from before the first packet.
    let reaction_points = if plan.reaction_points.is_empty() {
        None
    } else {
        Some(
            wirelab_workload::qcn::start(&plan, &stop)
                .context("starting the QCN reaction points")?,
        )
    };
    let workload = (|| -> Result<(Vec<wirelab_workload::ConnMeta>, Vec<ConnReport>)> {
        if plan
            .conns
            .iter()
            .any(|c| c.transport == wirelab_spec::Transport::Udp)
        {
            // Nothing to hand off: UDP flows are not armed (no events).
            let meta = plan
                .conns
                .iter()
                .map(|c| wirelab_workload::ConnMeta {
                    id: c.id,
                    requester: std::net::SocketAddrV4::new(c.requester_ip, c.sport),
                    responder: std::net::SocketAddrV4::new(c.responder_ip, c.dport),
                    data_mss: plan.mtu - 28,
                })
                .collect();
            let reports = wirelab_workload::udp::run(&plan, &stop)?;
            return Ok((meta, reports));
        }
        if plan.conns.iter().any(|c| c.roce.is_some()) {
            let prepared = wirelab_workload::roce::prepare(&plan)?;
            roce_meta = prepared.meta.clone();
            arm_roce_flows(&plan, &switch, &roce_meta)?;
            let meta: Vec<wirelab_workload::ConnMeta> = plan
                .conns
                .iter()
                .zip(&roce_meta)
                .map(|(c, m)| {
                    let r = c.roce.expect("RoCE connection");
                    log.push_str(&format!(
                        "conn {}: QPN {:#x} -> {:#x}, IPSN {:#x}, path MTU {}\n",
                        c.id, m.requester_qpn, m.responder_qpn, m.ipsn, r.mtu
                    ));
                    wirelab_workload::ConnMeta {
                        id: c.id,
                        requester: std::net::SocketAddrV4::new(c.requester_ip, r.requester_sport),
                        responder: std::net::SocketAddrV4::new(c.responder_ip, 4791),
                        // One PSN per path-MTU payload: message-relative events
                        // resolve exactly as with a TCP MSS.
                        data_mss: r.mtu,
                    }
                })
                .collect();
            arm_events(&plan, &switch, &meta, &mut log)?;
            check_abort(&opts.abort)?;
            let (reports, counters) = wirelab_workload::roce::run(&plan, prepared, &stop);
            device_counters = counters;
            return Ok((meta, reports));
        }
        let prepared = wirelab_workload::prepare(&plan)?;
        check_abort(&opts.abort)?;
        let connected = wirelab_workload::connect(&plan, prepared)?;
        let meta = connected.meta.clone();
        for m in &meta {
            log.push_str(&format!(
                "conn {}: {} -> {} data mss {}\n",
                m.id, m.requester, m.responder, m.data_mss
            ));
        }
        arm_events(&plan, &switch, &meta, &mut log)?;
        check_abort(&opts.abort)?;
        let reports = wirelab_workload::run(&plan, connected, &stop);
        Ok((meta, reports))
    })();
    // Let the last packets (FIN/ACK) cross the switch before counting.
    std::thread::sleep(Duration::from_millis(50));
    let interrupted = opts.abort.load(Ordering::SeqCst);
    let (meta, reports) = match workload {
        Ok(v) => v,
        Err(e) if interrupted => {
            drop(lab);
            return Err(e.context("run stopped"));
        }
        Err(e) => return Err(e.context("running the workload")),
    };
    let kernel_rx_after = lab.switch_port_rx(&plan)?;
    let counters_after = host_counters(&plan)?;
    let rp_reports = match reaction_points {
        Some(r) => r.finish().context("stopping the QCN reaction points")?,
        None => Vec::new(),
    };
    let rp_facts: Vec<wirelab_analyze::rp::RpFacts> = rp_reports
        .iter()
        .zip(&plan.reaction_points)
        .map(|(r, p)| wirelab_analyze::rp::RpFacts {
            host: r.host.clone(),
            cnms: r.cnms,
            line_rate_bps: p.params.line_rate,
            points: r
                .changes
                .iter()
                .map(|c| wirelab_analyze::rp::RpPoint {
                    host: r.host.clone(),
                    ts_ns: (i128::from(c.now_ns) + clock_offset) as u64,
                    current_bps: c.current_bps,
                    target_bps: c.target_bps,
                    fb: c.fb,
                })
                .collect(),
        })
        .collect();

    let (port_counts, port_info) = port_records(
        &switch,
        plan.hosts.iter().enumerate().map(|(i, h)| {
            (
                h.port,
                format!("{}({})", h.switch_ifname, h.name),
                kernel_rx_after[i] - kernel_rx_before[i],
            )
        }),
    )?;
    let seq_issued = switch.mirror_seq()?;
    // Counters first, then the drain: every packet counted has its record in
    // the ring by now, so the trace can only be complete or honestly short.
    let records = dumper.finish()?;
    let truth = match truth {
        Some(t) => {
            let lost = switch.truth_lost()?;
            if lost > 0 {
                log.push_str(&format!(
                    "ground truth: {lost} samples lost to a full ring; the comparison is partial\n"
                ));
            }
            truth_points(&t.finish()?, clock_offset)
        }
        None => Vec::new(),
    };
    if !truth.is_empty() {
        wirelab_analyze::truth::write_csv(&dir.join(wirelab_analyze::truth::TRUTH_FILE), &truth)?;
    }
    if !rp_facts.is_empty() {
        let all: Vec<_> = rp_facts
            .iter()
            .flat_map(|f| f.points.iter().cloned())
            .collect();
        wirelab_analyze::rp::write_csv(&dir.join(wirelab_analyze::rp::RP_FILE), &all)?;
    }
    let integrity = wirelab_capture::check_integrity(&records, &port_counts, seq_issued);
    let trace_path = dir.join("trace.pcapng");
    wirelab_capture::write_pcapng(
        &trace_path,
        &records,
        &port_info,
        plan.snap_len,
        clock_offset,
    )?;

    // Analyze the file as written: the same path `wirelab analyze` takes.
    let trace = wirelab_trace::read(&trace_path)?;
    let opts = wirelab_analyze::Options::for_hosts(
        plan.hosts.iter().map(|h| {
            let er = h
                .stack
                .all_sysctls()
                .into_iter()
                .find(|(k, _)| k == "net.ipv4.tcp_early_retrans")
                .map(|(_, v)| v);
            (h.stack.rto_min.map(|r| r.0), er)
        }),
        None,
    );
    let mut counters = BTreeMap::new();
    for h in &plan.hosts {
        counters.insert(
            h.name.clone(),
            wirelab_netns::counters::delta(&counters_before[&h.name], &counters_after[&h.name]),
        );
    }
    let facts = RunFacts {
        completed: reports
            .iter()
            .map(|r| (r.id, (r.messages.len() as u32, r.expected_messages)))
            .collect(),
        mct_ns: reports
            .iter()
            .map(|r| (r.id, r.messages.iter().map(|m| m.mct_ns).collect()))
            .collect(),
        counters: counters.clone(),
        addresses: plan
            .hosts
            .iter()
            .map(|h| (h.name.clone(), std::net::IpAddr::V4(h.ip)))
            .collect(),
        gids: plan
            .hosts
            .iter()
            .filter(|h| h.gids.len() > 1)
            .map(|h| {
                let g = h.gids.iter().map(|g| std::net::IpAddr::V4(*g)).collect();
                (h.name.clone(), g)
            })
            .collect(),
        device_counters: wirelab_workload::roce::deltas(&device_counters),
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
        vaqm: vq_facts(&plan.vaqm, &truth),
        qcn: rp_facts,
    };
    let report = wirelab_analyze::report::build(
        &trace_path.display().to_string(),
        &trace,
        opts,
        Some(&facts),
        &spec.analyzers(),
        &plan.expect,
        &|_| {},
    );
    let mut verdicts = report.expect.clone();
    // An analyzer's violations fail the run unless the spec makes a claim
    // about that analyzer's findings (a test of a stack known to break a
    // rule says how it breaks it).
    for an in &report.analyzers {
        let claimed = plan.expect.iter().any(|x| {
            x.finding
                .as_deref()
                .is_some_and(|f| f.split('.').next() == Some(an.name))
        });
        if !claimed
            && an
                .findings
                .iter()
                .any(|f| f.kind == wirelab_analyze::Kind::Violation)
        {
            let first = an
                .findings
                .iter()
                .find(|f| f.kind == wirelab_analyze::Kind::Violation)
                .map_or(String::new(), |f| format!(": {}", f.message));
            verdicts.push(Verdict {
                claim: format!("{}: no violations", an.name),
                pass: false,
                observed: format!("{} violations{first}", an.violations),
            });
        }
    }
    let analysis = &report.analysis;

    let mut events = Vec::new();
    for e in &plan.events {
        let conn = &plan.conns[e.conn as usize - 1];
        let index = e.resolve_index(conn, meta[e.conn as usize - 1].data_mss);
        let hit: Vec<Evidence> = analysis
            .connections
            .iter()
            .filter(|c| c.id == e.conn)
            .flat_map(|c| c.events.iter().filter(|a| a.event_id == e.id).map(|a| a.at))
            .collect();
        events.push(EventSummary {
            id: e.id,
            conn: e.conn,
            target: target_text(e.target),
            iteration: if e.iteration == 0 {
                "all".into()
            } else {
                e.iteration.to_string()
            },
            action: e.action.name().into(),
            armed_index: index,
            hits: switch.event_hits(e.conn, index, e.iteration)?,
            hit,
        });
    }
    let connections = plan
        .conns
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
                data_mss: meta[c.id as usize - 1].data_mss,
                data_isn: st.filter(|s| s.synced).map(|s| s.isn),
            }
        })
        .collect();
    let workload_failed = reports.iter().find_map(|r| r.error.clone());
    let expect_failed = verdicts.iter().any(|v| !v.pass) || workload_failed.is_some();
    let (verdict, code) = verdict(interrupted, integrity.valid, expect_failed);
    let summary = Summary {
        schema: "wirelab.run/1",
        name: plan.name.clone(),
        description: spec.description.clone(),
        run_id: plan.run_id.clone(),
        results: dir.display().to_string(),
        verdict,
        duration_ms: started.elapsed().as_millis() as u64,
        mtu: plan.mtu,
        hosts: plan
            .hosts
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
            .collect(),
        connections,
        events,
        integrity,
        analysis: report,
        workload: reports,
        expect: verdicts,
        counters,
        roce: roce_meta,
        device_counters,
        vaqm: vaqm_summary(&plan, &switch)?,
        reaction_points: rp_reports,
        error: workload_failed,
    };
    write_results(&dir, &summary, &log, &port_counts)?;
    drop(lab);
    Ok(Outcome { summary, code })
}

/// Registers wirelab's DCTCP when a host of the plan uses it.
pub fn dctcp_for(plan: &Plan) -> Result<Option<wirelab_dataplane::dctcp::Dctcp>> {
    use wirelab_spec::CongestionControl;
    if !plan
        .hosts
        .iter()
        .any(|h| h.stack.congestion_control == CongestionControl::Dctcp)
    {
        return Ok(None);
    }
    if wirelab_dataplane::dctcp::registered() {
        return Ok(None);
    }
    Ok(Some(
        wirelab_dataplane::dctcp::Dctcp::register().context("registering DCTCP (struct_ops)")?,
    ))
}

/// Samples in the trace's clock (ns since the epoch).
fn truth_points(samples: &[wirelab_dataplane::TruthSample], clock_offset: i128) -> Vec<TruthPoint> {
    samples
        .iter()
        .map(|s| TruthPoint {
            ts_ns: (i128::from(s.ts_ns) + clock_offset) as u64,
            vq: s.vq,
            event: if s.enqueue {
                TruthEvent::Enqueue
            } else {
                TruthEvent::Dequeue
            },
            actual_bytes: u64::from(s.actual),
            actual_packets: s.qlen,
            virtual_bytes: s.virt,
            packet_bytes: s.len,
            packets: s.packets,
        })
        .collect()
}

/// What the `vaqm` analyzer needs about each queue.
pub fn vq_facts(queues: &[wirelab_plan::VqPlan], truth: &[TruthPoint]) -> Vec<VqFacts> {
    queues
        .iter()
        .map(|q| VqFacts {
            id: q.id,
            port: q.port.as_ref().map(|p| p.1.clone()),
            rate_bps: q.rate.0,
            dctcp: q.dctcp.clone(),
            red: q.red.clone(),
            qcn: q.qcn.clone(),
            buffer_bytes: q.buffer.map_or(0, |b| b.0),
            distributed: q.distributed.clone(),
            truth: truth.iter().filter(|p| p.vq == q.id).copied().collect(),
        })
        .collect()
}

fn write_results(dir: &Path, s: &Summary, log: &str, ports: &[PortCounts]) -> Result<()> {
    std::fs::write(dir.join("summary.json"), serde_json::to_vec_pretty(s)?)?;
    std::fs::write(
        dir.join("analysis.json"),
        serde_json::to_vec_pretty(&s.analysis)?,
    )?;
    crate::analyze::write_html(&dir.join("report.html"), &s.analysis)?;
    let counters = serde_json::json!({
        "hosts": s.counters,
        "switch_ports": ports,
    });
    std::fs::write(
        dir.join("counters.json"),
        serde_json::to_vec_pretty(&counters)?,
    )?;
    let mut wl = log.to_string();
    for r in &s.workload {
        for m in &r.messages {
            wl.push_str(&format!(
                "conn {} message {} {} posted {} completed {} mct_ns {}\n",
                r.id,
                m.message,
                m.verb.name(),
                m.posted_ns,
                m.completed_ns,
                m.mct_ns
            ));
        }
        if let Some(e) = &r.error {
            wl.push_str(&format!("conn {} error: {e}\n", r.id));
        }
    }
    std::fs::write(dir.join("workload.log"), wl)?;
    Ok(())
}
