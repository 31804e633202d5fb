//! A stateful load test's life cycle (Norma §4 and §8; `wirelab load`
//! with `stateful:`): emulated clients on the sending port and emulated
//! servers on the receiving port, each an EFSM in eBPF
//! (`wirelab_dataplane::efsm`), around a DUT whose TCP is the kernel's:
//!
//! 1. the EFSM tables and payloads from the spec alone (bad tables were
//!    refused when it was parsed);
//! 2. the tester lab up, haproxy started in the DUT's namespace when it
//!    is the DUT, the responders on both tester ports' ingress;
//! 3. the clients' first SYNs, one per connection, from the generator's
//!    live frames (the template's source port stepped by the editor);
//!    from then on the EFSMs answer and each connection that ends
//!    normally opens again from its slot's next port (Norma §8);
//! 4. one line per interval from the responders' counters;
//! 5. the drain: clients stop reopening, the connections in flight end,
//!    so the EFSMs' counts and haproxy's own statistics cover the same
//!    exchanges; both go into the results;
//! 6. the lab torn down on every way out.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use wirelab_dataplane::efsm::Responder;
use wirelab_dataplane::load::{Edit, GenConfig, Tester};
use wirelab_load::efsm::{flag, Count, Payload, Reply, Side, Table, COUNTS};
use wirelab_load::template;
use wirelab_netns::tester;
use wirelab_spec::efsm::{compile, RealServer, Stateful};
use wirelab_spec::load::{DutKind, LoadSpec, Metric};

use crate::haproxy::{self, Haproxy};
use crate::load::{judge, Claim};
use crate::nginx::Nginx;
use crate::{During, Error, RunOptions, Verdict};

/// The first port a client slot opens from.
pub const PORT_BASE: u16 = 1024;

/// One interval's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
    /// Connections the clients completed, and per second.
    pub connections: u64,
    pub connections_per_s: f64,
    /// Requests the servers answered.
    pub transactions: u64,
    pub transactions_per_s: f64,
    /// Response bytes the clients received in order, as bits per second.
    pub goodput_bps: f64,
    /// Resets either side received, but for one that closes an idle
    /// connection (everything the flow sent acknowledged).
    pub resets: u64,
    /// Flows each side holds at the interval's end.
    pub active_clients: usize,
    pub active_servers: usize,
    /// Packets no row matched, segments out of order (both sides).
    pub unmatched: u64,
    pub out_of_order: u64,
}

/// A side's counters at the end (after the drain).
#[derive(Debug, Clone, Serialize)]
pub struct SideCounts {
    pub efsm: String,
    /// Each transition ("from -> next (reply)") and how often it fired.
    pub transitions: Vec<(String, u64)>,
    pub unmatched: u64,
    pub out_of_order: u64,
    pub flows_created: u64,
    pub flows_ended: u64,
    pub bytes_received: u64,
    pub segments_sent: u64,
    pub bytes_sent: u64,
    pub table_full: u64,
    /// Flows still held after the drain.
    pub active_at_end: usize,
}

