//! Norma's load test as a workload (seed 002; issue 20): the generator
//! (`wirelab_dataplane::load`) replicates a template out of a tester port
//! at the rate the control plane chose (`wirelab_load::rate`), the sink
//! on another tester port counts what the device under test delivers,
//! and every interval the version bit flips (§6.1): once the retired
//! version has had `grace` to drain through the DUT, both sides' banks of
//! it are read and cleared, so sent and received are counted over the
//! same packets. The naive totals are read at the flips, beside them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use wirelab_dataplane::load::{Bank, Edit, GenConfig, GenCounts, Sample, Tester};
use wirelab_load::measure::{Interval, Side};
use wirelab_load::rate::Plan;
use wirelab_load::template::Template;

/// Where the tester's ports are: namespaces and devices.
#[derive(Debug, Clone)]
pub struct Ports {
    pub tx_ns: String,
    pub tx_dev: String,
    pub rx_ns: String,
    pub rx_dev: String,
    /// The veth peer of the sending port (namespace, device), which must
    /// run NAPI to take redirected frames: a pass-all XDP program is put
    /// there for the run (None: the device needs none).
    pub tx_peer: Option<(String, String)>,
    /// The same for the receiving port, when a stream is sent from it.
    pub rx_peer: Option<(String, String)>,
}

/// The tester port a stream leaves by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Port {
    #[default]
    Tx,
    /// Towards the DUT's other side: not measured (its frames are for the
    /// DUT, as ARP replies are).
    Rx,
}

/// One stream to send.
#[derive(Debug, Clone)]
pub struct Stream {
    pub template: Template,
    pub rate: Plan,
    pub edits: Vec<Edit>,
    pub table: Vec<u32>,
    /// Later rates (Norma's steps and ramps), each at a flip: an interval
    /// has one rate.
    pub schedule: Vec<RateChange>,
    /// Sample frames whose sequence number is a multiple of this, as sent
    /// and as received (0: none).
    pub sample_every: u32,
    /// A size mix's frame lengths in the order sent (empty: the
    /// template's length).
    pub sizes: Vec<u16>,
    pub port: Port,
    /// How late the generator may fall (a stall: descheduled, an
    /// interrupt) and still send the slots it missed, back to back; later,
    /// it gives them up. Zero: 64 slots' worth or 200 µs, the longer
    /// (`tolerance_ns`), so a stall never becomes a burst the DUT would be
    /// blamed for.
    pub catch_up: Duration,
}

impl Stream {
    /// The meter's tolerance at `interval_ns` (`tolerance_ns`).
    pub fn tolerance_ns(&self, interval_ns: u64) -> u64 {
        tolerance_ns(interval_ns, self.catch_up)
    }

    /// Whether the sink counts it (a stream for the DUT itself, as ARP
    /// replies, is counted as sent only, and left out of the totals).
    pub fn measured(&self) -> bool {
        self.template.sink.port != 0
    }
}

/// The meter's tolerance (GCRA's τ, ITU-T I.371) for one frame per
/// `interval_ns`: `catch_up`, or, when longer, 64 slots (one live-frame
/// batch of the kernel's) or `MIN_TOLERANCE_NS`.
pub fn tolerance_ns(interval_ns: u64, catch_up: Duration) -> u64 {
    (interval_ns.saturating_mul(64))
        .max(MIN_TOLERANCE_NS)
        .max(catch_up.as_nanos().min(u64::MAX as u128) as u64)
}

/// The least the meter tolerates. A batch's frames leave together at its
/// end, and the DUT's work on them runs then, on the generator's CPU: at
/// the bridge path's limit here (about 830,000 frames/s, `wirelab bench
/// load`) 64 frames take about 77 µs, as long as 64 slots at 10 Gbit/s of
/// 1518-byte frames (79 µs). Measured, three interleaved pairs at 812,743
/// frames/s of 1518 bytes: 647,000-657,000 frames/s arrived with 64 slots,
/// 678,000-695,000 with 200 µs, and the meter held (dropped) a third as
/// many runs. Our reading: with 64 slots a batch often began further
/// behind than the tolerance, gave its slots up, and then held the runs
/// that came early.
pub const MIN_TOLERANCE_NS: u64 = 200_000;

/// Samples kept per side at most: the pcapng sample stays a sample.
pub const MAX_SAMPLES: usize = 100_000;

