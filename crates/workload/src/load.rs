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
}

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
}

/// The run's latency, gathered interval by interval (each version's
/// histogram is cleared once read).
#[derive(Default)]
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
}

impl From<GenCounts> for GenCountsOut {
    fn from(c: GenCounts) -> Self {
        GenCountsOut {
            held: c.held,
            skipped: c.skipped,
            missed: c.missed,
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

/// An interval's latency figures, and its histogram added to the run's.
fn latency(t: &Tester, v: u32, b: &Bank, run: &mut RunLatency) -> Result<Option<Latency>, Error> {
    if b.stamped == 0 {
        return Ok(None);
    }
    let h = self::t("reading the latency histogram", t.sink_hist(0, v))?;
    run.add(&h, b);
    Ok(Some(figures(&h, b.lat_min, b.lat_max)))
}

/// Runs the stream for `timing.duration` (or until `abort`), calling
/// `each` with every interval as it is measured. The sink is attached
/// for the run and detached when this returns, whatever it returns.
pub fn run(
    ports: &Ports,
    stream: &Stream,
    timing: Timing,
    abort: &AtomicBool,
    mut each: impl FnMut(&Report),
) -> Result<Outcome, Error> {
    interrupt_with_sigusr1();
    let mut tester = t("loading the tester's programs", Tester::load(false))?;
    let tx = ifindex(&ports.tx_ns, &ports.tx_dev)?;
    let rx = ifindex(&ports.rx_ns, &ports.rx_dev)? as i32;
    t(
        "configuring the sink",
        tester.configure_sink(0, stream.template.sink, stream.sample_every),
    )?;
    wirelab_netns::in_netns(&ports.rx_ns, || tester.attach_sink(rx))?.map_err(|source| {
        Error::Tester {
            what: format!("attaching the sink to {} in {}", ports.rx_dev, ports.rx_ns),
            source,
        }
    })?;
    if let Some((ns, dev)) = &ports.tx_peer {
        let i = ifindex(ns, dev)? as i32;
        wirelab_netns::in_netns(ns, || tester.attach_pass(i))?.map_err(|source| Error::Tester {
            what: format!("turning NAPI on at {dev} in {ns}"),
            source,
        })?;
    }
    // The peer's NAPI, and all the DUT does with a packet, runs in the
    // generator's system call on the sending CPU (veth schedules its
    // peer's NAPI where the frame was sent), as softirq work. Threaded NAPI
    // would move it off that CPU, but on a machine of two cores its thread
    // waits milliseconds for a CPU and the veth ring (256 frames)
    // overflows; inline, the DUT forwards every packet in microseconds
    // and the generator is late now and then, which the meter counts
    // (slots given up) and the rate figures show.
    let tm = &stream.template;
    t(
        "configuring the generator",
        tester.configure(
            0,
            &GenConfig {
                interval_ns: stream.rate.interval_ns,
                // Late by up to 64 slots (one batch of the kernel's), the
                // generator catches up; later, the slots are given up and
                // counted, not sent back to back.
                tolerance_ns: stream.rate.interval_ns * 64,
                ifindex: tx,
                l3_off: tm.l3_off,
                l4_off: tm.l4_off,
                csum_off: tm.csum_off,
                inner_csum_off: tm.inner_csum_off,
                inner_l3_off: tm.inner_l3_off,
                stamp_off: tm.stamp_off.unwrap_or(0),
                units: stream.rate.units.iter().map(|u| (u.pass, u.skip)).collect(),
                edits: stream.edits.clone(),
                template: tm.bytes.clone(),
                sample_every: stream.sample_every,
                sizes: stream.sizes.clone(),
                ipv6: tm.ipv6,
                tcp: tm.tcp,
            },
        ),
    )?;
    t(
        "filling the editor's table",
        tester.set_table(0, &stream.table),
    )?;
    let gen = t("opening the generator", tester.generator(0))?;
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let end = started + timing.duration;
    let frame = tm.bytes.clone();
    let mut intervals = Vec::new();
    let mut version = 0u32;
    let mut naive_prev = (0u64, 0u64);
    let mut prev_flip = 0.0;
    let mut run_lat = RunLatency::default();
    let mut pps_now = stream.rate.pps;
    let mut samples = Samples::default();
    let mut applied = Duration::ZERO;
    let tid = std::sync::OnceLock::new();
    let generator_cpu_ns = std::thread::scope(|s| -> Result<u64, Error> {
        let gen_thread = s.spawn(|| -> Result<u64, Error> {
            wirelab_netns::in_netns(&ports.tx_ns, || -> Result<u64, Error> {
                // SAFETY: pthread_self has no preconditions.
                tid.get_or_init(|| unsafe { libc::pthread_self() });
                // The meter, the units, the editor and the sequence numbers
                // are per-CPU state: a generator that migrated would go on
                // from another CPU's (a stale schedule, numbers from 0
                // again). It stays on the CPU it starts on.
                pin_to_this_cpu()?;
                if !stop.load(Ordering::SeqCst) {
                    t("generating", gen.generate_until_signalled(&frame))?;
                }
                Ok(thread_cpu_ns())
            })?
        });
        // Stops the generator however this scope ends: had the measuring
        // below panicked (a report printed to a closed pipe), the scope
        // would wait for ever on a generator nothing signals.
        let stopper = StopGenerator {
            stop: &stop,
            tid: &tid,
            thread: &gen_thread,
        };
        let mut next_flip = started + timing.interval;
        let r = (|| -> Result<(), Error> {
            loop {
                let now = Instant::now();
                if abort.load(Ordering::SeqCst) || gen_thread.is_finished() {
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
                let retired_pps = pps_now;
                let (from, upto) = (applied, next_flip - started);
                for c in stream
                    .schedule
                    .iter()
                    .filter(|c| c.at > from && c.at <= upto)
                {
                    let r = &c.rate;
                    t(
                        "changing the rate",
                        tester.set_rate(
                            0,
                            r.interval_ns,
                            r.interval_ns * 64,
                            &r.units.iter().map(|u| (u.pass, u.skip)).collect::<Vec<_>>(),
                        ),
                    )?;
                    (applied, pps_now) = (c.at, c.pps);
                }
                // Flip, then read the retired version once it drained.
                let retired = version;
                version ^= 1;
                t("flipping the version", tester.set_version(version))?;
                let flip_s = started.elapsed().as_secs_f64();
                let naive = naive_totals(&tester)?;
                std::thread::sleep(timing.grace);
                let rep = read_version(
                    &tester,
                    retired,
                    (prev_flip, flip_s),
                    naive,
                    naive_prev,
                    &mut run_lat,
                    retired_pps,
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
        let cpu = gen_thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        r?;
        Ok(cpu)
    })?;
    // The last interval: everything sent has stopped; let it drain.
    std::thread::sleep(timing.grace);
    let end_s = started.elapsed().as_secs_f64();
    let naive = naive_totals(&tester)?;
    let last = read_version(
        &tester,
        version,
        (prev_flip, end_s),
        naive,
        naive_prev,
        &mut run_lat,
        pps_now,
    )?;
    if last.counts.sent.packets > 0 {
        each(&last);
        intervals.push(last);
    }
    let (gs, rs) = (
        t("reading the totals", tester.gen_bank(0, 2))?,
        t("reading the totals", tester.sink_bank(0, 2))?,
    );
    let counts = t("reading the generator", tester.gen_counts(0))?;
    samples.drain(&tester)?;
    let lost = t("reading the samples lost", tester.samples_lost())?;
    Ok(Outcome {
        sent: gs.packets,
        received: rs.packets,
        sent_pps: gs.pps(),
        received_pps: rs.pps(),
        rate_error: if stream.schedule.is_empty() {
            rs.pps().map(|p| (p - stream.rate.pps) / stream.rate.pps)
        } else {
            worst_full_interval_error(&intervals)
        },
        generator: counts.into(),
        generator_cpu_ns,
        latency: run_lat.figures(),
        latency_buckets: run_lat
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
    })
}

/// With the rate changing, the run's rate error is its worst interval's,
/// received against asked, over the intervals between the first and the
/// last (which the start and the end cut short); None with fewer than
/// three.
fn worst_full_interval_error(intervals: &[Report]) -> Option<f64> {
    if intervals.len() < 3 {
        return None;
    }
    intervals[1..intervals.len() - 1]
        .iter()
        .map(|i| {
            i.received_pps
                .map_or(1.0, |p| (p - i.requested_pps) / i.requested_pps)
        })
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

/// Binds the calling thread to the CPU it runs on.
fn pin_to_this_cpu() -> Result<(), Error> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    let mut set = nix::sched::CpuSet::new();
    usize::try_from(cpu)
        .map_err(|_| Error::Other("sched_getcpu failed".into()))
        .and_then(|c| {
            set.set(c)
                .map_err(|e| Error::Other(format!("CPU {c}: {e}")))
        })?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| Error::Other(format!("pinning the generator to CPU {cpu}: {e}")))
}

/// The calling thread's CPU time, user and system (ns).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// SIGUSR1 interrupts the generator's system call and does nothing else
/// (its default would end the process).
/// Ends the generator's thread when dropped.
struct StopGenerator<'a, 's, T> {
    stop: &'a AtomicBool,
    tid: &'a std::sync::OnceLock<libc::pthread_t>,
    thread: &'a std::thread::ScopedJoinHandle<'s, T>,
}

impl<T> Drop for StopGenerator<'_, '_, T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The generator's one long call ends at a signal; until its thread
        // is in the call, signal again.
        while !self.thread.is_finished() {
            if let Some(&th) = self.tid.get() {
                // SAFETY: the thread is alive (not finished, scoped).
                unsafe { libc::pthread_kill(th, libc::SIGUSR1) };
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
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

fn naive_totals(tester: &Tester) -> Result<(u64, u64), Error> {
    Ok((
        t("reading the totals", tester.gen_bank(0, 2))?.packets,
        t("reading the totals", tester.sink_bank(0, 2))?.packets,
    ))
}

fn read_version(
    tester: &Tester,
    v: u32,
    (start_s, end_s): (f64, f64),
    naive: (u64, u64),
    naive_prev: (u64, u64),
    run: &mut RunLatency,
    requested_pps: f64,
) -> Result<Report, Error> {
    let o = t("reading the generator's bank", tester.gen_bank(0, v))?;
    let i = t("reading the sink's bank", tester.sink_bank(0, v))?;
    let lat = latency(tester, v, &i, run)?;
    t("clearing a bank", tester.clear_gen_bank(0, v))?;
    t("clearing a bank", tester.clear_sink_bank(0, v))?;
    Ok(Report {
        start_s,
        end_s,
        requested_pps,
        counts: Interval::of(
            side(&o),
            side(&i),
            naive.0 - naive_prev.0,
            naive.1 - naive_prev.1,
        ),
        sent_pps: o.pps(),
        received_pps: i.pps(),
        latency: lat,
        late: i.late_seq,
    })
}
