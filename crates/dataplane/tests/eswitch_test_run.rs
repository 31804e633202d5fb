//! The eSwitch stage (ScalaCN's flow tables, seed 001 Fig. 8) under
//! `BPF_PROG_TEST_RUN`: masks searched in their order until one holds the
//! packet's masked key, the masks visited per packet and per mask, each
//! action, chained tables, and the order changed while packets flow.
//! Needs root.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

mod common;
use common::{check_table, have_bpf, run_frame, Change, Fixture, Out, Rec};
use etherparse::IpEcn;
use wirelab_dataplane::eswitch::{Action, Match, MAX_CHAIN, MAX_MASKS};
use wirelab_dataplane::{verdict, Config, Switch};

const LO_IFINDEX: u32 = 1;
/// Where the MAC table sends 02:..:02 (the frames' destination).
const MAC_OUT: u32 = 4242;
/// Where flow-table entries send packets.
const ES_OUT: u32 = 5151;
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

fn frame(dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    common::udp_frame(dst, dport, 200, IpEcn::NotEct)
}

fn switch(eswitch: bool) -> Switch {
    let sw = Switch::load(Config {
        eswitch,
        ..Config::default()
    })
    .expect("switch loads");
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, MAC_OUT, 2).unwrap();
    sw
}

/// Mask i of a table: the destination's first 24 + i bits and the
/// destination port. Entry i: 10.0.i.0/(24+i) port 9000 + i.
fn mask(i: u32) -> Match {
    Match {
        daddr: Match::prefix(24 + i as u8),
        dport: 0xffff,
        ..Match::default()
    }
}

fn entry(i: u32) -> Match {
    Match {
        daddr: [10, 0, i as u8, 0],
        dport: 9000 + i as u16,
        ..Match::default()
    }
}

/// Table 0 with eight masks, one entry each, searched 0..8.
fn eight_masks(sw: &Switch, action: impl Fn(u32) -> Action) {
    for i in 0..8 {
        sw.set_es_mask(0, i, &mask(i)).unwrap();
        sw.add_es_entry(0, i, &entry(i), action(i)).unwrap();
    }
    sw.set_es_order(0, &(0..8).collect::<Vec<u16>>()).unwrap();
}

fn visited(sw: &Switch) -> u64 {
    sw.es_stats().unwrap().visited
}
fn misses(sw: &Switch) -> u64 {
    sw.es_stats().unwrap().misses
}
fn lookups_of_mask_5(sw: &Switch) -> u64 {
    sw.es_mask_stats(0, 5).unwrap().0
}
fn hits_of_mask_5(sw: &Switch) -> u64 {
    sw.es_mask_stats(0, 5).unwrap().1
}
fn lookups_of_mask_7(sw: &Switch) -> u64 {
    sw.es_mask_stats(0, 7).unwrap().0
}
fn drops(sw: &Switch) -> u64 {
    sw.es_stats().unwrap().drops
}
fn port_es_drops(sw: &Switch) -> u64 {
    sw.counters(1).unwrap().es_drops
}

fn row(what: &str, input: Vec<u8>, verdict: u32, maps: Vec<Change>) -> Fixture {
    Fixture {
        what: what.into(),
        at: None,
        input,
        verdict,
        output: Out::Same,
        // Captured before the verdict, as every packet is.
        record: Some(Rec::NONE),
        maps,
    }
}

