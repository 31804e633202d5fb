//! The Linux backend of a lab: one network namespace per host plus one for
//! the switch, veth pairs created directly inside them (no device ever exists
//! in the root namespace), addresses from the lab range, offloads off, stack
//! settings, bottleneck qdiscs.
//!
//! Crash safety: before anything is created, the run writes a registry entry
//! (`/run/wirelab/<run>.json`, with its pid and namespaces). `Lab` removes
//! everything on drop (success, error, panic, Ctrl-C); `clean` removes what a
//! killed run left behind.

mod cmd;
pub mod counters;
pub mod route;
mod routed;
pub mod tester;

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wirelab_plan::{Plan, NS_PREFIX, PREFIX_LEN};

pub use cmd::{run, CmdError};
pub use routed::Routed;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Cmd(#[from] CmdError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("entering namespace {ns}: {source}")]
    Setns { ns: String, source: nix::Error },
    #[error("{0}")]
    Other(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

pub const REGISTRY_DIR: &str = "/run/wirelab";
const NETNS_DIR: &str = "/run/netns";

#[derive(Debug, Serialize, Deserialize)]
struct RegistryEntry {
    pid: u32,
    /// The owner's start time (`/proc/PID/stat` field 22, clock ticks since
    /// boot). A pid alone is not an identity: after a restart that keeps
    /// `/run` (a container restart), another process may have the owner's
    /// pid, and its lab would be kept for ever. Absent in entries written
    /// before it was recorded; those fall back to the pid alone.
    #[serde(default)]
    start: Option<u64>,
    namespaces: Vec<String>,
    /// `wirelab bump`: the programs it attached to interfaces it does not
    /// own, removed again by `clean` if the bump died.
    #[serde(default)]
    bumps: Vec<BumpAttach>,
    /// Host sysctls a run changed (name, the value it found), put back by
    /// `clean` if the run died (`HostSysctls`).
    #[serde(default)]
    sysctls: Vec<(String, String)>,
}

/// The switch attached at tc ingress of an existing interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BumpAttach {
    pub ns: String,
    pub ifname: String,
    /// The bump created the interface's clsact qdisc (and removes it).
    pub created_clsact: bool,
}

impl BumpAttach {
    /// Removes the bump's filter (tc handle 1, priority 1 at ingress) and
    /// the clsact qdisc it created; gone already is fine.
    pub fn remove(&self) -> Result<(), Error> {
        if !Path::new(NETNS_DIR).join(&self.ns).exists() {
            return Ok(()); // the namespace, and the interface, are gone
        }
        let present = |what: &str| {
            run("tc", &["-n", &self.ns, what, "show", "dev", &self.ifname])
                .map(|o| o.contains("clsact") || o.contains("handle 0x1"))
                .unwrap_or(false)
        };
        if self.created_clsact {
            if present("qdisc") {
                run(
                    "tc",
                    &[
                        "-n",
                        &self.ns,
                        "qdisc",
                        "del",
                        "dev",
                        &self.ifname,
                        "clsact",
                    ],
                )?;
            }
        } else {
            let _ = run(
                "tc",
                &[
                    "-n",
                    &self.ns,
                    "filter",
                    "del",
                    "dev",
                    &self.ifname,
                    "ingress",
                    "pref",
                    "1",
                    "handle",
                    "1",
                    "bpf",
                ],
            );
        }
        Ok(())
    }
}

/// Whether `ifname` in namespace `ns` has a clsact qdisc.
pub fn has_clsact(ns: &str, ifname: &str) -> Result<bool, Error> {
    Ok(run("tc", &["-n", ns, "qdisc", "show", "dev", ifname])?.contains("clsact"))
}

/// A bump's registry entry, removed on drop (after the bump detached).
pub struct BumpRegistration {
    path: PathBuf,
}

impl BumpRegistration {
    /// Records the attachments before they are made, so a killed bump is
    /// cleaned up by `wirelab clean`.
    pub fn new(id: &str, attach: &[BumpAttach]) -> Result<BumpRegistration, Error> {
        fs::create_dir_all(REGISTRY_DIR).map_err(io(format!("creating {REGISTRY_DIR}")))?;
        let path = Path::new(REGISTRY_DIR).join(format!("bump-{id}.json"));
        let entry = RegistryEntry {
            pid: std::process::id(),
            start: process_start(std::process::id()),
            namespaces: Vec::new(),
            bumps: attach.to_vec(),
            sysctls: Vec::new(),
        };
        fs::write(
            &path,
            serde_json::to_vec(&entry).expect("registry entry serialises"),
        )
        .map_err(io("writing the bump registry"))?;
        Ok(BumpRegistration { path })
    }
}

impl Drop for BumpRegistration {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The host's IPv4 neighbour-table limit, lowered for one run and put back
/// when dropped (or by `wirelab clean`, if the run was killed).
///
/// Linux keeps one ARP table for every namespace, and its limits
/// (`gc_thresh1..3`, ip-sysctl.rst) exist only in the initial namespace:
/// a lab cannot give its DUT a table of its own size. The limit is set
/// as the entries that count against it now plus `limit`, so the DUT can
/// add `limit` more before `neigh_alloc` refuses ("neighbor table
/// overflow", counted in `/proc/net/stat/arp_cache`'s `table_fulls`);
/// entries updated in the last 5 s are not forced out (neigh_forced_gc).
/// While it holds, the host itself cannot learn new neighbours past the
/// limit either: only with the user's consent (`--host-wide`).
pub struct HostNeighbourLimit {
    path: PathBuf,
    saved: Vec<(String, String)>,
    /// The entries that counted against the limit when it was set.
    pub base: u64,
    /// gc_thresh3 as set: `base + limit`.
    pub thresh3: u64,
}

/// The table's limits, gc_thresh1..3.
pub const NEIGH_THRESH: [&str; 3] = [
    "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2",
    "net.ipv4.neigh.default.gc_thresh3",
];

/// The host's ARP table: (entries, table_fulls), from
/// `/proc/net/stat/arp_cache` (hex fields; every CPU's line repeats the
/// entries, table_fulls is per CPU).
pub fn arp_cache_stat() -> Result<(u64, u64), Error> {
    let text = fs::read_to_string("/proc/net/stat/arp_cache")
        .map_err(io("reading /proc/net/stat/arp_cache"))?;
    parse_arp_cache_stat(&text).ok_or_else(|| {
        Error::Other("/proc/net/stat/arp_cache: no `entries` or `table_fulls` column".into())
    })
}

/// Entries of the ARP table that do not count against its limit, in the
/// namespaces this host names (the initial one and `/run/netns`): those on
/// a loopback device and permanent ones (neighbour.c's `exempt_from_gc`).
/// A namespace without a name (a container's) is not seen.
pub fn arp_entries_exempt() -> Result<u64, Error> {
    let mut spaces: Vec<Option<String>> = vec![None];
    if let Ok(d) = fs::read_dir(NETNS_DIR) {
        spaces.extend(
            d.filter_map(|e| e.ok())
                .map(|e| Some(e.file_name().to_string_lossy().into_owned())),
        );
    }
    let mut n = 0;
    for ns in spaces {
        let mut args: Vec<&str> = Vec::new();
        if let Some(ns) = &ns {
            args.extend(["-n", ns.as_str()]);
        }
        args.extend(["-4", "neigh", "show", "nud", "all"]);
        // A namespace deleted meanwhile has no entries left to count.
        let Ok(out) = run("ip", &args) else { continue };
        n += count_exempt(&out);
    }
    Ok(n)
}

fn count_exempt(ip_neigh: &str) -> u64 {
    ip_neigh
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.windows(2).any(|p| p == ["dev", "lo"]) || w.contains(&"PERMANENT")
        })
        .count() as u64
}

