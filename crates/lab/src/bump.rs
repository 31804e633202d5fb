//! `wirelab bump`: the switch pipeline with its vAQM stage inline between
//! two existing interfaces of one namespace (NetBump's "bump on the wire",
//! seed 003 §3): each interface's frames leave through the other, marked
//! or dropped as the queues' disciplines say, every one mirrored into the
//! trace. It runs for `--duration` or until Ctrl-C, then writes the trace,
//! the analysis and a summary, and detaches, leaving the interfaces as it
//! found them (a registry entry lets `wirelab clean` do that for a bump
//! that was killed).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use wirelab_capture::{Dumper, Integrity};
use wirelab_dataplane::{Config, Switch};
use wirelab_netns::{in_netns, BumpAttach, BumpRegistration};
use wirelab_spec::BumpSpec;

use crate::summary::VqSummary;
use crate::{During, Error, Verdict};

pub struct Args<'a> {
    pub ns: &'a str,
    pub ifaces: [&'a str; 2],
    pub config: &'a Path,
    pub duration: Duration,
    pub out: &'a Path,
}

#[derive(Debug, Serialize)]
pub struct BumpSummary {
    pub schema: &'static str,
    pub namespace: String,
    pub interfaces: [String; 2],
    pub results: String,
    pub verdict: &'static str,
    pub duration_ms: u64,
    pub integrity: Integrity,
    pub vaqm: Vec<VqSummary>,
    pub analysis: wirelab_analyze::report::Report,
}

/// Reads and checks the bump's YAML against the two interfaces: a
/// `BadInput` naming what is wrong (the CLI's exit 2).
pub fn load(args: &Args) -> Result<(BumpSpec, [(u32, u32); 2]), Error> {
    let text = std::fs::read_to_string(args.config)
        .map_err(|e| Error::BadInput(format!("reading {}: {e}", args.config.display())))?;
    if !Path::new("/run/netns").join(args.ns).exists() {
        return Err(Error::BadInput(format!(
            "no network namespace `{}` (see `ip netns list`)",
            args.ns
        )));
    }
    if args.ifaces[0] == args.ifaces[1] {
        return Err(Error::BadInput(format!(
            "a bump needs two different interfaces, got `{}` twice",
            args.ifaces[0]
        )));
    }
    let mut links = [(0, 0); 2];
    for (i, dev) in args.ifaces.iter().enumerate() {
        links[i] = wirelab_netns::link_info(args.ns, dev).map_err(|e| {
            Error::BadInput(format!(
                "no interface `{dev}` in namespace `{}`: {e}",
                args.ns
            ))
        })?;
    }
    let mtu = links[0].1.min(links[1].1).max(68);
    let spec = wirelab_spec::parse_bump(&text, args.ifaces, mtu, wirelab_analyze::catalog())
        .map_err(|e| Error::BadInput(format!("{}: {e}", args.config.display())))?;
    Ok((spec, links))
}

/// The queues in the switch's terms: port 1 is the first interface, 2 the
/// second; a queue's `port` names the interface its packets leave by.
fn queues(spec: &BumpSpec, ifaces: [&str; 2]) -> Vec<wirelab_plan::VqPlan> {
    spec.vaqm
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| wirelab_plan::VqPlan {
            id: i as u32 + 1,
            port: q.port.as_deref().map(|p| {
                // Validated: a queue's port is one of the two interfaces.
                let n = ifaces.iter().position(|d| *d == p).unwrap_or(0) as u32 + 1;
                (n, p.to_string())
            }),
            destinations: Vec::new(),
            rate: q.rate,
            buffer: q.buffer,
            dctcp: q.dctcp.clone(),
            red: q.red.clone(),
            qcn: q.qcn.clone(),
            distributed: None,
            extension: None,
        })
        .collect()
}