/// haproxy's own account next to the EFSMs'.
#[derive(Debug, Clone, Serialize)]
pub struct HaproxyCheck {
    /// The frontend's sessions and HTTP requests.
    pub frontend_sessions: u64,
    pub frontend_requests: u64,
    /// The backend's sessions and 2xx responses.
    pub backend_sessions: u64,
    pub backend_2xx: u64,
    /// The same as the EFSMs counted them: the clients' requests sent,
    /// the servers' requests answered.
    pub efsm_requests_sent: u64,
    pub efsm_transactions: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatefulOutcome {
    pub intervals: Vec<Interval>,
    /// Over the measured duration (before the drain).
    pub seconds: f64,
    pub connections: u64,
    pub connections_per_second: f64,
    pub transactions: u64,
    pub goodput_bps: f64,
    pub resets: u64,
    pub clients: SideCounts,
    /// None: the servers are real (nginx).
    pub servers: Option<SideCounts>,
    /// The drain ended every flow (else the counts may differ by the
    /// exchanges in flight); servers that keep connections alive may
    /// still hold the DUT's idle ones.
    pub drained: bool,
    /// wirelab's switch as the DUT: its capture's integrity.
    pub switch: Option<crate::switch_dut::SwitchDutSummary>,
    /// The responders' CPU time and runs (both sides), as the kernel
    /// counts BPF programs' while `kernel.bpf_stats_enabled` is 1
    /// (`wirelab bench load` turns it on); None when it is off.
    pub tester_cpu_ns: Option<u64>,
    pub tester_runs: Option<u64>,
    pub haproxy: Option<HaproxyCheck>,
}

/// `summary.json` of a stateful load test.
#[derive(Debug, Clone, Serialize)]
pub struct StatefulSummary {
    pub schema: &'static str,
    pub name: String,
    pub description: Option<String>,
    pub run_id: String,
    pub results: String,
    pub verdict: &'static str,
    pub dut: &'static str,
    pub connections_kept: u32,
    /// Requests each connection sends before it closes (1: the server
    /// closes after one).
    pub requests_per_connection: u32,
    pub outcome: StatefulOutcome,
    pub expect: Vec<Claim>,
    pub duration_ms: u64,
}

impl StatefulSummary {
    /// summary.json's content: the intervals are in intervals.jsonl, so
    /// here they are counted, not repeated.
    pub fn to_json(&self) -> Result<serde_json::Value, Error> {
        let mut v = serde_json::to_value(self).during("encoding the summary")?;
        if let Some(o) = v.get_mut("outcome").and_then(|o| o.as_object_mut()) {
            o.insert("intervals".into(), self.outcome.intervals.len().into());
        }
        Ok(v)
    }
}

pub struct StatefulOutput {
    pub summary: StatefulSummary,
    pub verdict: Verdict,
    pub dir: PathBuf,
}

/// Rows of `t` whose reply is `r`.
fn rows_with(t: &Table, r: Reply) -> Vec<usize> {
    (0..t.rows.len())
        .filter(|&i| t.rows[i].reply == r)
        .collect()
}

/// What the counters mean for each side's table.
struct Meaning {
    /// Client rows that complete a connection (reopen; or, in a table
    /// without one, every row that ends a flow normally).
    completed: Vec<usize>,
    /// Client rows that send a request (the first, or the next on a
    /// connection kept alive).
    requests: Vec<usize>,
    resets_c: Vec<usize>,
    resets_s: Vec<usize>,
}

fn meaning(c: &Table, s: Option<&Table>) -> Meaning {
    // A reset that arrives once everything the flow sent was
    // acknowledged closes an idle connection: not counted as one.
    let rst = |t: &Table| -> Vec<usize> {
        (0..t.rows.len())
            .filter(|&i| t.rows[i].flags_value & flag::RST != 0 && t.rows[i].all_acked != 1)
            .collect()
    };
    let mut completed = rows_with(c, Reply::Reopen);
    if completed.is_empty() {
        completed = (0..c.rows.len())
            .filter(|&i| c.rows[i].forget && c.rows[i].flags_value & flag::RST == 0)
            .collect();
    }
    Meaning {
        completed,
        requests: [rows_with(c, Reply::Data), rows_with(c, Reply::NextMessage)].concat(),
        resets_c: rst(c),
        resets_s: s.map_or(Vec::new(), rst),
    }
}

fn sum(counts: &[u64], rows: &[usize]) -> u64 {
    rows.iter().map(|&i| counts[i]).sum()
}

fn extra(counts: &[u64], rows: usize, c: Count) -> u64 {
    counts[rows + c as usize]
}

/// The sides for `st`, addressed for a DUT of `kind` (no server side when
/// the servers are real).
fn sides(st: &Stateful, kind: DutKind) -> Result<(Side, Option<Side>), Error> {
    let bad = |(at, m): (String, String)| Error::BadInput(format!("{at}: {m}"));
    let (Some(c), Some(s)) = (&st.clients, &st.servers) else {
        unreachable!("validated: a stateful test has clients and servers")
    };
    let at = tester::addresses(kind);
    let ctab = compile(&c.efsm, "stateful.clients.efsm").map_err(bad)?;
    let stab = match &s.efsm {
        Some(e) => Some(compile(e, "stateful.servers.efsm").map_err(bad)?),
        None => None,
    };
    let n = c.connections;
    let range = (u32::from(u16::MAX) + 1 - u32::from(PORT_BASE)) / n * n;
    let client = Side {
        table: ctab,
        local_ip: u32::from(at.tx),
        mss: st.mss,
        segments_per_ack: st.segments_per_ack,
        payload: Some(Payload::new(
            c.request().as_bytes(),
            c.request().len() as u64,
            st.mss,
        )),
        fin_after_data: false,
        port_base: PORT_BASE,
        connections: n,
        port_range: range,
        requests: c.requests,
        draining: false,
    };
    let server = stab.map(|table| Side {
        table,
        local_ip: u32::from(at.rx),
        mss: st.mss,
        segments_per_ack: st.segments_per_ack,
        payload: Some(Payload::http_response(s.response.0, st.mss)),
        fin_after_data: !s.keep_alive,
        port_base: 0,
        connections: 0,
        port_range: 1,
        requests: 1,
        draining: false,
    });
    Ok((client, server))
}

/// The clients' side draining: no request is left (a kept-alive
/// connection closes after the response in flight) and nothing opens
/// again: what ends, ends.
fn drained(side: &Side) -> Side {
    Side {
        draining: true,
        ..side.clone()
    }
}

fn side_counts(t: &Table, counts: &[u64], active: usize) -> SideCounts {
    let n = t.rows.len();
    SideCounts {
        efsm: t.name.clone(),
        transitions: (0..n).map(|i| (t.describe(i), counts[i])).collect(),
        unmatched: extra(counts, n, Count::Unmatched),
        out_of_order: extra(counts, n, Count::OutOfOrder),
        flows_created: extra(counts, n, Count::FlowsCreated),
        flows_ended: extra(counts, n, Count::FlowsEnded),
        bytes_received: extra(counts, n, Count::BytesReceived),
        segments_sent: extra(counts, n, Count::SegmentsSent),
        bytes_sent: extra(counts, n, Count::BytesSent),
        table_full: extra(counts, n, Count::TableFull),
        active_at_end: active,
    }
}

/// Runs the stateful test `spec`; `each` is told of every interval as it
/// is measured. The lab is gone when this returns, whatever it returns.
pub fn run(
    spec: &LoadSpec,
    opts: &RunOptions,
    mut each: impl FnMut(&Interval),
) -> Result<StatefulOutput, Error> {
    let started = Instant::now();
    let st = spec
        .stateful
        .as_ref()
        .ok_or_else(|| Error::BadInput("not a stateful test".into()))?;
    let (client, server) = sides(st, spec.dut.kind)?;
    let m = meaning(&client.table, server.as_ref().map(|s| &s.table));
    let clients = st.clients.as_ref().expect("sides() checked");
    let servers = st.servers.as_ref().expect("sides() checked");
    let crate::load::Begun {
        run_id,
        name,
        dir,
        lab,
    } = crate::load::begin(spec, opts)?;
    let write = |file: &str, bytes: &[u8]| crate::load::write_in(&dir, file, bytes);
    // wirelab's switch as the DUT: attached before anything flows.
    let switch = match spec.dut.kind {
        DutKind::Switch => Some(crate::switch_dut::SwitchDut::start(&lab)?),
        _ => None,
    };
    // The tester (its responders, in softirq, and real servers) on the
    // first CPU, the DUT on the last: two machines' worth of separation.
    let (tester_cpu, dut_cpu) = cpus();
    lab.split_cpus(tester_cpu, dut_cpu)
        .during("putting the tester and the DUT on CPUs of their own")?;
    let at = tester::addresses(spec.dut.kind);
    let (target, target_port) = if spec.dut.kind == DutKind::Haproxy {
        (at.dut_tx_side, clients.port)
    } else {
        (at.rx, servers.port)
    };
    // Removed after the daemons stop (declared before them).
    let _dut_dir = crate::daemon::DutDir::create(&run_id)?;
    let proxy = if spec.dut.kind == DutKind::Haproxy {
        let cfg = haproxy::Config {
            listen: (at.dut_tx_side, clients.port),
            servers: (0..servers.count)
                .map(|i| (at.rx, servers.port + i as u16))
                .collect(),
            maxconn: (clients.connections * 2).max(1000),
        };
        Some(Haproxy::start(&lab.dut_ns, &run_id, Some(dut_cpu), &cfg)?)
    } else {
        None
    };
    let nginx = match servers.real {
        Some(RealServer::Nginx) => {
            let listen: Vec<_> = (0..servers.count)
                .map(|i| (at.rx, servers.port + i as u16))
                .collect();
            Some(Nginx::start(
                &lab.rx_ns,
                &run_id,
                Some(tester_cpu),
                &listen,
                servers.response.0,
            )?)
        }
        None => None,
    };
    opts.check_abort()?;
    // The responders, each in its port's namespace.
    let attach = |ns: &str, dev: &str, side: &Side| -> Result<(Responder, u32), Error> {
        let ifindex = wirelab_netns::ifindex(ns, dev).during(format!("finding {dev}"))?;
        let mut r = Responder::load(false).during("loading the responder")?;
        r.configure(side, ifindex)
            .during("configuring the responder")?;
        wirelab_netns::in_netns(ns, || r.attach(ifindex as i32))
            .during(format!("entering {ns}"))?
            .during(format!("attaching the responder to {dev}"))?;
        Ok((r, ifindex))
    };
    let srv = match &server {
        Some(side) => Some(attach(&lab.rx_ns, tester::RX_DEV, side)?.0),
        None => None,
    };
    let (cli, cli_ifindex) = attach(&lab.tx_ns, tester::TX_DEV, &client)?;
    // The first SYNs: the generator's live frames, one per connection,
    // the source port stepped over the slots (App. C's direct step).
    let mut gen = Tester::load(false).during("loading the generator")?;
    let dut_in = wirelab_netns::ifindex(&lab.dut_ns, tester::DUT_IN).during("finding d0")?;
    wirelab_netns::in_netns(&lab.dut_ns, || gen.attach_pass(dut_in as i32))
        .during("entering the DUT's namespace")?
        .during("turning NAPI on at d0")?;
    let syn = template::tcp_syn(
        &template::Udp {
            src_mac: lab.tx_mac,
            dst_mac: lab.next_hop_mac,
            src: at.tx,
            dst: target,
            sport: PORT_BASE,
            dport: target_port,
        },
        // Any ISN: a slot's later SYNs take the clock's (RFC 793 §3.3).
        wirelab_load::efsm::clock_isn(crate::record::monotonic_ns()),
        st.mss,
    )
    .map_err(Error::BadInput)?;
    gen.configure(
        0,
        &GenConfig {
            ifindex: cli_ifindex,
            l3_off: syn.l3_off,
            l4_off: syn.l4_off,
            csum_off: syn.csum_off,
            inner_csum_off: 0,
            inner_l3_off: 0,
            stamp_off: 0,
            edits: vec![Edit::step(
                34,
                2,
                u32::from(PORT_BASE),
                u32::from(PORT_BASE) + clients.connections - 1,
            )],
            template: syn.bytes.clone(),
            ..Default::default()
        },
    )
    .during("configuring the generator")?;
    let handle = gen.generator(0).during("the generator's program")?;
    wirelab_netns::in_netns(&lab.tx_ns, || {
        // On one CPU throughout: the editor's port counter is per CPU, and
        // a move between batches would open some ports twice.
        let mut here = nix::sched::CpuSet::new();
        nix::sched::sched_getcpu()
            .and_then(|c| here.set(c))
            .and_then(|_| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &here))
            .map_err(|e| std::io::Error::other(format!("pinning the opener: {e}")))
            .during("opening the connections")?;
        handle
            .generate(&syn.bytes, clients.connections)
            .during("opening the connections")
    })
    .during("entering the sender's namespace")??;

