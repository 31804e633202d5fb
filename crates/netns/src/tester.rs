//! The lab of a load test (Norma, seed 002; `wirelab load`): two tester
//! ports, each in a namespace of its own, cabled to a device under test in
//! a third, as Norma's Tofino ports are cabled to the DUT:
//!
//! ```text
//!  wl-<id>-tx [t0] ─── [d0] wl-<id>-dut [d1] ─── [t1] wl-<id>-rx
//! ```
//!
//! The DUT is what Linux makes of its namespace: a router between
//! 198.18.1.0/24 and 198.18.2.0/24, a bridge joining both ports into
//! 198.18.1.0/24, a router with a stateful nftables firewall and source
//! NAT, the same two subnets with forwarding off for haproxy, which
//! `wirelab_lab` starts there, or two bare ports for wirelab's own switch,
//! which `wirelab_lab` attaches (one subnet, as a bridge's). Lab addresses are RFC 2544's benchmark range (198.18.0.0/15), only
//! ever inside these namespaces. Every link has its offloads off, so the DUT
//! forwards wire-sized frames. Removed on drop (with whatever runs inside),
//! registered for `wirelab clean` until then.

use std::net::Ipv4Addr;

use wirelab_spec::load::{DutKind, Egress};

use crate::{fmt_mac, in_netns, offloads_off, run, Error, Namespaces};

/// The sending port's device, in `tx_ns`.
pub const TX_DEV: &str = "t0";
/// The receiving port's device, in `rx_ns`.
pub const RX_DEV: &str = "t1";
/// The DUT's ports towards the sender and the receiver.
pub const DUT_IN: &str = "d0";
pub const DUT_OUT: &str = "d1";

