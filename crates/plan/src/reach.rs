//! ScalaCN §4.1 (a), topological restrictions: where the flow tables send
//! each connection's packets, found without running anything. Each
//! direction's packet searches the masks in their written order, an
//! entry's fields compared under its mask as the switch stage compares
//! them, gotos followed. A combination of tables that drops a
//! connection's packets, sends them to another host or goes round in a
//! loop is one no test needs to run (ScalaCN Fig. 9: packets B and C).

use std::net::Ipv4Addr;

use crate::{ConnPlan, EsActionPlan, EsEntryPlan, EsNext, EsPlan, Plan, Transport};

/// The most tables a packet passes (the switch's `WL_ES_MAX_CHAIN`).
const MAX_CHAIN: usize = 4;
/// RoCEv2's UDP destination port (IBTA Annex A17).
const ROCE_PORT: u16 = 4791;
/// VXLAN's UDP destination port (RFC 7348 §5).
const VXLAN_PORT: u16 = 4789;

/// Where a packet ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// To its destination (by an entry, or by the MAC table after a miss
    /// or a count).
    Delivered,
    Dropped {
        table: usize,
        mask: usize,
    },
    /// Forwarded to another host's port.
    Misrouted {
        table: usize,
        mask: usize,
        to: usize,
    },
    /// Still going to another table after the longest chain.
    Loop,
    /// Left the switch still VXLAN-encapsulated (no host here
    /// decapsulates): by an entry that sends it on encapsulated, or by the
    /// MAC table after the outer headers missed.
    Encapsulated {
        table: usize,
        mask: usize,
    },
    /// A decap entry hit a packet that is not VXLAN: the switch drops it
    /// (a tunnel error).
    NotVxlan {
        table: usize,
        mask: usize,
    },
}

/// A packet's fields as the stage keys them.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    proto: u8,
    /// The VNI of a packet the tables encapsulated; its other fields are
    /// then the outer headers' (`None`: the packet as its host sent it).
    vni: Option<u32>,
}

fn prefix(a: Ipv4Addr, len: u8) -> u32 {
    let m = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    };
    u32::from(a) & m
}

fn matches(p: &Pkt, f: &wirelab_spec::flowtables::MaskFields, e: &EsEntryPlan) -> bool {
    let zero = Ipv4Addr::UNSPECIFIED;
    prefix(p.src, f.src) == prefix(e.src.unwrap_or(zero), f.src)
        && prefix(p.dst, f.dst) == prefix(e.dst.unwrap_or(zero), f.dst)
        && (!f.sport || p.sport == e.sport.unwrap_or(0))
        && (!f.dport || p.dport == e.dport.unwrap_or(0))
        && (!f.proto || p.proto == e.proto.unwrap_or(0))
        && (!f.vni || p.vni.unwrap_or(0) == e.vni.unwrap_or(0))
}

fn fate(es: &EsPlan, p: &Pkt, dest: usize) -> Fate {
    let mut p = *p;
    // The entry that last encapsulated the packet (for a miss's fate).
    let mut encapsulated = None;
    let mut table = 0usize;
    for _ in 0..MAX_CHAIN {
        let hit = es.tables.get(table).and_then(|masks| {
            masks.iter().enumerate().find_map(|(m, mask)| {
                mask.entries
                    .iter()
                    .find(|e| matches(&p, &mask.fields, e))
                    .map(|e| (m, e.action))
            })
        });
        // Out of `host`'s port, encapsulated or not.
        let out = |host: usize, mask: usize, vxlan: bool| {
            if host != dest {
                Fate::Misrouted {
                    table,
                    mask,
                    to: host,
                }
            } else if vxlan {
                Fate::Encapsulated { table, mask }
            } else {
                Fate::Delivered
            }
        };
        let (mask, action) = match hit {
            // The MAC table forwards it, as it is.
            None | Some((_, EsActionPlan::Count)) => {
                return match encapsulated {
                    Some((table, mask)) => Fate::Encapsulated { table, mask },
                    None => Fate::Delivered,
                }
            }
            Some(h) => h,
        };
        match action {
            EsActionPlan::Count => unreachable!("handled above"),
            EsActionPlan::Drop => return Fate::Dropped { table, mask },
            EsActionPlan::Forward { host } => return out(host, mask, p.vni.is_some()),
            EsActionPlan::Decap { host } => {
                return match p.vni {
                    None => Fate::NotVxlan { table, mask },
                    Some(_) => out(host, mask, false),
                }
            }
            EsActionPlan::Encap {
                next: EsNext::Host(host),
                ..
            } => return out(host, mask, true),
            EsActionPlan::Encap {
                next: EsNext::Table(t),
                vni,
                remote,
            } => {
                // The search goes on with the outer headers as its key, as
                // the switch stage's `es_outer_key` builds it (the outer
                // source port keyed as 0).
                p = Pkt {
                    src: wirelab_spec::flowtables::LOCAL_VTEP,
                    dst: remote,
                    sport: 0,
                    dport: VXLAN_PORT,
                    proto: 17,
                    vni: Some(vni),
                };
                encapsulated = Some((table, mask));
                table = t as usize;
            }
            EsActionPlan::Goto(t) => table = t as usize,
        }
    }
    Fate::Loop
}

