//! Every rejection the spec makes, with its exact message, path and line.

use wirelab_spec::{IndexOrAll, Spec, SpecError, Verb};

/// Specs are checked against the analyzers there are.
fn parse(text: &str) -> Result<Spec, SpecError> {
    wirelab_spec::parse(text, wirelab_analyze::catalog())
}

const BASE: &str = "\
topology:
  hosts:
    - name: requester
    - name: responder
traffic:
  connections:
    - from: requester
      to: responder
      message_size: 14480
";

fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

#[test]
fn the_base_spec_is_valid_and_defaults_are_filled() {
    let s = parse(BASE).unwrap();
    assert_eq!(s.topology.mtu, 1500);
    assert_eq!(s.capture.snap_len, 128);
    assert_eq!(s.traffic.connections[0].count.0, 1);
    assert!(s.events.is_empty());
}

#[test]
fn events_and_expectations_parse() {
    let s = parse(&with(
        "events:\n  - {connection: 1, packet: 5, action: drop}\n  - {connection: 1, packet: all, iteration: 2, action: ecn}\nexpect:\n  - {connection: 1, packet: 5, retransmitted: 2, recovery: [fast, timeout]}\n  - {host: responder, counter: TcpInCsumErrors, at_least: 1}\n",
    ))
    .unwrap();
    assert_eq!(s.events[1].packet, IndexOrAll::All);
    assert_eq!(s.expect[0].recovery.as_ref().unwrap().len(), 2);
}

#[test]
fn a_verb_or_a_combination_of_verbs() {
    let roce = with("").replace("connections:", "transport: roce\n  connections:");
    let s = parse(&roce.replace(
        "message_size: 14480",
        "message_size: 14480\n      verb: [send, read]",
    ))
    .unwrap();
    let v = &s.traffic.connections[0].verb;
    assert_eq!(
        (v.to_string(), v.of(0), v.of(1), v.of(2)),
        ("send+read".into(), Verb::Send, Verb::Read, Verb::Send)
    );
    assert!(v.requester_sends_data() && v.responder_sends_data());
    let s = parse(&roce.replace(
        "message_size: 14480",
        "message_size: 14480\n      verb: read",
    ))
    .unwrap();
    let v = &s.traffic.connections[0].verb;
    assert_eq!(v.to_string(), "read");
    assert!(!v.requester_sends_data() && v.responder_sends_data());
    assert_eq!(
        parse(BASE).unwrap().traffic.connections[0].verb.to_string(),
        "write"
    );
}

