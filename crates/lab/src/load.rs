//! A load test's life cycle (Norma, seed 002; `wirelab load`), on the run
//! engine's terms: the same options, progress, verdicts, interruption and
//! results folder as `run`, with a lab of its own shape, since the
//! tester's ports are cabled to the device under test as Norma's are, not
//! through the switch (whose capture of every packet would be the
//! bottleneck of a line-rate test):
//!
//! 1. the rate plan (§5.2: meter and cascaded units) and the template,
//!    from the spec alone: what cannot be sent is refused before anything
//!    exists;
//! 2. the tester lab up (`wirelab_netns::tester`), the DUT configured in
//!    its namespace; RFC 2544 §23's learning frames;
//! 3. the stream (`wirelab_workload::load`), one interval at a time, each
//!    line to the caller and to `intervals.jsonl` as it is measured;
//! 4. the DUT's own statistics into `dut/`, the claims, `summary.json`;
//! 5. the lab torn down on every way out.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use wirelab_dataplane::load::{Edit, EditMode, Sample};
use wirelab_load::rate;
use wirelab_load::template::{self, Template};
use wirelab_netns::tester::{self, TesterLab};
use wirelab_spec::load::{EditSpec, L4Kind, LoadSpec, Metric, SendPort};
use wirelab_workload::load::{Outcome, Port, Ports, RateChange, Report, Stream, Timing};

use crate::{During, Error, RunOptions, Verdict};

/// What the control plane chose for the stream: printed before it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub dut: &'static str,
    /// The frames' mean size (with the FCS); a size mix's pattern, in
    /// the order sent (without it; empty: one size).
    pub frame_bytes: f64,
    pub sizes: Vec<u16>,
    pub requested_pps: f64,
    pub rate: rate::Plan,
    /// The rate's steps after the start (steps and ramps).
    pub schedule: Vec<RateChange>,
    /// How late the generator may fall and still send the frames it owes
    /// (the meter's tolerance at the first rate; `stream.catch_up`).
    pub catch_up_ns: u64,
    pub template: Template,
}

/// One claim of `expect:`, judged.
#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    pub claim: String,
    pub pass: bool,
    pub observed: String,
}

/// `summary.json` of a load test.
#[derive(Debug, Clone, Serialize)]
pub struct LoadSummary {
    pub schema: &'static str,
    pub name: String,
    pub description: Option<String>,
    pub run_id: String,
    pub results: String,
    pub verdict: &'static str,
    /// What was chosen for the stream (with `streams:`, for the first).
    pub setup: Setup,
    /// With `streams:`, what was chosen for each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<Setup>,
    /// The run's totals and figures; its intervals are in intervals.jsonl.
    pub outcome: OutcomeSummary,
    /// The RFC 2544 search, when the spec asked for one (its trials are
    /// in trials.json).
    pub search: Option<SearchResult>,
    pub back_to_back: Option<BackToBackResult>,
    /// The bursts as sent and as they arrived (with `sample_every: 1`,
    /// every frame's times): gaps inside bursts and periods between them.
    pub burst_shape: Option<BurstShapes>,
    /// wirelab's switch as the DUT: its capture's integrity (Lumina §3.5)
    /// and where the capture is.
    pub switch: Option<crate::switch_dut::SwitchDutSummary>,
    /// With an ARP stream: what the router learned (Norma §8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<Learned>,
    pub expect: Vec<Claim>,
    pub duration_ms: u64,
}

/// Norma §8's ARP-learning test: the router's neighbours among the
/// addresses an ARP stream announced.
#[derive(Debug, Clone, Serialize)]
pub struct Learned {
    pub announced: u32,
    /// Learned by the run's end (after its last interval drained).
    pub learned: usize,
    /// The first interval's end (s since the start) by which it had them
    /// all (None: it never did): an upper bound on the time to learn, to
    /// the interval's resolution.
    pub all_by_s: Option<f64>,
    /// (interval's end, learned), one per interval.
    pub over_time: Vec<(f64, usize)>,
    /// With `dut.neighbour_limit`: the table's limit as set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<NeighbourLimit>,
}

/// Why `dut.neighbour_limit` needs the user's consent (`host_wide`).
pub const HOST_WIDE_NEEDED: &str =
    "Linux keeps one ARP table for every namespace, limited host-wide \
     (net.ipv4.neigh.default.gc_thresh3): the run would lower the host's limit until it ends. \
     Allow it with --host-wide";

/// The neighbour table's limit for the run (the host's, lowered).
#[derive(Debug, Clone, Serialize)]
pub struct NeighbourLimit {
    /// `dut.neighbour_limit`.
    pub limit: u32,
    /// Entries of the host's ARP table that counted against the limit
    /// when it was set (every namespace's, this lab's own among them;
    /// not loopback or permanent ones, which the kernel exempts).
    pub host_entries_before: u64,
    /// gc_thresh3 for the run: the two above added.
    pub gc_thresh3: u64,
    /// Attempts to add an entry the kernel refused for want of room
    /// during the run ("neighbor table overflow": `table_fulls`,
    /// host-wide; each ARP reply or frame to an address not learned
    /// tries again).
    pub refused: u64,
}

