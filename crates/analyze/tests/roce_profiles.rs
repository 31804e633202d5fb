//! Each RoCE analyzer passes the `default` profile and flags the quirk
//! profiles it is meant to catch; every built-in quirk profile is caught by
//! at least one analyzer. The traces come from wirelab's transport on
//! virtual time (wirelab_roce::sim), one run per profile with every
//! situation Lumina's experiments create: a lost write packet, a lost read
//! response, a tail packet dropped until the retries run out, CE marks on
//! three QPs from two GIDs of one host, and a QP combining send and read
//! (Lumina §3.2) that loses a packet each way, and a read response
//! dropped every time it is sent.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use wirelab_analyze::report::{self, Report};
use wirelab_analyze::{Kind, Options, RunFacts};
use wirelab_roce::packet::{self, Kind as PKind};
use wirelab_roce::sim::{Action, Seen, Sim};
use wirelab_roce::{Device, DeviceConfig, QpConfig, Verb, WorkRequest};
use wirelab_spec::roce::load_profile;
use wirelab_trace::{Link, Meta, Packet, Trace};

const A1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const A2: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Lumina's min-retransmit-timeout (Listing 2): 4.096 µs × 2^14 = 67 ms.
const TIMEOUT: u8 = 14;
const RETRY_CNT: u8 = 7;
/// Long enough next to the QPs' packet spacing that the limiter's scope
/// shows in the number of CNPs.
const CNP_INTERVAL: u64 = 20_000;