/// (what, extra YAML appended to BASE or a whole document, expected error)
#[test]
fn each_rejection_names_path_and_line() {
    let cases: &[(&str, String, &str)] = &[
        (
            "flow tables: an entry on a field its mask does not compare",
            with("flowtables:\n  tables:\n    - masks:\n        - match: {dst: 32}\n          entries:\n            - {dst: responder, dport: 80, action: count}\n"),
            "flowtables.tables[0].masks[0].entries[0].dport: the mask does not compare `dport`: add it to the mask's match (line 15)",
        ),
        (
            "flow tables: forward to a host that is not there",
            with("flowtables:\n  tables:\n    - masks:\n        - match: {dst: 32}\n          entries:\n            - {dst: responder, action: forward, to: nobody}\n"),
            "flowtables.tables[0].masks[0].entries[0].to: no host `nobody` (line 15)",
        ),
        (
            "flow tables: an address that is neither",
            with("flowtables:\n  tables:\n    - masks:\n        - match: {dst: 32}\n          entries:\n            - {dst: 10.0.0.300, action: drop}\n"),
            "flowtables.tables[0].masks[0].entries[0].dst: `10.0.0.300` is neither a host nor an IPv4 address (line 15)",
        ),
        (
            "flow tables: a loop of gotos",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: goto, table: 1}]\n    - masks:\n        - entries: [{action: goto, table: 0}]\n"),
            "flowtables.tables: tables 0 -> 1 -> 0 form a loop (line 11)",
        ),
        (
            "flow tables: more masks than a table holds",
            with("flowtables:\n  generate: {masks: 256}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.tables[0].masks: 257 masks (generated ones included): a table holds 256 (line 13)",
        ),
        (
            "flow tables: the hyper mask needs an id of its own",
            with("flowtables:\n  generate: {masks: 255}\n  optimise: {policy: scalacn}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.tables[0].masks: 257 masks (generated ones and the hyper mask included): a table holds 256 (line 14)",
        ),
        (
            "flow tables: an optimiser looking too often",
            with("flowtables:\n  optimise: {policy: hit-count, interval: 100us}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.optimise.interval: at least 1ms (line 11)",
        ),
        (
            "flow tables: a window shorter than the interval",
            with("flowtables:\n  optimise: {policy: scalacn, interval: 10ms, window: 5ms}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.optimise.window: at least one interval (line 11)",
        ),
        (
            "flow tables: a hyper mask with no room",
            with("flowtables:\n  optimise: {policy: scalacn, hyper_entries: 0}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.optimise.hyper_entries: at least 1 (line 11)",
        ),
        (
            "flow tables: a virtual switch looking too often",
            with("flowtables:\n  offload: {interval: 200us}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.offload.interval: at least 1ms (line 11)",
        ),
        (
            "flow tables: rules aged faster than they are looked at",
            with("flowtables:\n  offload: {interval: 5ms, idle: 2ms}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.offload.idle: at least one interval (line 11)",
        ),
        (
            "flow tables: a slow path that forwards nothing",
            with("flowtables:\n  offload: {slow_path_pps: 0}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.offload.slow_path_pps: at least 1 (a slow path that forwards nothing never lets a flow start) (line 11)",
        ),
        (
            "flow tables: an offloading virtual switch in front of OVS",
            with("flowtables:\n  dut: ovs\n  offload: {}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.offload: an offloading virtual switch in front of the eSwitch; OVS has its own upcalls: not with `dut: ovs` (line 12)",
        ),
        (
            "flow tables: offload and an optimiser at once",
            with("flowtables:\n  offload: {}\n  optimise: {policy: hit-count}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.offload: not with `optimise` yet: one control loop orders the masks or offloads flows (line 11)",
        ),
        (
            "flow tables: an unknown device",
            with("flowtables:\n  device: cx9\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.device: no eSwitch profile `cx9` (there are: default, new-masks-last, encap-context-limit, late-counters, slow-deletion) (line 11)",
        ),
        (
            "flow tables: an unknown policy",
            with("flowtables:\n  optimise: {policy: lru}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.optimise.policy: unknown variant `lru`, expected one of `insertion`, `hit-count`, `scalacn` (line 11)",
        ),
        (
            "flow tables: a prefix longer than an address",
            with("flowtables:\n  tables:\n    - masks:\n        - match: {src: 33}\n"),
            "flowtables.tables[0].masks[0].match: a prefix is 0..=32 bits (line 13)",
        ),
        (
            "flow tables: encap with neither a table nor a host",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: encap, encap: {vni: 5, remote: 198.19.0.2}}]\n"),
            "flowtables.tables[0].masks[0].entries[0]: encap: either `table:` (searched with the outer headers) or `to:` (sent encapsulated) (line 13)",
        ),
        (
            "flow tables: encap without a tunnel",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: encap, to: responder}]\n"),
            "flowtables.tables[0].masks[0].entries[0].encap: encap: the tunnel (`encap: {vni, remote}`) (line 13)",
        ),
        (
            "flow tables: a VNI wider than 24 bits",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: encap, to: responder, encap: {vni: 16777216, remote: 198.19.0.2}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].encap.vni: a VNI is 24 bits (line 13)",
        ),
        (
            "flow tables: a remote VTEP outside the lab",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: encap, to: responder, encap: {vni: 5, remote: 10.0.0.1}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].encap.remote: 10.0.0.1: a remote VTEP is a lab address, in 198.18.0.0/15 (line 13)",
        ),
        (
            "flow tables: decap without a host",
            with("flowtables:\n  tables:\n    - masks:\n        - match: {vni: true}\n          entries: [{vni: 5, action: decap}]\n"),
            "flowtables.tables[0].masks[0].entries[0].to: name the host it leaves by (`to:`) (line 14)",
        ),
        (
            "flow tables: a VNI the mask does not compare",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{vni: 5, action: decap, to: responder}]\n"),
            "flowtables.tables[0].masks[0].entries[0].vni: the mask does not compare `vni`: add it to the mask's match (line 13)",
        ),
        (
            "flow tables: a tunnel on a forward",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: forward, to: responder, encap: {vni: 5, remote: 198.19.0.2}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].encap: only `encap` has a tunnel (line 13)",
        ),
        (
            "flow tables: set with nothing to set",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: count, set: {}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].set: set: name a field to rewrite (dmac, smac, src, dst, sport, dport) (line 13)",
        ),
        (
            "flow tables: set on a drop",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: drop, set: {dport: 7}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].set: a dropped packet is not rewritten (line 13)",
        ),
        (
            "flow tables: set on a decap",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: decap, to: responder, set: {dport: 7}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].set: it would rewrite the outer headers decap strips; rewrite in a table after the decap (line 13)",
        ),
        (
            "flow tables: set a MAC that is neither",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: count, set: {dmac: '02:00:00:00:00'}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].set.dmac: `02:00:00:00:00` is neither a host nor a MAC address (xx:xx:xx:xx:xx:xx) (line 13)",
        ),
        (
            "flow tables: set an address outside the lab",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: count, set: {dst: 8.8.8.8}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].set.dst: 8.8.8.8: a rewritten address is a lab address, in 198.18.0.0/15 (line 13)",
        ),
        (
            "flow tables: an encap loop",
            with("flowtables:\n  tables:\n    - masks:\n        - entries: [{action: encap, table: 0, encap: {vni: 5, remote: 198.19.0.2}}]\n"),
            "flowtables.tables: tables 0 -> 0 form a loop (line 11)",
        ),
        (
            "flow tables: an overlay's remote table not listed",
            with("flowtables:\n  overlay: {subnets: 4}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.overlay.remote: no table 1 (tables 0..1): list it under `tables:` (line 11)",
        ),
        (
            "flow tables: an overlay in one table",
            with("flowtables:\n  overlay: {subnets: 4, remote: 0}\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.overlay.remote: the remote table is another than the local one (line 11)",
        ),
        (
            "flow tables: an overlay with no containers",
            with("flowtables:\n  overlay: {subnets: 4, containers: 0}\n  tables:\n    - masks: []\n    - masks: []\n"),
            "flowtables.overlay.containers: 1..=256 (entries per mask) (line 11)",
        ),
        (
            "flow tables: an overlay too big for a table",
            with("flowtables:\n  overlay: {subnets: 200}\n  generate: {masks: 100, table: 1}\n  tables:\n    - masks: []\n    - masks: []\n"),
            "flowtables.tables[1].masks: 300 masks (generated ones included): a table holds 256 (line 15)",
        ),
        (
            "flow tables: OVS with an eSwitch profile",
            with("flowtables:\n  dut: ovs\n  device: new-masks-last\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.device: an eSwitch profile; OVS is itself: not with `dut: ovs` (line 12)",
        ),
        (
            "flow tables: OVS sending an encapsulated packet out of a host's port",
            with("flowtables:\n  dut: ovs\n  tables:\n    - masks:\n        - entries: [{action: encap, to: responder, encap: {vni: 5, remote: 198.19.0.2}}]\n"),
            "flowtables.tables[0].masks[0].entries[0].to: not with `dut: ovs`: OVS pops the tunnel before the next table, so an encapsulated packet cannot leave by a host's port; search a table with `table:` (line 14)",
        ),
        (
            "flow tables: OVS forwarding in a table that encap entries search",
            with("flowtables:\n  dut: ovs\n  tables:\n    - masks:\n        - entries: [{action: encap, table: 1, encap: {vni: 5, remote: 198.19.0.2}}]\n    - masks:\n        - entries: [{action: forward, to: responder}]\n"),
            "flowtables.tables[1].masks[0].entries[0].action: not with `dut: ovs`: OVS pops the tunnel before the next table, so a table that encap entries search holds `decap` and `drop` entries only (line 16)",
        ),
        (
            "flow tables: OVS decapsulating what it did not encapsulate",
            with("flowtables:\n  dut: ovs\n  tables:\n    - masks:\n        - entries: [{action: decap, to: responder}]\n"),
            "flowtables.tables[0].masks[0].entries[0].action: not with `dut: ovs`: OVS pops the tunnel before the next table, so it decapsulates only what it encapsulated: `decap` belongs in a table that encap entries search (line 14)",
        ),
        (
            "flow tables: an unknown DUT",
            with("flowtables:\n  dut: p4\n  tables:\n    - masks:\n        - entries: [{action: count}]\n"),
            "flowtables.dut: unknown variant `p4`, expected `eswitch` or `ovs` (line 11)",
        ),
        (
            "packet index 0",
            with("events:\n  - connection: 1\n    packet: 0\n    action: drop\n"),
            "events[0].packet: must be >= 1, got 0 (line 12)",
        ),
        (
            "unknown field",
            with("events:\n  - connection: 1\n    packet: 1\n    acton: drop\n"),
            "events[0]: unknown field `acton`, expected one of `connection`, `packet`, `sent_by`, `message`, `iteration`, `action`, `edit`, `after` (line 13)",
        ),
        (
            "unknown action",
            with("events:\n  - {connection: 1, packet: 1, action: delay}\n"),
            "events[0].action: unknown variant `delay`, expected one of `drop`, `ecn`, `corrupt`, `edit`, `reorder` (line 11)",
        ),
        (
            "reorder without after",
            with("events:\n  - {connection: 1, packet: 1, action: reorder}\n"),
            "events[0].after: `action: reorder` needs `after:`, how many later packets overtake it, e.g. `after: 3` (line 11)",
        ),
        (
            "reorder after too many",
            with("events:\n  - {connection: 1, packet: 1, action: reorder, after: 65}\n"),
            "events[0].after: 1 to 64 packets may overtake it, got 65 (line 11)",
        ),
        (
            "reorder of every packet",
            with("events:\n  - {connection: 1, packet: all, action: reorder, after: 2}\n"),
            "events[0].packet: `reorder` holds one packet at a time per end: give a number, not `all` (line 11)",
        ),
        (
            "after with a drop",
            with("events:\n  - {connection: 1, packet: 1, action: drop, after: 2}\n"),
            "events[0].after: `after` goes with `action: reorder`, not `drop` (line 11)",
        ),
        (
            "too many GIDs",
            with("").replace("- name: requester", "- name: requester\n      gids: 9")
                .replace("connections:", "transport: roce\n  connections:"),
            "topology.hosts[0].gids: must be between 1 and 8, got 9 (line 4)",
        ),
        (
            "GIDs on TCP",
            with("").replace("- name: requester", "- name: requester\n      gids: 2"),
            "topology.hosts[0].gids: GIDs are RoCE device addresses: needs `traffic.transport: roce` (line 4)",
        ),
        (
            "edit without a field",
            with("events:\n  - {connection: 1, packet: 1, action: edit}\n")
                .replace("connections:", "transport: roce\n  connections:"),
            "events[0].edit: `action: edit` needs `edit:` naming the field, e.g. `edit: {migreq: 1}` (line 12)",
        ),
        (
            "edit of a field the switch does not know",
            with("events:\n  - {connection: 1, packet: 1, action: edit, edit: {se: 1}}\n")
                .replace("connections:", "transport: roce\n  connections:"),
            "events[0].edit: unknown field `se`, expected `migreq` (line 12)",
        ),
        (
            "MigReq is one bit",
            with("events:\n  - {connection: 1, packet: 1, action: edit, edit: {migreq: 2}}\n")
                .replace("connections:", "transport: roce\n  connections:"),
            "events[0].edit.migreq: MigReq is one bit: 0 or 1, got 2 (line 12)",
        ),
        (
            "MigReq on TCP",
            with("events:\n  - {connection: 1, packet: 1, action: edit, edit: {migreq: 1}}\n"),
            "events[0].edit: MigReq is a RoCE header field: `edit` needs `transport: roce` (line 11)",
        ),
        (
            "edit with another action",
            with("events:\n  - {connection: 1, packet: 1, action: drop, edit: {migreq: 1}}\n")
                .replace("connections:", "transport: roce\n  connections:"),
            "events[0].edit: `edit` goes with `action: edit`, not `drop` (line 12)",
        ),
        (
            "connection out of range",
            with("events:\n  - connection: 3\n    packet: 1\n    action: drop\n"),
            "events[0].connection: connection 3 does not exist (the spec has 1) (line 11)",
        ),
        (
            "unknown host",
            BASE.replace("to: responder", "to: responer"),
            "traffic.connections[0].to: unknown host `responer` (hosts: requester, responder) (line 8)",
        ),
        (
            "mtu too small",
            BASE.replace("topology:\n", "topology:\n  mtu: 100\n"),
            "topology.mtu: must be between 576 and 9000, got 100 (line 2)",
        ),
        (
            "duration without unit",
            with("stack:\n  rto_min: 200\n"),
            "stack.rto_min: `200` needs a unit, e.g. `200ms` (line 11)",
        ),
        (
            "rto_min out of range",
            with("stack:\n  rto_min: 10us\n"),
            "stack.rto_min: must be between 1ms and 120s, got 10us (line 11)",
        ),
        (
            "microsecond timestamps without timestamps",
            with("stack:\n  timestamps: false\n  usec_timestamps: true\n"),
            "stack.usec_timestamps: microsecond timestamps need `timestamps: true` (they change the timestamp option's unit, RFC 7323 §5.4) (line 12)",
        ),
        (
            "a host's microsecond timestamps over the spec's timestamps off",
            BASE.replace("    - name: responder\n", "    - name: responder\n      stack: {usec_timestamps: true}\n")
                + "stack:\n  timestamps: false\n",
            "topology.hosts[1].stack.usec_timestamps: microsecond timestamps need `timestamps: true` (they change the timestamp option's unit, RFC 7323 §5.4) (line 5)",
        ),
        (
            "a socket buffer out of range",
            with("stack:\n  rcvbuf: 1000B\n"),
            "stack.rcvbuf: must be between 2KiB and 512MiB, got 1000B (line 11)",
        ),
        (
            "read_rate on reads",
            BASE.replace("      message_size: 14480\n", "      message_size: 14480\n      verb: read\n      read_rate: 10mbit\n"),
            "traffic.connections[0].read_rate: the responder reads writes and sends; reads (and replays) have their own timing (line 11)",
        ),
        (
            "read_rate too slow",
            BASE.replace("      message_size: 14480\n", "      message_size: 14480\n      read_rate: 1kbit\n"),
            "traffic.connections[0].read_rate: at least 8kbit, got 1kbit (line 10)",
        ),
        (
            "non-namespaced sysctl",
            with("stack:\n  sysctls:\n    vm.swappiness: '1'\n"),
            "stack.sysctls.vm.swappiness: only net.ipv4.* and net.core.* sysctls are namespaced; others would change the host (line 12)",
        ),
        (
            "duplicate host",
            BASE.replace("name: responder", "name: requester"),
            "topology.hosts[1].name: duplicate host `requester` (line 4)",
        ),
        (
            "bottleneck burst below a frame",
            BASE.replace("name: responder", "{name: responder, bottleneck: 100mbit, bottleneck_burst: 1000B}"),
            "topology.hosts[1].bottleneck_burst: 1000B is below one frame (1514B at MTU 1500) (line 4)",
        ),
        (
            "virtual buffer below a frame",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 1gbit, buffer: 1KB}\n"),
            "vaqm.queues[0].buffer: 1000B is below one frame (1514B at MTU 1500) (line 12)",
        ),
        (
            "bad host name",
            BASE.replace("name: responder", "name: Responder_1"),
            "topology.hosts[1].name: `Responder_1` must be 1-12 of a-z, 0-9, '-' starting with a letter (line 4)",
        ),
        (
            "message-relative with tx_depth > 1",
            with("events:\n  - {connection: 1, message: 1, packet: 2, action: drop}\n")
                .replace("message_size: 14480", "message_size: 14480\n      messages: 4\n      tx_depth: 2"),
            "events[0].message: message-relative packets need tx_depth: 1 (otherwise messages share segments) (line 13)",
        ),
        (
            "message that does not exist",
            with("events:\n  - {connection: 1, message: 2, packet: 2, action: drop}\n"),
            "events[0].message: message 2 does not exist (the connection sends 1) (line 11)",
        ),
        (
            "same packet twice",
            with("events:\n  - {connection: 1, packet: 2, action: drop}\n  - {connection: 1, packet: 2, action: ecn}\n"),
            "events[1]: the same packet and iteration is already addressed by an earlier event (line 12)",
        ),
        (
            "sent_by with all",
            with("events:\n  - {connection: 1, sent_by: responder, packet: all, action: drop}\n"),
            "events[0].packet: `sent_by: responder` counts packets: give a number, not `all` (line 11)",
        ),
        (
            "sent_by with a message",
            with("events:\n  - {connection: 1, sent_by: requester, message: 1, packet: 2, action: drop}\n"),
            "events[0].message: `sent_by` counts the end's packets from the handshake on, not within a message (line 11)",
        ),
        (
            "sent_by with an iteration",
            with("events:\n  - {connection: 1, sent_by: requester, packet: 2, iteration: 2, action: drop}\n"),
            "events[0].iteration: `sent_by` counts every packet, retransmissions included: it has no iteration (line 11)",
        ),
        (
            "sent_by over RoCE",
            with("events:\n  - {connection: 1, sent_by: requester, packet: 2, action: drop}\n")
                .replace("connections:", "transport: roce\n  connections:"),
            "events[0].sent_by: packets are counted per end for TCP (its IP-IDs); RoCE events address packets by PSN (line 12)",
        ),
        (
            "sent_by that is no end",
            with("events:\n  - {connection: 1, sent_by: switch, packet: 2, action: drop}\n"),
            "events[0].sent_by: unknown variant `switch`, expected `requester` or `responder` (line 11)",
        ),
        (
            "the same end's packet twice",
            with("events:\n  - {connection: 1, sent_by: responder, packet: 2, action: drop}\n  - {connection: 1, sent_by: responder, packet: 2, action: ecn}\n"),
            "events[1]: the same packet and iteration is already addressed by an earlier event (line 12)",
        ),
        (
            "send over TCP",
            with("").replace("message_size: 14480", "message_size: 14480\n      verb: send"),
            "traffic.connections[0].verb: `send` needs `traffic.transport: roce` (line 10)",
        ),
        (
            "vAQM queue on an unknown host",
            with("vaqm:\n  queues:\n    - {port: nobody, rate: 100mbit, dctcp: {k: 30KB}}\n"),
            "vaqm.queues[0].port: no host named `nobody` (line 12)",
        ),
        (
            "vAQM queue with two disciplines",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, dctcp: {k: 30KB}, red: {min: 10KB, max: 20KB, max_p: 0.1}}\n"),
            "vaqm.queues[0]: one discipline per queue: `dctcp`, `red`, `qcn` or `extension` (line 12)",
        ),
        (
            "vAQM queue running an extension the spec does not name",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, extension: [30000]}\n"),
            "vaqm.queues[0].extension: no discipline to run: name its C file in `vaqm.extension` (line 12)",
        ),
        (
            "vAQM extension with more numbers than vq->param holds",
            with("vaqm:\n  extension: ext/dctcp.c\n  queues:\n    - {port: responder, rate: 100mbit, extension: [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n"),
            "vaqm.queues[0].extension: at most 8 numbers (vq->param[]), got 9 (line 13)",
        ),
        (
            "vAQM queue with a built-in discipline and an extension",
            with("vaqm:\n  extension: ext/dctcp.c\n  queues:\n    - {port: responder, rate: 100mbit, dctcp: {k: 30KB}, extension: [1]}\n"),
            "vaqm.queues[0]: one discipline per queue: `dctcp`, `red`, `qcn` or `extension` (line 13)",
        ),
        (
            "a delayed start under a barrier",
            with("").replace("message_size: 14480", "message_size: 14480\n      start: 1s").replace("traffic:\n", "traffic:\n  barrier: true\n"),
            "traffic.connections[0].start: cannot delay a connection under `traffic.barrier`: every round waits for all (line 11)",
        ),
        (
            "vAQM RED thresholds the wrong way round",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 1gbit, red: {min: 20KB, max: 10KB, max_p: 0.1}}\n"),
            "vaqm.queues[0].red.max: must be above min (20000B >= 10000B) (line 12)",
        ),
        (
            "one bump is not distributed",
            with("vaqm:\n  queues:\n    - port: responder\n      rate: 100mbit\n      distributed: {bumps: [[requester]]}\n"),
            "vaqm.queues[0].distributed.bumps: at least two bumps share a queue (a list of hosts each; [] sees none) (line 14)",
        ),
        (
            "a host in two bumps",
            with("vaqm:\n  queues:\n    - port: responder\n      rate: 100mbit\n      distributed: {bumps: [[requester], [requester]]}\n"),
            "vaqm.queues[0].distributed.bumps[1][0]: `requester` is already forwarded by another bump (line 14)",
        ),
        (
            "a batch of zero packets",
            with("vaqm:\n  queues:\n    - port: responder\n      rate: 100mbit\n      distributed: {bumps: [[requester], []], batches: [0]}\n"),
            "vaqm.queues[0].distributed.batches[0]: must be 1..1024, got 0 (line 14)",
        ),
        (
            "a label without a finding",
            with("expect:\n  - {connection: 1, messages_completed: true, label: bump 1}\n"),
            "expect[0].label: `label` goes with `finding` (line 11)",
        ),
        (
            "QCN feedback wider than 6 bits",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB, fb_max: 64}}\n"),
            "vaqm.queues[0].qcn.fb_max: must be 1..63 (QntzFb is 6 bits), got 64 (line 12)",
        ),
        (
            "QCN sampling above one",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB, p_max: 1.5}}\n"),
            "vaqm.queues[0].qcn.p_max: must be in [0, 1], got 1.5 (line 12)",
        ),
        (
            "QCN p_min above p_max",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB, p_min: 0.3, p_max: 0.2}}\n"),
            "vaqm.queues[0].qcn.p_max: must be at least p_min (0.2 < 0.3) (line 12)",
        ),
        (
            "QCN with RED on one queue",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB}, red: {min: 10KB, max: 20KB, max_p: 0.1}}\n"),
            "vaqm.queues[0]: one discipline per queue: `dctcp`, `red`, `qcn` or `extension` (line 12)",
        ),
        (
            "a reaction point without a congestion point",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit}\n  reaction_point:\n    hosts: [requester]\n"),
            "vaqm.reaction_point: no queue sends CNMs: give a queue `qcn:` (line 13)",
        ),
        (
            "a reaction point on no host",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB}}\n  reaction_point:\n    hosts: [nobody]\n"),
            "vaqm.reaction_point.hosts[0]: no host named `nobody` (line 14)",
        ),
        (
            "a reaction point whose floor is above its line rate",
            with("vaqm:\n  queues:\n    - {port: responder, rate: 100mbit, qcn: {q_eq: 20KB}}\n  reaction_point: {hosts: [requester], line_rate: 10mbit, min_rate: 20mbit}\n"),
            "vaqm.reaction_point.min_rate: must be above 0 and at most line_rate (10000000 bit/s), got 20000000 bit/s (line 13)",
        ),
        (
            "a UDP connection without a rate",
            BASE.replace("connections:", "transport: udp\n  connections:"),
            "traffic.connections[0].rate: a UDP connection needs `rate` (how fast it sends, e.g. 300mbit) (line 8)",
        ),
        (
            "a rate on a TCP connection",
            BASE.replace("message_size: 14480", "message_size: 14480\n      rate: 100mbit"),
            "traffic.connections[0].rate: is a UDP setting (TCP and RoCE pace themselves); set `traffic.transport: udp` (line 10)",
        ),
        (
            "an event on UDP",
            format!(
                "{}events:\n  - {{connection: 1, packet: 1, action: drop}}\n",
                BASE.replace("connections:", "transport: udp\n  connections:")
                    .replace("message_size: 14480", "message_size: 14480\n      rate: 100mbit")
            ),
            "events[0]: UDP datagrams carry no sequence numbers to address; events need TCP or RoCE (line 13)",
        ),
        (
            "vAQM queue that classifies nothing",
            with("vaqm:\n  queues:\n    - {rate: 1gbit}\n"),
            "vaqm.queues[0]: a queue needs `port` (a host: the switch port towards it) or `destinations` (line 12)",
        ),
        (
            "verb combination over TCP",
            with("").replace("message_size: 14480", "message_size: 14480\n      verb: [write, read]"),
            "traffic.connections[0].verb: a combination of verbs needs `traffic.transport: roce` (line 10)",
        ),
        (
            "empty verb list",
            with("")
                .replace("connections:", "transport: roce\n  connections:")
                .replace("message_size: 14480", "message_size: 14480\n      verb: []"),
            "traffic.connections[0].verb: an empty list of verbs; name at least one (line 11)",
        ),
        (
            "unknown verb in a combination",
            with("")
                .replace("connections:", "transport: roce\n  connections:")
                .replace("message_size: 14480", "message_size: 14480\n      verb: [send, atomic]"),
            "traffic.connections[0].verb[1]: unknown variant `atomic`, expected one of `send`, `write`, `read` (line 11)",
        ),
        (
            "RoCE path MTU larger than the link allows",
            with("")
                .replace("connections:", "transport: roce\n  connections:")
                .replace("message_size: 14480", "message_size: 14480\n      mtu: 2048"),
            "traffic.connections[0].mtu: a 2048-byte RoCE payload needs a link MTU of at least 2108; topology.mtu is 1500 (line 11)",
        ),
        (
            "unknown RoCE profile",
            with("").replace("topology:", "stack:\n  roce: {profile: cx9}\ntopology:"),
            "stack.roce.profile: unknown profile `cx9`: give a path to a YAML file or one of default, slow-nack-reaction, slow-read-nack, cnp-hidden-interval, cnp-per-ip, cnp-per-port, cnp-sent-not-counted, implied-nak-not-counted, clears-migreq, adaptive-retransmission, noisy-neighbour (line 2)",
        ),
        (
            "snap length",
            with("capture:\n  snap_len: 10\n"),
            "capture.snap_len: must be between 64 and 1518, got 10 (line 11)",
        ),
        (
            "ring size",
            with("capture:\n  ring_size: 5000\n"),
            "capture.ring_size: must be a power of two between 4KiB and 1GiB, got 5000B (line 11)",
        ),
        (
            "record bound",
            with("record:\n  th: 20ms\n"),
            "record.th: must be between 1ns and 10ms, got 20ms (line 11)",
        ),
        (
            "record idle",
            with("record: {idle: 1ms}\n"),
            "record.idle: must be between 10ms and 1h, got 1ms (line 10)",
        ),
        (
            "expectation without claim",
            with("expect:\n  - connection: 1\n"),
            "expect[0]: needs exactly one claim: retransmitted/recovery, ce_echoed, messages_completed, counter or finding (line 11)",
        ),
        (
            "recovery list length",
            with("expect:\n  - {connection: 1, packet: 5, retransmitted: 2, recovery: [fast]}\n"),
            "expect[0].recovery: lists 1 recoveries but `retransmitted` is 2 (line 11)",
        ),
        (
            "counter without bounds",
            with("expect:\n  - {host: responder, counter: TcpInCsumErrors}\n"),
            "expect[0]: `counter` needs `at_least`, `at_most` or `equals` (line 11)",
        ),
        (
            "unknown finding",
            with("expect:\n  - {finding: loss-recovery.oops, at_most: 0}\n"),
            // The message lists the named analyzer's findings.
            Box::leak(
                format!(
                    "expect[0].finding: unknown finding `loss-recovery.oops` (loss-recovery has: {}) (line 11)",
                    wirelab_analyze::catalog()
                        .get("loss-recovery")
                        .unwrap()
                        .findings
                        .iter()
                        .map(|f| f.0)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .into_boxed_str(),
            ),
        ),
        (
            "a finding of an analyzer that does not exist",
            with("expect:\n  - {finding: tcp-magic.oops, at_most: 0}\n"),
            "expect[0].finding: unknown finding `tcp-magic.oops` (analyzers: loss-recovery, retransmission-latency, ecn, counters, flow, roce-go-back-n, roce-retransmission-latency, roce-cnp, roce-counters, vaqm) (line 11)",
        ),
        (
            "a time without a unit",
            with("expect:\n  - {finding: flow.mct, at_most: 5}\n"),
            "expect[0].at_most: `5` needs a unit (e.g. 100us, 2ms) (line 11)",
        ),
        (
            "a finding of an analyzer the spec turned off",
            with("analyzers: [flow]\nexpect:\n  - {finding: ecn.violations, at_most: 0}\n"),
            "expect[0].finding: analyzer `ecn` is not in `analyzers:` (line 12)",
        ),
        (
            "unknown analyzer",
            with("analyzers: [flow, tcp-magic]\n"),
            "analyzers[1]: unknown analyzer `tcp-magic` (known: loss-recovery, retransmission-latency, ecn, counters, flow, roce-go-back-n, roce-retransmission-latency, roce-cnp, roce-counters, vaqm) (line 10)",
        ),
        (
            "a tolerance without equals",
            with("expect:\n  - {finding: flow.mct, at_most: 5ms, tolerance: 10%}\n"),
            "expect[0].tolerance: `tolerance` goes with `equals` (line 11)",
        ),
        (
            "one host",
            "topology:\n  hosts:\n    - name: a\ntraffic:\n  connections: []\n".to_string(),
            "topology.hosts: needs at least 2 hosts, got 1 (line 2)",
        ),
        (
            "wrong type",
            BASE.replace("message_size: 14480", "message_size: [1]"),
            "traffic.connections[0].message_size: invalid type: sequence, expected a size in bytes such as `64KiB` (line 9)",
        ),
        (
            "missing section",
            "topology:\n  hosts: []\n".to_string(),
            "missing field `traffic` (line 1)",
        ),
    ];
    let mut failures = Vec::new();
    for (what, yaml, want) in cases {
        match parse(yaml) {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(e) if e.to_string() != *want => {
                failures.push(format!("{what}:\n   got  {e}\n   want {want}"))
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn json_schema_describes_the_same_fields() {
    let s = wirelab_spec::json_schema(wirelab_analyze::catalog());
    let props = &s["properties"];
    for k in [
        "topology", "stack", "traffic", "events", "capture", "expect",
    ] {
        assert!(props.get(k).is_some(), "schema lacks `{k}`");
    }
    let ev = &s["definitions"]["Event"];
    assert_eq!(
        ev["additionalProperties"], false,
        "unknown fields are rejected there too"
    );
    let actions = serde_json::to_string(&s["definitions"]["Action"]).unwrap();
    for a in ["drop", "ecn", "corrupt"] {
        assert!(actions.contains(a));
    }
}

/// The schema editors use (`specs/wirelab.schema.json`) is the one the types
/// generate. To refresh it: WIRELAB_BLESS=1 cargo test -p wirelab-spec
#[test]
fn committed_schema_is_current() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs/wirelab.schema.json");
    let now = serde_json::to_string_pretty(&wirelab_spec::json_schema(wirelab_analyze::catalog()))
        .unwrap()
        + "\n";
    if std::env::var_os("WIRELAB_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        committed, now,
        "specs/wirelab.schema.json is stale; WIRELAB_BLESS=1 regenerates it"
    );
}

#[test]
fn every_example_spec_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs/tcp");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            wirelab_spec::load(&p, wirelab_analyze::catalog()).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 5);
}

/// A spec written back as YAML (as the fuzzer writes the specs it finds)
/// reads back the same, for every spec shipped, `packet: all` included.
#[test]
fn every_shipped_spec_round_trips_through_yaml() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs");
    let mut n = 0;
    for d in ["tcp", "roce", "vaqm", "demo"] {
        for e in std::fs::read_dir(root.join(d)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "yaml") {
                continue;
            }
            let spec = wirelab_spec::load(&p, wirelab_analyze::catalog())
                .unwrap_or_else(|e| panic!("{e}"));
            let text = serde_yaml::to_string(&spec).unwrap();
            let back = wirelab_spec::parse(&text, wirelab_analyze::catalog())
                .unwrap_or_else(|e| panic!("{}: written back: {e}\n{text}", p.display()));
            assert_eq!(back, spec, "{}", p.display());
            n += 1;
        }
    }
    assert!(n >= 30, "{n} specs");
}