fn parse_arp_cache_stat(text: &str) -> Option<(u64, u64)> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next()?.split_whitespace().collect();
    let col = |n: &str| head.iter().position(|h| *h == n);
    let (e, f) = (col("entries")?, col("table_fulls")?);
    let (mut entries, mut fulls) = (None, 0u64);
    for l in lines {
        let v: Vec<&str> = l.split_whitespace().collect();
        let hex = |i: usize| u64::from_str_radix(v.get(i)?, 16).ok();
        entries = entries.or(hex(e));
        fulls += hex(f)?;
    }
    Some((entries?, fulls))
}

impl HostNeighbourLimit {
    /// Lowers the host's table to about `limit` entries more than it holds
    /// now, for run `id`. Refused while another live run holds it; the
    /// values a killed holder left are put back first.
    pub fn set(id: &str, limit: u64) -> Result<HostNeighbourLimit, Error> {
        fs::create_dir_all(REGISTRY_DIR).map_err(io(format!("creating {REGISTRY_DIR}")))?;
        if let Ok(dir) = fs::read_dir(REGISTRY_DIR) {
            for e in dir.filter_map(|e| e.ok()) {
                let Ok(text) = fs::read_to_string(e.path()) else {
                    continue;
                };
                let Ok(other) = serde_json::from_str::<RegistryEntry>(&text) else {
                    continue;
                };
                if other.sysctls.is_empty() {
                    continue;
                }
                if owner_alive(&other) {
                    return Err(Error::Other(format!(
                        "run {} (pid {}) holds the host's neighbour-table limit; one at a time",
                        e.path().display(),
                        other.pid
                    )));
                }
                for (name, value) in &other.sysctls {
                    write_sysctl(name, value)?;
                }
                let _ = fs::remove_file(e.path());
            }
        }
        let saved: Vec<(String, String)> = NEIGH_THRESH
            .iter()
            .map(|n| {
                let path = format!("/proc/sys/{}", n.replace('.', "/"));
                fs::read_to_string(&path)
                    .map(|v| (n.to_string(), v.trim().to_string()))
                    .map_err(io(format!("reading {n}")))
            })
            .collect::<Result<_, _>>()?;
        let path = Path::new(REGISTRY_DIR).join(format!("host-{id}.json"));
        let entry = RegistryEntry {
            pid: std::process::id(),
            start: process_start(std::process::id()),
            namespaces: Vec::new(),
            bumps: Vec::new(),
            sysctls: saved.clone(),
        };
        // Recorded before anything changes, so a kill in between is undone.
        fs::write(
            &path,
            serde_json::to_vec(&entry).expect("registry entry serialises"),
        )
        .map_err(io("writing the host settings' registry"))?;
        let mut me = HostNeighbourLimit {
            path,
            saved,
            base: 0,
            thresh3: 0,
        };
        let (entries, _) = arp_cache_stat()?;
        me.base = entries.saturating_sub(arp_entries_exempt()?);
        me.thresh3 = me.base + limit;
        let old1: u64 = me.saved[0].1.parse().unwrap_or(u64::MAX);
        // gc_thresh1 <= 2 <= 3; the soft limit (2) at the hard one, so
        // the table fills to the limit, then refuses.
        write_sysctl(NEIGH_THRESH[0], &old1.min(me.thresh3).to_string())?;
        write_sysctl(NEIGH_THRESH[1], &me.thresh3.to_string())?;
        write_sysctl(NEIGH_THRESH[2], &me.thresh3.to_string())?;
        Ok(me)
    }
}