#[test]
fn masks_are_searched_in_order_and_each_action_applies() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    // Entries 0..5 forward, 6 drops, 7 counts.
    eight_masks(&sw, |i| match i {
        6 => Action::Drop,
        7 => Action::Count,
        _ => Action::Forward {
            ifindex: ES_OUT,
            port: 3,
        },
    });
    let ch = |what, read, by| Change { what, read, by };
    let table = [
        row(
            "a packet of mask 5's entry: six masks searched, the sixth hits",
            frame(Ipv4Addr::new(10, 0, 5, 0), 9005),
            verdict::REDIRECT,
            vec![
                ch("masks visited", visited, 6),
                ch("mask 5 lookups", lookups_of_mask_5, 1),
                ch("mask 5 hits", hits_of_mask_5, 1),
                ch("mask 7 lookups", lookups_of_mask_7, 0),
                ch("misses", misses, 0),
            ],
        ),
        row(
            "the same prefix, another port: no entry holds it, every mask searched",
            frame(Ipv4Addr::new(10, 0, 5, 0), 9006),
            verdict::REDIRECT, // by the MAC table
            vec![
                ch("masks visited", visited, 8),
                ch("mask 5 hits", hits_of_mask_5, 0),
                ch("mask 7 lookups", lookups_of_mask_7, 1),
                ch("misses", misses, 1),
            ],
        ),
        row(
            "mask 6's entry drops, after the capture",
            frame(Ipv4Addr::new(10, 0, 6, 0), 9006),
            verdict::SHOT,
            vec![
                ch("masks visited", visited, 7),
                ch("stage drops", drops, 1),
                ch("the port's flow-table drops", port_es_drops, 1),
            ],
        ),
        row(
            "mask 7's entry counts; the MAC table forwards",
            frame(Ipv4Addr::new(10, 0, 7, 0), 9007),
            verdict::REDIRECT,
            vec![ch("masks visited", visited, 8), ch("misses", misses, 0)],
        ),
    ];
    check_table(&sw, &table);
    // Where each forwarded: the entry's port, or the MAC table's.
    let (v, out, _) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 5, 0), 9005));
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(out.len(), 200);
    assert_eq!(
        sw.es_entry_hits(0, 5, &entry(5)).unwrap(),
        Some((2, 400)),
        "entry 5: two packets of 200 bytes"
    );
    assert_eq!(sw.es_entry_hits(0, 7, &entry(7)).unwrap(), Some((1, 200)));
    assert_eq!(sw.es_entry_hits(0, 4, &entry(4)).unwrap(), Some((0, 0)));
    // An entry's key is masked: 10.0.5.0/29 holds 10.0.5.7 too.
    let before = sw.es_entry_hits(0, 5, &entry(5)).unwrap().unwrap().0;
    run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 5, 7), 9005));
    assert_eq!(
        sw.es_entry_hits(0, 5, &entry(5)).unwrap().unwrap().0,
        before + 1
    );
    // Removed, the entry no longer matches.
    sw.remove_es_entry(0, 5, &entry(5)).unwrap();
    let m = misses(&sw);
    run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 5, 0), 9005));
    assert_eq!(misses(&sw), m + 1);
}

#[test]
fn moving_a_mask_forward_shortens_the_search() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    eight_masks(&sw, |_| Action::Count);
    let p = frame(Ipv4Addr::new(10, 0, 7, 0), 9007);
    let v0 = visited(&sw);
    run_frame(&sw, &p);
    assert_eq!(visited(&sw) - v0, 8, "the last mask: all eight searched");
    sw.set_es_order(0, &[7, 0, 1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(sw.es_order(0).unwrap(), vec![7, 0, 1, 2, 3, 4, 5, 6]);
    let v1 = visited(&sw);
    run_frame(&sw, &p);
    assert_eq!(visited(&sw) - v1, 1, "moved to the head: one mask searched");
    // A mask left out of the order is never searched.
    sw.set_es_order(0, &[0, 1, 2]).unwrap();
    let (v2, m2) = (visited(&sw), misses(&sw));
    run_frame(&sw, &p);
    assert_eq!((visited(&sw) - v2, misses(&sw) - m2), (3, 1));
    // One batch read of the table gives what each mask's own read does,
    // and a later table's batch starts at its own first mask.
    let each: Vec<(u64, u64)> = (0..8).map(|m| sw.es_mask_stats(0, m).unwrap()).collect();
    assert_eq!(sw.es_table_mask_stats(0, 8).unwrap(), each);
    assert!(each.iter().any(|s| s.1 > 0) && each[7].0 >= 2, "{each:?}");
    assert_eq!(sw.es_table_mask_stats(0, 3).unwrap(), each[..3]);
    assert_eq!(sw.es_table_mask_stats(1, 4).unwrap(), [(0, 0); 4]);
    assert!(sw.es_table_mask_stats(0, 0).unwrap().is_empty());
}

#[test]
fn a_flow_hitting_a_cascading_mask_is_reported_once_and_activated_into_the_hyper_mask() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    let fwd = Action::Forward {
        ifindex: ES_OUT,
        port: 3,
    };
    eight_masks(&sw, |_| fwd);
    let p = frame(Ipv4Addr::new(10, 0, 6, 0), 9006);
    // Without a hyper mask nothing is reported.
    run_frame(&sw, &p);
    assert!(sw.es_learned().unwrap().is_empty());
    // Mask 8 compares every bit and leads the search (ScalaCN §4.3).
    sw.set_es_mask(0, 8, &Match::all()).unwrap();
    sw.set_es_hyper(0, Some(8)).unwrap();
    sw.set_es_order(0, &[8, 0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    for _ in 0..3 {
        run_frame(&sw, &p);
    }
    let l = sw.es_learned().unwrap();
    assert_eq!(l.len(), 1, "one flow, one report: {l:?}");
    let f = l[0];
    assert_eq!((f.table, f.mask, f.action, f.pkts), (0, 6, fwd, 3));
    assert_eq!(f.fields.daddr, [10, 0, 6, 0]);
    assert_eq!(f.fields.dport, 9006);
    assert_eq!(f.fields.in_port, 1, "the whole key, ingress port too");
    assert!(f.first_ns <= f.last_ns && f.first_ns > 0);
    // Activated: its exact entry in the hyper mask; one mask searched now,
    // and it is no longer reported.
    sw.add_es_entry(0, 8, &f.fields, f.action).unwrap();
    sw.forget_es_learned(0, &f.fields).unwrap();
    let v = visited(&sw);
    let (verdict, _, _) = run_frame(&sw, &p);
    assert_eq!(verdict, verdict::REDIRECT);
    assert_eq!(visited(&sw) - v, 1, "the hyper mask hits first");
    assert_eq!(
        sw.es_entry_hits(0, 8, &f.fields).unwrap(),
        Some((1, p.len() as u64))
    );
    assert!(sw.es_learned().unwrap().is_empty());
    sw.forget_es_learned(0, &f.fields).unwrap(); // not there: no error
                                                 // Another flow (mask 2) is reported; with the hyper mask off, not.
    run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 2, 0), 9002));
    assert_eq!(sw.es_learned().unwrap()[0].mask, 2);
    sw.set_es_hyper(0, None).unwrap();
    run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 3, 0), 9003));
    assert_eq!(sw.es_learned().unwrap().len(), 1);
    assert_eq!(
        Match::all().bits(),
        6 * 8 * 2 + 32 * 2 + 16 * 2 + 8 + 8 + 16 + 32
    );
    assert_eq!(mask(3).bits(), 27 + 16);
}