pub fn run(
    args: &Args,
    spec: &BumpSpec,
    links: [(u32, u32); 2],
    abort: &AtomicBool,
    progress: &dyn crate::Progress,
) -> Result<(BumpSummary, Verdict), Error> {
    let started = Instant::now();
    let id = crate::new_run_id();
    let dir: PathBuf = args.out.join(format!("bump-{}-{id}", args.ns));
    std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
    let plans = queues(spec, args.ifaces);
    let switch = Switch::load(Config {
        snap_len: spec.capture.snap_len,
        ring_bytes: spec.capture.ring_size.0 as u32,
        max_conn: 1,
        vaqm: !plans.is_empty(),
        ..Config::default()
    })
    .during("loading the switch")?;
    for (i, (ifindex, _)) in links.iter().enumerate() {
        let (other, _) = links[1 - i];
        let at = format!("adding port {}", args.ifaces[i]);
        switch.add_port(*ifindex, i as u32 + 1).during(at.clone())?;
        switch
            .set_default_out(i as u32 + 1, other, 2 - i as u32)
            .during(at)?;
    }
    for q in &plans {
        let at = format!("setting up virtual queue {}", q.id);
        switch
            .set_vq(q.id, &crate::switch::vq_config(q))
            .during(at.clone())?;
        if let Some((port, _)) = &q.port {
            switch.vq_for_port(*port, q.id).during(at)?;
        }
    }
    // Record what is about to be attached before attaching it.
    let attach: Vec<BumpAttach> = args
        .ifaces
        .iter()
        .map(|d| {
            Ok(BumpAttach {
                ns: args.ns.to_string(),
                ifname: d.to_string(),
                created_clsact: !wirelab_netns::has_clsact(args.ns, d)
                    .during(format!("looking at the qdiscs of {d}"))?,
            })
        })
        .collect::<Result<_, Error>>()?;
    let registration = BumpRegistration::new(&id, &attach).during("registering the bump")?;
    // Detaches on every way out of here, errors included.
    struct Attached<'a> {
        switch: &'a Switch,
        ns: &'a str,
        attach: Vec<(i32, BumpAttach)>,
    }
    impl Drop for Attached<'_> {
        fn drop(&mut self) {
            let _ = in_netns(self.ns, || {
                for (ifindex, a) in &self.attach {
                    if self.switch.detach(*ifindex, a.created_clsact).is_err() {
                        let _ = a.remove();
                    }
                }
            });
        }
    }
    let mut attached = Attached {
        switch: &switch,
        ns: args.ns,
        attach: Vec::new(),
    };
    // Packets the kernel counted into each interface: the integrity
    // check's independent witness.
    let rx = || -> Result<Vec<u64>, Error> {
        args.ifaces
            .iter()
            .map(|d| wirelab_netns::link_rx_packets(args.ns, d))
            .collect::<Result<_, _>>()
            .during("reading interface counters")
    };
    // The interfaces may carry traffic while the program is attached and
    // detached, and neither happens at the instant a counter is read. So
    // the counters are read four times: before attaching and after
    // detaching (every frame the program saw is counted between them),
    // and after attaching and before detaching (every frame counted
    // between those two was seen: the program stays attached 20 ms more,
    // for the frames still in the backlog).
    let rx_before = rx()?;
    let clock_offset = wirelab_capture::monotonic_to_realtime_ns();
    let dumper = Dumper::start(&switch, Duration::ZERO).during("starting the capture")?;
    for (i, (ifindex, _)) in links.iter().enumerate() {
        attached.attach.push((*ifindex as i32, attach[i].clone()));
        in_netns(args.ns, || switch.attach_ingress(*ifindex as i32))
            .during(format!("entering {}", args.ns))?
            .during(format!("attaching to {}", args.ifaces[i]))?;
    }
    let rx_attached = rx()?;
    progress.stage(&id, crate::Stage::SwitchArmed);
    let until = Instant::now() + args.duration;
    while Instant::now() < until && !abort.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rx_detaching = rx()?;
    std::thread::sleep(Duration::from_millis(20));
    // Detach first: from here on nothing enters, so counters and the
    // ring describe the same packets.
    drop(attached);
    std::thread::sleep(Duration::from_millis(20));
    let rx_after = rx()?;
    let (counts, info) = crate::switch::port_records(
        &switch,
        (0..2).map(|i| {
            (
                i as u32 + 1,
                args.ifaces[i].to_string(),
                rx_detaching[i] - rx_attached[i],
                rx_after[i] - rx_before[i],
            )
        }),
    )?;
    let seq = switch.mirror_seq().during("reading the mirror sequence")?;
    let records = dumper.finish().during("draining the capture")?;
    let integrity = wirelab_capture::check_integrity(&records, &counts, seq);
    let trace_path = dir.join("trace.pcapng");
    wirelab_capture::write_pcapng(
        &trace_path,
        &records,
        &info,
        spec.capture.snap_len,
        clock_offset,
    )
    .during(format!("writing {}", trace_path.display()))?;
    let trace = wirelab_trace::read(&trace_path).during("reading the trace back")?;
    let facts = wirelab_analyze::RunFacts {
        vaqm: crate::capability::vq_facts(&plans, &[]),
        ..Default::default()
    };
    let report = wirelab_analyze::report::build(
        &trace_path.display().to_string(),
        &trace,
        wirelab_analyze::Options::default(),
        Some(&facts),
        &spec.analyzers(wirelab_analyze::catalog()),
        &[],
        &|_| {},
    );
    crate::results::write_html(&dir.join("report.html"), &report)?;
    let vaqm = plans
        .iter()
        .map(|q| VqSummary::of(q, &switch, ""))
        .collect::<Result<Vec<_>, _>>()?;
    drop(registration);
    let violations = report.analyzers.iter().any(|a| a.violations > 0);
    let verdict = Verdict::of(false, integrity.valid, violations);
    let summary = BumpSummary {
        schema: "wirelab.bump/1",
        namespace: args.ns.to_string(),
        interfaces: [args.ifaces[0].to_string(), args.ifaces[1].to_string()],
        results: dir.display().to_string(),
        verdict: verdict.name(),
        duration_ms: started.elapsed().as_millis() as u64,
        integrity,
        vaqm,
        analysis: report,
    };
    let json = serde_json::to_vec_pretty(&summary).during("encoding the summary")?;
    std::fs::write(dir.join("summary.json"), json).during("writing summary.json")?;
    Ok((summary, verdict))
}