impl LoadSummary {
    /// summary.json's content: the intervals are in intervals.jsonl and
    /// the trials in trials.json, so here they are counted, not repeated.
    pub fn to_json(&self) -> Result<serde_json::Value, Error> {
        let mut v = serde_json::to_value(self).during("encoding the summary")?;
        if let Some(o) = v.get_mut("outcome").and_then(|o| o.as_object_mut()) {
            o.insert("intervals".into(), self.outcome.intervals.into());
        }
        for k in ["search", "back_to_back"] {
            if let Some(o) = v.get_mut(k).and_then(|o| o.as_object_mut()) {
                o.remove("trials");
            }
        }
        Ok(v)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OutcomeSummary {
    pub intervals: usize,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a load test produced.
pub struct LoadOutput {
    pub summary: LoadSummary,
    pub verdict: Verdict,
    pub dir: PathBuf,
}

/// The rate plan and the template for `spec`, without touching the host.
/// The template's addresses are the lab's; its MACs are filled in when
/// the lab exists.
pub fn setup(spec: &LoadSpec) -> Result<(Setup, Vec<Edit>, Vec<u32>), Error> {
    let burst = match spec.on_off_burst() {
        // On/off is a burst at the rate while on (Norma Fig. 11).
        Some((packets, _)) => Some(rate::Burst {
            packets,
            peak_pps: spec.peak_pps().unwrap_or(spec.pps()),
        }),
        None => spec.stream().burst.as_ref().map(|b| rate::Burst {
            packets: b.packets,
            peak_pps: spec.peak_pps().unwrap_or(spec.pps()),
        }),
    };
    let req = rate::Request {
        pps: spec.pps(),
        burst,
    };
    let plan = rate::plan(req, wirelab_spec::load::UNITS)
        .map_err(|e| Error::BadInput(format!("stream: {e}")))?;
    let schedule = spec
        .schedule()
        .into_iter()
        .map(|(at, pps)| {
            let rate = rate::plan(
                rate::Request { pps, burst: None },
                wirelab_spec::load::UNITS,
            )
            .map_err(|e| Error::BadInput(format!("stream: a step to {pps}/s: {e}")))?;
            Ok(RateChange {
                at: at.as_std(),
                pps,
                rate,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let tm = template(spec, [0; 6], [0; 6], ([0; 6], [0; 6]))?;
    let (edits, table) = match spec.stream().arp {
        // The announced address, stepped over the range (App. C 1).
        Some(a) => (
            vec![Edit::step(
                template::ARP_SPA,
                4,
                u32::from(a.from),
                u32::from(a.last()),
            )],
            Vec::new(),
        ),
        None => edits(&spec.stream().edits, spec.stream().offsets()),
    };
    Ok((
        Setup {
            dut: spec.dut.kind.name(),
            frame_bytes: spec.stream().mean_size(),
            sizes: spec.stream().pattern(),
            requested_pps: spec.pps(),
            catch_up_ns: wirelab_workload::load::tolerance_ns(
                plan.interval_ns,
                spec.stream().catch_up_time(),
            ),
            rate: plan,
            schedule,
            template: tm,
        },
        edits,
        table,
    ))
}

/// The stream's frame, addressed in the lab (`wirelab_netns::tester`'s
/// addresses; the MACs are known once the lab exists): from the sending
/// port's MAC to `dst_mac`, or for an ARP stream from the receiving
/// port's (`rx_mac`) to the router's port on that side.
fn template(
    spec: &LoadSpec,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    rx_side: ([u8; 6], [u8; 6]),
) -> Result<Template, Error> {
    let at = tester::addresses(spec.dut.kind);
    let st = spec.stream();
    if let Some(a) = st.arp {
        let (sender_mac, target) = match st.port {
            SendPort::Tx => (src_mac, (dst_mac, at.dut_tx_side)),
            SendPort::Rx => (rx_side.0, (rx_side.1, at.dut_rx_side)),
        };
        return template::arp_reply((sender_mac, a.from), target)
            .map_err(|e| Error::BadInput(format!("stream.arp: {e}")));
    }
    // RFC 5180's IPv6 benchmarking range, the sender ::1:2, the
    // receiver ::1:3 (only ever inside the lab, on layer-2 DUTs).
    let v6 = |host: u8| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x00, 0x02]);
        a[13] = 1;
        a[15] = host;
        a
    };
    let stack = template::Stack {
        vlan: st.vlan,
        ipv6: (st.ip == 6).then(|| (v6(2), v6(3))),
        l4: match st.l4 {
            L4Kind::Udp => template::L4::Udp,
            L4Kind::Tcp => template::L4::Tcp {
                flags: st.tcp_flag_bits(),
            },
        },
        // The inner frame between two made-up tenant hosts: locally
        // administered MACs, addresses in the lab's benchmarking range
        // (RFC 2544 198.18.0.0/15), never routed outside the tunnel.
        vxlan: st.vxlan.map(|v| template::Vxlan {
            vni: v.vni,
            inner: template::Udp {
                src_mac: [0x02, 0x76, 0x78, 0, 0, 1],
                dst_mac: [0x02, 0x76, 0x78, 0, 0, 2],
                src: std::net::Ipv4Addr::new(198, 19, 200, 1),
                dst: std::net::Ipv4Addr::new(198, 19, 200, 2),
                sport: st.sport,
                dport: st.dport,
            },
        }),
        raw: st.raw_bytes(),
    };
    template::frame(
        &template::Udp {
            src_mac,
            dst_mac,
            src: at.tx,
            dst: at.rx,
            sport: st.sport,
            dport: st.dport,
        },
        &stack,
        spec.template_len(),
    )
    .map_err(|e| Error::BadInput(format!("stream.size: {e}")))
}

/// The spec's edits in the generator's terms, and the indirect tables'
/// values laid end to end.
fn edits(specs: &[EditSpec], (l3, l4): (u16, u16)) -> (Vec<Edit>, Vec<u32>) {
    let mut table = Vec::new();
    let out = specs
        .iter()
        .map(|e| {
            let (offset, width) = e.field.place_in(l3, l4);
            let mut x = Edit {
                offset,
                width,
                mode: EditMode::Step,
                carry_from: e.carry.map(|c| c as u8),
                rand_bits: 0,
                table: 0,
                lo: 0,
                hi: 0,
                step: 1,
            };
            if let Some(s) = e.step {
                (x.lo, x.hi, x.step) = (s.from, s.to, s.by);
            } else if let Some(t) = &e.table {
                x.mode = EditMode::Indirect;
                x.table = table.len() as u16;
                (x.lo, x.hi) = (0, t.len() as u32 - 1);
                table.extend_from_slice(t);
            } else if let Some(r) = e.random {
                x.mode = EditMode::Random;
                // The low bits random, the rest 0 (App. C 4).
                x.hi = ((1u64 << r.bits) - 1) as u32;
            } else if let Some(r) = e.ranged {
                x.mode = EditMode::Ranged;
                (x.lo, x.hi) = (r.from, r.to);
                // App. C 5: r of k bits with 2^k <= l, the largest such k.
                let l = u64::from(r.to - r.from) + 1;
                x.rand_bits = (63 - l.leading_zeros()) as u8;
            }
            x
        })
        .collect();
    (out, table)
}

/// What a load test reports as it goes.
pub enum Tick<'a> {
    /// A trial of an RFC 2544 search starts at this rate.
    Trial {
        trial: u32,
        pps: f64,
        rate: &'a rate::Plan,
    },
    /// An interval was measured (of trial `trial`, when searching); the
    /// report carries the rate asked for in it.
    Interval {
        trial: Option<u32>,
        report: &'a Report,
    },
    /// A trial of the search ended.
    TrialDone(&'a Trial),
}

/// One trial of an RFC 2544 search.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub trial: u32,
    pub requested_pps: f64,
    pub rate: rate::Plan,
    pub sent: u64,
    pub received: u64,
    pub lost: i64,
    pub loss_ratio: f64,
    /// The rate offered, first frame to last (below the request when the
    /// tester could not keep up: `missed` slots).
    pub sent_pps: Option<f64>,
    pub missed: u64,
    pub latency: Option<wirelab_workload::load::Latency>,
    /// The tester offered less than the rate asked for: the trial failed
    /// for the tester's sake, not the DUT's.
    pub tester_short: bool,
    pub pass: bool,
    /// A back-to-back trial's burst (frames) and its repeat (from 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
}

/// A run's bursts as the generator sent them (its meter's times) and as
/// the receiver got them (after the DUT and veth's NAPI batches).
#[derive(Debug, Clone, Serialize)]
pub struct BurstShapes {
    pub sent: wirelab_load::shape::BurstShape,
    pub received: wirelab_load::shape::BurstShape,
}

impl Trial {
    /// Trial `k` at `pps` with `plan`, from its outcome; not passed until
    /// its search says so.
    fn of(k: u32, pps: f64, plan: rate::Plan, o: &Outcome, tester_short: bool) -> Trial {
        let lost = o.sent as i64 - o.received as i64;
        Trial {
            trial: k,
            requested_pps: pps,
            rate: plan,
            sent: o.sent,
            received: o.received,
            lost,
            loss_ratio: if o.sent > 0 {
                lost as f64 / o.sent as f64
            } else {
                1.0
            },
            sent_pps: o.sent_pps,
            missed: o.generator.missed,
            latency: o.latency,
            tester_short,
            pass: false,
            burst: None,
            repeat: None,
        }
    }
}

/// What an RFC 2544 back-to-back search found (§26.4).
#[derive(Debug, Clone, Serialize)]
pub struct BackToBackResult {
    /// The burst's rate (frames/s).
    pub pps: f64,
    /// Per repeat, the longest burst forwarded whole (0: none).
    pub frames: Vec<u32>,
    /// Their mean: the back-to-back value §26.4 reports.
    pub mean: f64,
    /// Every burst up to the search's bound passed: the DUT may take more.
    pub at_bound: bool,
    /// Some trial's tester sent less than its burst.
    pub tester_limited: bool,
    pub trials: Vec<Trial>,
}

/// What an RFC 2544 search found.
#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    /// The best passing trial's requested rate (None: none passed).
    pub throughput_pps: Option<f64>,
    /// That trial's offered rate, measured.
    pub offered_pps: Option<f64>,
    /// The throughput in bits per second on the wire.
    pub throughput_bps: Option<f64>,
    /// The search's bounds when it stopped: passed at `lo`, failed at `hi`.
    pub lo_pps: f64,
    pub hi_pps: f64,
    /// Some trial's tester offered less than asked: the tester, not only
    /// the DUT, limited the search.
    pub tester_limited: bool,
    pub trials: Vec<Trial>,
}

/// An interval as intervals.jsonl keeps it.
#[derive(Serialize)]
struct IntervalLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    trial: Option<u32>,
    #[serde(flatten)]
    report: &'a Report,
    /// With an ARP stream: the announced addresses the router has learned
    /// by the interval's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    dut_neighbours: Option<usize>,
}

/// Runs the load test `spec` (one stream, or an RFC 2544 search of
/// trials); `each` is told of every trial and interval as it is measured.
/// Prints nothing; the lab is gone when this returns, whatever it
/// returns.
pub fn run(
    spec: &LoadSpec,
    opts: &RunOptions,
    mut each: impl FnMut(&Tick),
) -> Result<LoadOutput, Error> {
    let started = std::time::Instant::now();
    // Each stream planned on its own (one, unless `streams:`).
    let views = spec.stream_views();
    let mut planned = views.iter().map(setup).collect::<Result<Vec<_>, _>>()?;
    let single = views.len() == 1;
    if spec.dut.neighbour_limit.is_some() && !opts.host_wide {
        return Err(Error::BadInput(format!(
            "dut.neighbour_limit: {HOST_WIDE_NEEDED}"
        )));
    }
    let Begun {
        run_id,
        name,
        dir,
        lab,
    } = begin(spec, opts)?;
    let write = |file: &str, bytes: &[u8]| write_in(&dir, file, bytes);
    opts.check_abort()?;
    lab.learn().during("sending the learning frames")?;
    // wirelab's switch as the DUT: attached once the lab is quiet, so its
    // capture holds the stream's frames and nothing before.
    let switch = match spec.dut.kind {
        wirelab_spec::load::DutKind::Switch => Some(crate::switch_dut::SwitchDut::start(&lab)?),
        _ => None,
    };
    let rx_side = (
        wirelab_netns::link_mac(&lab.rx_ns, tester::RX_DEV).during("reading a MAC")?,
        wirelab_netns::link_mac(&lab.dut_ns, tester::DUT_OUT).during("reading a MAC")?,
    );
    for (p, v) in planned.iter_mut().zip(&views) {
        p.0.template = template(v, lab.tx_mac, lab.next_hop_mac, rx_side)?;
    }
    if spec.dut.arp_accept {
        lab.accept_arp()
            .during("letting the router learn from ARP replies")?;
    }
    // The table's limit, from what the host (with this lab's own
    // neighbours, learned above) holds now; put back when dropped, at
    // the run's end or on an error.
    let neighbour_limit = match spec.dut.neighbour_limit {
        Some(n) => {
            let fulls = wirelab_netns::arp_cache_stat()
                .during("reading the host's ARP table")?
                .1;
            let l = wirelab_netns::HostNeighbourLimit::set(&run_id, u64::from(n))
                .during("lowering the host's neighbour-table limit")?;
            Some((l, fulls))
        }
        None => None,
    };
    // An ARP stream's addresses: how many of them the router has learned,
    // read at each interval's end.
    let announced = views.iter().find_map(|v| v.stream().arp);
    let learned_now = || -> Option<usize> {
        let a = announced?;
        lab.neighbours_in(a.from, a.last()).ok()
    };
    let mut learned_over_time: Vec<(f64, usize)> = Vec::new();
    let ports = Ports {
        tx_ns: lab.tx_ns.clone(),
        tx_dev: tester::TX_DEV.into(),
        rx_ns: lab.rx_ns.clone(),
        rx_dev: tester::RX_DEV.into(),
        tx_peer: Some((lab.dut_ns.clone(), tester::DUT_IN.into())),
        rx_peer: Some((lab.dut_ns.clone(), tester::DUT_OUT.into())),
    };
    let path = dir.join("intervals.jsonl");
    let mut lines = std::fs::File::create(&path).during(format!("creating {}", path.display()))?;
    let mut sampled: Vec<(Option<u32>, Sample)> = Vec::new();
    // One run of the streams for `duration`: the first at `plan`'s rate
    // (a search's trial), the others at theirs.
    let mut stream_at = |plan: &rate::Plan,
                         duration: Duration,
                         trial: Option<u32>,
                         each: &mut dyn FnMut(&Tick)|
     -> Result<Outcome, Error> {
        let streams: Vec<Stream> = planned
            .iter()
            .enumerate()
            .map(|(k, (setup, edits, table))| Stream {
                template: setup.template.clone(),
                rate: if k == 0 {
                    plan.clone()
                } else {
                    setup.rate.clone()
                },
                edits: edits.clone(),
                table: table.clone(),
                schedule: if trial.is_some() {
                    Vec::new()
                } else {
                    setup.schedule.clone()
                },
                sample_every: spec.sample_every,
                sizes: setup.sizes.clone(),
                port: match views[k].stream().port {
                    SendPort::Tx => Port::Tx,
                    SendPort::Rx => Port::Rx,
                },
                catch_up: views[k].stream().catch_up_time(),
            })
            .collect();
        let timing = Timing {
            duration,
            interval: spec.interval.as_std(),
            grace: spec.grace().as_std().max(Duration::from_millis(1)),
        };
        let mut line_err = None;
        let outcome = wirelab_workload::load::run(&ports, &streams, timing, &opts.abort, |r| {
            each(&Tick::Interval { trial, report: r });
            let dut_neighbours = learned_now();
            if let Some(n) = dut_neighbours {
                learned_over_time.push((r.end_s, n));
            }
            // Written as measured: an interrupted run keeps what it measured.
            let r = serde_json::to_string(&IntervalLine {
                trial,
                report: r,
                dut_neighbours,
            })
            .map_err(std::io::Error::other)
            .and_then(|l| writeln!(lines, "{l}"));
            if let Err(e) = r {
                line_err.get_or_insert(e);
            }
        });
        if let Some(e) = line_err {
            return Err(e).during(format!("writing {}", path.display()));
        }
        let mut outcome = outcome.during("running the stream")?;
        sampled.extend(
            std::mem::take(&mut outcome.samples)
                .into_iter()
                .map(|x| (trial, x)),
        );
        Ok(outcome)
    };
    let mut b2b = None;
    let (outcome, search) = match spec.search.as_ref() {
        Some(wirelab_spec::load::Search {
            throughput: Some(t),
            ..
        }) => {
            let (o, r) = throughput(spec, t, opts, &mut stream_at, &mut each)?;
            (o, Some(r))
        }
        Some(wirelab_spec::load::Search {
            back_to_back: Some(b),
            ..
        }) => {
            let (o, r) = back_to_back(spec, b, opts, &mut stream_at, &mut each)?;
            b2b = Some(r);
            (o, None)
        }
        _ => {
            let first = planned[0].0.rate.clone();
            (
                stream_at(&first, spec.duration.as_std(), None, &mut each)?,
                None,
            )
        }
    };
    let trials = search
        .as_ref()
        .map(|r| &r.trials)
        .or(b2b.as_ref().map(|r| &r.trials));
    if let Some(t) = trials {
        write(
            "trials.json",
            &serde_json::to_vec_pretty(t).during("encoding the trials")?,
        )?;
    }
    if spec.sample_every > 0 {
        write_sample(&dir.join("sample.pcapng"), &sampled)?;
    }
    // Every frame sampled, a run of bursts: their shape as received (one
    // stream's).
    let burst_len = if single {
        spec.on_off_burst()
            .map(|(n, _)| n)
            .or(spec.stream().burst.as_ref().map(|b| b.packets))
    } else {
        None
    };
    let burst_shape = match (burst_len, spec.sample_every, &spec.search) {
        (Some(n), 1, None) => {
            let side = |received: bool| {
                let got: Vec<(u64, u64)> = sampled
                    .iter()
                    .filter(|(_, x)| x.received == received)
                    .map(|(_, x)| (x.seq, x.ts))
                    .collect();
                wirelab_load::shape::burst_shape(
                    &got,
                    n,
                    spec.peak_pps().unwrap_or(spec.pps()),
                    spec.pps(),
                )
            };
            Some(BurstShapes {
                sent: side(false),
                received: side(true),
            })
        }
        _ => None,
    };
    // The first bursts at µs scale, for the report: (µs since the first
    // frame, frames so far).
    let pattern: Vec<(f64, f64)> = match (burst_len, &burst_shape) {
        (Some(n), Some(_)) => {
            let mut got: Vec<(u64, u64)> = sampled
                .iter()
                .filter(|(_, x)| x.received && x.seq < 4 * u64::from(n))
                .map(|(_, x)| (x.ts, x.seq))
                .collect();
            got.sort_unstable();
            let t0 = got.first().map_or(0, |g| g.0);
            got.iter()
                .enumerate()
                .map(|(i, &(t, _))| ((t - t0) as f64 / 1e3, (i + 1) as f64))
                .collect()
        }
        _ => Vec::new(),
    };
    let switch = match switch {
        Some(s) => Some(s.finish(&dir.join("dut"))?),
        None => None,
    };
    for (file, text) in lab.dut_statistics() {
        write(&format!("dut/{file}"), text.as_bytes())?;
    }
    // Norma §8: what the router learned of the addresses announced, and
    // by when (the first interval's end at which it had them all).
    let learned = match announced {
        Some(a) => {
            let at_end = learned_now().unwrap_or(0);
            let full = learned_over_time
                .iter()
                .find(|&&(_, n)| n as u32 >= a.count)
                .map(|&(t, _)| t);
            Some(Learned {
                announced: a.count,
                learned: at_end,
                all_by_s: full,
                over_time: learned_over_time,
                limit: neighbour_limit.as_ref().map(|(l, fulls)| NeighbourLimit {
                    limit: spec.dut.neighbour_limit.unwrap_or(0),
                    host_entries_before: l.base,
                    gc_thresh3: l.thresh3,
                    refused: wirelab_netns::arp_cache_stat()
                        .map(|(_, f)| f.saturating_sub(*fulls))
                        .unwrap_or(0),
                }),
            })
        }
        None => None,
    };
    // The host's limit back as it was.
    drop(neighbour_limit);
    drop(lab);
    let interrupted = opts.abort.load(Ordering::SeqCst);
    let expect = judge(&spec.expect, |x| match (x.stream, x.metric) {
        (Some(k), m) => outcome.streams.get(k).and_then(|o| stream_metric(m, o)),
        (None, Metric::BackToBack) => b2b.as_ref().map(|r| r.mean),
        (None, Metric::Learned) => learned.as_ref().map(|l| l.learned as f64),
        (None, m) => metric(m, &outcome, search.as_ref()),
    });
    let verdict = Verdict::of(interrupted, true, expect.iter().any(|c| !c.pass));
    let summary = LoadSummary {
        schema: "wirelab.load/1",
        name,
        description: spec.description.clone(),
        run_id,
        results: dir.display().to_string(),
        verdict: verdict.name(),
        setup: planned[0].0.clone(),
        streams: if single {
            Vec::new()
        } else {
            planned.into_iter().map(|p| p.0).collect()
        },
        outcome: OutcomeSummary {
            intervals: outcome.intervals.len(),
            outcome,
        },
        search,
        back_to_back: b2b,
        burst_shape,
        switch,
        learned,
        expect,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    write(
        "summary.json",
        &serde_json::to_vec_pretty(&summary.to_json()?).during("encoding the summary")?,
    )?;
    write("report.html", page(&summary, &pattern).as_bytes())?;
    Ok(LoadOutput {
        summary,
        verdict,
        dir,
    })
}

/// A load test's start: its results folder with `spec.json` and `dut/`,
/// and its lab.
pub(crate) struct Begun {
    pub run_id: String,
    pub name: String,
    pub dir: PathBuf,
    pub lab: TesterLab,
}

pub(crate) fn begin(spec: &LoadSpec, opts: &RunOptions) -> Result<Begun, Error> {
    let run_id = opts.run_id.clone().unwrap_or_else(crate::new_run_id);
    let name = spec.name.clone().unwrap_or_else(|| "load".into());
    let dir = opts.out.join(format!("{name}-{run_id}"));
    std::fs::create_dir_all(dir.join("dut")).during(format!("creating {}", dir.display()))?;
    write_in(
        &dir,
        "spec.json",
        &serde_json::to_vec_pretty(spec).during("encoding the spec")?,
    )?;
    opts.check_abort()?;
    let lab = TesterLab::up(
        &run_id,
        spec.dut.kind,
        spec.ports.mtu,
        spec.dut.egress.as_ref(),
    )
    .during("bringing the tester's lab up")?;
    Ok(Begun {
        run_id,
        name,
        dir,
        lab,
    })
}

/// Writes `file` in the results folder `dir`.
pub(crate) fn write_in(dir: &std::path::Path, file: &str, bytes: &[u8]) -> Result<(), Error> {
    let p = dir.join(file);
    std::fs::write(&p, bytes).during(format!("writing {}", p.display()))
}

/// A measured rate that is missing or below a bound.
trait Below {
    fn is_none_or_below(self, bound: f64) -> bool;
}

impl Below for Option<f64> {
    fn is_none_or_below(self, bound: f64) -> bool {
        !matches!(self, Some(v) if v >= bound)
    }
}

type StreamAt<'a> = dyn FnMut(&rate::Plan, Duration, Option<u32>, &mut dyn FnMut(&Tick)) -> Result<Outcome, Error>
    + 'a;

/// RFC 2544 §26.1: the first trial at the stream's rate; then halving the
/// interval between the fastest rate that passed and the slowest that
/// failed until it is within the resolution. Returns the best passing
/// trial's outcome (the last trial's when none passed).
fn throughput(
    spec: &LoadSpec,
    t: &wirelab_spec::load::Throughput,
    opts: &RunOptions,
    stream_at: &mut StreamAt,
    each: &mut dyn FnMut(&Tick),
) -> Result<(Outcome, SearchResult), Error> {
    let ceiling = spec.pps();
    let (mut lo, mut hi) = (0.0f64, ceiling);
    let mut pps = ceiling;
    let mut trials: Vec<Trial> = Vec::new();
    let mut best: Option<Outcome> = None;
    let mut last = None;
    for k in 1..=t.max_trials {
        if opts.abort.load(Ordering::SeqCst) {
            break;
        }
        let plan = rate::plan(
            rate::Request { pps, burst: None },
            wirelab_spec::load::UNITS,
        )
        .map_err(|e| Error::BadInput(format!("trial {k} at {pps:.0}/s: {e}")))?;
        each(&Tick::Trial {
            trial: k,
            pps,
            rate: &plan,
        });
        let o = stream_at(&plan, t.trial.as_std(), Some(k), each)?;
        // An interrupted trial decides nothing.
        if opts.abort.load(Ordering::SeqCst) {
            last = Some(o);
            break;
        }
        // RFC 2544 judges the DUT at the rate offered: a trial the tester
        // could not send at the rate asked for (its meter gave up slots)
        // proves nothing about that rate, and counts as failed.
        let short = o
            .sent_pps
            .is_none_or_below(pps * (1.0 - t.resolution / 2.0));
        let mut trial = Trial::of(k, pps, plan, &o, short);
        trial.pass = o.sent > 0 && trial.loss_ratio <= t.loss && !short;
        let pass = trial.pass;
        each(&Tick::TrialDone(&trial));
        trials.push(trial);
        if pass {
            lo = pps;
            best = Some(o);
            if pps >= ceiling {
                break;
            }
        } else {
            hi = pps;
            last = Some(o);
        }
        if hi - lo <= t.resolution * ceiling {
            break;
        }
        pps = (lo + hi) / 2.0;
    }
    let found = trials
        .iter()
        .filter(|t| t.pass)
        .max_by(|a, b| a.requested_pps.total_cmp(&b.requested_pps));
    let wire = (spec.stream().mean_size() + wirelab_spec::load::WIRE_OVERHEAD as f64) * 8.0;
    let result = SearchResult {
        throughput_pps: found.map(|t| t.requested_pps),
        offered_pps: found.and_then(|t| t.sent_pps),
        throughput_bps: found.map(|t| t.requested_pps * wire),
        lo_pps: lo,
        hi_pps: hi,
        tester_limited: trials.iter().any(|t| t.tester_short),
        trials,
    };
    let outcome = best.or(last).ok_or_else(|| Error::Interrupted)?;
    Ok((outcome, result))
}

/// RFC 2544 §26.4: bursts of back-to-back frames at the stream's rate
/// (the meter's gap; the port's line rate when the stream asks for it),
/// the burst's length searched between 1 and `max_frames` by halving
/// until the longest that passed and the shortest that failed are within
/// `resolution`; a burst passes when every frame of it arrives. The
/// search is repeated and the mean of its results reported. Returns the
/// last trial's outcome.
fn back_to_back(
    spec: &LoadSpec,
    b: &wirelab_spec::load::BackToBack,
    opts: &RunOptions,
    stream_at: &mut StreamAt,
    each: &mut dyn FnMut(&Tick),
) -> Result<(Outcome, BackToBackResult), Error> {
    let pps = spec.pps();
    let base = rate::plan(
        rate::Request { pps, burst: None },
        wirelab_spec::load::UNITS,
    )
    .map_err(|e| Error::BadInput(format!("stream: {e}")))?;
    let mut trials: Vec<Trial> = Vec::new();
    let mut found = Vec::new();
    let mut last = None;
    let mut k = 0;
    let (mut at_bound, mut short_any) = (false, false);
    'repeats: for rep in 1..=b.repeat {
        let (mut lo, mut hi) = (0u32, b.max_frames + 1);
        let mut n = b.max_frames;
        loop {
            if opts.abort.load(Ordering::SeqCst) {
                break 'repeats;
            }
            k += 1;
            // The burst: the meter's rate, then one unit passing n and
            // skipping for longer than the trial lasts.
            let mut plan = base.clone();
            plan.units = vec![rate::Unit {
                pass: n,
                skip: u32::MAX - n,
            }];
            plan.burst_unit = Some(0);
            each(&Tick::Trial {
                trial: k,
                pps,
                rate: &plan,
            });
            let burst_ns = (f64::from(n) / pps * 1e9) as u64;
            let len = Duration::from_nanos(burst_ns) + b.drain.as_std();
            let o = stream_at(&plan, len.max(spec.interval.as_std()), Some(k), each)?;
            if opts.abort.load(Ordering::SeqCst) {
                last = Some(o);
                break 'repeats;
            }
            let short = o.sent < u64::from(n);
            short_any |= short;
            let pass = !short && o.received == o.sent;
            let trial = Trial {
                pass,
                burst: Some(n),
                repeat: Some(rep),
                ..Trial::of(k, pps, plan, &o, short)
            };
            each(&Tick::TrialDone(&trial));
            trials.push(trial);
            last = Some(o);
            if pass {
                lo = n;
            } else {
                hi = n;
            }
            if hi - lo <= b.resolution {
                break;
            }
            n = lo + (hi - lo) / 2;
        }
        at_bound |= lo == b.max_frames;
        found.push(lo);
    }
    let mean = if found.is_empty() {
        0.0
    } else {
        found.iter().map(|&f| f64::from(f)).sum::<f64>() / found.len() as f64
    };
    let outcome = last.ok_or(Error::Interrupted)?;
    Ok((
        outcome,
        BackToBackResult {
            pps,
            frames: found,
            mean,
            at_bound,
            tester_limited: short_any,
            trials,
        },
    ))
}

/// sample.pcapng: the sampled frames as the tester sent them (interface
/// 0) and as the receiver got them (interface 1), on the wall clock.
fn write_sample(path: &std::path::Path, sampled: &[(Option<u32>, Sample)]) -> Result<(), Error> {
    let offset = wirelab_capture::monotonic_to_realtime_ns();
    let ifaces = [
        (
            tester::TX_DEV.to_string(),
            "wirelab load: frames as the tester sent them".to_string(),
        ),
        (
            tester::RX_DEV.to_string(),
            "wirelab load: frames as the tester received them".to_string(),
        ),
    ];
    let packets = sampled
        .iter()
        .map(|(trial, x)| wirelab_capture::SamplePacket {
            iface: u32::from(x.received),
            ts_ns: (i128::from(x.ts) + offset).max(0) as u64,
            len: x.len,
            data: &x.data,
            comment: match trial {
                Some(k) => format!(
                    "wirelab load trial={k} seq={} {}",
                    x.seq,
                    if x.received { "received" } else { "sent" }
                ),
                None => format!(
                    "wirelab load seq={} {}",
                    x.seq,
                    if x.received { "received" } else { "sent" }
                ),
            },
        });
    wirelab_capture::write_sample_pcapng(
        path,
        &ifaces,
        wirelab_dataplane::load::SAMPLE_CAP as u32,
        packets,
    )
    .during(format!("writing {}", path.display()))
}

/// report.html: what ran, its claims, the rate per interval, the latency.
fn page(s: &LoadSummary, pattern: &[(f64, f64)]) -> String {
    let o = &s.outcome.outcome;
    let st = &s.setup;
    let f = |p: Option<f64>| p.map_or("-".into(), |p| format!("{p:.3}"));
    let mut facts = vec![
        ("DUT".to_string(), format!("Linux {}", st.dut)),
        (
            "stream".into(),
            format!(
                "{} B frames at {:.0} frames/s",
                st.frame_bytes, st.requested_pps
            ),
        ),
        ("rate plan (Norma §5.2)".into(), st.rate.describe()),
        (
            "sent".into(),
            format!("{} frames at {} frames/s", o.sent, f(o.sent_pps)),
        ),
        (
            "received".into(),
            format!(
                "{} frames at {} frames/s, {} lost, {} reordered or duplicated",
                o.received,
                f(o.received_pps),
                o.sent as i64 - o.received as i64,
                o.late
            ),
        ),
        (
            "generator".into(),
            format!(
                "{} slots given up late, {} frames sent behind their time (caught up), {:.2} s of CPU",
                o.generator.missed,
                o.generator.behind,
                o.generator_cpu_ns as f64 / 1e9
            ),
        ),
    ];
    if let Some(l) = &o.latency {
        facts.push((
            "latency (ns)".into(),
            format!(
                "min {} p50 {} p99 {} p99.9 {} p99.99 {} max {} mean {:.0}",
                l.min, l.p50, l.p99, l.p999, l.p9999, l.max, l.mean
            ),
        ));
    }
    if let Some(shapes) = &s.burst_shape {
        let g = |x: &Option<wirelab_load::shape::Gaps>| {
            x.map_or("-".into(), |g| {
                format!(
                    "mean {:.0} p50 {} p99 {} ns ({})",
                    g.mean, g.p50, g.p99, g.count
                )
            })
        };
        for (side, b) in [("sent", &shapes.sent), ("received", &shapes.received)] {
            facts.push((
                format!("burst shape ({side})"),
                format!(
                    "gaps inside bursts {} against {:.0} ns asked; periods {} against {:.0} ns",
                    g(&b.gaps),
                    b.requested_gap_ns,
                    g(&b.periods),
                    b.requested_period_ns
                ),
            ));
        }
    }
    if let Some(r) = &s.search {
        facts.push((
            "RFC 2544 throughput".into(),
            match r.throughput_pps {
                Some(p) => format!("{p:.0} frames/s after {} trials", r.trials.len()),
                None => format!("no trial passed ({} trials)", r.trials.len()),
            },
        ));
    }
    facts.push(("results".into(), s.results.clone()));
    // The intervals are in the folder's intervals.jsonl; the page reads
    // them from the outcome kept in memory.
    let intervals = o
        .intervals
        .iter()
        .map(|i| (i.end_s, i.requested_pps, i.sent_pps, i.received_pps))
        .collect();
    wirelab_report::html::load_page(&wirelab_report::html::LoadPage {
        title: &s.name,
        verdict: s.verdict,
        facts,
        claims: claim_rows(&s.expect),
        intervals,
        series: ["asked", "sent", "received"],
        unit: "thousand frames/s",
        latency: &o.latency_buckets,
        pattern,
    })
}

/// The `Figures` of an `Outcome` or a `StreamOutcome` (the same fields).
macro_rules! figures_of {
    ($o:expr) => {
        Figures {
            sent: $o.sent,
            received: $o.received,
            rate_error: $o.rate_error,
            received_pps: $o.received_pps,
            latency: $o.latency.as_ref(),
            late: $o.late,
        }
    };
}

/// The figures a stream's claims read, of the run or of one stream.
struct Figures<'a> {
    sent: u64,
    received: u64,
    rate_error: Option<f64>,
    received_pps: Option<f64>,
    latency: Option<&'a wirelab_workload::load::Latency>,
    late: u64,
}