#[test]
fn local_encap_then_remote_decap_in_two_tables_gives_the_frame_back() {
    use wirelab_dataplane::eswitch::Tunnel;
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    // Table 0, the sender's eSwitch: encapsulate by destination, then
    // table 1, the receiver's: decapsulate by VNI and outer destination.
    sw.set_es_mask(
        0,
        0,
        &Match {
            daddr: Match::prefix(32),
            ..Match::default()
        },
    )
    .unwrap();
    sw.set_es_order(0, &[0]).unwrap();
    let by_vtep = Match {
        daddr: Match::prefix(32),
        dport: 0xffff,
        proto: 0xff,
        vni: 0x00ff_ffff,
        ..Match::default()
    };
    sw.set_es_mask(1, 0, &by_vtep).unwrap();
    sw.set_es_order(1, &[0]).unwrap();
    let tunnel = Tunnel {
        dmac: [0x02, 0, 0, 0, 0, 9],
        smac: [0x02, 0, 0, 0, 0, 8],
        saddr: [192, 0, 2, 1],
        daddr: [192, 0, 2, 9],
        vni: 77,
        sport: 0,
        ttl: 0,
    };
    let to = Match {
        daddr: [10, 0, 0, 7],
        ..Match::default()
    };
    let encap = Action::EncapGoto { tunnel, table: 1 };
    sw.add_es_entry(0, 0, &to, encap).unwrap();
    let vtep = Match {
        daddr: [192, 0, 2, 9],
        dport: 4789,
        proto: 17,
        vni: 77,
        ..Match::default()
    };
    let decap = Action::Decap {
        ifindex: ES_OUT,
        port: 3,
    };
    sw.add_es_entry(1, 0, &vtep, decap).unwrap();
    let inner = frame(Ipv4Addr::new(10, 0, 0, 7), 9000);
    let v0 = visited(&sw);
    let (v, got, _) = run_frame(&sw, &inner);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(
        got, inner,
        "encapsulated and decapsulated: the frame itself"
    );
    let st = sw.es_stats().unwrap();
    assert_eq!((st.encaps, st.decaps, st.tunnel_errors), (1, 1, 0));
    assert_eq!(visited(&sw) - v0, 2, "one mask in each table");
    assert_eq!(sw.es_entry_hits(1, 0, &vtep).unwrap().map(|h| h.0), Some(1));
    // Another VNI: table 1 misses, the packet stays encapsulated (left to
    // the MAC table, counted as a miss).
    sw.add_es_entry(
        0,
        0,
        &to,
        Action::EncapGoto {
            tunnel: Tunnel { vni: 78, ..tunnel },
            table: 1,
        },
    )
    .unwrap();
    let m = misses(&sw);
    let (_, got, _) = run_frame(&sw, &inner);
    assert_eq!(got.len(), inner.len() + 50);
    assert_eq!(&got[46..49], &[0, 0, 78], "the VXLAN header's VNI");
    assert_eq!(&got[50..], &inner[..]);
    assert_eq!(misses(&sw) - m, 1);
}