impl Drop for HostNeighbourLimit {
    fn drop(&mut self) {
        // gc_thresh3 first, so the three never cross on the way back up.
        for (name, value) in self.saved.iter().rev() {
            let _ = write_sysctl(name, value);
        }
        let _ = fs::remove_file(&self.path);
    }
}

fn registry_path(run_id: &str) -> PathBuf {
    Path::new(REGISTRY_DIR).join(format!("{run_id}.json"))
}

/// A run's folder for a device under test's daemons (their database,
/// sockets and logs): beside its registry entry, so `clean` removes it
/// with the run.
pub fn dut_dir(run_id: &str) -> PathBuf {
    Path::new(REGISTRY_DIR).join(format!("dut-{run_id}"))
}

/// Runs `f` on a thread that has entered namespace `ns`. Sockets it creates
/// stay in that namespace for their whole life, whichever thread uses them
/// later; child processes it spawns start in it.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
    let path = Path::new(NETNS_DIR).join(ns);
    let file = fs::File::open(&path).map_err(io(format!("opening {}", path.display())))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // setns(CLONE_NEWNET) affects only the calling thread (setns(2)),
            // which is this short-lived scoped thread.
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                |source| Error::Setns {
                    ns: ns.to_string(),
                    source,
                },
            )?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Writes a sysctl of the namespace the calling thread is in.
/// The TCP settings a recording keeps (DETER Table 1's "TCP parameters"):
/// the namespaced sysctls that change how a connection behaves on the
/// wire. Names a kernel lacks are skipped.
pub const TCP_SETTINGS: &[&str] = &[
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_dsack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_adv_win_scale",
    "net.ipv4.tcp_moderate_rcvbuf",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_early_retrans",
    "net.ipv4.tcp_recovery",
    "net.ipv4.tcp_reordering",
    "net.ipv4.tcp_max_reordering",
    "net.ipv4.tcp_frto",
    "net.ipv4.tcp_thin_linear_timeouts",
    "net.ipv4.tcp_autocorking",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.tcp_limit_output_bytes",
    "net.ipv4.tcp_min_tso_segs",
    "net.ipv4.tcp_tso_win_divisor",
    "net.ipv4.tcp_pacing_ss_ratio",
    "net.ipv4.tcp_pacing_ca_ratio",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_base_mss",
    "net.ipv4.tcp_retries2",
    "net.ipv4.tcp_comp_sack_delay_ns",
    "net.ipv4.tcp_comp_sack_nr",
    "net.ipv4.tcp_min_rtt_wlen",
    "net.ipv4.tcp_no_metrics_save",
];

/// The values of `names` in the calling thread's namespace (those the
/// kernel has), whitespace as the kernel writes it collapsed.
fn read_sysctls(names: &[&str]) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|n| {
            let v = fs::read_to_string(format!("/proc/sys/{}", n.replace('.', "/"))).ok()?;
            Some((
                n.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        })
        .collect()
}

