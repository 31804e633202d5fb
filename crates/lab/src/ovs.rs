//! Open vSwitch's userspace datapath as the device under test (ScalaCN's
//! DUT 2; `flowtables.dut: ovs`). Debian's ovsdb-server and ovs-vswitchd
//! run inside the DUT's namespace with a database, sockets and logs of
//! their own (`/run/wirelab/dut-<run>`: nothing shared with a system OVS,
//! several labs at once), `--disable-system` so no kernel datapath is
//! touched. One bridge, `datapath_type=netdev`, whose port k is the link
//! to host k; the flow tables are its OpenFlow rules
//! (`wirelab_plan::openflow`). The switch in front still captures every
//! packet at its ingress, then hands it to the DUT by the ingress port's
//! link; what the DUT sends out of port k goes to host k.
//!
//! After the workload: `dpif-netdev/pmd-stats-show` (OVS's "avg. subtable
//! lookups per megaflow hit", ScalaCN's masks per packet), the megaflows
//! (`dpctl/dump-flows`) and the OpenFlow rules with their counters go into
//! the results folder, parsed into `summary.json`'s `ovs`; the daemons are
//! stopped and their folder removed. `Namespaces` kills whatever is left
//! in a lab namespace when it goes, and `wirelab clean` does too.

use std::path::{Path, PathBuf};

use serde::Serialize;
use wirelab_dataplane::Config;
use wirelab_netns::{in_netns, run};

use crate::capability::{Capability, Cx};
use crate::summary::Summary;
use crate::{During, Error};

const BRIDGE: &str = "br0";
/// The underlay bridge of OVS's native tunnels: it holds every VTEP
/// address, so what the tunnel port pushes comes back to be popped.
const UNDERLAY: &str = "brul";

/// The daemons of one lab, stopped on drop.
struct Daemons {
    dir: PathBuf,
    stopped: bool,
}

fn path(p: &Path) -> &str {
    p.to_str().expect("the run folder's path is UTF-8")
}