#[test]
fn tables_chain_by_goto_and_a_loop_stops_after_the_chain_limit() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    // Table 0: any UDP packet to 10.0.0.0/8 goes to table 1. Table 1:
    // three masks; the packet's entry is in the third, which forwards.
    let by_net = Match {
        daddr: Match::prefix(8),
        ..Match::default()
    };
    sw.set_es_mask(0, 0, &by_net).unwrap();
    let ten = Match {
        daddr: [10, 0, 0, 0],
        ..Match::default()
    };
    sw.add_es_entry(0, 0, &ten, Action::Goto(1)).unwrap();
    sw.set_es_order(0, &[0]).unwrap();
    for i in 0..3 {
        sw.set_es_mask(1, i, &mask(i)).unwrap();
    }
    let fwd = Action::Forward {
        ifindex: ES_OUT,
        port: 3,
    };
    sw.add_es_entry(1, 2, &entry(2), fwd).unwrap();
    sw.set_es_order(1, &[0, 1, 2]).unwrap();
    assert_eq!(sw.es_order(0).unwrap(), vec![0], "table 0 kept its order");
    let v = visited(&sw);
    let (verdict_, _, _) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 2, 0), 9002));
    assert_eq!(verdict_, verdict::REDIRECT);
    assert_eq!(
        visited(&sw) - v,
        1 + 3,
        "one mask in table 0, three in table 1"
    );
    let t = sw.es_stats().unwrap().tables;
    let pv = |t: wirelab_dataplane::eswitch::TableStats| (t.pkts, t.visited);
    assert_eq!(
        (pv(t[0]), pv(t[1]), pv(t[2])),
        ((1, 1), (1, 3), (0, 0)),
        "per table"
    );
    // Untimed unless asked (`flowtables.timed`): no clock read.
    assert!(t.iter().all(|t| t.search_ns == 0), "{t:?}");
    let h = sw.es_search_hist().unwrap();
    assert!(h
        .packet
        .iter()
        .chain(h.tables.iter().flatten())
        .all(|&c| c == 0));
    assert_eq!(sw.es_entry_hits(1, 2, &entry(2)).unwrap(), Some((1, 200)));
    // Timed: each search took time; the unsearched table none (and the
    // start subtracted before a search came back with its end).
    sw.set_es_timed(true);
    let (verdict_, _, _) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 2, 0), 9002));
    assert_eq!(verdict_, verdict::REDIRECT);
    let t = sw.es_stats().unwrap().tables;
    assert!(
        t[0].search_ns > 0 && t[1].search_ns > 0 && t[0].search_ns < 1_000_000,
        "{t:?}"
    );
    assert_eq!(t[2].search_ns, 0);
    // The same times in the histograms, each in the bucket the reader's
    // `hist::bucket` gives its value (wl_hist.h is the same function): one
    // search per table, and the packet's time over both.
    let h = sw.es_search_hist().unwrap();
    let one_at = |counts: &[u64], v: u64| {
        counts.iter().sum::<u64>() == 1 && counts[wirelab_load::hist::bucket(v)] == 1
    };
    assert!(one_at(&h.tables[0], t[0].search_ns), "table 0: {t:?}");
    assert!(one_at(&h.tables[1], t[1].search_ns), "table 1: {t:?}");
    assert!(h.tables[2].iter().all(|&c| c == 0));
    assert!(
        one_at(&h.packet, t[0].search_ns + t[1].search_ns),
        "the packet: {t:?}"
    );
    sw.set_es_timed(false);

    // Table 2 goes to itself: the packet passes MAX_CHAIN tables, is
    // counted as a loop and left to the MAC table.
    sw.set_es_mask(2, 0, &by_net).unwrap();
    sw.add_es_entry(2, 0, &ten, Action::Goto(2)).unwrap();
    sw.set_es_order(2, &[0]).unwrap();
    sw.add_es_entry(0, 0, &ten, Action::Goto(2)).unwrap();
    let (v, l) = (visited(&sw), sw.es_stats().unwrap().loops);
    let (verdict_, _, _) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 2, 0), 9002));
    assert_eq!(verdict_, verdict::REDIRECT);
    assert_eq!(sw.es_stats().unwrap().loops - l, 1);
    assert_eq!(visited(&sw) - v, u64::from(MAX_CHAIN));
}

