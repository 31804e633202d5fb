//! `wirelab replay`: each recorded connection in a fresh two-host lab of
//! its own (DETER §3.4, seed 004; issue 21 item 3). Both ends repeat their
//! recorded socket calls at their recorded times, and the switch's wire
//! events re-apply the network's drops and CE marks to the same logical
//! packets (each end's n-th packet, as the records' IP-ID gaps place
//! them), which cuts the butterfly effect as DETER's packet corrector does.
//! The replay records itself, so what the network did to it and how the
//! stacks answered are compared with the original.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use wirelab_deter::record::{self, ConnRecord, Event};
use wirelab_deter::replay::{send_time_differences, NetAction, Pair};
use wirelab_lab::RunOptions;
use wirelab_spec::CongestionControl;

use crate::code;

#[derive(clap::Args)]
pub struct Args {
    /// Record files, or folders searched for them (`wirelab record --out`,
    /// a run's `record/`).
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
    /// Replay only this connection (numbered from 1 by start, as listed).
    #[arg(long)]
    pub connection: Option<usize>,
    /// Where the replays' specs and results folders go.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Stop a replay whose calls have not finished after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// One JSON object per connection instead of text.
    #[arg(long)]
    pub json: bool,
    /// Replays at once, each in a lab of its own.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// The recorded traffic's capture (pcap or pcapng), to compare each
    /// replay's TCP headers with. Found by itself for a wirelab run's
    /// `record/` folder (its `trace.pcapng`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

/// A connection with both ends recorded.
struct Conn {
    pair: Pair,
    client_file: PathBuf,
    server_file: PathBuf,
}

/// How a replay compares with its recording.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Fidelity {
    /// The network's actions (sender, place, what: drop, ecn, reorder after
    /// k) in the recording and in the replay.
    recorded_actions: Vec<(String, u64, String)>,
    replayed_actions: Vec<(String, u64, String)>,
    /// Retransmissions by each end (client, server), recorded and replayed.
    recorded_retransmissions: (usize, usize),
    replayed_retransmissions: (usize, usize),
    /// The segments those retransmissions carried (one retransmitted skb
    /// can resend several lost segments: `tcp_skb_pcount`), with those the
    /// kernel counted that no event showed: each socket's own count.
    recorded_retransmitted_segments: (u64, u64),
    replayed_retransmitted_segments: (u64, u64),
    /// The TCP headers of both captures, when the recording's is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<Headers>,
    /// Each end's send times, replayed against recorded, each from its own
    /// first packet: (p50, p99, max) ns over the packets both sent, from
    /// Algorithm 1's samples (each within th). Not part of `same`.
    send_time_differences_ns: SendTimes,
    /// Where a record's retransmissions disagree with its own capture's
    /// (a kernel event the recorder missed, or one retransmission call
    /// that sent several segments): the captures decide `same`, and this
    /// says which record differs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    records_disagree: Vec<String>,
    /// The same network actions on the same packets, and the same
    /// retransmissions: by the captures' TCP headers when both are known,
    /// by the records otherwise.
    same: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
struct SendTimes {
    client: Option<(u64, u64, u64)>,
    server: Option<(u64, u64, u64)>,
}

/// A TCP header as a replay must repeat it: sequence and acknowledgment
/// numbers relative to each end's ISN, flags, payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct Hdr {
    seq: u32,
    ack: u32,
    flags: &'static str,
    len: u32,
}

/// Each direction's header sequence compared, in order.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Headers {
    /// Packets client -> server and server -> client, recorded and replayed.
    recorded: (usize, usize),
    replayed: (usize, usize),
    /// Retransmissions each end sent (client, server) as each capture
    /// shows them.
    recorded_retransmissions: (usize, usize),
    replayed_retransmissions: (usize, usize),
    /// The first packet that differs in each direction, and how: the
    /// client's (the sender's) and the server's (mostly ACKs, whose
    /// spacing follows the receiver's softirq and socket-lock timing).
    #[serde(skip_serializing_if = "Option::is_none")]
    client_differs: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_differs: Option<String>,
}

impl Headers {
    fn first_difference(&self) -> Option<&String> {
        self.client_differs
            .as_ref()
            .or(self.server_differs.as_ref())
    }
}