#[test]
fn a_discipline_file_is_found_next_to_the_spec_or_its_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ext")).unwrap();
    std::fs::write(dir.path().join("ext/mine.c"), "").unwrap();
    let spec = dir.path().join("s.yaml");
    let text = with("vaqm:\n  extension: ext/mine.c\n  queues:\n    - {port: responder, rate: 100mbit, extension: [1]}\n");
    std::fs::write(&spec, &text).unwrap();
    let s = wirelab_spec::load(&spec, wirelab_analyze::catalog()).unwrap();
    assert_eq!(
        s.vaqm.unwrap().extension.unwrap(),
        dir.path().join("ext/mine.c"),
        "relative to the spec, not to the working directory"
    );
    std::fs::write(&spec, text.replace("mine.c", "gone.c")).unwrap();
    let e = wirelab_spec::load(&spec, wirelab_analyze::catalog())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vaqm.extension: no such file:")
            && e.contains("ext/gone.c")
            && e.contains("(line 11)"),
        "{e}"
    );
}

/// `wirelab bump`'s YAML: queues name the bump's interfaces; what needs a
/// lab's hosts is refused with its path and line.
#[test]
fn bump_configs_name_interfaces_and_refuse_lab_only_settings() {
    use wirelab_spec::parse_bump;
    let ok = parse_bump(
        "vaqm:\n  queues:\n    - {port: eth1, rate: 1gbit, red: {min: 30KB, max: 90KB, max_p: 0.1}}\nanalyzers: [vaqm]\n",
        ["eth0", "eth1"],
        1500,
        wirelab_analyze::catalog(),
    )
    .unwrap();
    assert_eq!(ok.vaqm.queues[0].port.as_deref(), Some("eth1"));
    for (yaml, want) in [
        (
            "vaqm:\n  queues:\n    - {port: eth2, rate: 1gbit}\n",
            "vaqm.queues[0].port: no interface named `eth2` (line 3)",
        ),
        (
            "vaqm:\n  queues:\n    - {port: eth1, rate: 1gbit, qcn: {q_eq: 20KB}}\n  reaction_point: {hosts: [eth0]}\n",
            "vaqm.reaction_point: needs a lab's hosts; `wirelab bump` runs the queues, capture and analysis only (line 4)",
        ),
        (
            "vaqm:\n  queues:\n    - port: eth1\n      rate: 1gbit\n      distributed: {bumps: [[eth0], []]}\n",
            "vaqm.queues[0]: `wirelab bump` queues are classified by `port` (an interface) and run dctcp, red, qcn or estimate only (line 3)",
        ),
        (
            "vaqm:\n  queues:\n    - {port: eth1, rate: 1gbit, buffer: 1000}\n",
            "vaqm.queues[0].buffer: 1000B is below one frame (9014B at MTU 9000) (line 3)",
        ),
    ] {
        let mtu = if yaml.contains("buffer") { 9000 } else { 1500 };
        let e = parse_bump(yaml, ["eth0", "eth1"], mtu, wirelab_analyze::catalog()).unwrap_err().to_string();
        assert_eq!(e, want);
    }
}