#[test]
fn the_order_changes_while_packets_flow_and_none_misses() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    eight_masks(&sw, |_| Action::Count);
    let stop = AtomicBool::new(false);
    let flips = std::thread::scope(|s| {
        let flipper = s.spawn(|| {
            let mut n = 0u32;
            let fwd: Vec<u16> = (0..8).collect();
            let rev: Vec<u16> = (0..8).rev().collect();
            while !stop.load(Ordering::Relaxed) {
                sw.set_es_order(0, if n % 2 == 0 { &rev } else { &fwd })
                    .unwrap();
                n += 1;
            }
            n
        });
        let m = misses(&sw);
        let frames: Vec<Vec<u8>> = (0..8u8)
            .map(|k| frame(Ipv4Addr::new(10, 0, k, 0), 9000 + u16::from(k)))
            .collect();
        for i in 0..4000 {
            // Without reading the capture ring: a full ring loses records,
            // not packets.
            sw.test_run(&frames[i % 8]).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(misses(&sw), m, "every packet found its entry mid-reorder");
        flipper.join().unwrap()
    });
    assert!(
        flips > 10,
        "the order changed {flips} times while packets ran"
    );
}

#[test]
fn without_flow_tables_the_stage_is_not_in_the_pipeline() {
    if !have_bpf() {
        return;
    }
    let sw = switch(false);
    eight_masks(&sw, |_| Action::Drop);
    let (v, _, _) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 3, 0), 9003));
    assert_eq!(
        v,
        verdict::REDIRECT,
        "the MAC table forwards; no entry drops"
    );
    assert_eq!(sw.es_stats().unwrap().pkts, 0);
}

#[test]
fn limits_are_refused_with_what_the_switch_has() {
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    let e = sw.set_es_mask(0, MAX_MASKS, &Match::all()).unwrap_err();
    assert!(e.to_string().contains("masks 0..256"), "{e}");
    let e = sw.set_es_order(0, &[MAX_MASKS as u16]).unwrap_err();
    assert!(e.to_string().contains("ids below 256"), "{e}");
    let e = sw
        .add_es_entry(0, 0, &Match::default(), Action::Goto(9))
        .unwrap_err();
    assert!(e.to_string().contains("tables 0..4"), "{e}");
}

/// The outer headers RFC 7348 §5 gives, written independently of the
/// program: Ethernet, IPv4 (DF, TTL 64, checksum), UDP to 4789 (checksum
/// 0), VXLAN with the I flag and the VNI, then the original frame.
fn vxlan(inner: &[u8], t: &wirelab_dataplane::eswitch::Tunnel) -> Vec<u8> {
    use etherparse::{IpNumber, Ipv4Header};
    let udp_len = 8 + 8 + inner.len();
    let mut ip = Ipv4Header::new(udp_len as u16, 64, IpNumber::UDP, t.saddr, t.daddr).unwrap();
    ip.dont_fragment = true;
    ip.identification = 0;
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = Vec::new();
    out.extend_from_slice(&t.dmac);
    out.extend_from_slice(&t.smac);
    out.extend_from_slice(&[0x08, 0x00]);
    ip.write(&mut out).unwrap();
    out.extend_from_slice(&t.sport.to_be_bytes());
    out.extend_from_slice(&4789u16.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&[0x08, 0, 0, 0]);
    out.extend_from_slice(&t.vni.to_be_bytes()[1..]);
    out.push(0);
    out.extend_from_slice(inner);
    out
}