/// (connection, requester QPN, responder QPN, requester address, verbs
/// (message k uses verb k mod n), messages, message size)
type Conn = (u32, u32, u32, Ipv4Addr, &'static [Verb], u64, u32);
const CONNS: [Conn; 6] = [
    (1, 0x11, 0x21, A1, &[Verb::Write], 2, 32 * 1024),
    (2, 0x12, 0x22, A1, &[Verb::Read], 2, 10 * 1024),
    (3, 0x13, 0x23, A2, &[Verb::Write], 1, 3 * 1024),
    (4, 0x14, 0x24, A1, &[Verb::Write], 2, 32 * 1024),
    (5, 0x15, 0x25, A1, &[Verb::Send, Verb::Read], 4, 4 * 1024),
    (6, 0x16, 0x26, A1, &[Verb::Read], 1, 3 * 1024),
];

fn conn_of(s: &Seen) -> u32 {
    CONNS
        .iter()
        .find(|c| s.dqpn == c.1 || s.dqpn == c.2)
        .map_or(0, |c| c.0)
}

fn ipsn(conn: u32, requester: bool) -> u32 {
    // Near the top of the 24-bit space, so the PSNs wrap mid-run.
    0xff_fff0 + conn * 2 + requester as u32
}

fn device(profile: &str) -> Device {
    let mut c = DeviceConfig::new(load_profile(profile).expect("built-in profile"));
    c.adaptive_retransmission = profile == "adaptive-retransmission";
    c.min_time_between_cnps_ns = CNP_INTERVAL;
    c.line_rate_bps = 10e9;
    Device::new(c)
}

fn qp(
    qpn: u32,
    remote_qpn: u32,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    conn: u32,
    req: bool,
) -> QpConfig {
    QpConfig {
        ipsn: ipsn(conn, req),
        remote_ipsn: ipsn(conn, !req),
        timeout: TIMEOUT,
        retry_cnt: RETRY_CNT,
        ..QpConfig::new(qpn, remote_qpn, local, remote)
    }
}

/// The relative PSN (1 = the first) of a packet.
fn rel(s: &Seen) -> u32 {
    // Read responses and ACKs carry the requester's PSNs too (IBTA §9.7.1).
    wirelab_roce::psn::diff(s.psn, ipsn(conn_of(s), true)) as u32 + 1
}

/// The switch's events: what Lumina's specs inject.
fn fate(s: &Seen, log: &[Seen]) -> Action {
    let c = conn_of(s);
    let kind = packet::kind(s.opcode);
    let seen_before = |f: &dyn Fn(&Seen) -> bool| log.iter().any(|x| conn_of(x) == c && f(x));
    match (c, kind) {
        // A write loses its 5th packet once.
        (1, PKind::Data) if rel(s) == 5 && !seen_before(&|x| x.psn == s.psn) => Action::Drop,
        // A read loses its 3rd response once.
        (2, PKind::ReadResponse)
            if rel(s) == 3
                && !seen_before(&|x| {
                    x.psn == s.psn && packet::kind(x.opcode) == PKind::ReadResponse
                }) =>
        {
            Action::Drop
        }
        // The last packet of connection 3's only message, every time.
        (3, PKind::Data) if rel(s) == 3 => Action::Drop,
        // Send + read: the send's 2nd packet and the second read's 2nd
        // response (relative PSN 14) are lost once each.
        (5, PKind::Data) if rel(s) == 2 && !seen_before(&|x| x.psn == s.psn) => Action::Drop,
        (5, PKind::ReadResponse)
            if rel(s) == 14
                && !seen_before(&|x| {
                    x.psn == s.psn && packet::kind(x.opcode) == PKind::ReadResponse
                }) =>
        {
            Action::Drop
        }
        // A read's 2nd response, every time (found by `wirelab fuzz`: the
        // requester re-issues by implied NAK and by timeout in turn, and the
        // re-issue after a timeout is an implied NAK again, not a timeout).
        (6, PKind::ReadResponse) if rel(s) == 2 => Action::Drop,
        // Every other data packet of connections 1, 3 and 4 is CE-marked.
        (1 | 3 | 4, PKind::Data) => Action::Ecn,
        _ => Action::None,
    }
}

struct Run {
    report: Report,
    trace: Trace,
    facts: RunFacts,
}

fn run(profile: &str) -> Run {
    let mut a = device(profile);
    let mut b = device(profile);
    for &(conn, rq, rs, ip, _, _, _) in &CONNS {
        a.create_qp(qp(rq, rs, ip, B, conn, true));
        b.create_qp(qp(rs, rq, B, ip, conn, false));
    }
    for &(_, rq, rs, _, verbs, messages, len) in &CONNS {
        let sends = (0..messages)
            .filter(|&m| verbs[m as usize % verbs.len()] == Verb::Send)
            .count();
        if sends > 0 {
            b.post_recv(rs, sends as u64).expect("QP exists");
        }
        for m in 0..messages {
            let wr = WorkRequest {
                id: m + 1,
                verb: verbs[m as usize % verbs.len()],
                len,
                remote_va: 0x1_0000 * (m + 1),
                rkey: 7,
            };
            a.post_send(rq, wr).expect("posted");
        }
    }
    let mut sim = Sim::new(1_000);
    sim.add(a, &[A1, A2]);
    sim.add(b, &[B]);
    sim.set_hook(fate);
    sim.run(10_000_000_000);

    let packets = sim
        .log
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let data = s.ip_packet();
            Packet {
                frame: i as u64 + 1,
                ts_ns: s.t,
                orig_len: data.len() as u32,
                data,
                interface: 0,
                link: Link::RawIp,
                meta: Some(Meta {
                    seq: i as u64,
                    ts: s.t,
                    port: 0,
                    conn: if s.opcode == packet::op::CNP {
                        0
                    } else {
                        conn_of(s)
                    },
                    data_dir: matches!(packet::kind(s.opcode), PKind::Data | PKind::ReadResponse),
                    index: 0,
                    iter: 0,
                    first_tx: false,
                    event: s.fate,
                    event_id: 0,
                    ..Default::default()
                }),
            }
        })
        .collect();
    let trace = Trace {
        packets,
        interfaces: vec!["sw".into()],
        truncated: None,
    };
    let counters = |d: &Device| -> BTreeMap<String, i64> {
        d.counters()
            .0
            .iter()
            .map(|(k, v)| (k.clone(), *v as i64))
            .collect()
    };
    let facts = RunFacts {
        addresses: [("a".into(), IpAddr::V4(A1)), ("b".into(), IpAddr::V4(B))].into(),
        gids: [("a".into(), vec![IpAddr::V4(A1), IpAddr::V4(A2)])].into(),
        device_counters: [
            ("a".into(), counters(&sim.devs[0])),
            ("b".into(), counters(&sim.devs[1])),
        ]
        .into(),
        cnp_interval_ns: [("a".into(), CNP_INTERVAL), ("b".into(), CNP_INTERVAL)].into(),
        roce_retransmit: CONNS
            .iter()
            .map(|c| {
                (
                    c.0,
                    (
                        wirelab_roce::local_ack_timeout_ns(TIMEOUT).unwrap(),
                        RETRY_CNT as u32,
                    ),
                )
            })
            .collect(),
        roce_profile: [("a".into(), profile.into()), ("b".into(), profile.into())].into(),
        ..Default::default()
    };
    Run {
        report: analyze(&trace, &facts),
        trace,
        facts,
    }
}