/// The kernel's defaults of `TCP_SETTINGS`, once known.
static TCP_DEFAULTS: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();

/// Takes the kernel's defaults from namespace `ns`, one whose TCP sysctls
/// nobody set (a lab's switch namespace), unless they are known already.
/// A run does this: making a namespace to read them would leave the
/// kernel to tear it down later, in a worker of its own, beside the
/// traffic being measured.
pub fn tcp_defaults_from(ns: &str) -> Result<(), Error> {
    if TCP_DEFAULTS.get().is_none() {
        let d = in_netns(ns, || read_sysctls(TCP_SETTINGS))?;
        let _ = TCP_DEFAULTS.set(d);
    }
    Ok(())
}

/// The kernel's defaults of `TCP_SETTINGS`: those `tcp_defaults_from`
/// took, or read once per process in a namespace made for the purpose
/// and gone with the thread that made it.
pub fn tcp_default_settings() -> Result<&'static BTreeMap<String, String>, Error> {
    if let Some(d) = TCP_DEFAULTS.get() {
        return Ok(d);
    }
    let fresh = std::thread::scope(|s| {
        s.spawn(|| {
            // unshare(CLONE_NEWNET) moves only this short-lived thread.
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .map(|_| read_sysctls(TCP_SETTINGS))
        })
        .join()
        .expect("reading sysctls does not panic")
    })
    .map_err(|e| io("making a namespace to read the defaults in".to_string())(e.into()))?;
    Ok(TCP_DEFAULTS.get_or_init(|| fresh))
}

/// The TCP settings of namespace `ns` that differ from the kernel's
/// defaults (`tcp_default_settings`).
pub fn tcp_settings_changed(ns: &str) -> Result<BTreeMap<String, String>, Error> {
    let fresh = tcp_default_settings()?;
    let here = in_netns(ns, || read_sysctls(TCP_SETTINGS))?;
    Ok(here
        .into_iter()
        .filter(|(k, v)| fresh.get(k) != Some(v))
        .collect())
}

/// The routes of namespace `ns` that carry options (ip-route(8)'s
/// `rto_min`, `quickack`, `initcwnd`, ...: route metrics TCP reads per
/// connection, DETER Table 1's per-route settings), as `ip -j route`
/// gives them: `{dst, dev, table, metrics: {name: value}}`, rto_min in ms.
pub fn route_options(ns: &str) -> Result<Vec<serde_json::Value>, Error> {
    let out = run("ip", &["-n", ns, "-j", "route", "show", "table", "all"])?;
    let routes: Vec<serde_json::Value> = serde_json::from_str(&out)
        .map_err(|e| Error::Other(format!("parsing `ip -j route show` in {ns}: {e}")))?;
    Ok(routes
        .into_iter()
        .filter_map(|r| {
            // One object per metric in ip's output; merged.
            let metrics: serde_json::Map<String, serde_json::Value> = r
                .get("metrics")?
                .as_array()?
                .iter()
                .filter_map(|m| m.as_object())
                .flat_map(|m| m.clone())
                .collect();
            (!metrics.is_empty()).then(|| {
                serde_json::json!({
                    "dst": r.get("dst"),
                    "dev": r.get("dev"),
                    "table": r.get("table"),
                    "metrics": metrics,
                })
            })
        })
        .collect())
}

pub fn write_sysctl(name: &str, value: &str) -> Result<(), Error> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    fs::write(&path, value).map_err(io(format!("setting {name}={value}")))
}

/// A running lab. Dropping it deletes every namespace (and with them the
/// veths, qdiscs and tc programs) and the registry entry.
pub struct Lab {
    namespaces: Namespaces,
    /// Switch-namespace ifindex of each host's port, by host index.
    pub switch_ifindex: Vec<u32>,
    /// With a device under test (`Plan::dut_ns`): switch-namespace ifindex
    /// of each host port's link to it, by host index.
    pub dut_ifindex: Vec<u32>,
}

impl Lab {
    pub fn namespaces(&self) -> &[String] {
        self.namespaces.names()
    }