#[test]
fn vxlan_encap_and_decap_are_byte_exact_and_decap_matches_on_the_vni() {
    use wirelab_dataplane::eswitch::Tunnel;
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    // Table 0: local encap by destination; remote decap by VNI.
    let by_dst = Match {
        daddr: Match::prefix(32),
        ..Match::default()
    };
    sw.set_es_mask(0, 0, &by_dst).unwrap();
    let by_vni = Match {
        proto: 0xff,
        dport: 0xffff,
        vni: 0x00ff_ffff,
        ..Match::default()
    };
    sw.set_es_mask(0, 1, &by_vni).unwrap();
    sw.set_es_order(0, &[1, 0]).unwrap();
    let tunnel = Tunnel {
        dmac: [0x02, 0, 0, 0, 0, 9],
        smac: [0x02, 0, 0, 0, 0, 8],
        saddr: [192, 0, 2, 1],
        daddr: [192, 0, 2, 9],
        vni: 0x12_3456,
        sport: 50_000,
        ttl: 0,
    };
    let to = Match {
        daddr: [10, 0, 0, 7],
        ..Match::default()
    };
    let out = (ES_OUT, 3);
    sw.add_es_entry(
        0,
        0,
        &to,
        Action::Encap {
            ifindex: out.0,
            port: out.1,
            tunnel,
        },
    )
    .unwrap();
    let inner = frame(Ipv4Addr::new(10, 0, 0, 7), 9000);
    let (v, got, recs) = run_frame(&sw, &inner);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(
        got,
        vxlan(&inner, &tunnel),
        "encapsulated as RFC 7348 gives it"
    );
    assert_eq!(recs.len(), 1, "captured, as it leaves");
    assert_eq!(sw.es_stats().unwrap().encaps, 1);

    // The encapsulated frame comes back: decapsulated by its VNI's rule,
    // exactly the original frame again.
    let vni = Match {
        proto: 17,
        dport: 4789,
        vni: 0x12_3456,
        ..Match::default()
    };
    sw.add_es_entry(
        0,
        1,
        &vni,
        Action::Decap {
            ifindex: out.0,
            port: out.1,
        },
    )
    .unwrap();
    let (v, back, _) = run_frame(&sw, &got);
    assert_eq!(v, verdict::REDIRECT);
    assert_eq!(back, inner, "decapsulated to the original frame");
    assert_eq!(sw.es_stats().unwrap().decaps, 1);

    // Another VNI does not match the decap rule.
    let other = vxlan(&inner, &Tunnel { vni: 7, ..tunnel });
    let m = sw.es_stats().unwrap().misses;
    let (_, same, _) = run_frame(&sw, &other);
    assert_eq!(same, other, "left as it was");
    assert_eq!(sw.es_stats().unwrap().misses, m + 1);

    // A decap rule that catches a packet that is not VXLAN: dropped and
    // counted, never forwarded half-stripped.
    let any = Match::default();
    sw.set_es_mask(1, 0, &any).unwrap();
    sw.add_es_entry(
        1,
        0,
        &any,
        Action::Decap {
            ifindex: out.0,
            port: out.1,
        },
    )
    .unwrap();
    sw.set_es_order(1, &[0]).unwrap();
    sw.set_es_mask(0, 2, &by_dst).unwrap();
    sw.add_es_entry(
        0,
        2,
        &Match {
            daddr: [10, 0, 0, 8],
            ..Match::default()
        },
        Action::Goto(1),
    )
    .unwrap();
    sw.set_es_order(0, &[1, 0, 2]).unwrap();
    let plain = frame(Ipv4Addr::new(10, 0, 0, 8), 9000);
    let (v, _, _) = run_frame(&sw, &plain);
    assert_eq!(v, verdict::SHOT);
    assert_eq!(sw.es_stats().unwrap().tunnel_errors, 1);
    assert!(sw
        .add_es_entry(
            0,
            0,
            &to,
            Action::Encap {
                ifindex: 1,
                port: 1,
                tunnel: Tunnel {
                    vni: 1 << 24,
                    ..tunnel
                }
            }
        )
        .unwrap_err()
        .to_string()
        .contains("24 bits"));
}

/// A TCP or UDP frame as etherparse builds it, its checksums computed
/// there (not by the arithmetic under test): MACs (destination, source),
/// from `src` to `dst`.
fn l4_frame(
    macs: ([u8; 6], [u8; 6]),
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    tcp: bool,
) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(macs.1, macs.0).ipv4(src.0, dst.0, 64);
    let payload = [0x5au8; 100];
    let mut out = Vec::new();
    if tcp {
        let b = b.tcp(src.1, dst.1, 1000, 65535).ack(1).psh();
        b.write(&mut out, &payload).unwrap();
    } else {
        b.udp(src.1, dst.1).write(&mut out, &payload).unwrap();
    }
    out
}

