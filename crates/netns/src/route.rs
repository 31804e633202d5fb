//! A host's lab route, set over rtnetlink.
//!
//! Why not `ip route`: the route metric TCP reads for microsecond
//! timestamps (`RTAX_FEATURES` bit `RTAX_FEATURE_TCP_USEC_TS`, Linux 6.7)
//! has no keyword in Debian 12's iproute2 (6.1: `features` takes only
//! `ecn`), and a replace overwrites every metric of the route, so the
//! route and all its metrics go in one `RTM_NEWROUTE`, built with
//! netlink-packet-route (the rust-netlink project's message types) rather
//! than by hand.

use std::net::Ipv4Addr;

use netlink_packet_core::{
    NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::{in_netns, Error};

/// `RTAX_FEATURE_TCP_USEC_TS` (include/uapi/linux/rtnetlink.h, Linux
/// 6.7): connections on the route use TCP timestamps in microseconds, not
/// milliseconds (RFC 7323 §5.4 allows any tick from 1 µs to 1 s).
pub const FEATURE_TCP_USEC_TS: u32 = 1 << 4;

/// `RTAX_RTO_MIN` (include/uapi/linux/rtnetlink.h), the bit its lock sets.
const RTAX_RTO_MIN: u32 = 13;

/// A directly connected IPv4 route and the options TCP reads from it per
/// connection (rtnetlink's `RTAX_*` metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRoute<'a> {
    pub dst: Ipv4Addr,
    pub prefix_len: u8,
    pub dev: &'a str,
    pub src: Ipv4Addr,
    /// `RTAX_RTO_MIN`, in milliseconds as ip-route(8)'s `rto_min` stores it.
    pub rto_min_ms: Option<u32>,
    pub quickack: bool,
    /// `RTAX_FEATURES` bits.
    pub features: u32,
}

impl LinkRoute<'_> {
    /// The `RTM_NEWROUTE` body: what `ip route replace DST dev DEV proto
    /// kernel scope link src SRC [rto_min Nms] [quickack 1]` sends, with
    /// the outgoing interface by index.
    fn message(&self, oif: u32) -> RouteMessage {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        m.header.destination_prefix_length = self.prefix_len;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Kernel;
        m.header.scope = RouteScope::Link;
        m.header.kind = RouteType::Unicast;
        m.attributes = vec![
            RouteAttribute::Destination(RouteAddress::Inet(self.dst)),
            RouteAttribute::Oif(oif),
            RouteAttribute::PrefSource(RouteAddress::Inet(self.src)),
        ];
        let mut metrics = Vec::new();
        if let Some(ms) = self.rto_min_ms {
            // Locked, as ip-route(8) always sends it: Linux reads a route's
            // rto_min only when its lock bit is set (tcp_rto_min:
            // dst_metric_locked(dst, RTAX_RTO_MIN)).
            metrics.push(RouteMetric::Lock(1 << RTAX_RTO_MIN));
            metrics.push(RouteMetric::RtoMin(ms));
        }
        if self.quickack {
            metrics.push(RouteMetric::QuickAck(1));
        }
        if self.features != 0 {
            metrics.push(RouteMetric::Features(self.features));
        }
        if !metrics.is_empty() {
            m.attributes.push(RouteAttribute::Metrics(metrics));
        }
        m
    }
}

/// The feature bits of a route's `features` option as `route_options`
/// gives it (`ip -j route`: iproute2 6.1 names only the `ecn` feature and
/// shows the whole set in hex beside it, `"0x10"`).
pub fn feature_bits(features: &serde_json::Value) -> Option<u32> {
    match features.as_str() {
        Some(hex) => u32::from_str_radix(hex.strip_prefix("0x")?, 16).ok(),
        None => features.as_u64().and_then(|b| u32::try_from(b).ok()),
    }
}