pub fn run(args: &Args, abort: &Arc<AtomicBool>) -> Result<u8> {
    let conns = match gather(&args.records) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("wirelab: {e:#}");
            return Ok(code::ERROR);
        }
    };
    if conns.is_empty() {
        eprintln!("wirelab: no connection has both ends recorded: nothing to replay");
        return Ok(code::ERROR);
    }
    let chosen: Vec<(usize, &Conn)> = match args.connection {
        Some(n) if n == 0 || n > conns.len() => {
            eprintln!(
                "wirelab: --connection {n}: the records hold connections 1..={}",
                conns.len()
            );
            return Ok(code::ERROR);
        }
        Some(n) => vec![(n, &conns[n - 1])],
        None => conns.iter().enumerate().map(|(i, c)| (i + 1, c)).collect(),
    };
    let trace = args.trace.clone().or_else(|| {
        args.records.iter().find_map(|p| {
            let t = p.parent()?.join("trace.pcapng");
            (p.is_dir() && p.file_name()? == "record" && t.is_file()).then_some(t)
        })
    });
    let recorded_trace = match &trace {
        Some(t) => match wirelab_trace::read(t) {
            Ok(tr) => Some(tr),
            Err(e) => {
                eprintln!("wirelab: --trace {}: {e}", t.display());
                return Ok(code::ERROR);
            }
        },
        None => None,
    };
    crate::run::require_root()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    // Each replay is a lab of its own: `--jobs` of them at once, printed
    // whole as each ends.
    let next = AtomicUsize::new(0);
    let worst = Mutex::new(code::OK);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|sc| {
        for _ in 0..args.jobs.clamp(1, chosen.len()) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(n, c)) = chosen.get(i) else { break };
                if abort.load(Ordering::SeqCst) || failure.lock().expect("lock").is_some() {
                    break;
                }
                match replay_one(args, abort, n, c, recorded_trace.as_ref()) {
                    Ok(code_now) => {
                        let mut w = worst.lock().expect("lock");
                        *w = (*w).max(code_now);
                    }
                    Err(e) => {
                        failure.lock().expect("lock").get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("lock") {
        return Err(e);
    }
    if abort.load(Ordering::SeqCst) {
        return Ok(code::INTERRUPTED);
    }
    Ok(worst.into_inner().expect("lock"))
}

/// Prints one replay whole, so that parallel ones do not interleave.
static PRINT: Mutex<()> = Mutex::new(());

/// Replays connection `n`: its spec written and loaded, the lab run, the
/// replay compared; returns its exit code.
fn replay_one(
    args: &Args,
    abort: &Arc<AtomicBool>,
    n: usize,
    c: &Conn,
    recorded_trace: Option<&wirelab_trace::Trace>,
) -> Result<u8> {
    let spec_path = args.out.join(format!(
        "replay-{n}-{}-{}.yaml",
        c.pair.client_addr().port(),
        c.pair.server_addr().port()
    ));
    std::fs::write(&spec_path, spec_text(n, c)?)
        .with_context(|| format!("writing {}", spec_path.display()))?;
    let spec = match wirelab_spec::load(&spec_path, wirelab_lab::catalog()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    let opts = RunOptions {
        timeout: Duration::from_secs(args.timeout),
        abort: abort.clone(),
        ..RunOptions::new(&args.out)
    };
    let out = wirelab_lab::run(&spec, None, &opts, &wirelab_lab::Quiet)?;
    let fidelity = compare(&c.pair, &out.dir, recorded_trace);
    let mut code_now = crate::run::exit_code(out.verdict);
    if fidelity.as_ref().is_ok_and(|f| !f.same) {
        code_now = code_now.max(code::EXPECT_FAILED);
    }
    let _print = PRINT.lock().unwrap_or_else(|e| e.into_inner());
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "connection": n,
                "client": c.pair.client_addr().to_string(),
                "server": c.pair.server_addr().to_string(),
                "spec": spec_path,
                "summary": out.summary,
                "fidelity": fidelity.as_ref().ok(),
                "fidelity_error": fidelity.as_ref().err().map(|e| format!("{e:#}")),
            }))?
        );
    } else {
        println!(
            "wirelab replay: connection {n}, {} -> {} (spec {})",
            c.pair.client_addr(),
            c.pair.server_addr(),
            spec_path.display()
        );
        crate::summary::print(&out.summary, false);
        match &fidelity {
            Ok(f) => println!(
                "  replay     {}: network actions {} recorded, {} replayed; retransmissions client {}/{}, server {}/{} (recorded/replayed); {}",
                if f.same { "SAME" } else { "DIFFERENT" },
                f.recorded_actions.len(),
                f.replayed_actions.len(),
                f.recorded_retransmissions.0,
                f.replayed_retransmissions.0,
                f.recorded_retransmissions.1,
                f.replayed_retransmissions.1,
                match &f.headers {
                    None => "TCP headers not compared (no capture of the recording: --trace)".to_string(),
                    Some(h) => match h.first_difference() {
                        None => format!(
                            "TCP headers identical ({} + {} packets)",
                            h.recorded.0, h.recorded.1
                        ),
                        Some(d) => format!("TCP headers differ: {d}"),
                    },
                }
            ),
            Err(e) => println!("  replay     not compared: {e:#}"),
        }
        for d in fidelity.iter().flat_map(|f| &f.records_disagree) {
            println!("  records    {d}");
        }
        if let Ok(f) = &fidelity {
            let t = &f.send_time_differences_ns;
            let show = |x: Option<(u64, u64, u64)>| {
                x.map_or("no samples".to_string(), |(p50, p99, max)| {
                    format!(
                        "p50 {:.1} p99 {:.1} max {:.1} us",
                        p50 as f64 / 1e3,
                        p99 as f64 / 1e3,
                        max as f64 / 1e3
                    )
                })
            };
            println!(
                "  send times replayed - recorded: client {}, server {}",
                show(t.client),
                show(t.server)
            );
        }
    }
    Ok(code_now)
}