/// OpenFlow's set_field as an entry's rewrite: the fields change, the
/// IPv4 and TCP/UDP checksums are patched to what a fresh computation
/// gives (RFC 1624), a rewritten destination MAC is forwarded by the MAC
/// table, a later table matches the rewritten fields, and an address
/// rewrite on a frame that is not IPv4 is dropped and counted.
#[test]
fn set_field_rewrites_headers_with_checksums_a_later_table_sees() {
    use wirelab_dataplane::eswitch::Rewrite;
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    const MAC_C: [u8; 6] = [0x02, 0, 0, 0, 0, 3];
    sw.add_fwd(MAC_C, MAC_OUT + 1, 4).unwrap();
    let a = [0x02, 0, 0, 0, 0, 1];
    let by_dst = Match {
        daddr: Match::prefix(32),
        ..Match::default()
    };
    sw.set_es_mask(0, 0, &by_dst).unwrap();
    sw.set_es_order(0, &[0]).unwrap();
    let to = |d: [u8; 4]| Match {
        daddr: d,
        ..Match::default()
    };
    // 10.0.0.7 -> rewritten to 10.0.0.9:9001 at MAC_C, counted: the MAC
    // table sends it by MAC_C.
    let nat = Rewrite {
        dmac: Some(MAC_C),
        daddr: Some([10, 0, 0, 9]),
        dport: Some(9001),
        ..Rewrite::NONE
    };
    sw.add_es_entry_rewriting(0, 0, &to([10, 0, 0, 7]), Action::Count, &nat)
        .unwrap();
    for tcp in [true, false] {
        let input = l4_frame(
            (MAC_B, a),
            ([198, 18, 0, 1], 40000),
            ([10, 0, 0, 7], 9000),
            tcp,
        );
        let want = l4_frame(
            (MAC_C, a),
            ([198, 18, 0, 1], 40000),
            ([10, 0, 0, 9], 9001),
            tcp,
        );
        let tx = sw.counters(4).unwrap().tx_pkts;
        let (v, got, recs) = run_frame(&sw, &input);
        assert_eq!(v, verdict::REDIRECT, "tcp {tcp}");
        assert_eq!(
            got, want,
            "tcp {tcp}: rewritten, checksums as computed afresh"
        );
        let cap = &recs[0].1;
        assert!(cap.len() >= 54, "tcp {tcp}: the headers are captured");
        assert_eq!(
            cap[..],
            want[..cap.len()],
            "tcp {tcp}: captured as it leaves"
        );
        assert_eq!(
            sw.counters(4).unwrap().tx_pkts,
            tx + 1,
            "tcp {tcp}: out of MAC_C's port"
        );
    }
    // A UDP packet sent without a checksum (0) keeps none.
    let bare = frame(Ipv4Addr::new(10, 0, 0, 7), 9000);
    let (_, got, _) = run_frame(&sw, &bare);
    assert_eq!(&got[40..42], &[0, 0], "UDP checksum stays 0");
    assert_eq!(&got[36..38], &9001u16.to_be_bytes());
    assert_eq!(
        etherparse::Ipv4HeaderSlice::from_slice(&got[14..])
            .unwrap()
            .to_header()
            .calc_header_checksum(),
        u16::from_be_bytes([got[24], got[25]]),
        "IPv4 header checksum patched"
    );

    // Rewrite, then go to table 1, which matches the rewritten source.
    sw.add_es_entry_rewriting(
        0,
        0,
        &to([10, 0, 0, 8]),
        Action::Goto(1),
        &Rewrite {
            saddr: Some([198, 18, 0, 99]),
            sport: Some(7),
            ..Rewrite::NONE
        },
    )
    .unwrap();
    let by_src = Match {
        saddr: Match::prefix(32),
        sport: 0xffff,
        ..Match::default()
    };
    sw.set_es_mask(1, 0, &by_src).unwrap();
    sw.set_es_order(1, &[0]).unwrap();
    let rewritten_src = Match {
        saddr: [198, 18, 0, 99],
        sport: 7,
        ..Match::default()
    };
    sw.add_es_entry(
        1,
        0,
        &rewritten_src,
        Action::Forward {
            ifindex: ES_OUT,
            port: 3,
        },
    )
    .unwrap();
    let input = l4_frame(
        (MAC_B, a),
        ([198, 18, 0, 1], 40000),
        ([10, 0, 0, 8], 9000),
        true,
    );
    let want = l4_frame(
        (MAC_B, a),
        ([198, 18, 0, 99], 7),
        ([10, 0, 0, 8], 9000),
        true,
    );
    let tx = sw.counters(3).unwrap().tx_pkts;
    let (v, got, _) = run_frame(&sw, &input);
    assert_eq!((v, got), (verdict::REDIRECT, want));
    assert_eq!(
        sw.counters(3).unwrap().tx_pkts,
        tx + 1,
        "table 1's entry forwarded it"
    );
    assert_eq!(
        sw.es_entry_hits(1, 0, &rewritten_src).unwrap().map(|h| h.0),
        Some(1)
    );

    // An address rewrite on an ARP frame: nothing to rewrite, dropped.
    let any = Match::default();
    sw.set_es_mask(0, 1, &any).unwrap();
    sw.set_es_order(0, &[0, 1]).unwrap();
    sw.add_es_entry_rewriting(
        0,
        1,
        &any,
        Action::Count,
        &Rewrite {
            daddr: Some([10, 0, 0, 1]),
            ..Rewrite::NONE
        },
    )
    .unwrap();
    let mut arp = Vec::from(MAC_B);
    arp.extend_from_slice(&a);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let before = sw.es_stats().unwrap();
    let (v, _, _) = run_frame(&sw, &arp);
    let after = sw.es_stats().unwrap();
    assert_eq!(v, verdict::SHOT);
    assert_eq!(after.rewrite_errors, before.rewrite_errors + 1);
    assert_eq!(before.rewrites, 4, "TCP, UDP, bare UDP, the goto");
    assert_eq!(after.rewrites, before.rewrites, "counted only once made");
}

