//! Hosts A and B on either side of a router R, made as a user makes a
//! network for `wirelab record` (ip, ethtool, sysctl), not as a wirelab
//! lab: the recording's tests and `wirelab bench record` share it.

use crate::{run, Error, Namespaces};

/// A (10.N.1.2) – R (10.N.1.1, 10.N.2.1) – B (10.N.2.2), every interface
/// with offloads off so each packet is one IP-ID (wire-sized), R
/// forwarding. Removed on drop, registered for `wirelab clean` until then.
pub struct Routed {
    _ns: Namespaces,
    pub a: String,
    pub r: String,
    pub b: String,
    /// B's address.
    pub b_addr: String,
}

impl Routed {
    /// Namespaces `wl-<name>a`, `r`, `b` under registry entry `name`; `n`
    /// is the second octet of the two subnets (10.n.1.0/24, 10.n.2.0/24).
    pub fn new(name: &str, n: u8) -> Result<Routed, Error> {
        let (a, r, b) = (
            format!("wl-{name}a"),
            format!("wl-{name}r"),
            format!("wl-{name}b"),
        );
        let ns = Namespaces::new(name, &[a.clone(), r.clone(), b.clone()])?;
        let ip = |args: &[&str]| run("ip", args).map(|_| ());
        ip(&[
            "link", "add", "name", "va", "netns", &a, "type", "veth", "peer", "name", "ra",
            "netns", &r,
        ])?;
        ip(&[
            "link", "add", "name", "vb", "netns", &b, "type", "veth", "peer", "name", "rb",
            "netns", &r,
        ])?;
        let net = |s: u8, h: u8| format!("10.{n}.{s}.{h}");
        for (ns, addr, dev) in [
            (&a, net(1, 2), "va"),
            (&r, net(1, 1), "ra"),
            (&r, net(2, 1), "rb"),
            (&b, net(2, 2), "vb"),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
        }
        for (ns, devs) in [
            (&a, &["va"][..]),
            (&r, &["ra", "rb"][..]),
            (&b, &["vb"][..]),
        ] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            for dev in devs {
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                run(
                    "ip",
                    &[
                        "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off",
                        "gro", "off",
                    ],
                )?;
            }
        }
        ip(&["-n", &a, "route", "add", "default", "via", &net(1, 1)])?;
        ip(&["-n", &b, "route", "add", "default", "via", &net(2, 1)])?;
        run(
            "ip",
            &[
                "netns",
                "exec",
                &r,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ],
        )?;
        Ok(Routed {
            _ns: ns,
            b_addr: net(2, 2),
            a,
            r,
            b,
        })
    }
}