impl Figures<'_> {
    /// A metric's value (None: not measured, as latency when nothing
    /// arrived, or not a stream's figure).
    fn get(&self, m: Metric) -> Option<f64> {
        let lost = self.sent as f64 - self.received as f64;
        let lat = self.latency;
        match m {
            Metric::Sent => Some(self.sent as f64),
            Metric::Received => Some(self.received as f64),
            Metric::Lost => Some(lost),
            Metric::LossRatio => (self.sent > 0).then(|| lost / self.sent as f64),
            Metric::RateError => self.rate_error.map(f64::abs),
            Metric::ReceivedPps => self.received_pps,
            Metric::LatencyMean => lat.map(|l| l.mean),
            Metric::LatencyP50 => lat.map(|l| l.p50 as f64),
            Metric::LatencyP99 => lat.map(|l| l.p99 as f64),
            Metric::LatencyP999 => lat.map(|l| l.p999 as f64),
            Metric::LatencyP9999 => lat.map(|l| l.p9999 as f64),
            Metric::LatencyMax => lat.map(|l| l.max as f64),
            Metric::Late => Some(self.late as f64),
            _ => None,
        }
    }
}

/// A metric's value over the run (None: the run did not measure it, as
/// latency when nothing arrived).
pub fn metric(m: Metric, o: &Outcome, search: Option<&SearchResult>) -> Option<f64> {
    match m {
        Metric::ThroughputPps => search.and_then(|s| s.throughput_pps),
        // The back-to-back search's and the router's (`run` judges
        // them); a stateful test's (validation keeps them out).
        Metric::BackToBack
        | Metric::Learned
        | Metric::Connections
        | Metric::ConnectionsPerSecond
        | Metric::Transactions
        | Metric::Resets
        | Metric::Goodput => None,
        m => figures_of!(o).get(m),
    }
}