/// Every record under the paths, paired by connection and ordered by when
/// the client's record began. An end recorded alone is said and skipped.
fn gather(paths: &[PathBuf]) -> Result<Vec<Conn>> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    let mut by_conn: BTreeMap<(SocketAddr, SocketAddr), Vec<(PathBuf, ConnRecord)>> =
        BTreeMap::new();
    for f in files {
        let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
        let r = record::decode(&bytes).map_err(|d| anyhow::anyhow!("{}: {d}", f.display()))?;
        let (Some(l), Some(rm)) = (r.local, r.remote) else {
            eprintln!("wirelab: {}: no addresses; skipped", f.display());
            continue;
        };
        by_conn
            .entry((l.min(rm), l.max(rm)))
            .or_default()
            .push((f, r));
    }
    let mut out = Vec::new();
    for ((a, b), mut ends) in by_conn {
        if ends.len() != 2 {
            eprintln!(
                "wirelab: {a} <-> {b}: {} record(s) ({}); a replay needs one from each end: skipped",
                ends.len(),
                ends.iter().map(|e| e.0.display().to_string()).collect::<Vec<_>>().join(", ")
            );
            continue;
        }
        let (fb, rb) = ends.pop().expect("two");
        let (fa, ra) = ends.pop().expect("two");
        let a_local = ra.local;
        let pair = Pair::of(ra, rb).map_err(|e| anyhow::anyhow!("{}: {e}", fa.display()))?;
        let (client_file, server_file) = if pair.client.local == a_local {
            (fa, fb)
        } else {
            (fb, fa)
        };
        out.push(Conn {
            pair,
            client_file,
            server_file,
        });
    }
    out.sort_by_key(|c| (c.pair.client.start_ns, c.pair.client_addr()));
    Ok(out)
}

/// Record files at `p` (one, or a folder's, recursively), sorted.
pub(crate) fn collect(p: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("reading {}", p.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("reading {}", p.display()))?;
        entries.sort();
        for e in entries {
            if e.is_dir() || e.extension().is_some_and(|x| x == record::EXTENSION) {
                collect(&e, out)?;
            }
        }
    } else if p.exists() {
        out.push(p.to_path_buf());
    } else {
        anyhow::bail!("{}: no such file or folder", p.display());
    }
    Ok(())
}

