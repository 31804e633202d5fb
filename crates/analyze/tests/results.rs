//! The results folder's facts, written and read back as one type.

use std::collections::BTreeMap;

use wirelab_analyze::results::{self, Error, FACTS_FILE};
use wirelab_analyze::rp::{RpFacts, RpPoint};
use wirelab_analyze::truth::{TruthEvent, TruthPoint, VqFacts};
use wirelab_analyze::{HostFacts, RunFacts};

fn facts() -> RunFacts {
    let truth = |vq, ts_ns| TruthPoint {
        ts_ns,
        vq,
        event: TruthEvent::Enqueue,
        actual_bytes: 1514,
        actual_packets: 1,
        virtual_bytes: 1200,
        packet_bytes: 1514,
        packets: 7,
    };
    RunFacts {
        hosts: vec![HostFacts {
            name: "a".into(),
            rto_min_ns: Some(5_000_000),
            early_retrans: Some("0".into()),
        }],
        completed: BTreeMap::from([(1, (3, 4)), (12, (1, 1))]),
        mct_ns: BTreeMap::from([(1, vec![10, 20, 30])]),
        roce_retransmit: BTreeMap::from([(2, (67_108_864, 7))]),
        addresses: BTreeMap::from([("a".into(), "198.18.0.1".parse().unwrap())]),
        vaqm: vec![
            VqFacts {
                id: 1,
                rate_bps: 100_000_000,
                truth: vec![truth(1, 5), truth(1, 6)],
                ..Default::default()
            },
            VqFacts {
                id: 2,
                truth: vec![truth(2, 7)],
                ..Default::default()
            },
        ],
        qcn: vec![RpFacts {
            host: "a".into(),
            cnms: 3,
            line_rate_bps: 1_000_000_000,
            points: vec![RpPoint {
                host: "a".into(),
                ts_ns: 9,
                current_bps: 500,
                target_bps: 600,
                fb: 12,
            }],
        }],
        ..Default::default()
    }
}

#[test]
fn facts_written_by_a_run_read_back_equal_with_their_csv_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = facts();
    results::write(dir.path(), &f).unwrap();
    let g = results::read(dir.path())
        .unwrap()
        .expect("facts.json was written");
    // Connection ids are integer map keys: they must come back as such.
    assert_eq!(g.completed, f.completed);
    assert_eq!(g.roce_retransmit, f.roce_retransmit);
    assert_eq!(g.hosts, f.hosts);
    // The ground truth and the reaction points come back from their CSVs,
    // each queue with its own samples.
    assert_eq!(g.vaqm[0].truth, f.vaqm[0].truth);
    assert_eq!(g.vaqm[1].truth, f.vaqm[1].truth);
    assert_eq!(g.qcn[0].points, f.qcn[0].points);
    assert_eq!(format!("{f:?}"), format!("{g:?}"));
    // The options follow the hosts: rto_min 5 ms, TLP off (early_retrans 0).
    let o = results::options(dir.path(), 200_000_000).unwrap();
    assert_eq!(o.min_rto_ns, 5_000_000);
    assert!(!o.tlp);
}

#[test]
fn a_folder_without_facts_is_none_and_a_damaged_one_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    assert!(results::read(dir.path()).unwrap().is_none());
    assert_eq!(
        results::options(dir.path(), 123).unwrap().min_rto_ns,
        123,
        "no facts: the caller's rto"
    );
    std::fs::write(
        dir.path().join(FACTS_FILE),
        "{\"schema\": \"wirelab.facts/0\"}",
    )
    .unwrap();
    let e = results::read(dir.path()).unwrap_err();
    assert!(matches!(e, Error::Schema { .. }), "{e}");
    assert!(e.to_string().contains("facts.json"), "{e}");
    std::fs::write(dir.path().join(FACTS_FILE), "{\"schema\": ").unwrap();
    let e = results::read(dir.path()).unwrap_err();
    assert!(matches!(e, Error::Json { .. }), "{e}");
}