fn analyze(trace: &Trace, facts: &RunFacts) -> Report {
    let analyzers = [
        "roce-go-back-n",
        "roce-retransmission-latency",
        "roce-cnp",
        "roce-counters",
    ];
    report::build(
        "sim",
        trace,
        Options::default(),
        Some(facts),
        &analyzers,
        &[],
        &|_| {},
    )
}

/// (analyzer, finding) of every violation.
fn violations(r: &Report) -> Vec<(String, String, String)> {
    r.analyzers
        .iter()
        .flat_map(|a| {
            a.findings
                .iter()
                .filter(|f| f.kind == Kind::Violation)
                .map(|f| (a.name.to_string(), f.name.to_string(), f.message.clone()))
        })
        .collect()
}

fn measured<'a>(r: &'a Report, name: &str) -> Vec<&'a wirelab_analyze::Finding> {
    r.analyzers
        .iter()
        .flat_map(|a| a.findings.iter())
        .filter(|f| f.name == name)
        .collect()
}

/// Which quirk each analyzer is meant to catch: profile -> (analyzer,
/// finding, a word the message must carry).
const CAUGHT_BY: &[(&str, &str, &str, &str)] = &[
    (
        "slow-nack-reaction",
        "roce-retransmission-latency",
        "slow-nack-reaction",
        "reaction to the NAK",
    ),
    (
        "slow-read-nack",
        "roce-retransmission-latency",
        "slow-read-nack-generation",
        "re-issuing the read",
    ),
    ("cnp-hidden-interval", "roce-cnp", "cnp-missing", "per QP"),
    (
        "cnp-per-ip",
        "roce-cnp",
        "cnp-missing",
        "per destination IP",
    ),
    ("cnp-per-port", "roce-cnp", "cnp-missing", "per NIC port"),
    (
        "cnp-sent-not-counted",
        "roce-counters",
        "counter-disagrees",
        "np_cnp_sent",
    ),
    (
        "implied-nak-not-counted",
        "roce-counters",
        "counter-disagrees",
        "implied_nak_seq_err",
    ),
    (
        "clears-migreq",
        "roce-go-back-n",
        "migreq-clear",
        "MigReq = 0",
    ),
    (
        "adaptive-retransmission",
        "roce-retransmission-latency",
        "timeout-below-minimum",
        "below the configured",
    ),
    (
        "adaptive-retransmission",
        "roce-retransmission-latency",
        "retries-exceed-retry-cnt",
        "retry_cnt 7",
    ),
];