/// The replay's spec: two hosts, the connection's calls, and a wire event
/// per network action, recording on (so the replay can be compared).
fn spec_text(n: usize, c: &Conn) -> Result<String> {
    let abs = |p: &Path| -> Result<String> {
        Ok(std::fs::canonicalize(p)
            .with_context(|| format!("resolving {}", p.display()))?
            .display()
            .to_string())
    };
    let sent: u64 = c
        .pair
        .client
        .calls
        .iter(c.pair.client.start_ns)
        .filter(|x| x.1.kind == record::CallKind::Send)
        .map(|x| x.1.bytes)
        .sum();
    let mut actions = c.pair.actions();
    // One event per packet: a packet both CE-marked and late keeps its
    // mark (the congestion control's input). The switch lets at most 64
    // packets overtake one, and holds at most 8 per end at a time.
    actions.dedup_by_key(|a| (a.0, a.1));
    let ecn = actions.iter().any(|a| a.2 == NetAction::Ce);
    let mut s = format!(
        "# Written by `wirelab replay`: connection {n} of the records, {} -> {}.\n\
         description: >\n  DETER's replay (seed 004 §3.4) of {} -> {}, recorded at {} and {}:\n  \
         each end repeats its socket calls at their recorded times, and the\n  \
         switch re-applies the network's {} drops, CE marks and reorderings\n  \
         to the same logical packets (each end's n-th packet).\n\
         topology:\n  hosts:\n    - name: client\n{}    - name: server\n{}",
        c.pair.client_addr(),
        c.pair.server_addr(),
        c.pair.client_addr(),
        c.pair.server_addr(),
        c.pair.client.host,
        c.pair.server.host,
        actions.len(),
        host_stack(&c.client_file, &c.pair.client)?,
        host_stack(&c.server_file, &c.pair.server)?,
    );
    if ecn {
        s.push_str("stack:\n  ecn: true\n");
    }
    s.push_str(&format!(
        "traffic:\n  connections:\n    - from: client\n      to: server\n      message_size: {}\n      replay:\n        requester: {}\n        responder: {}\n",
        sent.clamp(1, 1 << 30),
        yaml_str(&abs(&c.client_file)?),
        yaml_str(&abs(&c.server_file)?),
    ));
    if !actions.is_empty() {
        s.push_str("events:\n");
        for (from_server, place, a) in actions {
            let action = match a {
                NetAction::Drop => "drop".to_string(),
                NetAction::Ce => "ecn".to_string(),
                NetAction::Reorder(k) => {
                    format!("reorder, after: {}", k.min(wirelab_spec::MAX_REORDER_AFTER))
                }
            };
            s.push_str(&format!(
                "  - {{connection: 1, sent_by: {}, packet: {place}, action: {action}}}\n",
                if from_server {
                    "responder"
                } else {
                    "requester"
                },
            ));
        }
    }
    s.push_str("record: {}\n");
    Ok(s)
}

