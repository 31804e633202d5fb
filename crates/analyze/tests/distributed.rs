//! The `vaqm` analyzer's distributed replay (NetBump §3.2.2) on a trace
//! made here: a queue fed by two hosts, each forwarded by its own bump.
//! The replay must first reproduce the switch's estimate packet for
//! packet; a trace whose estimate disagrees is caught (the model does not
//! describe that queue), and with the estimate intact each bump's error
//! against the in-sync one is reported per delay and batch.

use std::net::IpAddr;

mod common;

use wirelab_analyze::distributed::LeakyBucket;
use wirelab_analyze::report::{build, Report};
use wirelab_analyze::truth::VqFacts;
use wirelab_analyze::{Kind, Options, RunFacts};
use wirelab_spec::vaqm::Distributed;
use wirelab_spec::Nanos;
use wirelab_trace::{Meta, Trace};

const T0: u64 = 1_700_000_000_000_000_000;
const MONO0: u64 = 5_000_000_000;

/// 200 packets from s1 and s2 in turn, 100 µs apart, into a 100 Mbit/s
/// queue; their metadata carries the switch's estimate (Fig. 5).
fn trace() -> Trace {
    let mut q = LeakyBucket::new(100_000_000, 0);
    let packets = (0..200u64)
        .map(|i| {
            let ts = MONO0 + i * 100_000;
            q.add(ts, 1500);
            let meta = Meta {
                ts,
                vq: 1,
                vq_bytes: q.bytes as u32,
                ..Default::default()
            };
            common::made_packet(i, 1 + (i % 2) as u8, 1500, T0 + i * 100_000, meta)
        })
        .collect();
    Trace {
        packets,
        interfaces: vec!["s1".into(), "s2".into()],
        truncated: None,
    }
}

fn facts() -> RunFacts {
    let mut f = RunFacts::default();
    for (h, ip) in [("s1", "198.18.0.1"), ("s2", "198.18.0.2")] {
        f.addresses.insert(h.into(), ip.parse::<IpAddr>().unwrap());
    }
    f.vaqm.push(VqFacts {
        id: 1,
        port: Some("sink".into()),
        rate_bps: 100_000_000,
        distributed: Some(Distributed {
            bumps: vec![vec!["s1".into()], vec!["s2".into()]],
            delays: vec![Nanos(0), Nanos(1_000_000)],
            batches: vec![1],
        }),
        ..Default::default()
    });
    f
}

fn report(t: &Trace) -> Report {
    build(
        "d",
        t,
        Options::default(),
        Some(&facts()),
        &["vaqm"],
        &[],
        &|_| {},
    )
}

#[test]
fn each_bump_is_compared_with_the_in_sync_estimate_per_delay() {
    let r = report(&trace());
    let fs: Vec<_> = r.analyzers[0].findings.iter().collect();
    assert!(fs.iter().all(|f| f.kind != Kind::Violation), "{fs:?}");
    let errs: Vec<_> = fs
        .iter()
        .filter(|f| f.name == "distributed-error")
        .collect();
    let labels: Vec<&str> = errs.iter().map(|f| f.label.as_deref().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "bump 1, 0ns, batch 1",
            "bump 2, 0ns, batch 1",
            "bump 1, 1ms, batch 1",
            "bump 2, 1ms, batch 1"
        ]
    );
    // At once: exactly the in-sync estimate, at each bump's 100 packets.
    for f in &errs[..2] {
        assert_eq!(f.samples.len(), 100);
        assert!(f.samples.iter().all(|e| *e == 0.0), "{}", f.message);
    }
    // 1 ms late: the other bump's last 5 packets are not known yet; the
    // early floor at empty forgave part of the drain, and the deficit
    // settles at 2500 B (the in-sync queue grows 250 B per 100 µs).
    for f in &errs[2..] {
        let d = f.distribution.unwrap();
        assert!(d.p50 >= 1514.0 && d.max <= 7500.0, "{}", f.message);
    }
}

#[test]
fn a_trace_whose_estimate_is_not_the_leaky_bucket_is_caught() {
    let mut t = trace();
    t.packets[57].meta.as_mut().unwrap().vq_bytes += 100;
    let r = report(&t);
    let v: Vec<_> = r.analyzers[0]
        .findings
        .iter()
        .filter(|f| f.kind == Kind::Violation)
        .collect();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].name, "replay-mismatch");
    assert_eq!(v[0].evidence[0].mirror_seq, Some(57));
    // No distributed figures from a model that does not hold.
    assert!(r.analyzers[0]
        .findings
        .iter()
        .all(|f| f.name != "distributed-error"));
}
