//! ScalaCN §4.1 (a), topological restrictions: where the flow tables send
//! each connection's packets, found without running anything. Each
//! direction's packet searches the masks in their written order, an
//! entry's fields compared under its mask as the switch stage compares
//! them, gotos followed. A combination of tables that drops a
//! connection's packets, sends them to another host or goes round in a
//! loop is one no test needs to run (ScalaCN Fig. 9: packets B and C).

use std::net::Ipv4Addr;

use crate::{ConnPlan, EsActionPlan, EsEntryPlan, EsNext, EsPlan, EsSetPlan, Plan, Transport};

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
    /// An entry rewrote the destination MAC to one no host has, and the
    /// MAC table, which forwards by it, has no port for it.
    NoMac {
        table: usize,
        mask: usize,
    },
}

/// A packet's fields as the stage keys them.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    /// What the MAC table forwards by.
    dmac: [u8; 6],
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

/// Applies an entry's rewrite to the packet (as the stage rewrites both
/// the packet and its key).
fn rewrite(p: &mut Pkt, w: &EsSetPlan) {
    p.dmac = w.dmac.unwrap_or(p.dmac);
    p.src = w.src.unwrap_or(p.src);
    p.dst = w.dst.unwrap_or(p.dst);
    // Ports on TCP and UDP only, as the stage rewrites them.
    if p.proto == 6 || p.proto == 17 {
        p.sport = w.sport.unwrap_or(p.sport);
        p.dport = w.dport.unwrap_or(p.dport);
    }
}