    // The intervals.
    let path = dir.join("intervals.jsonl");
    let mut lines = std::fs::File::create(&path).during(format!("creating {}", path.display()))?;
    let cn = client.table.rows.len();
    let sn = server.as_ref().map_or(0, |s| s.table.rows.len());
    // The servers' counters (none when they are real).
    let srv_counts = |srv: &Option<Responder>| -> Result<Vec<u64>, Error> {
        match srv {
            Some(r) => r.counts().during("reading the servers' counters"),
            None => Ok(vec![0; sn + COUNTS]),
        }
    };
    let srv_flows = |srv: &Option<Responder>| srv.as_ref().map_or(0, |r| r.flows());
    // Transactions: the responses the clients received whole (as wrk
    // counts them), whoever the servers are.
    let transactions = |c: &[u64]| -> u64 { extra(c, cn, Count::MessagesReceived) };
    let zero = (vec![0u64; cn + COUNTS], vec![0u64; sn + COUNTS]);
    let mut last = zero.clone();
    let t0 = Instant::now();
    let interval = spec.interval.as_std();
    let duration = spec.duration.as_std();
    let mut intervals = Vec::new();
    let mut k = 1u32;
    while !opts.abort.load(Ordering::SeqCst) {
        let due = interval * k;
        if due > duration + Duration::from_millis(1) {
            break;
        }
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            // In slices, so Ctrl-C is heard.
            let end = Instant::now() + wait;
            while Instant::now() < end && !opts.abort.load(Ordering::SeqCst) {
                std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
            }
        }
        let now = (
            cli.counts().during("reading the clients' counters")?,
            srv_counts(&srv)?,
        );
        let d = |a: &[u64], b: &[u64], rows: &[usize]| sum(a, rows) - sum(b, rows);
        let secs = interval.as_secs_f64();
        let conns = d(&now.0, &last.0, &m.completed);
        let trans = transactions(&now.0) - transactions(&last.0);
        let rx = extra(&now.0, cn, Count::BytesReceived) - extra(&last.0, cn, Count::BytesReceived);
        let i = Interval {
            start_s: (interval * (k - 1)).as_secs_f64(),
            end_s: due.as_secs_f64(),
            connections: conns,
            connections_per_s: conns as f64 / secs,
            transactions: trans,
            transactions_per_s: trans as f64 / secs,
            goodput_bps: rx as f64 * 8.0 / secs,
            resets: d(&now.0, &last.0, &m.resets_c) + d(&now.1, &last.1, &m.resets_s),
            active_clients: cli.flows(),
            active_servers: srv_flows(&srv),
            unmatched: extra(&now.0, cn, Count::Unmatched) + extra(&now.1, sn, Count::Unmatched)
                - extra(&last.0, cn, Count::Unmatched)
                - extra(&last.1, sn, Count::Unmatched),
            out_of_order: extra(&now.0, cn, Count::OutOfOrder)
                + extra(&now.1, sn, Count::OutOfOrder)
                - extra(&last.0, cn, Count::OutOfOrder)
                - extra(&last.1, sn, Count::OutOfOrder),
        };
        each(&i);
        let l = serde_json::to_string(&i).during("encoding an interval")?;
        writeln!(lines, "{l}").during(format!("writing {}", path.display()))?;
        intervals.push(i);
        last = now;
        k += 1;
    }
    let measured = last.clone();
    let seconds = intervals.last().map_or(0.0, |i| i.end_s);

    // The drain: no connection opens again; the ones in flight end.
    let mut cli = cli;
    cli.configure(&drained(&client), cli_ifindex)
        .during("stopping the clients' reopening")?;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut drained_all = false;
    // Servers that keep connections alive may be left holding the DUT's
    // idle ones (haproxy's pool): those have nothing in flight.
    let srv_left = |srv: &Option<Responder>| match srv {
        Some(r) if servers.keep_alive => r.busy_flows(),
        Some(r) => r.flows(),
        None => 0,
    };
    while Instant::now() < deadline {
        if cli.flows() == 0 && srv_left(&srv) == 0 {
            drained_all = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let end = (
        cli.counts().during("reading the clients' counters")?,
        srv_counts(&srv)?,
    );
    let times: Vec<_> = std::iter::once(cli.run_time())
        .chain(srv.as_ref().map(|s| s.run_time()))
        .collect();
    let tester = times
        .iter()
        .copied()
        .collect::<Option<Vec<_>>>()
        .map(|v| v.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)));
    let check = match &proxy {
        Some(h) => {
            let s = h.stats()?;
            write("dut/haproxy-stats.csv", s.csv.as_bytes())?;
            Some(HaproxyCheck {
                frontend_sessions: s.get("clients", "FRONTEND", "stot"),
                frontend_requests: s.get("clients", "FRONTEND", "req_tot"),
                backend_sessions: s.get("servers", "BACKEND", "stot"),
                backend_2xx: s.get("servers", "BACKEND", "hrsp_2xx"),
                efsm_requests_sent: sum(&end.0, &m.requests),
                efsm_transactions: transactions(&end.0),
            })
        }
        None => None,
    };
    if let Some(mut h) = proxy {
        h.stop();
        for (f, text) in h.files() {
            write(&format!("dut/{f}"), text.as_bytes())?;
        }
    }
    if let Some(mut n) = nginx {
        n.stop();
        std::fs::create_dir_all(dir.join("servers")).during("creating servers/")?;
        for (f, text) in n.files() {
            write(&format!("servers/{f}"), text.as_bytes())?;
        }
    }
    let switch = match switch {
        Some(s) => Some(s.finish(&dir.join("dut"))?),
        None => None,
    };
    for (file, text) in lab.dut_statistics() {
        write(&format!("dut/{file}"), text.as_bytes())?;
    }
    let outcome = StatefulOutcome {
        seconds,
        connections: sum(&measured.0, &m.completed),
        connections_per_second: if seconds > 0.0 {
            sum(&measured.0, &m.completed) as f64 / seconds
        } else {
            0.0
        },
        transactions: transactions(&end.0),
        goodput_bps: if seconds > 0.0 {
            extra(&measured.0, cn, Count::BytesReceived) as f64 * 8.0 / seconds
        } else {
            0.0
        },
        resets: sum(&end.0, &m.resets_c) + sum(&end.1, &m.resets_s),
        clients: side_counts(&client.table, &end.0, cli.flows()),
        servers: server
            .as_ref()
            .map(|s| side_counts(&s.table, &end.1, srv_flows(&srv))),
        drained: drained_all,
        switch,
        tester_cpu_ns: tester.map(|t| t.0),
        tester_runs: tester.map(|t| t.1),
        haproxy: check,
        intervals,
    };
    drop((cli, srv, gen));
    drop(lab);
    let interrupted = opts.abort.load(Ordering::SeqCst);
    let expect = judge(&spec.expect, |x| metric(x.metric, &outcome));
    let verdict = Verdict::of(interrupted, true, expect.iter().any(|c| !c.pass));
    let summary = StatefulSummary {
        schema: "wirelab.load-stateful/1",
        name,
        description: spec.description.clone(),
        run_id,
        results: dir.display().to_string(),
        verdict: verdict.name(),
        dut: spec.dut.kind.name(),
        connections_kept: clients.connections,
        requests_per_connection: clients.requests,
        outcome,
        expect,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    write(
        "summary.json",
        &serde_json::to_vec_pretty(&summary.to_json()?).during("encoding the summary")?,
    )?;
    write("report.html", page(&summary).as_bytes())?;
    Ok(StatefulOutput {
        summary,
        verdict,
        dir,
    })
}