#[test]
fn the_default_profile_passes_every_roce_analyzer_and_each_measures_something() {
    let r = run("default").report;
    assert_eq!(violations(&r), Vec::<(String, String, String)>::new());
    for a in &r.analyzers {
        assert!(a.checks > 0, "{} checked nothing", a.name);
    }
    // What the run measured: one NAK per lost write or send packet, one
    // re-issued read per lost response, the tail loss and the read that
    // never gets its response resent by timeout exactly retry_cnt times, and CNPs from the responder for its
    // CE-marked writes.
    let gen = measured(&r, "nack-generation");
    let at = |f: &&wirelab_analyze::Finding| (f.connection, f.packet, f.in_message);
    assert_eq!(
        gen.iter().map(at).collect::<Vec<_>>(),
        vec![(Some(1), Some(5), Some(5)), (Some(5), Some(2), Some(2))],
        "{gen:?}"
    );
    assert!(gen
        .iter()
        .all(|f| f.device.as_deref() == Some("b (default)")));
    // Relative PSN 3 of the read's responses and the combination's PSN 14
    // (response 2 of its 4th message), which the requester re-issues; and
    // connection 6's response 2, lost every time: re-issued at once, then
    // again after each of the retry_cnt timeouts (a NAK per missing PSN
    // until the timer fires, as for writes).
    let read = measured(&r, "read-nack-generation");
    let mut want = vec![(Some(2), Some(3), Some(3)), (Some(5), Some(14), Some(2))];
    want.extend([(Some(6), Some(2), Some(2)); 1 + RETRY_CNT as usize]);
    assert_eq!(read.iter().map(at).collect::<Vec<_>>(), want, "{read:?}");
    assert!(read
        .iter()
        .all(|f| f.device.as_deref() == Some("a (default)")));
    assert_eq!(measured(&r, "nack-reaction").len(), 2);
    // Connection 3's tail and connection 6's read, retry_cnt times each.
    let timeouts = measured(&r, "timeout");
    assert_eq!(timeouts.len(), 2 * RETRY_CNT as usize, "{timeouts:?}");
    // Timed from when the local ACK timer started: exactly the timeout on
    // virtual time, or one link delay (1 µs) more when a read response
    // started it (the switch sees it before the requester does).
    let min = wirelab_roce::local_ack_timeout_ns(TIMEOUT).unwrap() as f64;
    assert!(
        timeouts
            .iter()
            .all(|t| (min..=min + 1_000.0).contains(&t.value.unwrap())),
        "{timeouts:?}"
    );
    assert!(
        timeouts.iter().filter(|t| t.value.unwrap() == min).count() >= 2 * RETRY_CNT as usize - 1
    );
    let cnps = measured(&r, "cnps");
    assert!(cnps.iter().any(|f| f.value.unwrap() >= 3.0), "{cnps:?}");
    let interval = measured(&r, "interval");
    assert!(
        interval.iter().any(|f| f.message.contains("per QP")),
        "{interval:?}"
    );
}

#[test]
fn each_quirk_profile_is_flagged_by_the_analyzer_meant_to_catch_it() {
    for profile in CAUGHT_BY
        .iter()
        .map(|c| c.0)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let r = run(profile).report;
        let got = violations(&r);
        let want: Vec<_> = CAUGHT_BY.iter().filter(|c| c.0 == profile).collect();
        for (_, analyzer, finding, word) in &want {
            assert!(
                got.iter()
                    .any(|g| g.0 == *analyzer && g.1 == *finding && g.2.contains(word)),
                "{profile}: {analyzer}.{finding} mentioning {word:?} not among {got:#?}"
            );
        }
        // Nothing else is flagged: the quirk explains every violation.
        for g in &got {
            assert!(
                want.iter().any(|w| w.1 == g.0 && w.2 == g.1),
                "{profile}: unexpected {g:?}"
            );
        }
    }
}

#[test]
fn every_built_in_quirk_profile_is_caught_by_some_analyzer() {
    // A performance quirk breaks no rule on the wire: the noisy neighbour
    // (Lumina §6.2.2) shows as innocent QPs' completion times and the
    // device's rx_discards_phy, which `wirelab fuzz`'s `noisy-neighbour`
    // objective scores (and wirelab_roce's transport test
    // `a_shared_slow_path_makes_innocent_qps_wait...` pins).
    const BY_COMPLETION_TIMES: [&str; 1] = ["noisy-neighbour"];
    for (name, _) in wirelab_spec::roce::BUILTIN {
        if *name == "default" || BY_COMPLETION_TIMES.contains(name) {
            continue;
        }
        assert!(
            CAUGHT_BY.iter().any(|c| c.0 == *name),
            "profile {name} has no analyzer that catches it"
        );
    }
}