/// One stream's figure (`expect: [{stream: k}]`; validation keeps the
/// others out).
fn stream_metric(m: Metric, o: &wirelab_workload::load::StreamOutcome) -> Option<f64> {
    figures_of!(o).get(m)
}

/// The claims as report.html lists them: (claim, pass, observed).
pub(crate) fn claim_rows(expect: &[Claim]) -> Vec<(String, bool, String)> {
    expect
        .iter()
        .map(|c| (c.claim.clone(), c.pass, c.observed.clone()))
        .collect()
}

/// `expect:` judged against the run's `value` of each metric.
pub(crate) fn judge(
    expect: &[wirelab_spec::load::LoadExpect],
    value: impl Fn(&wirelab_spec::load::LoadExpect) -> Option<f64>,
) -> Vec<Claim> {
    expect
        .iter()
        .map(|x| {
            let (lo, hi) = x.bounds();
            let v = value(x);
            let pass = v.is_some_and(|v| {
                !matches!(lo, Some(lo) if v < lo) && !matches!(hi, Some(hi) if v > hi)
            });
            let observed = match (v, x.metric.unit()) {
                (None, _) => "not measured".into(),
                (Some(v), wirelab_spec::Unit::Nanos) => {
                    format!("{}", wirelab_spec::Nanos(v as u64))
                }
                (Some(v), wirelab_spec::Unit::BitsPerSec) => {
                    format!("{:.1} Mbit/s", v / 1e6)
                }
                (Some(v), _) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
                (Some(v), _) if (0.1..1e6).contains(&v.abs()) => format!("{v:.2}"),
                (Some(v), _) => format!("{v:.3e}"),
            };
            Claim {
                claim: x.describe(),
                pass,
                observed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_become_the_generators_terms() {
        let s = wirelab_spec::load::parse(
            "dut: {kind: router}
stream:
  size: 128
  pps: 1000
  edits:
    - {field: udp.sport, step: {from: 1000, to: 1999, by: 2}}
    - {field: ipv4.src, table: [7, 8, 9], carry: 0}
    - {field: ipv4.tos, random: {bits: 3}}
    - {field: ipv4.dst, ranged: {from: 10, to: 1009}}
",
        )
        .unwrap();
        let (setup, e, table) = setup(&s).unwrap();
        assert_eq!(setup.template.bytes.len(), 124);
        assert_eq!(table, vec![7, 8, 9]);
        assert_eq!(
            (e[0].offset, e[0].width, e[0].lo, e[0].hi, e[0].step),
            (34, 2, 1000, 1999, 2)
        );
        assert_eq!(
            (e[1].mode, e[1].carry_from, e[1].lo, e[1].hi),
            (EditMode::Indirect, Some(0), 0, 2)
        );
        assert_eq!(
            (e[2].mode, e[2].hi, e[2].offset, e[2].width),
            (EditMode::Random, 7, 15, 1)
        );
        // l = 1000: k = 9, the largest with 2^k <= l (Norma's Fig. 13 case).
        assert_eq!(
            (e[3].mode, e[3].rand_bits, e[3].lo, e[3].hi),
            (EditMode::Ranged, 9, 10, 1009)
        );
        assert_eq!(setup.rate.interval_ns, 1_000_000);
    }
}