/// The rate from `at` (since the start) on.
#[derive(Debug, Clone, Serialize)]
pub struct RateChange {
    #[serde(serialize_with = "secs")]
    pub at: Duration,
    pub pps: f64,
    pub rate: Plan,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// How long, and how it is measured.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub duration: Duration,
    /// Between version flips (iperf3's -i).
    pub interval: Duration,
    /// Longer than the DUT can hold a packet (§6.1): a retired version is
    /// read this long after its flip.
    pub grace: Duration,
}

/// Latency figures of an interval (ns), from the histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    /// p99.99: the histogram's log-linear buckets keep it within 1.6%.
    pub p9999: u64,
    pub max: u64,
    pub mean: f64,
}

/// One interval's line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Seconds since the start, of the interval's two flips.
    pub start_s: f64,
    pub end_s: f64,
    /// The rate asked for in this interval.
    pub requested_pps: f64,
    #[serde(flatten)]
    pub counts: Interval,
    /// Rate between the interval's first and last packet at each side.
    pub sent_pps: Option<f64>,
    pub received_pps: Option<f64>,
    pub latency: Option<Latency>,
    /// Sequence numbers not above one seen before: reordered or duplicated.
    pub late: u64,
    /// With several streams, each one's (the figures above are all of
    /// them together).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamReport>,
}

/// One stream's part of an interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    pub requested_pps: f64,
    #[serde(flatten)]
    pub counts: Interval,
    pub received_pps: Option<f64>,
    pub latency: Option<Latency>,
    pub late: u64,
}

/// One stream's part of the run.
#[derive(Debug, Clone, Serialize)]
pub struct StreamOutcome {
    pub sent: u64,
    pub received: u64,
    pub sent_pps: Option<f64>,
    pub received_pps: Option<f64>,
    pub rate_error: Option<f64>,
    pub generator: GenCountsOut,
    pub generator_cpu_ns: u64,
    /// The CPU its generator ran on.
    pub cpu: usize,
    pub latency: Option<Latency>,
    pub late: u64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub intervals: Vec<Report>,
    /// Every packet sent and received, from the naive totals after the
    /// last version drained.
    pub sent: u64,
    pub received: u64,
    /// The rates between the first packet and the last, at each side.
    pub sent_pps: Option<f64>,
    pub received_pps: Option<f64>,
    /// (received rate − requested) / requested.
    pub rate_error: Option<f64>,
    /// The generator's own counts: meter slots given up (late), runs held.
    pub generator: GenCountsOut,
    /// CPU time of the generator's thread (ns): the tester's cost.
    pub generator_cpu_ns: u64,
    /// One-way latency over every stamped packet of the run (the
    /// intervals' histograms summed).
    pub latency: Option<Latency>,
    /// Sequence numbers received not above one seen before, over the run.
    pub late: u64,
    /// The run's latency histogram, its non-empty buckets: (the bucket's
    /// highest value in ns, frames), in order.
    pub latency_buckets: Vec<(u64, u64)>,
    /// The sampled frames, as sent and as received, in the order taken.
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// Samples taken beyond `MAX_SAMPLES` a side, or that the ring had no
    /// room for.
    pub samples_dropped: u64,
    /// With several streams, each one's (the figures above are all of
    /// them together: counts and rates summed, latency over every
    /// stamped frame, CPU time over every generator thread).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamOutcome>,
}

/// The run's latency, gathered interval by interval (each version's
/// histogram is cleared once read).
#[derive(Default, Clone)]
struct RunLatency {
    hist: Vec<u64>,
    min: Option<u64>,
    max: u64,
}

impl RunLatency {
    fn add(&mut self, h: &[u64], b: &Bank) {
        if b.stamped == 0 {
            return;
        }
        self.hist.resize(self.hist.len().max(h.len()), 0);
        for (t, x) in self.hist.iter_mut().zip(h) {
            *t += x;
        }
        self.min = Some(self.min.map_or(b.lat_min, |m| m.min(b.lat_min)));
        self.max = self.max.max(b.lat_max);
    }
    fn figures(&self) -> Option<Latency> {
        Some(figures(&self.hist, self.min?, self.max))
    }
    /// Another's frames added to these.
    fn merge(&mut self, o: &RunLatency) {
        let Some(m) = o.min else {
            return;
        };
        self.hist.resize(self.hist.len().max(o.hist.len()), 0);
        for (t, x) in self.hist.iter_mut().zip(&o.hist) {
            *t += x;
        }
        self.min = Some(self.min.map_or(m, |x| x.min(m)));
        self.max = self.max.max(o.max);
    }
}