/// A host's `stack:` in the replay's spec, as DETER Table 1 asks: the
/// TCP settings its recording found changed from the kernel's defaults
/// (`settings.json` beside the record), as the spec's fields where it has
/// one, the rest as sysctls; the options of the route that carried the
/// connection (`rto_min`, `quickack`); and the socket's own congestion
/// control, which wins over the namespace's (wirelab sets it on every
/// socket, and the kernel's default is no default of a replay's). Empty
/// without any (records from before these were written).
fn host_stack(record: &Path, r: &record::ConnRecord) -> Result<String> {
    let mut fields = Vec::new();
    let mut sysctls = Vec::new();
    let settings = record
        .parent()
        .map(|d| d.join(wirelab_lab::record::SETTINGS))
        .and_then(|p| Some((std::fs::read_to_string(&p).ok()?, p)));
    // A socket setting of the record (DETER Table 1's per-socket ones).
    let setting = |name: &str| {
        r.settings
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.1.as_str())
    };
    let socket_cc = setting(record::TCP_CONGESTION);
    if let Some((text, path)) = settings {
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let Some(changed) = v["tcp_settings_changed"].as_object() else {
            anyhow::bail!("{}: no tcp_settings_changed", path.display());
        };
        for (k, val) in changed {
            let val = val.as_str().unwrap_or_default();
            let on = val != "0";
            match k.as_str() {
                "net.ipv4.tcp_congestion_control" => {
                    if let Some(cc) =
                        CongestionControl::from_kernel_name(val).filter(|_| socket_cc.is_none())
                    {
                        fields.push(format!("congestion_control: {}", cc.name()));
                    }
                }
                "net.ipv4.tcp_ecn" => fields.push(format!("ecn: {}", val == "1")),
                "net.ipv4.tcp_sack" => fields.push(format!("sack: {on}")),
                "net.ipv4.tcp_timestamps" => fields.push(format!("timestamps: {on}")),
                // wirelab's own labs set it; every replay does too.
                "net.ipv4.tcp_no_metrics_save" => {}
                _ => sysctls.push(format!("{}: {}", yaml_str(k), yaml_str(val))),
            }
        }
        if let (Some(routes), Some(remote)) = (v["route_options"].as_array(), r.remote) {
            if let Some(m) = route_to(routes, remote.ip()) {
                for (k, val) in m {
                    match (k.as_str(), val.as_u64()) {
                        ("rto_min", Some(ms)) => fields.push(format!("rto_min: {ms}ms")),
                        ("quickack", Some(q)) => fields.push(format!("quickack: {}", q != 0)),
                        ("features", _)
                            if wirelab_netns::route::feature_bits(val)
                                == Some(wirelab_netns::route::FEATURE_TCP_USEC_TS) =>
                        {
                            fields.push("usec_timestamps: true".into())
                        }
                        _ => eprintln!(
                            "wirelab: {}: the route to {} has option {k} {val}, which a replay does not set",
                            path.display(),
                            remote.ip()
                        ),
                    }
                }
            }
        }
    }
    if let Some(cc) = socket_cc {
        let Some(c) = CongestionControl::from_kernel_name(cc) else {
            anyhow::bail!(
                "{}: the socket ran congestion control {cc}; a replay runs {}",
                record.display(),
                CongestionControl::ALL.map(|c| c.kernel_name()).join(", ")
            );
        };
        fields.push(format!("congestion_control: {}", c.name()));
    }
    // The socket options its application set, which no sysctl holds.
    for (name, field) in [(record::SO_RCVBUF, "rcvbuf"), (record::SO_SNDBUF, "sndbuf")] {
        if let Some(v) = setting(name) {
            let bytes: u64 = v
                .parse()
                .with_context(|| format!("{}: {name} {v:?} is not a size", record.display()))?;
            use wirelab_spec::{MAX_SOCKET_BUFFER, MIN_SOCKET_BUFFER};
            let set = bytes.clamp(MIN_SOCKET_BUFFER, MAX_SOCKET_BUFFER);
            if set != bytes {
                eprintln!(
                    "wirelab: {}: {name} {bytes} is outside what a spec sets; the replay sets {set}",
                    record.display()
                );
            }
            fields.push(format!("{field}: {set}"));
        }
    }
    if let Some(v) = setting(record::TCP_NODELAY) {
        fields.push(format!("nodelay: {}", v == "1"));
    }
    if setting(record::TCP_CORK).is_some() {
        eprintln!(
            "wirelab: {}: the socket was corked (TCP_CORK) when recorded, which a replay does not set",
            record.display()
        );
    }
    if !sysctls.is_empty() {
        fields.push(format!("sysctls: {{{}}}", sysctls.join(", ")));
    }
    Ok(if fields.is_empty() {
        String::new()
    } else {
        format!("      stack: {{{}}}\n", fields.join(", "))
    })
}

/// The options (metrics) of the most specific route in `routes`
/// (`wirelab_netns::route_options`) that covers `to`, as the kernel's
/// longest-prefix match picks it.
fn route_to(
    routes: &[serde_json::Value],
    to: std::net::IpAddr,
) -> Option<&serde_json::Map<String, serde_json::Value>> {
    let std::net::IpAddr::V4(to) = to else {
        return None;
    };
    routes
        .iter()
        .filter_map(|r| {
            let dst = r["dst"].as_str()?;
            let (net, len) = if dst == "default" {
                (std::net::Ipv4Addr::UNSPECIFIED, 0)
            } else {
                match dst.split_once('/') {
                    Some((a, l)) => (a.parse().ok()?, l.parse::<u32>().ok()?.min(32)),
                    None => (dst.parse().ok()?, 32),
                }
            };
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            (u32::from(net) & mask == u32::from(to) & mask)
                .then_some((len, r["metrics"].as_object()?))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, m)| m)
}

/// A path as a YAML double-quoted scalar.
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Retransmissions a record holds (tcp_retransmit_skb events); a
/// capture's are `retransmissions_captured`.
fn retransmissions(r: &ConnRecord) -> usize {
    r.events
        .iter(r.start_ns)
        .filter(|e| matches!(e.1, Event::Retransmit { .. }))
        .count()
}

