//! The flow tables as OpenFlow rules for Open vSwitch (ScalaCN's DUT 2),
//! in `ovs-ofctl add-flows` syntax (ovs-fields(7), ovs-actions(7)), so both
//! DUTs hold the same logical tables. The eSwitch searches a table's masks
//! in order and the first that holds the packet's masked key decides;
//! OpenFlow has no mask order, so each mask's rules get a priority below
//! the masks searched before it (entries of one mask never overlap: one
//! key each). A miss, or a `count`, goes to the MAC table, as in the
//! switch: table 250 forwards each host's MAC out of its port and drops
//! the rest (the switch's static table; no learning, no flooding).
//! OVS numbers its ports by `ofport_request`: the DUT's port k is host k's.
//!
//! VXLAN (RFC 7348) goes through OVS's userspace native tunneling
//! (Documentation/howto/userspace-tunneling.rst): an `encap` entry sets
//! the tunnel's key and addresses and outputs to the tunnel port
//! (`TUNNEL_PORT`), which pushes the outer headers towards the remote
//! VTEP. The DUT holds every VTEP address itself (`crates/lab/src/ovs.rs`),
//! so OVS pops the packet again and it comes back in on the tunnel port,
//! its outer fields as tunnel metadata: a table-0 rule sends it to the
//! table the encap entry named, whose matches on outer fields become
//! matches on `tun_src`, `tun_dst` and `tun_id` (UDP port 4789 is the
//! tunnel port's). A `decap` entry there outputs the packet, popped
//! already. A miss in such a table drops, as the eSwitch's MAC table drops
//! a frame addressed to a VTEP.

use std::fmt::Write;

use crate::{EsActionPlan, EsEntryPlan, EsPlan, HostPlan};
use wirelab_spec::flowtables::MaskFields;

/// The OpenFlow table that plays the switch's MAC table.
pub const MAC_TABLE: u32 = 250;
/// The priority of a table's first mask; each later mask's is one less.
const TOP: usize = 30_000;
/// The OpenFlow port of the VXLAN tunnel port (host ports are 1..=N).
pub const TUNNEL_PORT: u32 = 4789;
/// Packets back from the tunnel go to their table first.
const TUNNEL_IN: usize = 60_000;

/// Tables that an `encap` entry searches next: after OVS pops the
/// tunnel, their packets arrive there with the outer fields as metadata.
pub fn tunnel_tables(es: &EsPlan) -> std::collections::BTreeSet<u32> {
    es.tables
        .iter()
        .flatten()
        .flat_map(|m| &m.entries)
        .filter_map(|e| match e.action {
            EsActionPlan::Encap {
                next: crate::EsNext::Table(t),
                ..
            } => Some(t),
            _ => None,
        })
        .collect()
}

/// The VTEP addresses the spec's own (not generated) encap entries send
/// to: the DUT holds them, so that OVS pops what it pushed.
pub fn vteps(es: &EsPlan) -> std::collections::BTreeSet<std::net::Ipv4Addr> {
    es.tables
        .iter()
        .flatten()
        .filter(|m| !m.generated)
        .flat_map(|m| &m.entries)
        .filter_map(|e| match e.action {
            EsActionPlan::Encap { remote, .. } => Some(remote),
            _ => None,
        })
        .collect()
}

/// An entry of a table packets reach popped: its outer-field matches as
/// tunnel metadata.
fn tunnel_matches(f: &MaskFields, e: &EsEntryPlan) -> String {
    let mut m = vec![format!("in_port={TUNNEL_PORT}")];
    if f.src > 0 {
        m.push(format!("tun_src={}", prefix(e.src, f.src)));
    }
    if f.dst > 0 {
        m.push(format!("tun_dst={}", prefix(e.dst, f.dst)));
    }
    if f.vni {
        m.push(format!("tun_id={}", e.vni.unwrap_or(0)));
    }
    m.join(",")
}

fn prefix(a: Option<std::net::Ipv4Addr>, len: u8) -> String {
    let a = a.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
    let m = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    format!("{}/{len}", std::net::Ipv4Addr::from(u32::from(a) & m))
}

/// One entry's match fields as the mask compares them; more than one when
/// ports are compared without the protocol (OpenFlow needs TCP or UDP
/// before a port: the eSwitch keys both the same way).
fn matches(f: &MaskFields, e: &EsEntryPlan) -> Vec<String> {
    // A rewritten port needs TCP or UDP in the match, and an address IPv4
    // (ovs-actions(7): set_field's prerequisites).
    let sets_ports = e.set.sport.is_some() || e.set.dport.is_some();
    let ports = f.sport || f.dport || sets_ports;
    let ip =
        ports || f.proto || f.src > 0 || f.dst > 0 || e.set.src.is_some() || e.set.dst.is_some();
    let protos: Vec<u8> = if f.proto {
        vec![e.proto.unwrap_or(0)]
    } else if ports {
        vec![6, 17]
    } else {
        vec![0]
    };
    protos
        .into_iter()
        .map(|p| {
            let mut m = Vec::new();
            if ip {
                m.push("ip".to_string());
            }
            if f.src > 0 {
                m.push(format!("nw_src={}", prefix(e.src, f.src)));
            }
            if f.dst > 0 {
                m.push(format!("nw_dst={}", prefix(e.dst, f.dst)));
            }
            if f.proto || ports {
                m.push(format!("nw_proto={p}"));
            }
            if f.sport {
                m.push(format!("tp_src={}", e.sport.unwrap_or(0)));
            }
            if f.dport {
                m.push(format!("tp_dst={}", e.dport.unwrap_or(0)));
            }
            m.join(",")
        })
        .collect()
}