#[test]
fn the_simulated_trace_is_what_the_switch_would_capture() {
    // Every packet's ICRC verifies unless the switch corrupted it, and the
    // PSNs wrap past 2^24 - 1 within the run.
    let t = run("default").trace;
    let mut wrapped = false;
    for p in &t.packets {
        let (h, roce) = packet::split_ipv4_udp(&p.data).expect("IPv4/UDP");
        assert!(packet::icrc_ok_ipv4(&h, roce), "frame {}", p.frame);
        let bth = packet::Bth::parse(roce).unwrap();
        wrapped |= bth.psn < 0x10;
    }
    assert!(wrapped);
}

/// The trace of a default run with packets taken out or repeated, as a
/// device that breaks a go-back-N rule would have sent them.
fn edited(edit: impl Fn(&mut Vec<Packet>)) -> Vec<(String, String, String)> {
    let Run {
        mut trace, facts, ..
    } = run("default");
    edit(&mut trace.packets);
    violations(&analyze(&trace, &facts))
        .into_iter()
        .filter(|v| v.0 == "roce-go-back-n")
        .collect()
}

fn bth(p: &Packet) -> packet::Bth {
    packet::Bth::parse(&p.data[28..]).expect("a RoCE packet")
}

fn conn(p: &Packet) -> u32 {
    p.meta.as_ref().map_or(0, |m| m.conn)
}

fn is_nak(p: &Packet) -> bool {
    bth(p).opcode == packet::op::ACKNOWLEDGE && p.data[28 + packet::BTH_LEN] & 0x60 == 0x60
}

/// Index of the n-th (0-based) packet of connection `c` matching `f`.
fn nth(ps: &[Packet], c: u32, n: usize, f: impl Fn(&Packet) -> bool) -> usize {
    ps.iter()
        .enumerate()
        .filter(|(_, p)| conn(p) == c && f(p))
        .nth(n)
        .expect("such a packet")
        .0
}

/// An ACK or NAK `like` made to carry `psn` (its ICRC sealed again), at
/// the switch `dt_ns` after packet `at` (its mirror sequence number too,
/// so it sorts there).
fn acknowledging(like: &Packet, psn: u32, at: &Packet, dt_ns: i64) -> Packet {
    let mut a = like.clone();
    a.data[28 + 9..28 + 12].copy_from_slice(&psn.to_be_bytes()[1..]);
    let (h, _) = packet::split_ipv4_udp(&a.data).expect("IPv4/UDP");
    packet::seal_ipv4(&h, &mut a.data[28..]);
    let m = at.meta.clone().unwrap();
    a.ts_ns = at.ts_ns.saturating_add_signed(dt_ns);
    let am = a.meta.as_mut().unwrap();
    am.ts = m.ts.saturating_add_signed(dt_ns);
    am.seq = m.seq;
    a
}

fn names(v: &[(String, String, String)]) -> Vec<&str> {
    v.iter().map(|v| v.1.as_str()).collect()
}