fn figures(h: &[u64], min: u64, max: u64) -> Latency {
    use wirelab_load::hist;
    // A bucket's highest equivalent value may pass the largest value seen.
    let q = |x| hist::quantile(h, x).unwrap_or(0).clamp(min, max);
    Latency {
        min,
        p50: q(0.5),
        p99: q(0.99),
        p999: q(0.999),
        p9999: q(0.9999),
        max,
        mean: hist::mean(h).unwrap_or(0.0),
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct GenCountsOut {
    pub held: u64,
    pub skipped: u64,
    pub missed: u64,
    /// Frames sent a slot or more behind their time, catching up.
    pub behind: u64,
}

impl From<GenCounts> for GenCountsOut {
    fn from(c: GenCounts) -> Self {
        GenCountsOut {
            held: c.held,
            skipped: c.skipped,
            missed: c.missed,
            behind: c.behind,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Tester {
        what: String,
        source: wirelab_dataplane::Error,
    },
    #[error(transparent)]
    Netns(#[from] wirelab_netns::Error),
    #[error("{0}")]
    Other(String),
}

fn t<T>(what: &str, r: Result<T, wirelab_dataplane::Error>) -> Result<T, Error> {
    r.map_err(|source| Error::Tester {
        what: what.to_string(),
        source,
    })
}

fn ifindex(ns: &str, dev: &str) -> Result<u32, Error> {
    let i = wirelab_netns::in_netns(ns, || nix::net::if_::if_nametoindex(dev))?;
    i.map_err(|e| Error::Other(format!("finding {dev} in {ns}: {e}")))
}

fn side(b: &Bank) -> Side {
    Side {
        packets: b.packets,
        bytes: b.bytes,
        mean_ns: b.mean_ns(),
    }
}

/// An interval's latency histogram of stream `k`'s version `v` (empty
/// when nothing stamped arrived).
fn histogram(t: &Tester, k: u32, v: u32, b: &Bank) -> Result<Vec<u64>, Error> {
    if b.stamped == 0 {
        return Ok(Vec::new());
    }
    self::t("reading the latency histogram", t.sink_hist(k, v))
}

/// Runs the streams for `timing.duration` (or until `abort`), each on a
/// generator thread of its own (on CPUs of their own while there are
/// enough: the first on the CPU it starts on, the next ones on the CPUs
/// after it), calling `each` with every interval as it is measured. The
/// sink is attached for the run and detached when this returns, whatever
/// it returns.
pub fn run(
    ports: &Ports,
    streams: &[Stream],
    timing: Timing,
    abort: &AtomicBool,
    mut each: impl FnMut(&Report),
) -> Result<Outcome, Error> {
    let n = streams.len();
    let measured: Vec<bool> = streams.iter().map(Stream::measured).collect();
    if n == 0 || n > wirelab_dataplane::load::STREAMS as usize {
        return Err(Error::Other(format!(
            "{n} streams: the tester runs 1 to {}",
            wirelab_dataplane::load::STREAMS
        )));
    }
    interrupt_with_sigusr1();
    let mut tester = t("loading the tester's programs", Tester::load(false))?;
    let tx = ifindex(&ports.tx_ns, &ports.tx_dev)?;
    let rx = ifindex(&ports.rx_ns, &ports.rx_dev)? as i32;
    for (k, stream) in streams.iter().enumerate() {
        t(
            "configuring the sink",
            tester.configure_sink(k as u32, stream.template.sink, stream.sample_every),
        )?;
    }
    wirelab_netns::in_netns(&ports.rx_ns, || tester.attach_sink(rx))?.map_err(|source| {
        Error::Tester {
            what: format!("attaching the sink to {} in {}", ports.rx_dev, ports.rx_ns),
            source,
        }
    })?;
    let from_rx = streams.iter().any(|s| s.port == Port::Rx);
    for (ns, dev) in ports
        .tx_peer
        .iter()
        .chain(ports.rx_peer.iter().filter(|_| from_rx))
    {
        napi_on(&mut tester, ns, dev)?;
    }
    // The peer's NAPI, and all the DUT does with a packet, runs in the
    // generator's system call on the sending CPU (veth schedules its
    // peer's NAPI where the frame was sent), as softirq work. Threaded NAPI
    // would move it off that CPU, but on a machine of two cores its thread
    // waits milliseconds for a CPU and the veth ring (256 frames)
    // overflows; inline, the DUT forwards every packet in microseconds
    // and the generator is late now and then, which the meter counts
    // (slots given up) and the rate figures show.
    //
    // The editor's tables are one, the streams' laid end to end.
    let mut table = Vec::new();
    for (k, stream) in streams.iter().enumerate() {
        let tm = &stream.template;
        let base = table.len() as u16;
        table.extend_from_slice(&stream.table);
        let edits = stream
            .edits
            .iter()
            .map(|e| Edit {
                table: e.table + base,
                ..*e
            })
            .collect();
        t(
            "configuring the generator",
            tester.configure(
                k as u32,
                &GenConfig {
                    interval_ns: stream.rate.interval_ns,
                    // Late by up to the tolerance, the generator catches
                    // up; later, the slots are given up and counted.
                    tolerance_ns: stream.tolerance_ns(stream.rate.interval_ns),
                    ifindex: match stream.port {
                        Port::Tx => tx,
                        Port::Rx => rx as u32,
                    },
                    l3_off: tm.l3_off,
                    l4_off: tm.l4_off,
                    csum_off: tm.csum_off,
                    inner_csum_off: tm.inner_csum_off,
                    inner_l3_off: tm.inner_l3_off,
                    stamp_off: tm.stamp_off.unwrap_or(0),
                    units: stream.rate.units.iter().map(|u| (u.pass, u.skip)).collect(),
                    edits,
                    template: tm.bytes.clone(),
                    // A stream nothing receives has no sample to pair.
                    sample_every: if stream.measured() {
                        stream.sample_every
                    } else {
                        0
                    },
                    sizes: stream.sizes.clone(),
                    ipv6: tm.ipv6,
                    tcp: tm.tcp,
                    no_ip: tm.no_ip,
                },
            ),
        )?;
    }
    t("filling the editor's table", tester.set_table(0, &table))?;
    let gens = (0..n)
        .map(|k| t("opening the generator", tester.generator(k as u32)))
        .collect::<Result<Vec<_>, _>>()?;
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let end = started + timing.duration;
    let mut intervals = Vec::new();
    let mut version = 0u32;
    let mut naive_prev = vec![(0u64, 0u64); n];
    let mut prev_flip = 0.0;
    let mut run_lat = vec![RunLatency::default(); n];
    let mut pps_now: Vec<f64> = streams.iter().map(|s| s.rate.pps).collect();
    let mut applied = vec![Duration::ZERO; n];
    let mut samples = Samples::default();
    let tids: Vec<std::sync::OnceLock<libc::pthread_t>> =
        (0..n).map(|_| std::sync::OnceLock::new()).collect();
    let first_cpu = std::sync::OnceLock::new();
    let ran = std::thread::scope(|s| -> Result<Vec<(u64, usize)>, Error> {
        let threads: Vec<_> = (0..n)
            .map(|k| {
                let (gen, tid, stop, first_cpu) = (&gens[k], &tids[k], &stop, &first_cpu);
                let frame = &streams[k].template.bytes;
                let ns = match streams[k].port {
                    Port::Tx => &ports.tx_ns,
                    Port::Rx => &ports.rx_ns,
                };
                s.spawn(move || -> Result<(u64, usize), Error> {
                    wirelab_netns::in_netns(ns, || -> Result<(u64, usize), Error> {
                        // SAFETY: pthread_self has no preconditions.
                        tid.get_or_init(|| unsafe { libc::pthread_self() });
                        // The meter, the units, the editor and the sequence
                        // numbers are per-CPU state: a generator that
                        // migrated would go on from another CPU's (a stale
                        // schedule, numbers from 0 again). It stays on one.
                        let cpu = pin_generator(k, first_cpu)?;
                        if !stop.load(Ordering::SeqCst) {
                            t("generating", gen.generate_until_signalled(frame))?;
                        }
                        Ok((thread_cpu_ns(), cpu))
                    })?
                })
            })
            .collect();
        // Stops the generators however this scope ends: had the measuring
        // below panicked (a report printed to a closed pipe), the scope
        // would wait for ever on a generator nothing signals.
        let stopper = StopGenerators {
            stop: &stop,
            tids: &tids,
            threads: &threads,
        };
        let mut next_flip = started + timing.interval;
        let r = (|| -> Result<(), Error> {
            loop {
                let now = Instant::now();
                if abort.load(Ordering::SeqCst) || threads.iter().any(|h| h.is_finished()) {
                    break;
                }
                samples.drain(&tester)?;
                if now < next_flip.min(end) {
                    std::thread::sleep((next_flip.min(end) - now).min(Duration::from_millis(50)));
                    continue;
                }
                if now >= end {
                    break;
                }
                // A new rate starts with the interval it belongs to.
                let retired_pps = pps_now.clone();
                let upto = next_flip - started;
                for (k, stream) in streams.iter().enumerate() {
                    let from = applied[k];
                    for c in stream
                        .schedule
                        .iter()
                        .filter(|c| c.at > from && c.at <= upto)
                    {
                        let r = &c.rate;
                        t(
                            "changing the rate",
                            tester.set_rate(
                                k as u32,
                                r.interval_ns,
                                streams[k].tolerance_ns(r.interval_ns),
                                &r.units.iter().map(|u| (u.pass, u.skip)).collect::<Vec<_>>(),
                            ),
                        )?;
                        (applied[k], pps_now[k]) = (c.at, c.pps);
                    }
                }
                // Flip, then read the retired version once it drained.
                let retired = version;
                version ^= 1;
                t("flipping the version", tester.set_version(version))?;
                let flip_s = started.elapsed().as_secs_f64();
                let naive = naive_totals(&tester, n)?;
                std::thread::sleep(timing.grace);
                let rep = read_version(
                    &tester,
                    retired,
                    (prev_flip, flip_s),
                    (&naive, &naive_prev),
                    &mut run_lat,
                    (&retired_pps, &measured),
                )?;
                each(&rep);
                intervals.push(rep);
                naive_prev = naive;
                prev_flip = flip_s;
                next_flip += timing.interval;
            }
            Ok(())
        })();
        drop(stopper);
        let ran = threads
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Result<Vec<_>, Error>>()?;
        r?;
        Ok(ran)
    })?;
    // The last interval: everything sent has stopped; let it drain.
    std::thread::sleep(timing.grace);
    let end_s = started.elapsed().as_secs_f64();
    let naive = naive_totals(&tester, n)?;
    let last = read_version(
        &tester,
        version,
        (prev_flip, end_s),
        (&naive, &naive_prev),
        &mut run_lat,
        (&pps_now, &measured),
    )?;
    if last.counts.sent.packets > 0 {
        each(&last);
        intervals.push(last);
    }
    samples.drain(&tester)?;
    let lost = t("reading the samples lost", tester.samples_lost())?;
    let mut per = Vec::with_capacity(n);
    for (k, stream) in streams.iter().enumerate() {
        let k32 = k as u32;
        let (gs, rs) = (
            t("reading the totals", tester.gen_bank(k32, 2))?,
            t("reading the totals", tester.sink_bank(k32, 2))?,
        );
        let counts = t("reading the generator", tester.gen_counts(k32))?;
        per.push(StreamOutcome {
            sent: gs.packets,
            received: rs.packets,
            sent_pps: gs.pps(),
            received_pps: rs.pps(),
            rate_error: if stream.schedule.is_empty() {
                rs.pps().map(|p| (p - stream.rate.pps) / stream.rate.pps)
            } else {
                worst_full_interval_error(
                    &intervals
                        .iter()
                        .map(|i| match i.streams.get(k) {
                            Some(x) => (x.requested_pps, x.received_pps),
                            None => (i.requested_pps, i.received_pps),
                        })
                        .collect::<Vec<_>>(),
                )
            },
            generator: counts.into(),
            generator_cpu_ns: ran[k].0,
            cpu: ran[k].1,
            latency: run_lat[k].figures(),
            late: intervals
                .iter()
                .map(|i| i.streams.get(k).map_or(i.late, |x| x.late))
                .sum(),
        });
    }
    // The totals are the measured streams'.
    let mut all = RunLatency::default();
    for (r, _) in run_lat.iter().zip(&measured).filter(|(_, &m)| m) {
        all.merge(r);
    }
    let counted = || {
        per.iter()
            .zip(&measured)
            .filter(|(_, &m)| m)
            .map(|(x, _)| x)
    };
    let sum_opt =
        |f: &dyn Fn(&StreamOutcome) -> Option<f64>| -> Option<f64> { counted().map(f).sum() };
    let requested: f64 = streams
        .iter()
        .filter(|s| s.measured())
        .map(|s| s.rate.pps)
        .sum();
    let received_pps = sum_opt(&|x| x.received_pps);
    let scheduled = streams.iter().any(|s| !s.schedule.is_empty());
    Ok(Outcome {
        sent: counted().map(|x| x.sent).sum(),
        received: counted().map(|x| x.received).sum(),
        sent_pps: sum_opt(&|x| x.sent_pps),
        received_pps,
        rate_error: if scheduled {
            worst_full_interval_error(
                &intervals
                    .iter()
                    .map(|i| (i.requested_pps, i.received_pps))
                    .collect::<Vec<_>>(),
            )
        } else {
            received_pps.map(|p| (p - requested) / requested)
        },
        generator: per
            .iter()
            .fold(GenCountsOut::default(), |a, x| GenCountsOut {
                held: a.held + x.generator.held,
                skipped: a.skipped + x.generator.skipped,
                missed: a.missed + x.generator.missed,
                behind: a.behind + x.generator.behind,
            }),
        generator_cpu_ns: per.iter().map(|x| x.generator_cpu_ns).sum(),
        latency: all.figures(),
        latency_buckets: all
            .hist
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, c)| (wirelab_load::hist::range(b).1, *c))
            .collect(),
        late: intervals.iter().map(|i| i.late).sum(),
        samples_dropped: samples.dropped + lost.0 + lost.1,
        samples: samples.kept,
        intervals,
        streams: if n > 1 { per } else { Vec::new() },
    })
}

/// With the rate changing, the run's rate error is its worst interval's,
/// received against asked, over the intervals between the first and the
/// last (which the start and the end cut short); None with fewer than
/// three.
/// `intervals` are (requested, received) rates.
fn worst_full_interval_error(intervals: &[(f64, Option<f64>)]) -> Option<f64> {
    if intervals.len() < 3 {
        return None;
    }
    intervals[1..intervals.len() - 1]
        .iter()
        .map(|&(asked, got)| got.map_or(1.0, |p| (p - asked) / asked))
        .max_by(|a, b| a.abs().total_cmp(&b.abs()))
}

/// The sample as it is drained: at most `MAX_SAMPLES` a side kept.
#[derive(Default)]
struct Samples {
    kept: Vec<Sample>,
    per_side: [usize; 2],
    dropped: u64,
}

impl Samples {
    fn drain(&mut self, tester: &Tester) -> Result<(), Error> {
        t(
            "reading the sample",
            tester.drain_samples(|s| {
                let side = &mut self.per_side[s.received as usize];
                if *side < MAX_SAMPLES {
                    *side += 1;
                    self.kept.push(s);
                } else {
                    self.dropped += 1;
                }
            }),
        )
    }
}

/// Binds generator `k`'s thread to a CPU and returns it: the first
/// generator to the CPU it runs on, generator k to the k-th allowed CPU
/// after that one (round the allowed set: with more streams than CPUs,
/// some share one).
fn pin_generator(k: usize, first: &std::sync::OnceLock<usize>) -> Result<usize, Error> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    let me = nix::unistd::Pid::from_raw(0);
    let allowed = sched_getaffinity(me)
        .map_err(|e| Error::Other(format!("reading the CPUs allowed: {e}")))?;
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    let here = || {
        // SAFETY: sched_getcpu has no preconditions.
        usize::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0)
    };
    let cpu = if k == 0 {
        *first.get_or_init(here)
    } else {
        // Generator 0 may not have started yet: then this one's CPU
        // counts as the first.
        let base = *first.get_or_init(here);
        let at = cpus.iter().position(|&c| c == base).unwrap_or(0);
        cpus[(at + k) % cpus.len().max(1)]
    };
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| Error::Other(format!("CPU {cpu}: {e}")))?;
    sched_setaffinity(me, &set)
        .map_err(|e| Error::Other(format!("pinning a generator to CPU {cpu}: {e}")))?;
    Ok(cpu)
}