/// (the tester's CPU, the DUT's): the first and the last.
pub fn cpus() -> (usize, usize) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0, n - 1)
}

/// A metric's value over the run.
pub fn metric(m: Metric, o: &StatefulOutcome) -> Option<f64> {
    match m {
        Metric::Connections => Some(o.connections as f64),
        Metric::ConnectionsPerSecond => Some(o.connections_per_second),
        Metric::Transactions => Some(o.transactions as f64),
        Metric::Resets => Some(o.resets as f64),
        Metric::Goodput => Some(o.goodput_bps),
        _ => None,
    }
}

/// report.html: the test, its claims, connections and transactions per
/// interval, every EFSM transition's count.
fn page(s: &StatefulSummary) -> String {
    let o = &s.outcome;
    let mut facts = vec![
        ("DUT".to_string(), s.dut.to_string()),
        (
            "connections kept open".into(),
            format!("{} (Norma §8: each that ends normally opens again)", s.connections_kept),
        ),
        (
            "measured".into(),
            format!(
                "{} connections ({:.0}/s), {} transactions, goodput {:.1} Mbit/s, {} resets over {:.1} s",
                o.connections,
                o.connections_per_second,
                o.transactions,
                o.goodput_bps / 1e6,
                o.resets,
                o.seconds
            ),
        ),
    ];
    if let Some(h) = &o.haproxy {
        facts.push((
            "haproxy's statistics".into(),
            format!(
                "frontend {} sessions, {} requests; backend {} sessions, {} 2xx — EFSMs: {} requests sent, {} answered",
                h.frontend_sessions,
                h.frontend_requests,
                h.backend_sessions,
                h.backend_2xx,
                h.efsm_requests_sent,
                h.efsm_transactions
            ),
        ));
    }
    for (who, side) in [("client", Some(&o.clients)), ("server", o.servers.as_ref())] {
        let Some(side) = side else { continue };
        for (t, n) in &side.transitions {
            facts.push((format!("{who} EFSM ({}): {t}", side.efsm), n.to_string()));
        }
        facts.push((
            format!("{who} side"),
            format!(
                "{} unmatched, {} out of order, {} flows held at the end",
                side.unmatched, side.out_of_order, side.active_at_end
            ),
        ));
    }
    facts.push(("results".into(), s.results.clone()));
    let intervals = o
        .intervals
        .iter()
        .map(|i| {
            (
                i.end_s,
                i.connections_per_s,
                Some(i.transactions_per_s),
                Some(i.goodput_bps / 1e6),
            )
        })
        .collect();
    wirelab_report::html::load_page(&wirelab_report::html::LoadPage {
        title: &s.name,
        verdict: s.verdict,
        facts,
        claims: crate::load::claim_rows(&s.expect),
        intervals,
        series: ["connections/s", "transactions/s", "goodput (Mbit/s)"],
        unit: "thousands",
        latency: &[],
        pattern: &[],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_tables_mean_what_the_counts_say() {
        let s = wirelab_spec::load::parse(
            "dut: {kind: haproxy}
stateful:
  clients: {efsm: http-client, connections: 100}
  servers: {efsm: http-server, count: 2}
",
        )
        .unwrap();
        let (c, v) = sides(s.stateful.as_ref().unwrap(), DutKind::Haproxy).unwrap();
        let m = meaning(&c.table, v.as_ref().map(|v| &v.table));
        // Reopened after the server's close, or after ours.
        assert_eq!(m.completed.len(), 2);
        assert!(m
            .completed
            .iter()
            .all(|&i| c.table.rows[i].reply == Reply::Reopen));
        // The first request, and the next on a connection kept alive.
        assert_eq!(m.requests.len(), 2);
        assert_eq!((c.requests, v.as_ref().unwrap().fin_after_data), (1, true));
        // 64512 ports in slots of 100: 645 ports each.
        assert_eq!(c.port_range, 64500);
        assert_eq!(
            c.local_ip,
            u32::from(std::net::Ipv4Addr::new(198, 18, 1, 2))
        );
        assert!(drained(&c).draining && !c.draining);
    }
}