#[test]
fn the_go_back_n_fsm_flags_each_rule_a_device_breaks() {
    // The lost write packet's relative PSN 5, as a PSN.
    let lost = (ipsn(1, true) + 4) & 0xff_ffff;
    let resent = |p: &Packet| {
        conn(p) == 1 && bth(p).psn == lost && packet::kind(bth(p).opcode) == PKind::Data
    };

    // A responder that never NAKs the gap.
    let v = edited(|ps| {
        let i = nth(ps, 1, 0, is_nak);
        ps.remove(i);
    });
    assert!(names(&v).contains(&"nak-missing"), "{v:?}");

    // A responder that NAKs the gap twice.
    let v = edited(|ps| {
        let i = nth(ps, 1, 0, is_nak);
        let dup = ps[i].clone();
        ps.insert(i + 1, dup);
    });
    assert_eq!(names(&v), vec!["nak-repeated"], "{v:?}");

    // A requester that resends from the packet after the NAKed one.
    let v = edited(|ps| {
        let i = nth(ps, 1, 1, resent);
        ps.remove(i);
    });
    assert!(names(&v).contains(&"wrong-restart"), "{v:?}");

    // A requester that skips a packet of the resend round.
    let v = edited(|ps| {
        let i = nth(ps, 1, 1, resent);
        ps.remove(i + 1 + ps[i + 1..].iter().position(|p| conn(p) == 1).unwrap());
    });
    assert!(names(&v).contains(&"resend-skipped"), "{v:?}");

    // A requester that never re-issues the read whose response was lost:
    // the connection ends at the gap.
    let v = edited(|ps| {
        let i = nth(ps, 2, 2, |p| bth(p).opcode == packet::op::READ_REQUEST);
        let mut k = 0;
        ps.retain(|p| {
            k += 1;
            k <= i || conn(p) != 2
        });
    });
    assert!(names(&v).contains(&"read-not-reissued"), "{v:?}");

    // A responder that never NAKs a lost first packet: the gap is at the
    // requester's first PSN, not at the first PSN the responder received.
    let v = edited(|ps| {
        let i = nth(ps, 4, 0, |p| packet::kind(bth(p).opcode) == PKind::Data);
        ps[i].meta.as_mut().unwrap().event = Action::Drop;
    });
    assert!(names(&v).contains(&"nak-missing"), "{v:?}");

    // A NAK with nothing missing.
    let v = edited(|ps| {
        let i = nth(ps, 1, 0, is_nak);
        let mut nak = ps[i].clone();
        nak.ts_ns = 0;
        nak.meta.as_mut().unwrap().ts = 0;
        ps.insert(0, nak);
    });
    assert!(names(&v).contains(&"nak-unjustified"), "{v:?}");
}

#[test]
fn a_nak_that_comes_while_a_resend_round_runs_waits_for_the_round() {
    // A NAK at the switch while a go-back-N round is sending: the round's
    // next packets may have been queued before the requester read it, so
    // they continue the round and are not a wrong restart. Seen in the lab
    // when a flow table's slow path dropped packets of a resend round.
    let lost = (ipsn(1, true) + 4) & 0xff_ffff;
    let resent = |p: &Packet| {
        conn(p) == 1 && bth(p).psn == lost && packet::kind(bth(p).opcode) == PKind::Data
    };
    let from_requester_data =
        |p: &Packet| conn(p) == 1 && packet::kind(bth(p).opcode) == PKind::Data;
    let v = edited(|ps| {
        // The round resends rel 5, 6 and 7 (the requester had sent no
        // further). Its rel 5 is lost again, to a flow table; the
        // responder NAKs it once rel 6 arrives, and rel 7 was queued.
        let i5 = nth(ps, 1, 1, resent);
        let j6 = (i5 + 1..ps.len())
            .find(|&i| from_requester_data(&ps[i]))
            .expect("the round's second packet");
        ps[i5].meta.as_mut().unwrap().es_drop = true;
        let nak = acknowledging(&ps[nth(ps, 1, 0, is_nak)], lost, &ps[j6], 1);
        ps.insert(j6 + 1, nak);
    });
    assert!(!names(&v).contains(&"wrong-restart"), "{v:?}");
}

