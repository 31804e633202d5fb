//! The `vaqm` analyzer on QCN (NetBump §4.3): a small trace made here of
//! UDP packets through a QCN queue, some of which caused a CNM (`cnm=N` in
//! their metadata), with the reaction points' facts. A device that
//! behaves passes; a lost CNM, a CNM from a queue without QCN and a
//! feedback wider than the queue's fb_max are each caught, with the
//! packets as evidence.

use std::net::IpAddr;

mod common;

use wirelab_analyze::report::{build, Report};
use wirelab_analyze::rp::{RpFacts, RpPoint};
use wirelab_analyze::truth::VqFacts;
use wirelab_analyze::{Kind, Options, RunFacts};
use wirelab_spec::vaqm::Qcn;
use wirelab_spec::Bytes;
use wirelab_trace::{Meta, Trace};

const T0: u64 = 1_700_000_000_000_000_000;

/// 40 packets 100 µs apart, alternating between s1 and s2, through queue
/// 1; packets at `cnm` carry that feedback.
fn trace(cnm: &[(usize, u32)]) -> Trace {
    let packets = (0..40usize)
        .map(|i| {
            let t = T0 + i as u64 * 100_000;
            let meta = Meta {
                ts: t,
                vq: 1,
                vq_bytes: 1000 * i as u32,
                cnm: cnm.iter().find(|c| c.0 == i).map_or(0, |c| c.1),
                ..Default::default()
            };
            common::made_packet(i as u64, 1 + (i % 2) as u8, 1000, t, meta)
        })
        .collect();
    Trace {
        packets,
        interfaces: vec!["s1".into(), "s2".into()],
        truncated: None,
    }
}

fn facts(qcn: bool, received: [u64; 2]) -> RunFacts {
    let mut f = RunFacts::default();
    for (h, ip) in [
        ("s1", "198.18.0.1"),
        ("s2", "198.18.0.2"),
        ("sink", "198.18.0.4"),
    ] {
        f.addresses.insert(h.into(), ip.parse::<IpAddr>().unwrap());
    }
    f.vaqm.push(VqFacts {
        id: 1,
        port: Some("sink".into()),
        rate_bps: 100_000_000,
        qcn: qcn.then_some(Qcn {
            q_eq: Bytes(20_000),
            w: 1,
            fb_max: 32,
            p_min: 0.01,
            p_max: 0.2,
        }),
        ..Default::default()
    });
    for (host, cnms) in [("s1", received[0]), ("s2", received[1])] {
        f.qcn.push(RpFacts {
            host: host.into(),
            cnms,
            line_rate_bps: 100_000_000,
            points: vec![RpPoint {
                host: host.into(),
                ts_ns: T0 + 2_000_000,
                current_bps: 50_000_000,
                target_bps: 100_000_000,
                fb: 32,
            }],
        });
    }
    f
}

fn report(t: &Trace, f: &RunFacts) -> Report {
    build(
        "qcn",
        t,
        Options::default(),
        Some(f),
        &["vaqm"],
        &[],
        &|_| {},
    )
}

fn findings<'a>(r: &'a Report, name: &str) -> Vec<&'a wirelab_analyze::Finding> {
    r.analyzers
        .iter()
        .flat_map(|a| a.findings.iter())
        .filter(|f| f.name == name)
        .collect()
}

fn violations(r: &Report) -> Vec<(&'static str, String)> {
    r.analyzers
        .iter()
        .flat_map(|a| a.findings.iter())
        .filter(|f| f.kind == Kind::Violation)
        .map(|f| (f.name, f.message.clone()))
        .collect()
}

#[test]
fn cnms_that_all_arrive_pass_and_are_counted_with_their_packets() {
    // Packets 20 (s1) and 31 (s2) caused CNMs with |Fb| 12 and 32.
    let t = trace(&[(20, 12), (31, 32)]);
    let r = report(&t, &facts(true, [1, 1]));
    assert_eq!(violations(&r), vec![]);
    let c = findings(&r, "cnms");
    assert_eq!(c[0].value, Some(2.0));
    let seqs: Vec<u64> = c[0]
        .evidence
        .iter()
        .map(|e| e.mirror_seq.unwrap())
        .collect();
    assert_eq!(seqs, vec![20, 31]);
    let fb = findings(&r, "qcn-feedback");
    assert!(
        fb[0].message.contains("median") && fb[0].message.contains("max 32"),
        "{}",
        fb[0].message
    );
    // One send rate per source, named by host, with a plot.
    let rates = findings(&r, "send-rate");
    assert_eq!(rates.len(), 2);
    assert!(rates[0].message.contains("s1 sent") && rates[1].message.contains("s2 sent"));
    // 20 packets of 1000 B each over 4 ms: 40 Mbit/s while sending.
    assert!(rates.iter().all(|f| !f.series.is_empty()));
    let rp = findings(&r, "rp-rate");
    assert_eq!(rp.len(), 2);
    assert!(
        rp[0].message.contains("min 50.0Mbit/s"),
        "{}",
        rp[0].message
    );
    // 2 CNMs judged + one delivery check per reaction point.
    assert_eq!(r.analyzers[0].checks, 4);
}

#[test]
fn a_cnm_that_never_reached_its_reaction_point_is_caught() {
    let t = trace(&[(20, 12), (22, 8), (31, 32)]);
    let r = report(&t, &facts(true, [1, 1]));
    let v = violations(&r);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0, "cnm-lost");
    assert!(
        v[0].1.contains("s1 received 1 CNMs; the switch sent it 2"),
        "{}",
        v[0].1
    );
    let lost = findings(&r, "cnm-lost");
    let seqs: Vec<u64> = lost[0]
        .evidence
        .iter()
        .map(|e| e.mirror_seq.unwrap())
        .collect();
    assert_eq!(seqs, vec![20, 22]);
}

#[test]
fn a_cnm_from_a_queue_without_qcn_or_beyond_fb_max_is_wrong() {
    let t = trace(&[(20, 12)]);
    let r = report(&t, &facts(false, [1, 0]));
    let v = violations(&r);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].1
            .contains("a CNM (|Fb| 12) from a queue without `qcn`"),
        "{}",
        v[0].1
    );

    let t = trace(&[(20, 40)]);
    let r = report(&t, &facts(true, [1, 0]));
    let v = violations(&r);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].1.contains("|Fb| 40 above fb_max = 32"), "{}", v[0].1);
}