/// Hostile specs are refused quickly, in bounded memory, with a short
/// message (issue 19 item 5).
#[test]
fn hostile_specs_are_refused_without_hanging_or_allocating() {
    // A million levels of flow nesting: refused before the YAML parser
    // (whose scanner takes minutes on it) sees them.
    let deep = format!(
        "{BASE}analyzers: {}{}\n",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000)
    );
    let e = parse(&deep).unwrap_err();
    assert_eq!(e.to_string(), "nested deeper than 64 levels (line 10)");
    // Brackets inside quotes and comments do not count.
    let quoted = format!(
        "{BASE}name: \"{}\" # {}\n",
        "[".repeat(100),
        "{".repeat(100)
    );
    assert_eq!(parse(&quoted).unwrap().name.unwrap().len(), 100);
    // Counts are bounded before anything is allocated per connection.
    for count in ["4294967295", "1e9"] {
        let e = parse(&BASE.replace(
            "message_size: 14480",
            &format!("message_size: 14480\n      count: {count}"),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("connections; at most 1024") || e.contains("count"),
            "{count}: {e}"
        );
    }
    // A 10 MB value is not echoed back.
    let huge = BASE.replace(
        "message_size: 14480",
        &format!("message_size: {}", "9".repeat(10 << 20)),
    );
    let e = parse(&huge).unwrap_err().to_string();
    assert!(e.len() < 500, "{} bytes of message", e.len());
    assert!(e.contains("bytes in all"), "{e}");
    // The name is joined onto the results folder.
    for bad in ["../../etc", "a/b", "..", "."] {
        let e = parse(&format!("name: \"{bad}\"\n{BASE}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("name: "), "{bad}: {e}");
    }
    // Bounds no value can satisfy.
    let e = parse(&with(
        "expect:\n  - {finding: flow.mct, at_least: 2ms, at_most: 1ms}\n",
    ))
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "expect[0].at_least: is above `at_most`: no value can satisfy both (line 11)"
    );
    let e = parse(&with(
        "expect:\n  - {finding: flow.mct, equals: 2ms, tolerance: -5%}\n",
    ))
    .unwrap_err()
    .to_string();
    assert_eq!(e, "expect[0].tolerance: must not be negative (line 11)");
}

/// A RoCE profile file is named relative to the spec and read by `load`
/// (what `wirelab check` calls), so a missing file, a directory or a device
/// that never ends is refused there, with the YAML path and line.
#[test]
fn profile_files_resolve_beside_the_spec_and_are_checked_on_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("nics")).unwrap();
    std::fs::write(
        dir.path().join("nics/mine.yaml"),
        "name: mine\ndescription: a NIC of my own\ncnp_scope: ip\n",
    )
    .unwrap();
    let spec = |profile: &str| {
        let text = BASE.replace("connections:", "transport: roce\n  connections:")
            + &format!("stack:\n  roce:\n    profile: {profile}\n");
        let p = dir.path().join("s.yaml");
        std::fs::write(&p, text).unwrap();
        wirelab_spec::load(&p, wirelab_analyze::catalog())
    };
    let s = spec("nics/mine.yaml").unwrap();
    let p = s.stack.roce.unwrap().profile.unwrap();
    assert_eq!(std::path::Path::new(&p), dir.path().join("nics/mine.yaml"));
    for (profile, want) in [
        ("nics/gone.yaml", "cannot read RoCE profile"),
        ("nics/", "is not a regular file"),
        ("/dev/zero", "is not a regular file"),
    ] {
        let e = spec(profile).unwrap_err().to_string();
        assert!(
            e.contains("stack.roce.profile: ") && e.contains(want) && e.contains("(line 13)"),
            "{profile}: {e}"
        );
    }
}

