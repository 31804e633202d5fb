//! The plan of a fixed spec and run id is compared with a checked-in
//! snapshot. To accept an intended change: WIRELAB_BLESS=1 cargo test -p wirelab-plan
use std::path::Path;

const SPEC: &str = "\
name: incast
topology:
  hosts:
    - name: s1
    - name: s2
    - name: sink
      bottleneck: 100mbit
stack:
  congestion_control: reno
  rto_min: 5ms
traffic:
  barrier: true
  connections:
    - {from: s1, to: sink, message_size: 10KB, messages: 3}
    - {from: s2, to: sink, message_size: 10KB, messages: 3, verb: read, count: 2}
events:
  - {connection: 3, message: 2, packet: 4, action: drop}
  - {connection: 1, packet: all, iteration: all, action: ecn}
";

#[test]
fn plan_matches_snapshot() {
    let spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
    let plan = wirelab_plan::plan(&spec, "0a1b2c", 1).unwrap();
    let got = serde_json::to_string_pretty(&plan).unwrap() + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/incast.json");
    if std::env::var_os("WIRELAB_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("snapshot exists (WIRELAB_BLESS=1 writes it)");
    assert_eq!(
        got, want,
        "plan changed; if intended, re-run with WIRELAB_BLESS=1"
    );
}

#[test]
fn message_relative_events_resolve_with_the_runtime_mss() {
    let spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
    let plan = wirelab_plan::plan(&spec, "x", 1).unwrap();
    let ev = &plan.events[0];
    let conn = &plan.conns[2];
    // 10 000 bytes at MSS 1448 is 7 segments; packet 4 of message 2 is 7 + 4.
    assert_eq!(ev.resolve_index(conn, 1448), 11);
    // Without timestamps the MSS is 1460: still 7 segments.
    assert_eq!(ev.resolve_index(conn, 1460), 11);
    // At MSS 536 (RFC 879 default) a message is 19 segments.
    assert_eq!(ev.resolve_index(conn, 536), 23);
    assert_eq!(
        plan.events[1].resolve_index(&plan.conns[0], 1448),
        0,
        "`all`"
    );
    assert_eq!(plan.events[1].iteration, 0, "`iteration: all`");
}

#[test]
fn names_are_unique_per_run() {
    let spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
    let a = wirelab_plan::plan(&spec, "aaaaaa", 1).unwrap();
    let b = wirelab_plan::plan(&spec, "bbbbbb", 1).unwrap();
    for (x, y) in a.hosts.iter().zip(&b.hosts) {
        assert_ne!(x.ns, y.ns);
        assert!(x.ns.starts_with(wirelab_plan::NS_PREFIX));
    }
    assert_ne!(a.switch_ns, b.switch_ns);
}

#[test]
fn roce_connections_take_the_gids_of_their_hosts_in_turn() {
    let spec = wirelab_spec::parse(
        "topology:
  hosts:
    - {name: a, gids: 2}
    - {name: b, gids: 3}
traffic:
  transport: roce
  connections:
    - {from: a, to: b, count: 4, message_size: 4KiB}
",
        wirelab_analyze::catalog(),
    )
    .unwrap();
    let plan = wirelab_plan::plan(&spec, "0a1b2c", 1).unwrap();
    let ips: Vec<(String, String)> = plan
        .conns
        .iter()
        .map(|c| (c.requester_ip.to_string(), c.responder_ip.to_string()))
        .collect();
    let want = [
        ("198.18.0.1", "198.18.0.2"),
        ("198.18.1.1", "198.18.1.2"),
        ("198.18.0.1", "198.18.2.2"),
        ("198.18.1.1", "198.18.0.2"),
    ];
    assert_eq!(
        ips,
        want.map(|(a, b)| (a.to_string(), b.to_string())).to_vec()
    );
    assert_eq!(plan.hosts[1].gids.len(), 3);
    assert_eq!(plan.hosts[1].gids[0], plan.hosts[1].ip);
}

#[test]
fn connections_start_at_their_group_start_plus_the_stagger() {
    let spec = wirelab_spec::parse(
        "topology:
  hosts:
    - {name: a}
    - {name: b}
traffic:
  connections:
    - {from: a, to: b, message_size: 1KB}
    - {from: a, to: b, count: 3, message_size: 1KB, start: 1s, stagger: 250ms}
    - {from: b, to: a, count: 2, message_size: 1KB, stagger: 10ms}
",
        wirelab_analyze::catalog(),
    )
    .unwrap();
    let plan = wirelab_plan::plan(&spec, "0a1b2c", 1).unwrap();
    let starts: Vec<u64> = plan.conns.iter().map(|c| c.start.0 / 1_000_000).collect();
    assert_eq!(starts, [0, 1000, 1250, 1500, 0, 10]);
}

#[test]
fn a_spec_that_skipped_validation_is_an_error_naming_the_field_not_a_panic() {
    // A library caller may build a Spec by hand; planning it must not panic.
    let mut spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
    spec.traffic.connections[1].to = "nowhere".into();
    let e = wirelab_plan::plan(&spec, "x", 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "traffic.connections[1].to: no host named `nowhere` in topology.hosts (was the spec validated?)"
    );
}

#[test]
fn the_seed_is_recorded_and_nothing_else_depends_on_it() {
    let spec = wirelab_spec::parse(SPEC, wirelab_analyze::catalog()).unwrap();
    let a = wirelab_plan::plan(&spec, "x", 1).unwrap();
    let mut b = wirelab_plan::plan(&spec, "x", 2).unwrap();
    assert_eq!((a.seed, b.seed), (1, 2));
    b.seed = 1;
    assert_eq!(a, b, "the seed only feeds the run's random choices");
}