#[test]
fn a_timeout_racing_an_ack_on_its_way_runs_from_before_that_ack() {
    // Seen in the lab: a message's ACK passed the switch 0.9 ms before the
    // requester, whose timer had run since the message's first packet,
    // resent the message: it had not read the ACK yet. Its timer ran from
    // before that ACK, so the resend is not a timeout below the minimum.
    let Run {
        trace,
        facts,
        report,
    } = run("default");
    let is_ack = |p: &Packet| {
        bth(p).opcode == packet::op::ACKNOWLEDGE && p.data[28 + packet::BTH_LEN] & 0x60 == 0
    };
    // Conn 3 loses its last packet every time it is sent, so it times out
    // and never gets an ACK: conn 1's first ACK is made its.
    let frame = measured(&report, "timeout")
        .iter()
        .map(|f| f.evidence[0].frame)
        .find(|&fr| trace.packets.iter().any(|p| p.frame == fr && conn(p) == 3))
        .expect("conn 3 resent by timeout");
    let i = trace.packets.iter().position(|p| p.frame == frame).unwrap();
    let mut ack = trace.packets[nth(&trace.packets, 1, 0, is_ack)].clone();
    let (_, _, rq, _, _, _, _) = CONNS[2];
    ack.data[16..20].copy_from_slice(&A2.octets());
    ack.data[28 + 5..28 + 8].copy_from_slice(&rq.to_be_bytes()[1..]);
    ack.meta.as_mut().unwrap().conn = 3;
    let psn = bth(&trace.packets[i]).psn;
    // The ACK of `acked`, at the switch 100 µs before the resend.
    let with_ack = |acked: u32| {
        let mut t = Trace {
            packets: trace.packets.clone(),
            interfaces: trace.interfaces.clone(),
            truncated: None,
        };
        let a = acknowledging(&ack, acked, &t.packets[i], -100_000);
        t.packets.insert(i, a);
        violations(&analyze(&t, &facts))
            .into_iter()
            .filter(|v| v.1 == "timeout-below-minimum")
            .count()
    };
    assert_eq!(with_ack(psn), 0, "the ACK covers the resent PSN");
    // An ACK of the PSN before restarts the timer at the requester as
    // before: a resend 100 µs after it is below the minimum.
    assert_eq!(with_ack(psn.wrapping_sub(1) & 0xff_ffff), 1);
}

#[test]
fn a_resend_round_cut_short_by_an_ack_that_covered_it_skips_nothing() {
    // Seen in the lab: a timeout's round had resent part of a message
    // when the requester read the ACK of all of it (it had passed the
    // switch before the round began), and went on to the next message.
    // The rest of the round was acknowledged: nothing was skipped.
    let lost = (ipsn(1, true) + 4) & 0xff_ffff;
    let resent = |p: &Packet| {
        conn(p) == 1 && bth(p).psn == lost && packet::kind(bth(p).opcode) == PKind::Data
    };
    let is_ack = |p: &Packet| {
        bth(p).opcode == packet::op::ACKNOWLEDGE && p.data[28 + packet::BTH_LEN] & 0x60 == 0
    };
    let cut = |acked: bool| {
        edited(|ps| {
            // The round resends rel 5, 6 and 7; rel 8 is new.
            let i5 = nth(ps, 1, 1, resent);
            let round: Vec<usize> = (i5 + 1..ps.len())
                .filter(|&i| conn(&ps[i]) == 1 && packet::kind(bth(&ps[i]).opcode) == PKind::Data)
                .take(2)
                .collect();
            let last = bth(&ps[round[1]]).psn;
            ps.remove(round[1]);
            ps.remove(round[0]);
            if acked {
                // The ACK of rel 7, at the switch right after rel 5 went.
                let a = acknowledging(&ps[nth(ps, 1, 0, is_ack)], last, &ps[i5], 1);
                ps.insert(i5 + 1, a);
            }
        })
        .into_iter()
        .filter(|v| v.1 == "resend-skipped")
        .count()
    };
    assert_eq!(cut(true), 0, "acknowledged, not skipped");
    assert_eq!(cut(false), 1, "without the ACK, rel 6 and 7 were skipped");
}

#[test]
fn a_device_that_ignores_the_cnp_interval_is_flagged() {
    // Every CNP sent twice: more than a per-QP limiter allows.
    let Run {
        mut trace, facts, ..
    } = run("default");
    let cnps: Vec<Packet> = trace
        .packets
        .iter()
        .filter(|p| bth(p).opcode == packet::op::CNP)
        .cloned()
        .collect();
    assert!(!cnps.is_empty());
    trace.packets.extend(cnps);
    trace.packets.sort_by_key(|p| p.ts_ns);
    let v = violations(&analyze(&trace, &facts));
    assert!(
        v.iter().any(|v| v.0 == "roce-cnp" && v.1 == "cnp-excess"),
        "{v:?}"
    );
}