    /// Brings the plan's topology up. On error, what was created is removed.
    pub fn up(plan: &Plan) -> Result<Lab, Error> {
        let mut namespaces = vec![plan.switch_ns.clone()];
        namespaces.extend(plan.hosts.iter().map(|h| h.ns.clone()));
        namespaces.extend(plan.dut_ns.clone());
        // From here on, an early return drops `lab`, which removes what exists.
        let mut lab = Lab {
            namespaces: Namespaces::new(&plan.run_id, &namespaces)?,
            switch_ifindex: Vec::new(),
            dut_ifindex: Vec::new(),
        };
        let sw = plan.switch_ns.as_str();
        let mtu = plan.mtu.to_string();
        let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        in_netns(sw, || -> Result<(), Error> {
            write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
            write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")
        })??;
        run("ip", &["-n", sw, "link", "set", "lo", "up"])?;
        for h in &plan.hosts {
            let mac = fmt_mac(&h.mac);
            // The pair is created with each end already in its namespace.
            run(
                "ip",
                &[
                    "link",
                    "add",
                    "name",
                    &h.ifname,
                    "netns",
                    &h.ns,
                    "address",
                    &mac,
                    "mtu",
                    &mtu,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &h.switch_ifname,
                    "netns",
                    sw,
                    "mtu",
                    &mtu,
                ],
            )?;
            in_netns(&h.ns, || -> Result<(), Error> {
                // IPv6 off: router solicitations and MLD reports would be
                // traffic nobody asked for in a deterministic trace.
                write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
                write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
                for (k, v) in h.stack.all_sysctls() {
                    write_sysctl(&k, &v)?;
                }
                Ok(())
            })??;
            let addr = format!("{}/{}", h.ip, PREFIX_LEN);
            run("ip", &["-n", &h.ns, "link", "set", "lo", "up"])?;
            run("ip", &["-n", &h.ns, "addr", "add", &addr, "dev", &h.ifname])?;
            // Further GIDs of its RoCE device, in the namespace only.
            for g in h.gids.iter().filter(|g| **g != h.ip) {
                let a = format!("{g}/{PREFIX_LEN}");
                run("ip", &["-n", &h.ns, "addr", "add", &a, "dev", &h.ifname])?;
            }
            run("ip", &["-n", &h.ns, "link", "set", &h.ifname, "up"])?;
            // Wire-sized frames at the switch (no TSO/GSO/GRO), and checksums
            // computed in software and verified by the receiver, so that a
            // `corrupt` event is caught as a real NIC's would be.
            offloads_off(&h.ns, &h.ifname)?;
            // Hosts on the CPUs after the first, round robin.
            let cpu = if ncpus > 1 {
                1 + (h.port as usize - 1) % (ncpus - 1)
            } else {
                0
            };
            steer_rx(&h.ns, &h.ifname, cpu)?;
            // Static neighbours: no ARP in the trace, and the switch forwards
            // on destination MAC.
            for (peer, ip) in plan
                .hosts
                .iter()
                .filter(|p| p.port != h.port)
                .flat_map(|p| p.gids.iter().map(move |g| (p, g)))
            {
                run(
                    "ip",
                    &[
                        "-n",
                        &h.ns,
                        "neigh",
                        "replace",
                        &ip.to_string(),
                        "lladdr",
                        &fmt_mac(&peer.mac),
                        "dev",
                        &h.ifname,
                        "nud",
                        "permanent",
                    ],
                )?;
            }
            route::replace(
                &h.ns,
                &route::LinkRoute {
                    dst: wirelab_plan::host_ip(0),
                    prefix_len: PREFIX_LEN,
                    dev: &h.ifname,
                    src: h.ip,
                    rto_min_ms: h.stack.rto_min.map(|r| r.as_millis().max(1) as u32),
                    quickack: h.stack.quickack,
                    features: if h.stack.usec_timestamps {
                        route::FEATURE_TCP_USEC_TS
                    } else {
                        0
                    },
                },
            )?;

            run("ip", &["-n", sw, "link", "set", &h.switch_ifname, "up"])?;
            offloads_off(sw, &h.switch_ifname)?;
            // Every switch port on CPU 0: the switch is one serial pipeline
            // like a hardware one, its mirror order is its processing order,
            // and its ring and sequence counter never bounce between CPUs.
            steer_rx(sw, &h.switch_ifname, 0)?;
            if let Some(b) = h.bottleneck {
                // tbf shapes (queues, then drops past `limit`); this kernel has
                // no netem/fq. The plan's burst holds at least one frame.
                let burst = b.burst.0;
                run(
                    "tc",
                    &[
                        "-n",
                        sw,
                        "qdisc",
                        "replace",
                        "dev",
                        &h.switch_ifname,
                        "root",
                        "tbf",
                        "rate",
                        &format!("{}bit", b.rate.0),
                        "burst",
                        &burst.to_string(),
                        "limit",
                        &b.buffer.0.to_string(),
                    ],
                )?;
            }
            lab.switch_ifindex.push(ifindex(sw, &h.switch_ifname)?);
        }
        if let Some(dut) = &plan.dut_ns {
            lab.dut_ifindex = dut_links(plan, sw, dut, &mtu)?;
        }
        Ok(lab)
    }