/// The calling thread's CPU time, user and system (ns).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// SIGUSR1 interrupts the generator's system call and does nothing else
/// (its default would end the process).
/// Ends the generators' threads when dropped.
struct StopGenerators<'a, 's, T> {
    stop: &'a AtomicBool,
    tids: &'a [std::sync::OnceLock<libc::pthread_t>],
    threads: &'a [std::thread::ScopedJoinHandle<'s, T>],
}

impl<T> Drop for StopGenerators<'_, '_, T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A generator's one long call ends at a signal; until its thread
        // is in the call, signal again.
        for (tid, thread) in self.tids.iter().zip(self.threads) {
            while !thread.is_finished() {
                if let Some(&th) = tid.get() {
                    // SAFETY: the thread is alive (not finished, scoped).
                    unsafe { libc::pthread_kill(th, libc::SIGUSR1) };
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// What the path from the tester's port to the receiving side takes in at
/// most, frames/s of `frame`: the least a source can do (each live frame
/// sent on as it is, `wl_raw`) into the least a sink can do (count and
/// drop, `wl_drop`), for `duration`, on one pinned CPU as the generator
/// runs. The bench sets the generator against it (issue 20: within 80%).
pub fn path_limit(ports: &Ports, frame: &[u8], duration: Duration) -> Result<f64, Error> {
    interrupt_with_sigusr1();
    let mut tester = t("loading the tester's programs", Tester::load(false))?;
    let tx = ifindex(&ports.tx_ns, &ports.tx_dev)?;
    let rx = ifindex(&ports.rx_ns, &ports.rx_dev)? as i32;
    t(
        "configuring the baseline source",
        tester.configure(
            0,
            &GenConfig {
                ifindex: tx,
                template: frame.to_vec(),
                ..Default::default()
            },
        ),
    )?;
    wirelab_netns::in_netns(&ports.rx_ns, || tester.attach_drop(rx))?.map_err(|source| {
        Error::Tester {
            what: format!(
                "attaching the bare sink to {} in {}",
                ports.rx_dev, ports.rx_ns
            ),
            source,
        }
    })?;
    if let Some((ns, dev)) = &ports.tx_peer {
        napi_on(&mut tester, ns, dev)?;
    }
    let raw = t("opening the baseline source", tester.raw_generator())?;
    let (stop, tid, first) = (
        AtomicBool::new(false),
        std::sync::OnceLock::new(),
        std::sync::OnceLock::new(),
    );
    std::thread::scope(|s| -> Result<f64, Error> {
        let thread = s.spawn(|| -> Result<(), Error> {
            wirelab_netns::in_netns(&ports.tx_ns, || -> Result<(), Error> {
                // SAFETY: pthread_self has no preconditions.
                tid.get_or_init(|| unsafe { libc::pthread_self() });
                pin_generator(0, &first)?;
                if !stop.load(Ordering::SeqCst) {
                    t("sending", raw.generate_until_signalled(frame))?;
                }
                Ok(())
            })?
        });
        let threads = [thread];
        let _stopper = StopGenerators {
            stop: &stop,
            tids: std::slice::from_ref(&tid),
            threads: &threads,
        };
        // Counted from a moment after the start to one before the end:
        // neither the call's setup nor its teardown is in the rate.
        std::thread::sleep(Duration::from_millis(300));
        let (c0, t0) = (t("reading the count", tester.dropped())?, Instant::now());
        std::thread::sleep(duration);
        let (c1, t1) = (t("reading the count", tester.dropped())?, Instant::now());
        if threads[0].is_finished() {
            return Err(Error::Other("the baseline source stopped early".into()));
        }
        Ok((c1 - c0) as f64 / (t1 - t0).as_secs_f64())
    })
}

/// The pass-all program on `dev` in `ns`, a sending port's veth peer: a
/// veth takes redirected frames only while its peer runs NAPI.
fn napi_on(tester: &mut Tester, ns: &str, dev: &str) -> Result<(), Error> {
    let i = ifindex(ns, dev)? as i32;
    wirelab_netns::in_netns(ns, || tester.attach_pass(i))?.map_err(|source| Error::Tester {
        what: format!("turning NAPI on at {dev} in {ns}"),
        source,
    })
}

fn interrupt_with_sigusr1() {
    extern "C" fn nothing(_: libc::c_int) {}
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a handler that does nothing is async-signal-safe; no
        // SA_RESTART, so the interrupted call returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = nothing as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
    });
}

/// Each stream's naive totals: (sent, received).
type Totals = Vec<(u64, u64)>;

fn naive_totals(tester: &Tester, n: usize) -> Result<Totals, Error> {
    (0..n as u32)
        .map(|k| {
            Ok((
                t("reading the totals", tester.gen_bank(k, 2))?.packets,
                t("reading the totals", tester.sink_bank(k, 2))?.packets,
            ))
        })
        .collect()
}

/// Two sides' counts as one: packets and bytes summed, the mean time
/// over all their packets.
fn sum_sides(a: Side, b: Side) -> Side {
    let total = a.packets + b.packets;
    Side {
        packets: total,
        bytes: a.bytes + b.bytes,
        mean_ns: match (a.mean_ns, b.mean_ns) {
            (Some(x), Some(y)) => {
                Some((x * a.packets as f64 + y * b.packets as f64) / total as f64)
            }
            (x, None) => x,
            (None, y) => y,
        },
    }
}

/// Version `v` of every stream, read and cleared: the interval's report,
/// all streams together, with each stream's beside it when there are
/// several.
fn read_version(
    tester: &Tester,
    v: u32,
    (start_s, end_s): (f64, f64),
    (naive, naive_prev): (&Totals, &Totals),
    run: &mut [RunLatency],
    (requested_pps, measured): (&[f64], &[bool]),
) -> Result<Report, Error> {
    let mut per = Vec::new();
    let mut hist_all: Vec<u64> = Vec::new();
    let (mut lat_min, mut lat_max) = (None::<u64>, 0u64);
    let (mut sent, mut received) = (Side::default(), Side::default());
    let (mut naive_sent, mut naive_received) = (0, 0);
    let (mut sent_pps, mut received_pps) = (Some(0.0), Some(0.0));
    let mut late = 0;
    for (k, lat_run) in run.iter_mut().enumerate() {
        let k32 = k as u32;
        let o = t("reading the generator's bank", tester.gen_bank(k32, v))?;
        let i = t("reading the sink's bank", tester.sink_bank(k32, v))?;
        let h = histogram(tester, k32, v, &i)?;
        lat_run.add(&h, &i);
        t("clearing a bank", tester.clear_gen_bank(k32, v))?;
        t("clearing a bank", tester.clear_sink_bank(k32, v))?;
        let counts = Interval::of(
            side(&o),
            side(&i),
            naive[k].0 - naive_prev[k].0,
            naive[k].1 - naive_prev[k].1,
        );
        let rep = StreamReport {
            requested_pps: requested_pps[k],
            counts: counts.clone(),
            received_pps: i.pps(),
            latency: (i.stamped > 0).then(|| figures(&h, i.lat_min, i.lat_max)),
            late: i.late_seq,
        };
        per.push(rep);
        // A stream for the DUT itself (ARP replies) is left out of the
        // totals.
        if !measured[k] {
            continue;
        }
        if i.stamped > 0 {
            hist_all.resize(hist_all.len().max(h.len()), 0);
            for (t, x) in hist_all.iter_mut().zip(&h) {
                *t += x;
            }
            lat_min = Some(lat_min.map_or(i.lat_min, |m| m.min(i.lat_min)));
            lat_max = lat_max.max(i.lat_max);
        }
        sent = sum_sides(sent, counts.sent);
        received = sum_sides(received, counts.received);
        naive_sent += naive[k].0 - naive_prev[k].0;
        naive_received += naive[k].1 - naive_prev[k].1;
        // A stream silent in this interval (an off phase) adds nothing.
        sent_pps = match (sent_pps, o.pps()) {
            (Some(a), Some(b)) => Some(a + b),
            (a, None) if o.packets == 0 => a,
            _ => None,
        };
        received_pps = match (received_pps, i.pps()) {
            (Some(a), Some(b)) => Some(a + b),
            (a, None) if i.packets == 0 => a,
            _ => None,
        };
        late += i.late_seq;
    }
    let none_sent = sent.packets == 0;
    Ok(Report {
        start_s,
        end_s,
        requested_pps: requested_pps
            .iter()
            .zip(measured)
            .filter(|(_, &m)| m)
            .map(|(p, _)| p)
            .sum(),
        counts: Interval::of(sent, received, naive_sent, naive_received),
        sent_pps: sent_pps.filter(|_| !none_sent),
        received_pps: received_pps.filter(|_| received.packets > 0),
        latency: lat_min.map(|m| figures(&hist_all, m, lat_max)),
        late,
        streams: if per.len() > 1 { per } else { Vec::new() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_tolerates_64_slots_or_the_catch_up_asked_for() {
        assert_eq!(tolerance_ns(10_000, Duration::ZERO), 640_000);
        // At high rates, 200 µs: more than 64 slots.
        assert_eq!(tolerance_ns(1_231, Duration::ZERO), 200_000);
        assert_eq!(
            tolerance_ns(10_000, Duration::from_millis(100)),
            100_000_000
        );
        // A catch-up shorter than 64 slots does not shrink the tolerance.
        assert_eq!(
            tolerance_ns(1_000_000, Duration::from_millis(10)),
            64_000_000
        );
    }
}