/// The segments a record's retransmissions carried, with those the kernel
/// counted that no event showed (`Event::Unseen`): the socket's own count.
fn retransmitted_segments(r: &ConnRecord) -> u64 {
    r.events
        .iter(r.start_ns)
        .map(|e| match e.1 {
            Event::Retransmit { segments, .. } => u64::from(segments),
            Event::Unseen(n) => u64::from(n),
            _ => 0,
        })
        .sum()
}

fn named(actions: Vec<(bool, u64, NetAction)>) -> Vec<(String, u64, String)> {
    actions
        .into_iter()
        .map(|(s, p, a)| {
            (
                (if s { "server" } else { "client" }).to_string(),
                p,
                a.name(),
            )
        })
        .collect()
}

/// One direction's headers of the connection `from` -> `to` in a capture,
/// relative to the ISNs its SYNs carry (0 before one is seen).
fn headers_of(t: &wirelab_trace::Trace, from: SocketAddr, to: SocketAddr) -> Vec<Hdr> {
    let tcps: Vec<wirelab_trace::Tcp> = t.packets.iter().filter_map(|p| p.tcp().ok()).collect();
    let is = |x: &wirelab_trace::Tcp, a: SocketAddr, b: SocketAddr| {
        x.src == a.ip() && x.sport == a.port() && x.dst == b.ip() && x.dport == b.port()
    };
    let isn = |a, b| {
        tcps.iter()
            .find(|x| x.syn && is(x, a, b))
            .map_or(0, |x| x.seq)
    };
    let (mine, theirs) = (isn(from, to), isn(to, from));
    tcps.iter()
        .filter(|x| is(x, from, to))
        .map(|x| Hdr {
            seq: x.seq.wrapping_sub(mine),
            ack: if x.has_ack {
                x.ack.wrapping_sub(theirs)
            } else {
                0
            },
            flags: match (x.syn, x.fin, x.rst, x.has_ack) {
                (true, _, _, false) => "S",
                (true, _, _, true) => "SA",
                (_, true, _, _) => "FA",
                (_, _, true, _) => "R",
                _ => "A",
            },
            len: x.payload_len,
        })
        .collect()
}

/// Where two header sequences first differ.
fn first_difference(what: &str, a: &[Hdr], b: &[Hdr]) -> Option<String> {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then_some(a.len().min(b.len())))?;
    Some(format!(
        "{what} packet {}: recorded {}, replayed {}",
        i + 1,
        a.get(i).map_or("none".into(), |h| format!("{h:?}")),
        b.get(i).map_or("none".into(), |h| format!("{h:?}"))
    ))
}