#[test]
fn a_slow_path_reports_each_missed_flow_and_forwards_within_its_capacity() {
    // ScalaCN §2-3: with a virtual switch offloading flows, a miss is a
    // packet for software. Capacity 1 packet per second, bursts of 2: the
    // first two misses pass (by the MAC table), the third, within the
    // second, is dropped after the capture and says so in its record.
    if !have_bpf() {
        return;
    }
    let sw = switch(true);
    eight_masks(&sw, |_| Action::Forward {
        ifindex: ES_OUT,
        port: 3,
    });
    sw.remove_es_entry(0, 5, &entry(5)).unwrap();
    let missing = frame(Ipv4Addr::new(10, 0, 5, 0), 9005);
    // Without a slow path a miss goes to the MAC table, unreported.
    let (v, _, _) = run_frame(&sw, &missing);
    assert_eq!(v, verdict::REDIRECT);
    assert!(sw.es_upcalls().unwrap().is_empty());
    assert!(
        sw.set_es_slow_path(Some((0, 4))).is_err(),
        "a rate of 0 is refused"
    );
    sw.set_es_slow_path(Some((1, 2))).unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let (v, _, records) = run_frame(&sw, &missing);
        assert_eq!(records.len(), 1, "every packet is captured");
        let h = records[0].0;
        got.push((v, h.es_visited, h.es_drop));
    }
    assert_eq!(
        got,
        vec![
            (verdict::REDIRECT, 8, 0),
            (verdict::REDIRECT, 8, 0),
            (verdict::SHOT, 8, 1),
        ],
        "(verdict, masks searched, flow-table drop) of each miss"
    );
    let st = sw.es_stats().unwrap();
    assert_eq!((st.slow_pkts, st.slow_drops, st.misses), (2, 1, 4));
    let u = sw.es_upcalls().unwrap();
    assert_eq!(u.len(), 1, "one flow, one report: {u:?}");
    assert_eq!((u[0].table, u[0].pkts), (0, 3));
    assert_eq!(
        (u[0].fields.daddr, u[0].fields.dport),
        ([10, 0, 5, 0], 9005)
    );
    assert_eq!(u[0].fields.in_port, 1, "the whole key");
    assert!(u[0].first_ns > 0 && u[0].first_ns <= u[0].last_ns);
    // A hit never reaches the slow path, whatever its capacity left.
    let (v, _, records) = run_frame(&sw, &frame(Ipv4Addr::new(10, 0, 4, 0), 9004));
    assert_eq!(
        (v, records[0].0.es_visited, records[0].0.es_drop),
        (verdict::REDIRECT, 5, 0)
    );
    assert_eq!(sw.es_stats().unwrap().slow_drops, 1);
    // Offloaded (its entry back) and forgotten: no report, no drop.
    sw.add_es_entry(0, 5, &entry(5), Action::Count).unwrap();
    sw.forget_es_upcall(0, &u[0].fields).unwrap();
    let (v, _, _) = run_frame(&sw, &missing);
    assert_eq!(v, verdict::REDIRECT);
    assert!(sw.es_upcalls().unwrap().is_empty());
    sw.forget_es_upcall(0, &u[0].fields).unwrap(); // not there: no error
                                                   // The slow path off again: misses unreported and unlimited.
    sw.remove_es_entry(0, 5, &entry(5)).unwrap();
    sw.set_es_slow_path(None).unwrap();
    for _ in 0..3 {
        assert_eq!(run_frame(&sw, &missing).0, verdict::REDIRECT);
    }
    assert!(sw.es_upcalls().unwrap().is_empty());
}