/// Where the tables send `p`, a packet for host `dest`; `macs[i]` is host
/// i's MAC (the switch's MAC table).
fn fate(macs: &[[u8; 6]], es: &EsPlan, p: &Pkt, dest: usize) -> Fate {
    let mut p = *p;
    // The last rewrite of the destination MAC: (table, mask).
    let mut new_dmac = None;
    // The entry that last encapsulated the packet (for a miss's fate).
    let mut encapsulated = None;
    let mut table = 0usize;
    for _ in 0..MAX_CHAIN {
        let hit = es.tables.get(table).and_then(|masks| {
            masks.iter().enumerate().find_map(|(m, mask)| {
                mask.entries
                    .iter()
                    .find(|e| matches(&p, &mask.fields, e))
                    .map(|e| (m, e))
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
        if let Some((mask, e)) = hit {
            if !e.set.is_empty() {
                rewrite(&mut p, &e.set);
                if e.set.dmac.is_some() {
                    new_dmac = Some((table, mask));
                }
            }
        }
        let (mask, action) = match hit {
            // The MAC table forwards it, by its destination MAC.
            None
            | Some((
                _,
                EsEntryPlan {
                    action: EsActionPlan::Count,
                    ..
                },
            )) => {
                let by_mac = macs.iter().position(|m| *m == p.dmac);
                return match (by_mac, new_dmac, encapsulated) {
                    (None, Some((table, mask)), _) => Fate::NoMac { table, mask },
                    (Some(to), Some((table, mask)), _) if to != dest => {
                        Fate::Misrouted { table, mask, to }
                    }
                    (_, _, Some((table, mask))) => Fate::Encapsulated { table, mask },
                    _ => Fate::Delivered,
                };
            }
            Some((mask, e)) => (mask, e.action),
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
                    // The MAC table's decision stays the inner frame's
                    // (the switch routes before the tables).
                    dmac: p.dmac,
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
fn packets(c: &ConnPlan, macs: &[[u8; 6]]) -> [(&'static str, Pkt, usize); 2] {
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
                dmac: macs[c.responder],
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
                dmac: macs[c.requester],
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
    let macs: Vec<[u8; 6]> = plan.hosts.iter().map(|h| h.mac).collect();
    let mut out = Vec::new();
    for c in &plan.conns {
        for (i, (way, p, dest)) in packets(c, &macs).iter().enumerate() {
            if i == 1 && c.transport == Transport::Udp {
                continue;
            }
            let f = fate(&macs, es, p, *dest);
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
                Fate::NoMac { table, mask } => format!(
                    "dropped: table {table} mask {mask} rewrote the destination MAC to one no host has"
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

    /// Host i's MAC.
    const MACS: [[u8; 6]; 3] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]];

    fn pkt() -> Pkt {
        Pkt {
            dmac: MACS[1],
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
            set: Default::default(),
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
            offload: None,
            timed: false,
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
        assert_eq!(fate(&MACS, &es, &pkt(), 1), Fate::Delivered);
        let tcp = Pkt { proto: 6, ..pkt() };
        assert_eq!(
            fate(&MACS, &es, &tcp, 1),
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
            fate(&MACS, &es, &pkt(), 1),
            Fate::Misrouted {
                table: 0,
                mask: 0,
                to: 0
            }
        );
        let es = tables(vec![vec![mask(0, vec![entry(None, EsActionPlan::Drop)])]]);
        assert_eq!(
            fate(&MACS, &es, &pkt(), 1),
            Fate::Dropped { table: 0, mask: 0 }
        );
    }

    #[test]
    fn a_loop_between_tables_is_found() {
        let es = tables(vec![
            vec![mask(0, vec![entry(None, EsActionPlan::Goto(1))])],
            vec![mask(0, vec![entry(None, EsActionPlan::Goto(0))])],
        ]);
        assert_eq!(fate(&MACS, &es, &pkt(), 1), Fate::Loop);
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
        assert_eq!(
            fate(&MACS, &overlay(vtep, 77, 1), &pkt(), 1),
            Fate::Delivered
        );
        // The decap entry keys the outer headers: another VNI or another
        // VTEP misses, and the packet leaves encapsulated.
        assert_eq!(
            fate(&MACS, &overlay(vtep, 78, 1), &pkt(), 1),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
        assert_eq!(
            fate(
                &MACS,
                &overlay(Ipv4Addr::new(198, 19, 0, 3), 77, 1),
                &pkt(),
                1
            ),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
        assert_eq!(
            fate(&MACS, &overlay(vtep, 77, 0), &pkt(), 1),
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
        assert_eq!(
            fate(&MACS, &es, &pkt(), 1),
            Fate::NotVxlan { table: 0, mask: 0 }
        );
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
            fate(&MACS, &es, &pkt(), 1),
            Fate::Encapsulated { table: 0, mask: 0 }
        );
    }

    /// set_field: a rewritten destination MAC is what the MAC table
    /// forwards by (to another host, or to none), and a later table
    /// matches the rewritten fields.
    #[test]
    fn a_rewrite_moves_the_mac_tables_decision_and_the_next_tables_key() {
        let set = |set: EsSetPlan, action| EsEntryPlan {
            set,
            ..entry(None, action)
        };
        let to_c = EsSetPlan {
            dmac: Some(MACS[2]),
            ..Default::default()
        };
        let es = tables(vec![vec![mask(0, vec![set(to_c, EsActionPlan::Count)])]]);
        assert_eq!(
            fate(&MACS, &es, &pkt(), 1),
            Fate::Misrouted {
                table: 0,
                mask: 0,
                to: 2
            }
        );
        let nowhere = EsSetPlan {
            dmac: Some([2, 0, 0, 0, 0, 0x99]),
            ..Default::default()
        };
        let es = tables(vec![vec![mask(0, vec![set(nowhere, EsActionPlan::Count)])]]);
        assert_eq!(
            fate(&MACS, &es, &pkt(), 1),
            Fate::NoMac { table: 0, mask: 0 }
        );
        // Table 0 rewrites the destination; table 1 drops the old one and
        // forwards the new one.
        let new_dst = Ipv4Addr::new(198, 18, 0, 9);
        let es = tables(vec![
            vec![mask(
                0,
                vec![set(
                    EsSetPlan {
                        dst: Some(new_dst),
                        ..Default::default()
                    },
                    EsActionPlan::Goto(1),
                )],
            )],
            vec![mask(
                32,
                vec![
                    entry(Some(pkt().dst), EsActionPlan::Drop),
                    entry(Some(new_dst), EsActionPlan::Forward { host: 1 }),
                ],
            )],
        ]);
        assert_eq!(fate(&MACS, &es, &pkt(), 1), Fate::Delivered);
        // The same rewrite to the host's own MAC changes nothing.
        let same = EsSetPlan {
            dmac: Some(MACS[1]),
            ..Default::default()
        };
        let es = tables(vec![vec![mask(0, vec![set(same, EsActionPlan::Count)])]]);
        assert_eq!(fate(&MACS, &es, &pkt(), 1), Fate::Delivered);
    }
}