/// Adds or replaces `route` in namespace `ns`'s main table.
pub fn replace(ns: &str, route: &LinkRoute) -> Result<(), Error> {
    let what = || {
        format!(
            "setting the route {}/{} dev {} in {ns}",
            route.dst, route.prefix_len, route.dev
        )
    };
    in_netns(ns, || -> Result<(), Error> {
        let oif = nix::net::if_::if_nametoindex(route.dev)
            .map_err(|e| Error::Other(format!("{}: no interface {}: {e}", what(), route.dev)))?;
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::NewRoute(route.message(oif)));
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
        req.header.sequence_number = 1;
        req.finalize();
        let mut buf = vec![0u8; req.buffer_len()];
        req.serialize(&mut buf);

        let io = |e: std::io::Error| Error::Io {
            what: what(),
            source: e,
        };
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(io)?;
        socket.bind_auto().map_err(io)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(io)?;
        socket.send(&buf, 0).map_err(io)?;
        let (reply, _) = socket.recv_from_full().map_err(io)?;
        let ack = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&reply)
            .map_err(|e| Error::Other(format!("{}: the kernel's answer: {e}", what())))?;
        match ack.payload {
            // An ACK is an error message with code 0 (netlink(7)).
            NetlinkPayload::Error(e) => match e.code {
                None => Ok(()),
                Some(_) => Err(io(e.to_io())),
            },
            other => Err(Error::Other(format!(
                "{}: the kernel answered {other:?}, not an acknowledgment",
                what()
            ))),
        }
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    /// The message is the one `ip route replace 198.18.0.0/16 dev eth0
    /// proto kernel scope link src 198.18.0.1 rto_min 5ms quickack 1`
    /// sends (nlmon), with the features metric after them.
    #[test]
    fn the_route_message_is_byte_exact() {
        let r = LinkRoute {
            dst: Ipv4Addr::new(198, 18, 0, 0),
            prefix_len: 16,
            dev: "eth0",
            src: Ipv4Addr::new(198, 18, 0, 1),
            rto_min_ms: Some(5),
            quickack: true,
            features: FEATURE_TCP_USEC_TS,
        };
        let m = r.message(7);
        let mut b = vec![0u8; m.buffer_len()];
        m.emit(&mut b);
        #[rustfmt::skip]
        let want: &[u8] = &[
            // rtmsg: AF_INET, dst_len 16, src_len 0, tos 0, table main (254),
            // proto kernel (2), scope link (253), type unicast (1), flags 0
            2, 16, 0, 0, 254, 2, 253, 1, 0, 0, 0, 0,
            // RTA_DST (1) 198.18.0.0
            8, 0, 1, 0, 198, 18, 0, 0,
            // RTA_OIF (4) 7
            8, 0, 4, 0, 7, 0, 0, 0,
            // RTA_PREFSRC (7) 198.18.0.1
            8, 0, 7, 0, 198, 18, 0, 1,
            // RTA_METRICS (8), 36 bytes: RTAX_LOCK (1) bit 13, RTAX_RTO_MIN
            // (13) 5, RTAX_QUICKACK (15) 1, RTAX_FEATURES (12) 0x10
            36, 0, 8, 0,
            8, 0, 1, 0, 0, 0x20, 0, 0,
            8, 0, 13, 0, 5, 0, 0, 0,
            8, 0, 15, 0, 1, 0, 0, 0,
            8, 0, 12, 0, 0x10, 0, 0, 0,
        ];
        assert_eq!(b, want);

        // No options: no metrics attribute at all, as ip sends it.
        let plain = LinkRoute {
            rto_min_ms: None,
            quickack: false,
            features: 0,
            ..r
        }
        .message(7);
        assert!(!plain
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Metrics(_))));
    }
}

#[cfg(test)]
mod lab_tests {
    use super::*;
    use crate::cmd::run;

    /// A namespace of this test's own, removed however the test ends.
    struct Ns(String);

    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = run("ip", &["netns", "del", &self.0]);
        }
    }

    #[test]
    fn the_kernel_takes_the_route_and_its_options() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED: needs root (a network namespace)");
            return;
        }
        let ns = Ns(format!("wlt-route-{}", std::process::id()));
        run("ip", &["netns", "add", &ns.0]).unwrap();
        for args in [
            &["link", "add", "r0", "type", "veth", "peer", "name", "r1"][..],
            &["link", "set", "r0", "up"],
            &["addr", "add", "198.18.0.1/16", "dev", "r0", "noprefixroute"],
        ] {
            let mut a = vec!["-n", &ns.0];
            a.extend_from_slice(args);
            run("ip", &a).unwrap();
        }
        let mut r = LinkRoute {
            dst: Ipv4Addr::new(198, 18, 0, 0),
            prefix_len: 16,
            dev: "r0",
            src: Ipv4Addr::new(198, 18, 0, 1),
            rto_min_ms: Some(5),
            quickack: true,
            features: FEATURE_TCP_USEC_TS,
        };
        replace(&ns.0, &r).unwrap();
        let shown = run("ip", &["-n", &ns.0, "route", "show", "198.18.0.0/16"]).unwrap();
        assert!(
            shown.starts_with("198.18.0.0/16 dev r0 proto kernel scope link src 198.18.0.1 ")
                && shown.contains(" features 0x10 rto_min lock 5ms quickack 1"),
            "{shown}"
        );
        // As a record reads it (`route_options`).
        let routes = crate::route_options(&ns.0).unwrap();
        let m = &routes.iter().find(|r| r["dst"] == "198.18.0.0/16").unwrap()["metrics"];
        assert_eq!(
            feature_bits(&m["features"]),
            Some(FEATURE_TCP_USEC_TS),
            "{m}"
        );
        // Replaced, not added beside: one route, now without options.
        r.rto_min_ms = None;
        r.quickack = false;
        r.features = 0;
        replace(&ns.0, &r).unwrap();
        let shown = run("ip", &["-n", &ns.0, "route", "show", "198.18.0.0/16"]).unwrap();
        assert!(
            !shown.contains("features") && !shown.contains("rto_min"),
            "{shown}"
        );
        assert_eq!(shown.lines().count(), 1, "{shown}");
        // A device the namespace lacks is named.
        let err = replace(&ns.0, &LinkRoute { dev: "nope0", ..r })
            .unwrap_err()
            .to_string();
        assert!(err.contains("no interface nope0"), "{err}");
    }
}