    /// Packets each host's bottleneck dropped on the way from the switch
    /// (after its capture point), by host index; 0 for a host without one.
    pub fn bottleneck_drops(&self, plan: &Plan) -> Result<Vec<u64>, Error> {
        plan.hosts
            .iter()
            .map(|h| match h.bottleneck {
                Some(_) => root_qdisc_drops(&plan.switch_ns, &h.switch_ifname),
                None => Ok(0),
            })
            .collect()
    }

    /// Kernel receive counters of each switch port (an independent witness
    /// for the integrity check), by host index.
    pub fn switch_port_rx(&self, plan: &Plan) -> Result<Vec<u64>, Error> {
        plan.hosts
            .iter()
            .map(|h| link_rx_packets(&plan.switch_ns, &h.switch_ifname))
            .collect()
    }

    pub fn run_id(&self) -> &str {
        &self.namespaces.id
    }
}

/// A device under test's namespace between the switch's ports: one veth
/// pair per host port, `d<port>` in the switch namespace and `o<port>` in
/// the DUT's. Returns the switch ends' ifindexes, by host index.
fn dut_links(plan: &Plan, sw: &str, dut: &str, mtu: &str) -> Result<Vec<u32>, Error> {
    in_netns(dut, || -> Result<(), Error> {
        write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")
    })??;
    run("ip", &["-n", dut, "link", "set", "lo", "up"])?;
    let mut out = Vec::new();
    for h in &plan.hosts {
        let (d, o) = wirelab_plan::dut_ifnames(h.port);
        run(
            "ip",
            &[
                "link", "add", "name", &d, "netns", sw, "mtu", mtu, "type", "veth", "peer", "name",
                &o, "netns", dut, "mtu", mtu,
            ],
        )?;
        for (ns, dev) in [(sw, &d), (dut, &o)] {
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
            // A userspace DUT reads and writes frames through packet
            // sockets: a checksum left to an offload would go out unfilled.
            offloads_off(ns, dev)?;
        }
        steer_rx(sw, &d, 0)?;
        out.push(ifindex(sw, &d)?);
    }
    Ok(out)
}

/// Stops every process still inside namespace `ns` (a DUT's daemons that
/// were not stopped, after a crash): SIGTERM, then SIGKILL after 1 s.
fn kill_processes_in(ns: &str) {
    let pids = |ns: &str| -> Vec<i32> {
        run("ip", &["netns", "pids", ns])
            .map(|o| {
                o.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter(|&p| p != std::process::id() as i32)
                    .collect()
            })
            .unwrap_or_default()
    };
    let send = |pids: &[i32], sig| {
        for &p in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
        }
    };
    let first = pids(ns);
    if first.is_empty() {
        return;
    }
    send(&first, nix::sys::signal::Signal::SIGTERM);
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if pids(ns).is_empty() {
            return;
        }
    }
    send(&pids(ns), nix::sys::signal::Signal::SIGKILL);
}

/// Network namespaces one process owns. They are recorded in the registry
/// before they are made, so `wirelab clean` removes them if the process is
/// killed, and are deleted (with every link and program in them) on drop.
/// A lab's hosts and switch; a test's or a recorder's own hosts.
pub struct Namespaces {
    id: String,
    names: Vec<String>,
}

impl Namespaces {
    /// Creates `names` (each must start with `wl-`, so that `clean` knows
    /// them) under registry entry `id`. On error, what was made is removed.
    pub fn new(id: &str, names: &[String]) -> Result<Namespaces, Error> {
        if let Some(n) = names.iter().find(|n| !n.starts_with(NS_PREFIX)) {
            return Err(Error::Other(format!(
                "namespace {n}: a lab namespace's name starts with {NS_PREFIX}"
            )));
        }
        fs::create_dir_all(REGISTRY_DIR).map_err(io(format!("creating {REGISTRY_DIR}")))?;
        let entry = RegistryEntry {
            pid: std::process::id(),
            start: process_start(std::process::id()),
            namespaces: names.to_vec(),
            bumps: Vec::new(),
            sysctls: Vec::new(),
        };
        fs::write(
            registry_path(id),
            serde_json::to_vec(&entry).expect("registry entry serialises"),
        )
        .map_err(io("writing the lab registry"))?;
        let mut made = Namespaces {
            id: id.to_string(),
            names: Vec::new(),
        };
        for ns in names {
            run("ip", &["netns", "add", ns])?;
            made.names.push(ns.clone());
        }
        Ok(made)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.names.iter().rev() {
            kill_processes_in(ns);
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("wirelab: removing namespace {ns}: {e}");
            }
        }
        let _ = fs::remove_file(registry_path(&self.id));
    }
}