/// A replay's records (`wirelab replay` writes such specs) are named
/// relative to the spec and read when it is loaded, so `check` names a
/// damaged one with its byte offset, its YAML path and line; a replay is
/// one TCP connection.
#[test]
fn replay_records_resolve_beside_the_spec_and_are_checked_on_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rec")).unwrap();
    let good = wirelab_deter::record::encode(&wirelab_deter::record::ConnRecord::default());
    std::fs::write(dir.path().join("rec/a.deter"), &good).unwrap();
    std::fs::write(dir.path().join("rec/b.deter"), &good[..good.len() - 1]).unwrap();
    let replay = |responder: &str| {
        BASE.to_string()
            + &format!("      replay: {{requester: rec/a.deter, responder: {responder}}}\n")
    };
    let load = |text: String| {
        let p = dir.path().join("s.yaml");
        std::fs::write(&p, text).unwrap();
        wirelab_spec::load(&p, wirelab_analyze::catalog())
    };
    let s = load(replay("rec/a.deter")).unwrap();
    let r = s.traffic.connections[0].replay.clone().unwrap();
    assert_eq!(r.requester, dir.path().join("rec/a.deter"));
    for (responder, want) in [
        ("rec/b.deter", "cut short"),
        ("rec/gone.deter", "No such file"),
    ] {
        let e = load(replay(responder)).unwrap_err().to_string();
        assert!(
            e.contains("traffic.connections[0].replay.responder: ")
                && e.contains(want)
                && e.contains("(line 10)"),
            "{responder}: {e}"
        );
    }
    for (text, want) in [
        (
            replay("rec/a.deter").replace("message_size: 14480", "message_size: 14480\n      count: 2"),
            "traffic.connections[0].replay: a replay is one connection whose calls are its one message: count, messages and tx_depth must be 1",
        ),
        (
            replay("rec/a.deter").replace("connections:", "transport: roce\n  connections:"),
            "traffic.connections[0].replay: a replay repeats TCP socket calls: needs `traffic.transport: tcp`",
        ),
    ] {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{e}");
    }
}