impl Daemons {
    fn start(ns: &str, run_id: &str) -> Result<Daemons, Error> {
        let dir = wirelab_netns::dut_dir(run_id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).during(format!("creating {}", dir.display()))?;
        // From here on, an early return stops what started.
        let d = Daemons {
            dir,
            stopped: false,
        };
        let f = |name: &str| d.dir.join(name).display().to_string();
        let db = f("conf.db");
        run(
            "ovsdb-tool",
            &["create", &db, "/usr/share/openvswitch/vswitch.ovsschema"],
        )
        .during(
            "creating Open vSwitch's database (is openvswitch-switch installed? `make deps`)",
        )?;
        run(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "ovsdb-server",
                &db,
                &format!("--remote=punix:{}", f("db.sock")),
                &format!("--pidfile={}", f("ovsdb-server.pid")),
                &format!("--unixctl={}", f("ovsdb-server.ctl")),
                &format!("--log-file={}", f("ovsdb-server.log")),
                "--detach",
                "--no-chdir",
            ],
        )
        .during("starting ovsdb-server")?;
        d.vsctl(&["--no-wait", "init"])?;
        // OVS_RUNDIR: the bridge's OpenFlow socket (br0.mgmt) in this
        // lab's folder, not the system's /var/run/openvswitch.
        let vswitchd = std::process::Command::new("ip")
            .env("OVS_RUNDIR", d.dir.as_os_str())
            .args([
                "netns",
                "exec",
                ns,
                "ovs-vswitchd",
                &format!("unix:{}", f("db.sock")),
                "--disable-system",
                &format!("--pidfile={}", f("ovs-vswitchd.pid")),
                &format!("--unixctl={}", f("ovs-vswitchd.ctl")),
                &format!("--log-file={}", f("ovs-vswitchd.log")),
                "--detach",
                "--no-chdir",
            ])
            .output()
            .during("starting ovs-vswitchd")?;
        if !vswitchd.status.success() {
            let why = String::from_utf8_lossy(&vswitchd.stderr).trim().to_string();
            Err::<(), _>(std::io::Error::other(why)).during("starting ovs-vswitchd")?;
        }
        Ok(d)
    }

    fn vswitchd_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("ovs-vswitchd.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, Error> {
        let db = format!("--db=unix:{}", self.dir.join("db.sock").display());
        let mut a = vec![db.as_str(), "--timeout=10"];
        a.extend(args);
        run("ovs-vsctl", &a).during(format!("ovs-vsctl {}", args.join(" ")))
    }

    fn appctl(&self, args: &[&str]) -> Result<String, Error> {
        let t = self.dir.join("ovs-vswitchd.ctl");
        let mut a = vec!["-t", path(&t), "--timeout=10"];
        a.extend(args);
        run("ovs-appctl", &a).during(format!("ovs-appctl {}", args.join(" ")))
    }

    fn ofctl(&self, args: &[&str]) -> Result<String, Error> {
        self.ofctl_on(BRIDGE, args)
    }

    fn ofctl_on(&self, bridge: &str, args: &[&str]) -> Result<String, Error> {
        let mgmt = format!("unix:{}", self.dir.join(format!("{bridge}.mgmt")).display());
        let (cmd, rest) = args.split_first().expect("an ovs-ofctl command");
        let mut a = vec![*cmd, mgmt.as_str()];
        a.extend(rest);
        run("ovs-ofctl", &a).during(format!("ovs-ofctl {cmd}"))
    }

    /// Asks both daemons to exit, then makes sure: SIGKILL to a pid file's
    /// process still alive after 2 s. Their folder stays until drop (their
    /// logs are complete only now).
    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        for (ctl, args) in [
            ("ovs-vswitchd.ctl", &["exit", "--cleanup"][..]),
            ("ovsdb-server.ctl", &["exit"][..]),
        ] {
            let t = self.dir.join(ctl);
            let mut a = vec!["-t", path(&t), "--timeout=5"];
            a.extend(args);
            let _ = run("ovs-appctl", &a);
        }
        for pidfile in ["ovs-vswitchd.pid", "ovsdb-server.pid"] {
            let Some(pid) = std::fs::read_to_string(self.dir.join(pidfile))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            else {
                continue;
            };
            let pid = nix::unistd::Pid::from_raw(pid);
            let alive = || nix::sys::signal::kill(pid, None).is_ok();
            for _ in 0..40 {
                if !alive() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if alive() {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What OVS reported after the workload (`summary.json`'s `ovs`).
#[derive(Debug, Default, Clone, Serialize)]
pub struct OvsSummary {
    pub version: String,
    /// From `dpif-netdev/pmd-stats-show`, over every thread.
    pub packets: u64,
    pub emc_hits: u64,
    pub smc_hits: u64,
    pub megaflow_hits: u64,
    /// OVS's "avg. subtable lookups per megaflow hit" (the hit-weighted
    /// mean over threads): its masks searched per packet.
    pub subtable_lookups_per_hit: f64,
    /// Misses that went to the slow path (an upcall) and came back with a
    /// megaflow.
    pub upcalls: u64,
    pub failed_upcalls: u64,
    /// Megaflows in the datapath at the end (`dpctl/dump-flows`).
    pub megaflows: usize,
    /// Distinct megaflow masks among them (dpcls subtables).
    pub megaflow_masks: usize,
    /// OpenFlow rules installed.
    pub rules: usize,
    /// CPU time every thread of ovs-vswitchd spent while the workload ran
    /// (`/proc/PID/task/*/schedstat`, ns).
    pub cpu_ns: u64,
    /// Its CPU time per second when idle, sampled for 200 ms just before
    /// the workload: the main loop's polling of afpacket ports, which costs
    /// the same with or without traffic.
    pub idle_cpu_ns_per_s: u64,
    /// The CPU time the packets cost (`cpu_ns` less the idle rate over the
    /// workload's duration), per packet received: the DUT's own cost per
    /// packet, next to the eSwitch stage's kernel time.
    pub cpu_ns_per_packet: f64,
    /// The files this run kept, in the results folder.
    pub files: Vec<String>,
}

/// `name: N` fields of pmd-stats-show, summed over its threads; the
/// lookups per hit weighted by each thread's megaflow hits.
fn parse_pmd_stats(text: &str, s: &mut OvsSummary) {
    let mut weighted = 0.0;
    let mut hits_here = 0u64;
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        let v = v.trim();
        let n = || {
            v.split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match k {
            "packets received" => s.packets += n(),
            "emc hits" => s.emc_hits += n(),
            "smc hits" => s.smc_hits += n(),
            "megaflow hits" => {
                hits_here = n();
                s.megaflow_hits += hits_here;
            }
            "avg. subtable lookups per megaflow hit" => {
                weighted += v.parse::<f64>().unwrap_or(0.0) * hits_here as f64;
            }
            "miss with success upcall" => s.upcalls += n(),
            "miss with failed upcall" => s.failed_upcalls += n(),
            _ => {}
        }
    }
    s.subtable_lookups_per_hit = if s.megaflow_hits > 0 {
        weighted / s.megaflow_hits as f64
    } else {
        0.0
    };
}

/// A megaflow's mask: its match with every value replaced by the bits it
/// compares (`=/mask` kept; a field without a mask, compared in full, as
/// `full`).
fn megaflow_mask(line: &str) -> String {
    let m = line.split(", packets:").next().unwrap_or(line);
    // `-m` starts each flow with its unique id.
    let m = match m.strip_prefix("ufid:") {
        Some(rest) => rest.split_once(", ").map_or(rest, |r| r.1),
        None => m,
    };
    let mut out = String::new();
    let mut depth = 0;
    let mut field = String::new();
    for c in m.chars() {
        match c {
            '(' => {
                depth += 1;
                out.push(c);
            }
            ')' | ',' if depth > 0 => {
                out.push_str(&mask_of(&field));
                field.clear();
                if c == ')' {
                    depth -= 1;
                }
                out.push(c);
            }
            _ if depth > 0 => field.push(c),
            _ => out.push(c),
        }
    }
    out
}

fn mask_of(field: &str) -> String {
    let (key, value) = match field.split_once('=') {
        Some((k, v)) => (Some(k), v),
        None => (None, field),
    };
    let mask = match value.split_once('/') {
        Some((_, m)) => format!("/{m}"),
        None => "full".to_string(),
    };
    match key {
        Some(k) => format!("{k}={mask}"),
        None => mask,
    }
}

/// The capability: OVS up before the switch is attached, its statistics
/// after the workload, stopped before the namespaces go.
#[derive(Default)]
pub struct Ovs {
    daemons: Option<Daemons>,
    /// The OpenFlow rules installed, as given to ovs-ofctl.
    rules: String,
    summary: Option<OvsSummary>,
    /// ovs-vswitchd's CPU time when the workload started, and when.
    cpu_at_start: Option<(u64, std::time::Instant)>,
    /// Its idle CPU time per second (see `OvsSummary::idle_cpu_ns_per_s`).
    idle_rate: u64,
}

/// OVS's userspace native tunneling (Documentation/howto/
/// userspace-tunneling.rst), arranged so one OVS plays both VTEPs of
/// ScalaCN's overlay, as the eSwitch stage does: a VXLAN port on the
/// bridge (addresses and key from each rule, `wirelab_plan::openflow`),
/// and an underlay bridge holding the local VTEP and every remote one the
/// spec's encap entries name. A pushed packet leaves the underlay bridge
/// by one end of a veth pair and comes back by the other, addressed to
/// one of its own addresses, and OVS pops it onto the VXLAN port. The
/// loop's MTU leaves room for the outer headers (50 bytes).
fn tunnels(
    d: &Daemons,
    ns: &str,
    vteps: &std::collections::BTreeSet<std::net::Ipv4Addr>,
) -> Result<(), Error> {
    use wirelab_plan::openflow::TUNNEL_PORT;
    d.vsctl(&[
        "add-port",
        BRIDGE,
        "vxlan0",
        "--",
        "set",
        "interface",
        "vxlan0",
        "type=vxlan",
        &format!("ofport_request={TUNNEL_PORT}"),
        "options:remote_ip=flow",
        "options:local_ip=flow",
        "options:key=flow",
    ])?;
    d.vsctl(&[
        "add-br",
        UNDERLAY,
        "--",
        "set",
        "bridge",
        UNDERLAY,
        "datapath_type=netdev",
        "fail_mode=secure",
        "other_config:disable-in-band=true",
        "--",
        "set",
        "interface",
        UNDERLAY,
        "mtu_request=9000",
    ])?;
    let ipn = |args: &[&str]| -> Result<String, Error> {
        let mut a = vec!["-n", ns];
        a.extend(args);
        run("ip", &a).during(format!("ip {}", args.join(" ")))
    };
    ipn(&[
        "link", "add", "ula", "mtu", "9000", "type", "veth", "peer", "name", "ulb", "mtu", "9000",
    ])?;
    for (port, name) in [(1, "ula"), (2, "ulb")] {
        ipn(&["link", "set", name, "up"])?;
        d.vsctl(&[
            "add-port",
            UNDERLAY,
            name,
            "--",
            "set",
            "interface",
            name,
            &format!("ofport_request={port}"),
        ])?;
    }
    d.ofctl_on(
        UNDERLAY,
        &["add-flow", "priority=10,in_port=LOCAL,actions=output:1"],
    )?;
    d.ofctl_on(
        UNDERLAY,
        &["add-flow", "priority=10,in_port=2,actions=LOCAL"],
    )?;
    ipn(&["link", "set", UNDERLAY, "up"])?;
    let local = wirelab_spec::flowtables::LOCAL_VTEP;
    let all: Vec<std::net::Ipv4Addr> = std::iter::once(local)
        .chain(vteps.iter().copied())
        .collect();
    for a in &all {
        ipn(&["addr", "add", &format!("{a}/32"), "dev", UNDERLAY])?;
    }
    let mac = ipn(&["-j", "link", "show", UNDERLAY])?;
    let mac = serde_json::from_str::<serde_json::Value>(&mac)
        .ok()
        .and_then(|v| v[0]["address"].as_str().map(str::to_string))
        .ok_or_else(|| std::io::Error::other(format!("no MAC address on {UNDERLAY}")))
        .during("reading the underlay bridge's MAC")?;
    // OVS learns its namespace's routes from the kernel, a moment after
    // the addresses are added: each VTEP's route must be there before a
    // packet is pushed towards it.
    for a in &all {
        let t0 = std::time::Instant::now();
        while !d
            .appctl(&["ovs/route/lookup", &a.to_string()])
            .is_ok_and(|r| r.contains(UNDERLAY))
        {
            if t0.elapsed() > std::time::Duration::from_secs(5) {
                return Err(std::io::Error::other(format!(
                    "no route to VTEP {a} in Open vSwitch after 5 s"
                )))
                .during("setting up the VXLAN tunnel");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        d.appctl(&["tnl/neigh/set", UNDERLAY, &a.to_string(), &mac])?;
    }
    Ok(())
}

/// How long ovs-vswitchd's idle CPU rate is sampled before a workload.
const IDLE_SAMPLE: std::time::Duration = std::time::Duration::from_millis(200);

/// CPU time of every thread of process `pid`, in ns: the first field of
/// each `/proc/PID/task/TID/schedstat` (time on the CPU, ns; the kernel's
/// scheduler statistics, sched-stats.rst). Threads that ended before are
/// not counted, so read it while the daemon runs.
fn cpu_ns(pid: i32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for t in tasks.flatten() {
        let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

impl Capability for Ovs {
    fn name(&self) -> &'static str {
        "ovs"
    }
    fn configure(&self, config: &mut Config) {
        config.dut = true;
    }
    fn arm(&mut self, cx: &Cx) -> Result<(), Error> {
        let (Some(ns), Some(ft)) = (&cx.plan.dut_ns, &cx.plan.flowtables) else {
            return Ok(());
        };
        let d = Daemons::start(ns, &cx.plan.run_id)?;
        // fail_mode secure: no NORMAL flow of OVS's own before ours.
        d.vsctl(&[
            "add-br",
            BRIDGE,
            "--",
            "set",
            "bridge",
            BRIDGE,
            "datapath_type=netdev",
            "fail_mode=secure",
            "other_config:disable-in-band=true",
        ])?;
        for h in &cx.plan.hosts {
            let (_, o) = wirelab_plan::dut_ifnames(h.port);
            d.vsctl(&[
                "add-port",
                BRIDGE,
                &o,
                "--",
                "set",
                "interface",
                &o,
                &format!("ofport_request={}", h.port),
            ])?;
        }
        if !wirelab_plan::openflow::tunnel_tables(ft).is_empty() {
            tunnels(&d, ns, &wirelab_plan::openflow::vteps(ft))?;
        }
        let rules = wirelab_plan::openflow::compile(ft, &cx.plan.hosts);
        let file = d.dir.join("rules.txt");
        std::fs::write(&file, &rules).during("writing the OpenFlow rules")?;
        d.ofctl(&["add-flows", path(&file)])?;
        self.rules = rules;
        for (i, h) in cx.plan.hosts.iter().enumerate() {
            cx.switch
                .add_dut_link(h.port, cx.lab.dut_ifindex[i], cx.lab.switch_ifindex[i])
                .during(format!("linking port {} to the DUT", h.port))?;
        }
        in_netns(&cx.plan.switch_ns, || -> Result<(), Error> {
            for &ifindex in &cx.lab.dut_ifindex {
                cx.switch
                    .attach_from_dut(ifindex as i32)
                    .during(format!("attaching the DUT's return to ifindex {ifindex}"))?;
            }
            Ok(())
        })
        .during("entering the switch namespace")??;
        self.daemons = Some(d);
        Ok(())
    }
    fn start(&mut self, _cx: &Cx, _stop: &wirelab_workload::Stop) -> Result<(), Error> {
        if let Some(d) = &self.daemons {
            d.appctl(&["dpif-netdev/pmd-stats-clear"])?;
            let pid = d.vswitchd_pid();
            let idle_from = pid.and_then(cpu_ns);
            std::thread::sleep(IDLE_SAMPLE);
            let now = pid.and_then(cpu_ns);
            if let (Some(a), Some(b)) = (idle_from, now) {
                self.idle_rate = (u128::from(b.saturating_sub(a)) * 1_000_000_000
                    / IDLE_SAMPLE.as_nanos()) as u64;
                self.cpu_at_start = Some((b, std::time::Instant::now()));
            }
        }
        Ok(())
    }
    fn collect(
        &mut self,
        cx: &Cx,
        _facts: &mut wirelab_analyze::RunFacts,
        log: &mut String,
    ) -> Result<(), Error> {
        let Some(mut d) = self.daemons.take() else {
            return Ok(());
        };
        let mut s = OvsSummary {
            rules: self.rules.lines().count(),
            ..Default::default()
        };
        s.version = run("ovs-vswitchd", &["--version"])
            .ok()
            .and_then(|v| v.lines().next().map(str::to_string))
            .unwrap_or_default();
        let cpu = d.vswitchd_pid().and_then(cpu_ns);
        let pmd = d.appctl(&["dpif-netdev/pmd-stats-show"])?;
        parse_pmd_stats(&pmd, &mut s);
        if let (Some((a, since)), Some(b)) = (self.cpu_at_start, cpu) {
            s.cpu_ns = b.saturating_sub(a);
            s.idle_cpu_ns_per_s = self.idle_rate;
            let idle = self.idle_rate as f64 * since.elapsed().as_secs_f64();
            s.cpu_ns_per_packet = (s.cpu_ns as f64 - idle).max(0.0) / s.packets.max(1) as f64;
        }
        let megaflows = d.appctl(&["dpctl/dump-flows", "-m"])?;
        let flows: Vec<&str> = megaflows
            .lines()
            .filter(|l| l.contains("packets:"))
            .collect();
        s.megaflows = flows.len();
        s.megaflow_masks = flows
            .iter()
            .map(|l| megaflow_mask(l))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let openflow = d.ofctl(&["dump-flows"])?;
        let files = [
            ("ovs-rules.txt", std::mem::take(&mut self.rules)),
            ("ovs-pmd-stats.txt", pmd),
            ("ovs-megaflows.txt", megaflows),
            ("ovs-openflow.txt", openflow),
        ];
        d.stop_keeping_logs(cx.results, &mut s.files);
        if let Some(r) = cx.results {
            for (name, text) in files {
                std::fs::write(r.join(name), text).during(format!("writing {name}"))?;
                s.files.push(name.to_string());
            }
            s.files.sort();
        }
        log.push_str(&format!(
            "ovs: {} packets, {} megaflow hits at {:.2} subtable lookups each, {} upcalls, {} megaflows\n",
            s.packets, s.megaflow_hits, s.subtable_lookups_per_hit, s.upcalls, s.megaflows
        ));
        self.summary = Some(s);
        Ok(())
    }
    fn summarize(
        &mut self,
        _cx: &Cx,
        _meta: &[wirelab_workload::ConnMeta],
        _analysis: &wirelab_analyze::report::Report,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        summary.ovs = self.summary.take();
        Ok(())
    }
}

impl Daemons {
    /// Stops the daemons, keeping their logs in `results`.
    fn stop_keeping_logs(&mut self, results: Option<&Path>, files: &mut Vec<String>) {
        self.stop();
        let Some(r) = results else {
            return;
        };
        for name in ["ovs-vswitchd.log", "ovsdb-server.log"] {
            if std::fs::copy(self.dir.join(name), r.join(name)).is_ok() {
                files.push(name.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmd_stats_are_summed_over_threads_and_lookups_weighted_by_hits() {
        let text = "\
pmd thread numa_id 0 core_id 1:
  packets received: 100
  emc hits: 10
  smc hits: 0
  megaflow hits: 80
  avg. subtable lookups per megaflow hit: 2.00
  miss with success upcall: 10
  miss with failed upcall: 0
main thread:
  packets received: 30
  emc hits: 0
  megaflow hits: 20
  avg. subtable lookups per megaflow hit: 7.00
  miss with success upcall: 10
  miss with failed upcall: 1
";
        let mut s = OvsSummary::default();
        parse_pmd_stats(text, &mut s);
        assert_eq!(
            (
                s.packets,
                s.emc_hits,
                s.megaflow_hits,
                s.upcalls,
                s.failed_upcalls
            ),
            (130, 10, 100, 20, 1)
        );
        assert!((s.subtable_lookups_per_hit - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_megaflows_mask_keeps_the_bits_not_the_values() {
        let a = "recirc_id(0),in_port(2),eth_type(0x0800),ipv4(src=198.18.0.1,dst=198.18.0.0/255.255.255.0,proto=17,frag=no),udp(dst=4791), packets:5, bytes:500, used:0.1s, actions:3";
        let b = "recirc_id(0),in_port(3),eth_type(0x0800),ipv4(src=198.18.0.2,dst=198.18.0.0/255.255.255.0,proto=17,frag=no),udp(dst=4791), packets:9, bytes:900, used:0.1s, actions:2";
        assert_eq!(megaflow_mask(a), megaflow_mask(b));
        // `dpctl/dump-flows -m` as OVS 3.1 prints it: a unique id first.
        let m = |id: &str, port: u8| {
            format!("ufid:{id}, skb_priority(0/0),recirc_id(0),in_port(o{port}),eth(src=02:77:6c:00:00:0{port}/00:00:00:00:00:00),ipv4(src=198.18.0.{port}/248.0.0.0,proto=17,ttl=64/0), packets:1, bytes:1, used:0.0s, actions:o1")
        };
        assert_eq!(
            megaflow_mask(&m("94a75ec8-0562", 1)),
            megaflow_mask(&m("ea58b492-23c4", 2))
        );
        assert!(
            megaflow_mask(&m("94a75ec8", 1)).starts_with(
                "skb_priority(/0),recirc_id(full),in_port(full),eth(src=/00:00:00:00:00:00)"
            ),
            "{}",
            megaflow_mask(&m("94a75ec8", 1))
        );
        assert_eq!(
            megaflow_mask(a),
            "recirc_id(full),in_port(full),eth_type(full),ipv4(src=full,dst=/255.255.255.0,proto=full,frag=full),udp(dst=full)"
        );
    }
}