/// Steers every packet a lab device receives to one CPU's backlog (RPS).
///
/// veth delivers a frame with netif_rx() on the CPU that transmitted it, so
/// two consecutive frames of one flow sent from two CPUs (a sender thread that
/// migrated, ACK-clocked sends in softirq, a qdisc dequeued by another CPU)
/// can overtake each other: the lab would reorder packets on its own. With
/// RPS to a single CPU they are queued in the order they were transmitted.
pub fn steer_rx(ns: &str, dev: &str, cpu: usize) -> Result<(), Error> {
    let mask = format!("{:x}", 1u64 << (cpu % 64));
    // sysfs shows a namespace's devices only when mounted from inside it,
    // which `ip netns exec` does.
    run(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            &format!("echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"),
        ],
    )?;
    Ok(())
}

fn offloads_off(ns: &str, dev: &str) -> Result<(), Error> {
    run(
        "ip",
        &[
            "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
            "tx", "off", "rx", "off",
        ],
    )?;
    Ok(())
}

pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Deserialize)]
struct LinkJson {
    ifindex: u32,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    stats64: Option<Stats64>,
}
#[derive(Deserialize)]
struct Stats64 {
    rx: RxStats,
}
#[derive(Deserialize)]
struct RxStats {
    packets: u64,
}

fn link_json(ns: &str, dev: &str) -> Result<LinkJson, Error> {
    let out = run("ip", &["-n", ns, "-s", "-j", "link", "show", "dev", dev])?;
    let mut v: Vec<LinkJson> = serde_json::from_str(&out)
        .map_err(|e| Error::Other(format!("parsing `ip -j link show {dev}` in {ns}: {e}")))?;
    v.pop()
        .ok_or_else(|| Error::Other(format!("no device {dev} in {ns}")))
}

/// The inode of a named network namespace: the kernel's `ns.inum`, how
/// BPF tracing programs tell namespaces apart.
pub fn netns_inode(ns: &str) -> Result<u32, Error> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(Path::new(NETNS_DIR).join(ns)).map_err(io(format!("namespace {ns}")))?;
    Ok(m.ino() as u32)
}

pub fn ifindex(ns: &str, dev: &str) -> Result<u32, Error> {
    Ok(link_json(ns, dev)?.ifindex)
}

/// A device's (ifindex, MTU) in namespace `ns`.
pub fn link_info(ns: &str, dev: &str) -> Result<(u32, u32), Error> {
    let l = link_json(ns, dev)?;
    Ok((l.ifindex, l.mtu))
}

/// A device's MAC address in namespace `ns`.
pub fn link_mac(ns: &str, dev: &str) -> Result<[u8; 6], Error> {
    let a = link_json(ns, dev)?.address.unwrap_or_default();
    let v: Vec<u8> = a
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    v.try_into()
        .map_err(|_| Error::Other(format!("{dev} in {ns} has no MAC address (`{a}`)")))
}

/// Packets the root qdisc of `dev` in `ns` dropped (a bottleneck's tbf
/// past its buffer); 0 without one.
pub fn root_qdisc_drops(ns: &str, dev: &str) -> Result<u64, Error> {
    #[derive(serde::Deserialize)]
    struct Qdisc {
        #[serde(default)]
        drops: u64,
    }
    let out = run(
        "tc",
        &["-s", "-j", "-n", ns, "qdisc", "show", "dev", dev, "root"],
    )?;
    let v: Vec<Qdisc> = serde_json::from_str(&out).map_err(|e| {
        Error::Other(format!(
            "parsing `tc -s -j qdisc show dev {dev}` in {ns}: {e}"
        ))
    })?;
    Ok(v.iter().map(|q| q.drops).sum())
}

pub fn link_rx_packets(ns: &str, dev: &str) -> Result<u64, Error> {
    Ok(link_json(ns, dev)?.stats64.map_or(0, |s| s.rx.packets))
}