/// The lab's addresses for a DUT of `kind`: (the sender's, the
/// receiver's, the router's on each side; a bridge has none and gets the
/// sender's twice).
pub fn addresses(kind: DutKind) -> Addresses {
    let a = |net, host| Ipv4Addr::new(198, 18, net, host);
    if kind.routes() {
        Addresses {
            tx: a(1, 2),
            rx: a(2, 2),
            dut_tx_side: a(1, 1),
            dut_rx_side: a(2, 1),
        }
    } else {
        Addresses {
            tx: a(1, 2),
            rx: a(1, 3),
            dut_tx_side: a(1, 2),
            dut_rx_side: a(1, 2),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    pub tx: Ipv4Addr,
    pub rx: Ipv4Addr,
    pub dut_tx_side: Ipv4Addr,
    pub dut_rx_side: Ipv4Addr,
}

/// One load test's lab.
pub struct TesterLab {
    ns: Namespaces,
    pub tx_ns: String,
    pub dut_ns: String,
    pub rx_ns: String,
    pub kind: DutKind,
    pub tx_ip: Ipv4Addr,
    pub rx_ip: Ipv4Addr,
    /// The DUT's address on the receiver's side (a router's; a bridge has
    /// none and this is the sender's).
    pub dut_rx_side_ip: Ipv4Addr,
    pub tx_mac: [u8; 6],
    /// Where the sender's frames are addressed: the router's port, or the
    /// receiver itself behind a bridge.
    pub next_hop_mac: [u8; 6],
}

impl TesterLab {
    /// Builds the lab of run `id` (namespaces `wl-<id>-tx`, `-dut`, `-rx`).
    /// On error, what was made is removed.
    pub fn up(
        id: &str,
        kind: DutKind,
        mtu: u32,
        egress: Option<&Egress>,
    ) -> Result<TesterLab, Error> {
        let name = |s: &str| format!("{}{id}-{s}", wirelab_plan::NS_PREFIX);
        let (tx_ns, dut_ns, rx_ns) = (name("tx"), name("dut"), name("rx"));
        let ns = Namespaces::new(id, &[tx_ns.clone(), dut_ns.clone(), rx_ns.clone()])?;
        let ip = |args: &[&str]| run("ip", args).map(|_| ());
        let mtu = mtu.to_string();
        for (dev, ns, peer) in [(TX_DEV, &tx_ns, DUT_IN), (RX_DEV, &rx_ns, DUT_OUT)] {
            ip(&[
                "link", "add", "name", dev, "netns", ns, "mtu", &mtu, "type", "veth", "peer",
                "name", peer, "netns", &dut_ns, "mtu", &mtu,
            ])?;
        }
        for (ns, devs) in [
            (&tx_ns, &[TX_DEV][..]),
            (&dut_ns, &[DUT_IN, DUT_OUT][..]),
            (&rx_ns, &[RX_DEV][..]),
        ] {
            in_netns(ns, || -> Result<(), Error> {
                // IPv6 off: router solicitations and MLD reports are traffic
                // nobody asked for, counted by the DUT.
                crate::write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
                crate::write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")
            })??;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for dev in devs {
                offloads_off(ns, dev)?;
            }
        }
        let at = addresses(kind);
        let (tx_ip, rx_ip, dut_rx_side_ip) = (at.tx, at.rx, at.dut_rx_side);
        if kind.routes() {
            let (a, b) = (at.dut_tx_side, at.dut_rx_side);
            ip(&[
                "-n",
                &dut_ns,
                "addr",
                "add",
                &format!("{a}/24"),
                "dev",
                DUT_IN,
            ])?;
            ip(&[
                "-n",
                &dut_ns,
                "addr",
                "add",
                &format!("{b}/24"),
                "dev",
                DUT_OUT,
            ])?;
            // haproxy terminates the clients' connections and opens its
            // own to the servers: nothing is forwarded around it.
            let forward = if kind == DutKind::Haproxy { "0" } else { "1" };
            in_netns(&dut_ns, || -> Result<(), Error> {
                crate::write_sysctl("net.ipv4.ip_forward", forward)?;
                if kind == DutKind::Haproxy {
                    // Its listen backlog is its maxconn, capped by these.
                    crate::write_sysctl("net.core.somaxconn", "65535")?;
                    crate::write_sysctl("net.ipv4.tcp_max_syn_backlog", "65535")?;
                }
                Ok(())
            })??;
        } else if kind == DutKind::Bridge {
            // No spanning tree, no forwarding delay: a port forwards as
            // soon as it is up, not after listening and learning.
            ip(&[
                "-n",
                &dut_ns,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "stp_state",
                "0",
                "forward_delay",
                "0",
            ])?;
            for dev in [DUT_IN, DUT_OUT] {
                ip(&["-n", &dut_ns, "link", "set", dev, "master", "br0"])?;
            }
            ip(&["-n", &dut_ns, "link", "set", "br0", "up"])?;
        }
        ip(&[
            "-n",
            &tx_ns,
            "addr",
            "add",
            &format!("{tx_ip}/24"),
            "dev",
            TX_DEV,
        ])?;
        ip(&[
            "-n",
            &rx_ns,
            "addr",
            "add",
            &format!("{rx_ip}/24"),
            "dev",
            RX_DEV,
        ])?;
        for (ns, dev) in [
            (&tx_ns, TX_DEV),
            (&dut_ns, DUT_IN),
            (&dut_ns, DUT_OUT),
            (&rx_ns, RX_DEV),
        ] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        if kind.routes() {
            let via = |a: Ipv4Addr| a.to_string();
            ip(&[
                "-n",
                &tx_ns,
                "route",
                "add",
                "default",
                "via",
                &via(at.dut_tx_side),
            ])?;
            ip(&[
                "-n",
                &rx_ns,
                "route",
                "add",
                "default",
                "via",
                &via(at.dut_rx_side),
            ])?;
        }
        if kind == DutKind::Nat {
            nat(&dut_ns)?;
        }
        if let Some(e) = egress {
            // tbf queues what exceeds the rate and drops past `limit` (this
            // kernel has no netem or fq). Its bucket holds 1 ms of the rate
            // (at least a frame): tbf sends when its watchdog timer fires,
            // microseconds late, and a bucket of one frame would lose that
            // lateness at every frame (100 Mbit/s of 1514-byte frames drained
            // at 95 here).
            let frame = mtu.parse::<u64>().unwrap_or(1500) + 14;
            let frame = frame.max(e.rate.0 / 8 / 1000).to_string();
            run(
                "tc",
                &[
                    "-n",
                    &dut_ns,
                    "qdisc",
                    "replace",
                    "dev",
                    DUT_OUT,
                    "root",
                    "tbf",
                    "rate",
                    &format!("{}bit", e.rate.0),
                    "burst",
                    &frame,
                    "limit",
                    &e.buffer.0.to_string(),
                ],
            )?;
        }
        let tx_mac = crate::link_mac(&tx_ns, TX_DEV)?;
        let next_hop_mac = if kind.routes() {
            crate::link_mac(&dut_ns, DUT_IN)?
        } else {
            crate::link_mac(&rx_ns, RX_DEV)?
        };
        Ok(TesterLab {
            ns,
            tx_ns,
            dut_ns,
            rx_ns,
            kind,
            tx_ip,
            rx_ip,
            dut_rx_side_ip,
            tx_mac,
            next_hop_mac,
        })
    }

    /// Puts the tester and the DUT on CPUs of their own, as if they were
    /// two machines: what the tester's ports receive is processed (RPS)
    /// on `tester_cpu`, what the DUT's ports receive on `dut_cpu`, where
    /// the caller also runs the DUT's processes. Without it, a veth
    /// delivers on the sending CPU, and a tester answering in softirq
    /// would take its CPU time from the DUT's core.
    pub fn split_cpus(&self, tester_cpu: usize, dut_cpu: usize) -> Result<(), Error> {
        crate::steer_rx(&self.tx_ns, TX_DEV, tester_cpu)?;
        crate::steer_rx(&self.rx_ns, RX_DEV, tester_cpu)?;
        crate::steer_rx(&self.dut_ns, DUT_IN, dut_cpu)?;
        crate::steer_rx(&self.dut_ns, DUT_OUT, dut_cpu)
    }

    pub fn namespaces(&self) -> &[String] {
        self.ns.names()
    }

    /// RFC 2544 §23's learning frames: the receiver speaks first, so the
    /// DUT knows where it is (a router's neighbour entry, a bridge's
    /// forwarding entry) before the stream's first frame, which would
    /// otherwise wait on ARP or be flooded.
    pub fn learn(&self) -> Result<(), Error> {
        let to = std::net::SocketAddrV4::new(self.dut_rx_side_ip, 9);
        in_netns(&self.rx_ns, || -> Result<(), Error> {
            let s = std::net::UdpSocket::bind("0.0.0.0:0")
                .map_err(crate::io("a learning frame's socket"))?;
            s.send_to(b"learn", to)
                .map_err(crate::io(format!("sending a learning frame to {to}")))?;
            Ok(())
        })??;
        // The sender's side: its neighbour (the router, or the receiver
        // behind the bridge) is known statically, since the generator
        // writes the MAC into its frames itself.
        let target = if self.kind.routes() {
            addresses(self.kind).dut_tx_side.to_string()
        } else {
            self.rx_ip.to_string()
        };
        run(
            "ip",
            &[
                "-n",
                &self.tx_ns,
                "neigh",
                "replace",
                &target,
                "lladdr",
                &fmt_mac(&self.next_hop_mac),
                "dev",
                TX_DEV,
                "nud",
                "permanent",
            ],
        )?;
        // Until the neighbour is resolved, the DUT holds the first frames.
        for _ in 0..100 {
            let out = run(
                "ip",
                &["-n", &self.dut_ns, "neigh", "show", &self.rx_ip.to_string()],
            )?;
            let fdb = run("bridge", &["-n", &self.dut_ns, "fdb", "show", "br", "br0"])
                .unwrap_or_default();
            let rx_mac = fmt_mac(&crate::link_mac(&self.rx_ns, RX_DEV)?);
            // A bridge port learns before it forwards (802.1D states):
            // both must be forwarding too.
            let known = if self.kind.routes() {
                out.contains("lladdr")
            } else if self.kind == DutKind::Switch {
                // wirelab's switch forwards port to port: nothing to learn.
                true
            } else {
                let ports = run("bridge", &["-n", &self.dut_ns, "link", "show"])?;
                fdb.contains(&rx_mac) && ports.matches("state forwarding").count() == 2
            };
            if known {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err(Error::Other(format!(
            "the DUT did not learn the receiver {} within 1 s",
            self.rx_ip
        )))
    }

    /// A router that learns neighbours from ARP replies nobody asked for
    /// (`arp_accept` 1 on its ports: Linux creates the entry, where by
    /// default it only updates one it has; ip-sysctl.rst).
    pub fn accept_arp(&self) -> Result<(), Error> {
        in_netns(&self.dut_ns, || -> Result<(), Error> {
            for dev in ["all", "default", DUT_IN, DUT_OUT] {
                crate::write_sysctl(&format!("net.ipv4.conf.{dev}.arp_accept"), "1")?;
            }
            Ok(())
        })?
    }

    /// Neighbours the DUT holds on its receiving side with an address in
    /// `from..=to` and a link-layer address (learned: not failed nor
    /// still incomplete).
    pub fn neighbours_in(&self, from: Ipv4Addr, to: Ipv4Addr) -> Result<usize, Error> {
        let out = run(
            "ip",
            &["-n", &self.dut_ns, "-4", "neigh", "show", "dev", DUT_OUT],
        )?;
        Ok(out
            .lines()
            .filter(|l| l.contains("lladdr"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<Ipv4Addr>().ok())
            .filter(|a| (from..=to).contains(a))
            .count())
    }

    /// The DUT's own account, for the results folder: (file name, text).
    pub fn dut_statistics(&self) -> Vec<(String, String)> {
        let ns = self.dut_ns.as_str();
        let mut out = Vec::new();
        let mut take = |name: &str, prog: &str, args: &[&str]| {
            let text = run(prog, args).unwrap_or_else(|e| format!("{e}\n"));
            out.push((name.to_string(), text));
        };
        take("links.txt", "ip", &["-n", ns, "-s", "-s", "link", "show"]);
        take("qdiscs.txt", "tc", &["-n", ns, "-s", "qdisc", "show"]);
        take("neighbours.txt", "ip", &["-n", ns, "neigh", "show"]);
        match self.kind {
            DutKind::Bridge => take("fdb.txt", "bridge", &["-n", ns, "fdb", "show", "br", "br0"]),
            DutKind::Nat => {
                take(
                    "nftables.txt",
                    "ip",
                    &["netns", "exec", ns, "nft", "list", "ruleset"],
                );
                take(
                    "conntrack_count.txt",
                    "ip",
                    &[
                        "netns",
                        "exec",
                        ns,
                        "cat",
                        "/proc/sys/net/netfilter/nf_conntrack_count",
                    ],
                );
            }
            DutKind::Router => take("routes.txt", "ip", &["-n", ns, "route", "show"]),
            DutKind::Switch => {}
            DutKind::Haproxy => take("sockets.txt", "ip", &["netns", "exec", ns, "ss", "-s"]),
        }
        out
    }
}

/// A stateful firewall with source NAT (the kernel's conntrack and
/// nftables): new flows only from the sender's side, replies only as part
/// of an established flow, the sender's address masqueraded behind the
/// DUT's. Rules count their packets.
fn nat(ns: &str) -> Result<(), Error> {
    let rules = format!(
        "table ip wirelab {{
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related counter accept
    iifname \"{DUT_IN}\" oifname \"{DUT_OUT}\" ct state new counter accept
    counter
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat;
    oifname \"{DUT_OUT}\" counter masquerade
  }}
}}
"
    );
    let dir = tempfile_path(ns);
    std::fs::write(&dir, rules).map_err(crate::io(format!("writing {}", dir.display())))?;
    let r = run(
        "ip",
        &["netns", "exec", ns, "nft", "-f", &dir.display().to_string()],
    );
    let _ = std::fs::remove_file(&dir);
    r?;
    Ok(())
}

fn tempfile_path(ns: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{ns}-{}.nft", std::process::id()))
}