/// The replay's own records (and capture) against the recording's.
fn compare(
    recorded: &Pair,
    replay_dir: &Path,
    recorded_trace: Option<&wirelab_trace::Trace>,
) -> Result<Fidelity> {
    let mut conns = gather(&[replay_dir.join("record")])?;
    anyhow::ensure!(
        conns.len() == 1,
        "the replay recorded {} connections with both ends, not 1",
        conns.len()
    );
    let replayed = conns.pop().expect("one").pair;
    let f = Fidelity {
        recorded_actions: named(recorded.actions()),
        replayed_actions: named(replayed.actions()),
        recorded_retransmissions: (
            retransmissions(&recorded.client),
            retransmissions(&recorded.server),
        ),
        replayed_retransmissions: (
            retransmissions(&replayed.client),
            retransmissions(&replayed.server),
        ),
        recorded_retransmitted_segments: (
            retransmitted_segments(&recorded.client),
            retransmitted_segments(&recorded.server),
        ),
        replayed_retransmitted_segments: (
            retransmitted_segments(&replayed.client),
            retransmitted_segments(&replayed.server),
        ),
        headers: None,
        send_time_differences_ns: SendTimes {
            client: send_time_differences(&recorded.client, &replayed.client),
            server: send_time_differences(&recorded.server, &replayed.server),
        },
        records_disagree: Vec::new(),
        same: false,
    };
    let headers = match recorded_trace {
        None => None,
        Some(t) => {
            let replay = wirelab_trace::read(&replay_dir.join("trace.pcapng"))
                .map_err(|e| anyhow::anyhow!("reading the replay's capture: {e}"))?;
            let (rc, rs) = (recorded.client_addr(), recorded.server_addr());
            let (pc, ps) = (replayed.client_addr(), replayed.server_addr());
            let (a_up, a_down) = (headers_of(t, rc, rs), headers_of(t, rs, rc));
            let (b_up, b_down) = (headers_of(&replay, pc, ps), headers_of(&replay, ps, pc));
            anyhow::ensure!(
                !a_up.is_empty(),
                "the capture holds no packet of {rc} -> {rs}"
            );
            Some(Headers {
                recorded: (a_up.len(), a_down.len()),
                replayed: (b_up.len(), b_down.len()),
                recorded_retransmissions: (
                    retransmissions_captured(&a_up),
                    retransmissions_captured(&a_down),
                ),
                replayed_retransmissions: (
                    retransmissions_captured(&b_up),
                    retransmissions_captured(&b_down),
                ),
                client_differs: first_difference("client -> server", &a_up, &b_up),
                server_differs: first_difference("server -> client", &a_down, &b_down),
            })
        }
    };
    let mut records_disagree = Vec::new();
    if let Some(h) = &headers {
        for (what, record, capture) in [
            (
                "recording",
                f.recorded_retransmissions,
                h.recorded_retransmissions,
            ),
            (
                "replay",
                f.replayed_retransmissions,
                h.replayed_retransmissions,
            ),
        ] {
            if record != capture {
                records_disagree.push(format!(
                    "the {what}'s records count {}/{} retransmissions (client/server), its capture {}/{}",
                    record.0, record.1, capture.0, capture.1
                ));
            }
        }
    }
    let same_retransmissions = match &headers {
        Some(h) => h.first_difference().is_none(),
        None => f.recorded_retransmissions == f.replayed_retransmissions,
    };
    Ok(Fidelity {
        same: f.recorded_actions == f.replayed_actions && same_retransmissions,
        headers,
        records_disagree,
        ..f
    })
}

/// Segments of one direction that repeat sequence space already sent
/// (data, SYN or FIN): what the sender's TcpRetransSegs counts, as its
/// capture shows it.
fn retransmissions_captured(h: &[Hdr]) -> usize {
    let mut sent_to: Option<u32> = None;
    let mut n = 0;
    for x in h {
        let len = x.len + u32::from(x.flags.contains('S')) + u32::from(x.flags.contains('F'));
        if len == 0 {
            continue;
        }
        let end = x.seq.wrapping_add(len);
        match sent_to {
            // RFC 9293 §3.4: compared in sequence space.
            Some(to) if (x.seq.wrapping_sub(to) as i32) < 0 => {
                n += 1;
                if (end.wrapping_sub(to) as i32) > 0 {
                    sent_to = Some(end);
                }
            }
            _ => sent_to = Some(end),
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(seq: u32, flags: &'static str, len: u32) -> Hdr {
        Hdr {
            seq,
            ack: 0,
            flags,
            len,
        }
    }

    #[test]
    fn a_capture_counts_the_segments_that_repeat_sequence_space() {
        // SYN, three segments, the second resent whole, then a FIN resent.
        let up = [
            h(0, "S", 0),
            h(1, "A", 100),
            h(101, "A", 100),
            h(201, "A", 100),
            h(101, "A", 100),
            h(301, "FA", 0),
            h(301, "FA", 0),
        ];
        assert_eq!(retransmissions_captured(&up), 2);
        // A SYN sent again, and a retransmission that also carries new
        // data (its end moves the high mark, so the next is new).
        let up = [
            h(0, "S", 0),
            h(0, "S", 0),
            h(1, "A", 100),
            h(51, "A", 100),
            h(151, "A", 100),
        ];
        assert_eq!(retransmissions_captured(&up), 2);
        // Pure ACKs repeat nothing, however alike.
        assert_eq!(retransmissions_captured(&[h(1, "A", 0), h(1, "A", 0)]), 0);
        // Sequence numbers wrap (RFC 9293 §3.4).
        let up = [
            h(u32::MAX - 99, "A", 100),
            h(0, "A", 100),
            h(u32::MAX - 99, "A", 100),
        ];
        assert_eq!(retransmissions_captured(&up), 1);
    }
}