/// An entry's set_field as OpenFlow actions ahead of its own; a port only
/// on TCP and UDP, as the eSwitch rewrites it.
fn rewrites(w: &crate::EsSetPlan, tcp_or_udp: bool) -> String {
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut out = String::new();
    if let Some(m) = w.dmac {
        let _ = write!(out, "mod_dl_dst:{},", mac(m));
    }
    if let Some(m) = w.smac {
        let _ = write!(out, "mod_dl_src:{},", mac(m));
    }
    if let Some(a) = w.src {
        let _ = write!(out, "mod_nw_src:{a},");
    }
    if let Some(a) = w.dst {
        let _ = write!(out, "mod_nw_dst:{a},");
    }
    if tcp_or_udp {
        if let Some(p) = w.sport {
            let _ = write!(out, "mod_tp_src:{p},");
        }
        if let Some(p) = w.dport {
            let _ = write!(out, "mod_tp_dst:{p},");
        }
    }
    out
}

/// The rules, one per line; `hosts` give the MAC table. What OVS cannot
/// do as the eSwitch does (an encapsulated packet sent out of a host's
/// port, a decap outside a table that encap entries search) is refused
/// before a plan exists (spec validation, `dut: ovs`).
pub fn compile(es: &EsPlan, hosts: &[HostPlan]) -> String {
    let mut out = String::new();
    let tunneled = tunnel_tables(es);
    // Back from the tunnel: to the table its encap entry named.
    let mut back = std::collections::BTreeSet::new();
    for e in es.tables.iter().flatten().flat_map(|m| &m.entries) {
        if let EsActionPlan::Encap {
            vni,
            remote,
            next: crate::EsNext::Table(t),
        } = e.action
        {
            back.insert((vni, remote, t));
        }
    }
    for (vni, remote, t) in back {
        let _ = writeln!(
            out,
            "table=0,priority={TUNNEL_IN},in_port={TUNNEL_PORT},tun_id={vni},tun_dst={remote},actions=resubmit(,{t})"
        );
    }
    for (t, masks) in es.tables.iter().enumerate() {
        let popped = tunneled.contains(&(t as u32));
        for (m, mask) in masks.iter().enumerate() {
            let priority = TOP - m;
            for e in &mask.entries {
                let action = match e.action {
                    EsActionPlan::Count => format!("resubmit(,{MAC_TABLE})"),
                    EsActionPlan::Forward { host } | EsActionPlan::Decap { host } => {
                        format!("output:{}", hosts[host].port)
                    }
                    EsActionPlan::Drop => "drop".to_string(),
                    EsActionPlan::Goto(n) => format!("resubmit(,{n})"),
                    EsActionPlan::Encap { vni, remote, .. } => format!(
                        "set_field:{vni}->tun_id,set_field:{}->tun_src,set_field:{remote}->tun_dst,output:{TUNNEL_PORT}",
                        wirelab_spec::flowtables::LOCAL_VTEP
                    ),
                };
                if popped {
                    let _ = writeln!(
                        out,
                        "table={t},priority={priority},{},actions={action}",
                        tunnel_matches(&mask.fields, e)
                    );
                    continue;
                }
                let tcp_or_udp = !mask.fields.proto || matches!(e.proto, Some(6 | 17));
                let action = format!("{}{action}", rewrites(&e.set, tcp_or_udp));
                for m in matches(&mask.fields, e) {
                    let sep = if m.is_empty() { "" } else { "," };
                    let _ = writeln!(
                        out,
                        "table={t},priority={priority}{sep}{m},actions={action}"
                    );
                }
            }
        }
        let miss = if popped {
            "drop".to_string()
        } else {
            format!("resubmit(,{MAC_TABLE})")
        };
        let _ = writeln!(out, "table={t},priority=0,actions={miss}");
    }
    for h in hosts {
        let mac: Vec<String> = h.mac.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(
            out,
            "table={MAC_TABLE},priority=10,dl_dst={},actions=output:{}",
            mac.join(":"),
            h.port
        );
    }
    let _ = writeln!(out, "table={MAC_TABLE},priority=0,actions=drop");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "\
topology:
  hosts: [{name: a}, {name: b}]
traffic:
  transport: roce
  connections:
    - {from: a, to: b, message_size: 4KiB}
flowtables:
  dut: ovs
  generate: {masks: 2, entries: 1}
  tables:
    - masks:
        - match: {dst: 24, dport: true}
          entries:
            - {dst: b, dport: 4791, action: goto, table: 1}
        - entries: [{action: count, set: {dmac: b, dport: 7}}]
    - masks:
        - match: {src: 32, dst: 32, proto: true}
          entries:
            - {src: a, dst: b, proto: udp, action: forward, to: b, set: {src: 198.18.9.9, smac: '02:00:00:00:00:09'}}
            - {src: b, dst: a, proto: udp, action: drop}
";

    #[test]
    fn each_mask_is_a_priority_below_the_masks_searched_before_it() {
        let spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
        let plan = crate::plan(&spec, "0a1b2c", 1).unwrap();
        let text = compile(plan.flowtables.as_ref().unwrap(), &plan.hosts);
        let lines: Vec<&str> = text.lines().collect();
        // Two generated masks (drop rules that the lab never matches),
        // then the spec's: a port without a protocol is TCP and UDP, and
        // so is a port rewritten; set_field comes ahead of the action.
        assert_eq!(
            lines,
            [
                "table=0,priority=30000,ip,nw_dst=203.0.0.0/8,nw_proto=17,actions=drop",
                "table=0,priority=29999,ip,nw_dst=203.0.0.0/9,nw_proto=17,actions=drop",
                "table=0,priority=29998,ip,nw_dst=198.18.0.0/24,nw_proto=6,tp_dst=4791,actions=resubmit(,1)",
                "table=0,priority=29998,ip,nw_dst=198.18.0.0/24,nw_proto=17,tp_dst=4791,actions=resubmit(,1)",
                "table=0,priority=29997,ip,nw_proto=6,actions=mod_dl_dst:02:77:6c:00:00:02,mod_tp_dst:7,resubmit(,250)",
                "table=0,priority=29997,ip,nw_proto=17,actions=mod_dl_dst:02:77:6c:00:00:02,mod_tp_dst:7,resubmit(,250)",
                "table=0,priority=0,actions=resubmit(,250)",
                "table=1,priority=30000,ip,nw_src=198.18.0.1/32,nw_dst=198.18.0.2/32,nw_proto=17,actions=mod_dl_src:02:00:00:00:00:09,mod_nw_src:198.18.9.9,output:2",
                "table=1,priority=30000,ip,nw_src=198.18.0.2/32,nw_dst=198.18.0.1/32,nw_proto=17,actions=drop",
                "table=1,priority=0,actions=resubmit(,250)",
                "table=250,priority=10,dl_dst=02:77:6c:00:00:01,actions=output:1",
                "table=250,priority=10,dl_dst=02:77:6c:00:00:02,actions=output:2",
                "table=250,priority=0,actions=drop",
            ]
        );
    }

    const TUNNEL: &str = "\
topology:
  hosts: [{name: a}, {name: b}]
traffic:
  transport: roce
  connections:
    - {from: a, to: b, message_size: 4KiB}
flowtables:
  dut: ovs
  tables:
    - masks:
        - match: {dst: 32, proto: true}
          entries:
            - {dst: b, proto: udp, action: encap, encap: {vni: 2002, remote: 198.19.255.2}, table: 1}
    - masks:
        - match: {src: 24, dst: 32, vni: true, dport: true}
          entries:
            - {src: 198.19.255.0, dst: 198.19.255.2, vni: 2002, dport: 4789, action: decap, to: b}
";

    #[test]
    fn vxlan_goes_through_the_tunnel_port_and_comes_back_to_the_table_encap_named() {
        let spec = wirelab_spec::parse(TUNNEL, wirelab_analyze::catalog()).unwrap();
        let plan = crate::plan(&spec, "0a1b2c", 1).unwrap();
        let es = plan.flowtables.as_ref().unwrap();
        assert_eq!(tunnel_tables(es).into_iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(
            vteps(es).into_iter().collect::<Vec<_>>(),
            vec![std::net::Ipv4Addr::new(198, 19, 255, 2)]
        );
        let text = compile(es, &plan.hosts);
        let lines: Vec<&str> = text.lines().collect();
        // Pushed from the local VTEP with the entry's key and remote; back
        // from the tunnel (popped) into table 1, whose outer-field matches
        // are tunnel metadata (UDP 4789 is the tunnel port's); a miss
        // there drops, as the eSwitch drops a frame for a VTEP's MAC.
        assert_eq!(
            &lines[..5],
            [
                "table=0,priority=60000,in_port=4789,tun_id=2002,tun_dst=198.19.255.2,actions=resubmit(,1)",
                "table=0,priority=30000,ip,nw_dst=198.18.0.2/32,nw_proto=17,actions=set_field:2002->tun_id,set_field:198.19.255.254->tun_src,set_field:198.19.255.2->tun_dst,output:4789",
                "table=0,priority=0,actions=resubmit(,250)",
                "table=1,priority=30000,in_port=4789,tun_src=198.19.255.0/24,tun_dst=198.19.255.2/32,tun_id=2002,actions=output:2",
                "table=1,priority=0,actions=drop",
            ]
        );
    }
}