/// Namespaces that look like wirelab's (`wl-*`).
pub fn lab_namespaces() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(NS_PREFIX))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Field 22 of `/proc/PID/stat` (proc(5)): when the process started, in
/// clock ticks since boot. Fields are counted after the command name's
/// closing parenthesis, since the name itself may hold spaces and parentheses.
fn process_start(pid: u32) -> Option<u64> {
    start_field(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn start_field(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` begins with field 3 (state).
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The entry's owner still runs: its pid exists and, where the entry has
/// it, with the same start time.
fn owner_alive(entry: &RegistryEntry) -> bool {
    match entry.start {
        Some(start) => process_start(entry.pid) == Some(start),
        None => Path::new(&format!("/proc/{}", entry.pid)).exists(),
    }
}

/// What `clean` removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub namespaces: Vec<String>,
    pub registry_entries: Vec<String>,
    /// Namespaces left alone because their run is still alive.
    pub kept: Vec<String>,
    /// Interfaces (`ns:ifname`) a killed `wirelab bump` was attached to.
    pub bumps: Vec<String>,
    /// Host sysctls a killed run had changed, put back (`name=value`).
    pub sysctls: Vec<String>,
}

/// Removes what killed runs left: registry entries whose process is gone,
/// their namespaces, and `wl-*` namespaces no live run owns. With `all`,
/// live runs' labs are removed too.
pub fn clean(all: bool) -> Result<Cleaned, Error> {
    let mut out = Cleaned::default();
    let mut owned_by_live: BTreeMap<String, u32> = BTreeMap::new();
    if let Ok(dir) = fs::read_dir(REGISTRY_DIR) {
        for e in dir.filter_map(|e| e.ok()) {
            let p = e.path();
            let Ok(text) = fs::read_to_string(&p) else {
                continue;
            };
            let Ok(entry) = serde_json::from_str::<RegistryEntry>(&text) else {
                let _ = fs::remove_file(&p);
                continue;
            };
            if !all && owner_alive(&entry) && entry.pid != std::process::id() {
                for ns in entry.namespaces {
                    owned_by_live.insert(ns, entry.pid);
                }
                continue;
            }
            for b in &entry.bumps {
                b.remove()?;
                out.bumps.push(format!("{}:{}", b.ns, b.ifname));
            }
            for (name, value) in &entry.sysctls {
                write_sysctl(name, value)?;
                out.sysctls.push(format!("{name}={value}"));
            }
            fs::remove_file(&p).map_err(io(format!("removing {}", p.display())))?;
            out.registry_entries.push(p.display().to_string());
        }
    }
    for ns in lab_namespaces() {
        if owned_by_live.contains_key(&ns) {
            out.kept.push(ns);
            continue;
        }
        kill_processes_in(&ns);
        run("ip", &["netns", "del", &ns])?;
        out.namespaces.push(ns);
    }
    // A DUT's folder whose run has no registry entry left (its daemons
    // were in the namespaces just removed).
    if let Ok(dir) = fs::read_dir(REGISTRY_DIR) {
        for e in dir.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_prefix("dut-") {
                if !registry_path(id).exists() {
                    fs::remove_dir_all(e.path())
                        .map_err(io(format!("removing {}", e.path().display())))?;
                    out.registry_entries.push(e.path().display().to_string());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: u32, start: Option<u64>) -> RegistryEntry {
        RegistryEntry {
            pid,
            start,
            namespaces: Vec::new(),
            bumps: Vec::new(),
            sysctls: Vec::new(),
        }
    }

    #[test]
    fn the_arp_cache_stat_gives_the_entries_and_every_cpu_s_overflows() {
        let text = "entries  allocs destroys hash_grows lookups hits res_failed rcv_probes_mcast rcv_probes_ucast periodic_gc_runs forced_gc_runs unresolved_discards table_fulls\n\
                    00000105  0000000a 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000003\n\
                    00000105  00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000010\n";
        assert_eq!(parse_arp_cache_stat(text), Some((0x105, 0x13)));
        assert_eq!(parse_arp_cache_stat("entries allocs\n1 2\n"), None);
    }

    #[test]
    fn loopback_and_permanent_entries_do_not_count_against_the_limit() {
        let out = "0.0.0.0 dev lo lladdr 00:00:00:00:00:00 NOARP\n\
                   198.18.2.16 dev dut1 lladdr 02:00:00:00:00:01 REACHABLE\n\
                   198.18.2.17 dev dut1 lladdr 02:00:00:00:00:02 PERMANENT\n\
                   198.18.2.18 dev lol lladdr 02:00:00:00:00:03 STALE\n";
        assert_eq!(count_exempt(out), 2);
    }

    #[test]
    fn a_reused_pid_is_not_the_owner() {
        let me = std::process::id();
        let start = process_start(me).expect("this process has a start time");
        assert!(owner_alive(&entry(me, Some(start))));
        // The same pid, started at another time: a different process.
        assert!(!owner_alive(&entry(me, Some(start + 1))));
        // Entries written before start times were recorded: the pid alone.
        assert!(owner_alive(&entry(me, None)));
        // pid_max is at most 2^22 (proc(5)), so this pid never exists.
        assert!(!owner_alive(&entry(1 << 23, None)));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_fields() {
        // Field 22 is counted from the last ')', whatever the name holds.
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 0";
        assert_eq!(start_field(stat), Some(987654));
        assert_eq!(
            start_field("42 (x) S 1"),
            None,
            "a short line has no field 22"
        );
    }
}
