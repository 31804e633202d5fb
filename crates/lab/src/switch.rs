//! The switch of a lab: loaded with the stages the run's capabilities ask
//! for, its port and forwarding tables filled from the plan, attached to
//! every switch port; and the conversions from plan terms to switch terms.

use wirelab_capture::{PortCounts, PortInfo};
use wirelab_dataplane::ext::Extension;
use wirelab_dataplane::{Config, Discipline, Switch, VqConfig};
use wirelab_netns::{in_netns, Lab};
use wirelab_plan::Plan;
use wirelab_workload::Flow;

use crate::capability::{Capability, Cx};
use crate::{During, Error};

/// What the switch ports run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The whole pipeline: classification, the capabilities' stages,
    /// mirroring.
    Pipeline,
    /// Forwarding only: the benchmark baseline.
    ForwardOnly,
    /// Benchmarks: the pipeline with its capabilities armed, cut after
    /// this many stages (`wirelab_dataplane::STAGES`), then forwarded as
    /// the baseline does; what each stage costs is the difference.
    Cut(u8),
    /// Benchmarks: the pipeline with its capabilities armed, cut after
    /// this many stages as `Cut` is (0: whole; `BENCH_FLOOR`: the capture
    /// floor), and the forward-only baseline in turns within it as
    /// `set_bench_forward` says (`Config::bench_alternate`).
    Alternating(u8),
}

/// The load-time configuration: the plan's capture settings plus what each
/// capability needs.
pub fn config(plan: &Plan, caps: &[Box<dyn Capability>]) -> Config {
    let mut config = Config {
        snap_len: plan.snap_len,
        ring_bytes: plan.ring_bytes as u32,
        max_conn: (plan.conns.len() as u32).max(1),
        // The lab steers every switch port to one CPU (netns steer_rx):
        // the pipeline is serial, and ConnState::cpu_moves checks it.
        track_lock: false,
        // A bottleneck's queue is the network's, not its senders'.
        release_ports: plan
            .hosts
            .iter()
            .filter(|h| h.bottleneck.is_some())
            .fold(0, |m, h| m | 1u64 << (h.port & 63)),
        ..Config::default()
    };
    for c in caps {
        c.configure(&mut config);
    }
    config
}

/// Loads the switch with `caps`' stages (`ext`: a user discipline to link,
/// from `build_extension`), fills its tables, lets each capability arm
/// itself, and attaches it to every switch port of `lab`.
pub fn arm(
    plan: &Plan,
    lab: &Lab,
    mode: Mode,
    caps: &mut [Box<dyn Capability>],
    ext: Option<&Extension>,
) -> Result<Switch, Error> {
    let mut config = config(plan, caps);
    match mode {
        Mode::Cut(n) => config.bench_cut = n,
        Mode::Alternating(n) => {
            config.bench_alternate = true;
            config.bench_cut = n;
        }
        Mode::Pipeline | Mode::ForwardOnly => {}
    }
    let ext = ext.filter(|_| config.extension);
    let switch = Switch::load_with(config, ext).map_err(|e| match ext {
        // The verifier checks the discipline with the pipeline: its log
        // names the hook ("Validating wl_ext_process() ..."). That is the
        // user's input, not the host's fault.
        Some(x) => Error::BadInput(format!(
            "loading the switch with the discipline {}: {e}",
            x.source.display()
        )),
        None => Error::Step {
            what: "loading the switch".into(),
            source: Box::new(e),
        },
    })?;
    for (i, h) in plan.hosts.iter().enumerate() {
        let ifindex = lab.switch_ifindex[i];
        switch
            .add_port(ifindex, h.port)
            .during(format!("adding switch port {}", h.port))?;
        switch
            .add_fwd(h.mac, ifindex, h.port)
            .during(format!("adding the forwarding entry of {}", h.name))?;
    }
    {
        let cx = Cx {
            plan,
            lab,
            switch: &switch,
            clock_offset: 0,
            results: None,
        };
        for c in caps.iter_mut() {
            c.arm(&cx)?;
        }
    }
    in_netns(&plan.switch_ns, || -> Result<(), Error> {
        for ifindex in &lab.switch_ifindex {
            match mode {
                Mode::ForwardOnly => switch.attach_forward_only(*ifindex as i32),
                Mode::Pipeline | Mode::Cut(_) | Mode::Alternating(_) => {
                    switch.attach_ingress(*ifindex as i32)
                }
            }
            .during(format!("attaching the switch to ifindex {ifindex}"))?;
        }
        Ok(())
    })
    .during("entering the switch namespace")??;
    Ok(switch)
}

/// Arms the flows a workload reported (Lumina §3.3, step 1 of the
/// hand-off): the switch classifies them from their first packet.
pub fn arm_flows(switch: &Switch, flows: &[Flow]) -> Result<(), Error> {
    for f in flows {
        match *f {
            Flow::Tuple {
                key,
                conn,
                data,
                from_responder,
            } => switch.add_flow(key, conn, data, from_responder),
            Flow::Qp {
                saddr,
                daddr,
                dst_qpn,
                conn,
                track,
            } => switch.add_roce_flow(saddr, daddr, dst_qpn, conn, track),
        }
        .during("arming the workload's flows")?;
    }
    Ok(())
}

/// A planned virtual queue in the switch's terms.
pub fn vq_config(q: &wirelab_plan::VqPlan) -> VqConfig {
    let discipline = if let Some(p) = &q.extension {
        let mut params = [0; wirelab_dataplane::EXT_PARAMS];
        let n = p.len().min(params.len()); // at most 8: validated
        params[..n].copy_from_slice(&p[..n]);
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

/// Each switch port's counters next to what the kernel counted into it
/// (the integrity check), and its name and counts for the pcapng: from
/// (port, name, kernel rx packets while attached, kernel rx packets
/// around it); the two are equal where no traffic flows before the switch
/// is armed or after the workload (`PortCounts::kernel_rx_attached`).
pub fn port_records(
    switch: &Switch,
    ports: impl Iterator<Item = (u32, String, u64, u64)>,
) -> Result<(Vec<PortCounts>, Vec<PortInfo>), Error> {
    let mut counts = Vec::new();
    let mut info = Vec::new();
    for (port, name, kernel_rx_attached, kernel_rx) in ports {
        let c = switch
            .counters(port)
            .during(format!("reading the counters of switch port {port}"))?;
        counts.push(PortCounts {
            port,
            kernel_rx,
            kernel_rx_attached,
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