/// The packets of a connection each way: (what they are, fields, the
/// host they are for).
fn packets(c: &ConnPlan) -> [(&'static str, Pkt, usize); 2] {
    let (proto, (rs, rd), (ps, pd)) = match (c.transport, c.roce) {
        (Transport::Roce, Some(r)) => (
            17,
            (r.requester_sport, ROCE_PORT),
            (r.responder_sport, ROCE_PORT),
        ),
        (Transport::Udp, _) => (17, (c.sport, c.dport), (c.dport, c.sport)),
        _ => (6, (c.sport, c.dport), (c.dport, c.sport)),
    };
    [
        (
            "requester to responder",
            Pkt {
                src: c.requester_ip,
                dst: c.responder_ip,
                sport: rs,
                dport: rd,
                proto,
                vni: None,
            },
            c.responder,
        ),
        (
            "responder to requester",
            Pkt {
                src: c.responder_ip,
                dst: c.requester_ip,
                sport: ps,
                dport: pd,
                proto,
                vni: None,
            },
            c.requester,
        ),
    ]
}

/// Every connection's packets that the flow tables do not deliver, each
/// way, said in words (empty: every packet arrives). UDP's reverse
/// direction carries nothing and is not checked.
pub fn undelivered(plan: &Plan) -> Vec<String> {
    let Some(es) = &plan.flowtables else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in &plan.conns {
        for (i, (way, p, dest)) in packets(c).iter().enumerate() {
            if i == 1 && c.transport == Transport::Udp {
                continue;
            }
            let f = fate(es, p, *dest);
            let why = match f {
                Fate::Delivered => continue,
                Fate::Dropped { table, mask } => {
                    format!("dropped by table {table} mask {mask}")
                }
                Fate::Misrouted { table, mask, to } => format!(
                    "sent to {} by table {table} mask {mask}",
                    plan.hosts[to].name
                ),
                Fate::Loop => format!("still going after {MAX_CHAIN} tables (a loop)"),
                Fate::Encapsulated { table, mask } => format!(
                    "left the switch VXLAN-encapsulated (table {table} mask {mask}), which no host decapsulates"
                ),
                Fate::NotVxlan { table, mask } => format!(
                    "dropped: table {table} mask {mask} decapsulates, but the packet is not VXLAN"
                ),
            };
            out.push(format!("connection {} {way}: {why}", c.id));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EsMaskPlan;
    use wirelab_spec::flowtables::MaskFields;

    fn pkt() -> Pkt {
        Pkt {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            sport: 40001,
            dport: 4791,
            proto: 17,
            vni: None,
        }
    }

    fn entry(dst: Option<Ipv4Addr>, action: EsActionPlan) -> EsEntryPlan {
        EsEntryPlan {
            src: None,
            dst,
            sport: None,
            dport: None,
            proto: Some(17),
            vni: None,
            action,
        }
    }

    fn mask(dst: u8, entries: Vec<EsEntryPlan>) -> EsMaskPlan {
        EsMaskPlan {
            fields: MaskFields {
                dst,
                proto: true,
                ..Default::default()
            },
            entries,
            generated: false,
        }
    }

    fn tables(t: Vec<Vec<EsMaskPlan>>) -> EsPlan {
        EsPlan {
            tables: t,
            optimise: wirelab_flowopt::Policy::Insertion,
            device: wirelab_spec::flowtables::device("default").unwrap(),
            dut: Default::default(),
        }
    }

    #[test]
    fn a_valid_chain_delivers_and_a_miss_goes_to_the_mac_table() {
        let es = tables(vec![
            vec![mask(0, vec![entry(None, EsActionPlan::Goto(1))])],
            vec![
                // Another destination's /32 first, then this one's /24.
                mask(
                    32,
                    vec![entry(
                        Some(Ipv4Addr::new(198, 18, 0, 9)),
                        EsActionPlan::Drop,
                    )],
                ),
                mask(
                    24,
                    vec![entry(
                        Some(Ipv4Addr::new(198, 18, 0, 0)),
                        EsActionPlan::Forward { host: 1 },
                    )],
                ),
            ],
        ]);
        assert_eq!(fate(&es, &pkt(), 1), Fate::Delivered);
        let tcp = Pkt { proto: 6, ..pkt() };
        assert_eq!(
            fate(&es, &tcp, 1),
            Fate::Delivered,
            "no entry for TCP: the MAC table"
        );
    }

    #[test]
    fn an_unreachable_destination_is_found_with_the_mask_that_sends_it_away() {
        let es = tables(vec![vec![mask(
            16,
            vec![entry(
                Some(Ipv4Addr::new(198, 18, 0, 0)),
                EsActionPlan::Forward { host: 0 },
            )],
        )]]);
        assert_eq!(
            fate(&es, &pkt(), 1),
            Fate::Misrouted {
                table: 0,
                mask: 0,
                to: 0
            }
        );
        let es = tables(vec![vec![mask(0, vec![entry(None, EsActionPlan::Drop)])]]);
        assert_eq!(fate(&es, &pkt(), 1), Fate::Dropped { table: 0, mask: 0 });
    }

    #[test]
    fn a_loop_between_tables_is_found() {
        let es = tables(vec![
            vec![mask(0, vec![entry(None, EsActionPlan::Goto(1))])],
            vec![mask(0, vec![entry(None, EsActionPlan::Goto(0))])],
        ]);
        assert_eq!(fate(&es, &pkt(), 1), Fate::Loop);
    }

    /// Table 0 encapsulates (VNI 77 to `remote`) and searches table 1;
    /// table 1 decapsulates by VNI and remote VTEP, with `decap_vni`.
    fn overlay(remote: Ipv4Addr, decap_vni: u32, decap_to: usize) -> EsPlan {
        let decap = EsMaskPlan {
            fields: MaskFields {
                dst: 32,
                vni: true,
                ..Default::default()
            },
            entries: vec![EsEntryPlan {
                dst: Some(Ipv4Addr::new(198, 19, 0, 2)),
                vni: Some(decap_vni),
                proto: None,
                ..entry(None, EsActionPlan::Decap { host: decap_to })
            }],
            generated: false,
        };
        tables(vec![
            vec![mask(
                0,
                vec![entry(
                    None,
                    EsActionPlan::Encap {
                        vni: 77,
                        remote,
                        next: EsNext::Table(1),
                    },
                )],
            )],
            vec![decap],
        ])
    }

    #[test]
    fn an_overlay_is_followed_through_encap_and_the_remote_decap() {
        let vtep = Ipv4Addr::new(198, 19, 0, 2);
        assert_eq!(fate(&overlay(vtep, 77, 1), &pkt(), 1), Fate::Delivered);
        // The decap entry keys the outer headers: another VNI or another
        // VTEP misses, and the packet leaves encapsulated.
        assert_eq!(
            fate(&overlay(vtep, 78, 1), &pkt(), 1),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
        assert_eq!(
            fate(&overlay(Ipv4Addr::new(198, 19, 0, 3), 77, 1), &pkt(), 1),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
        assert_eq!(
            fate(&overlay(vtep, 77, 0), &pkt(), 1),
            Fate::Misrouted {
                table: 1,
                mask: 0,
                to: 0
            }
        );
    }

    #[test]
    fn decap_of_a_plain_packet_and_encap_out_of_a_port_are_not_delivered() {
        let es = tables(vec![vec![mask(
            0,
            vec![entry(None, EsActionPlan::Decap { host: 1 })],
        )]]);
        assert_eq!(fate(&es, &pkt(), 1), Fate::NotVxlan { table: 0, mask: 0 });
        let es = tables(vec![vec![mask(
            0,
            vec![entry(
                None,
                EsActionPlan::Encap {
                    vni: 5,
                    remote: Ipv4Addr::new(198, 19, 0, 2),
                    next: EsNext::Host(1),
                },
            )],
        )]]);
        assert_eq!(
            fate(&es, &pkt(), 1),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
    }
}
