//! vAQM (NetBump, seed 003): what each of the switch's virtual queues did,
//! judged against its discipline, and how close its estimate came to the
//! real queue behind the port (§6.2.2).
//!
//! The trace carries, per packet, the queue, its estimate after the packet
//! and the verdict (the mirror header); the run facts carry each queue's
//! configuration and the ground-truth samples of the real queue.

use std::collections::BTreeMap;

use wirelab_spec::Unit;
use wirelab_trace::Aqm;

use crate::model::evidence;
use crate::truth::VqFacts;
use crate::{Analyzer, Finding, Input};

pub struct Vaqm;

const A: &str = "vaqm";
/// An Ethernet frame at a 1500-byte MTU: what a qdisc counts per full packet.
pub const MTU_FRAME: u64 = 1514;

const DCTCP_RULE: &str =
    "DCTCP (Alizadeh et al. 2010 §3.1): mark CE when the instantaneous queue exceeds K";
const QCN_RULE: &str =
    "802.1Qau (NetBump §4.3): only a QCN congestion point sends CNMs, with |Fb| quantised to 1..fb_max";
const CNM_RULE: &str =
    "802.1Qau (NetBump §4.3): every CNM reaches the reaction point it is addressed to";
const REPLAY_RULE: &str =
    "NetBump Fig. 5: the switch's estimate is the leaky bucket of the packets it queued, at its drain rate";
const RED_RULE: &str =
    "RED (Floyd & Jacobson 1993 §4): no marks below min_th; above max_th every packet is dropped";

impl Analyzer for Vaqm {
    fn name(&self) -> &'static str {
        "vaqm"
    }

    fn findings(&self) -> &'static [(&'static str, Unit)] {
        &[
            ("violations", Unit::Count),
            ("wrong-decision", Unit::Count),
            ("queue", Unit::Bytes),
            ("marks", Unit::Count),
            ("drops", Unit::Count),
            ("overflows", Unit::Count),
            ("red-average", Unit::Bytes),
            ("error", Unit::Bytes),
            ("real-queue", Unit::Bytes),
            ("cnms", Unit::Count),
            ("qcn-feedback", Unit::Count),
            ("send-rate", Unit::BitsPerSec),
            ("rp-rate", Unit::BitsPerSec),
            ("cnm-lost", Unit::Count),
            ("replay-mismatch", Unit::Count),
            ("distributed-error", Unit::Bytes),
            ("distributed-truth-error", Unit::Bytes),
        ]
    }

    fn about(&self) -> &'static str {
        "virtual queues: occupancy, marks and drops against the discipline; the estimate against the real queue"
    }

    fn run(&self, input: &Input) -> (u64, Vec<Finding>) {
        let facts: &[VqFacts] = input.facts.map_or(&[], |f| &f.vaqm);
        let mut per: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, p) in input.trace.packets.iter().enumerate() {
            if let Some(m) = p.meta.as_ref().filter(|m| m.vq > 0) {
                per.entry(m.vq).or_default().push(i);
            }
        }
        let mut out = Vec::new();
        let mut checks = 0;
        // Every finding names its queue (`expect: {queue: N, ...}`).
        let tag = |out: &mut Vec<Finding>, from: usize, vq: u32| {
            for f in &mut out[from..] {
                f.queue = Some(vq);
            }
        };
        for (&vq, idxs) in &per {
            let f = facts.iter().find(|f| f.id == vq);
            let from = out.len();
            checks += judge(input, vq, idxs, f, &mut out);
            tag(&mut out, from, vq);
        }
        let t0 = input.trace.packets.first().map_or(0, |p| p.ts_ns);
        for f in facts {
            let from = out.len();
            truth(f, t0, &mut out);
            tag(&mut out, from, f.id);
        }
        checks += reaction_points(input, t0, &mut out);
        (checks, out)
    }
}

fn name_of(vq: u32, f: Option<&VqFacts>) -> String {
    match f.and_then(|f| f.port.as_deref()) {
        Some(p) => format!("vq {vq} (port to {p})"),
        None => format!("vq {vq}"),
    }
}

/// Occupancy, marks and drops of one queue, and each verdict against its
/// discipline. Returns the decisions checked.
fn judge(
    input: &Input,
    vq: u32,
    idxs: &[usize],
    f: Option<&VqFacts>,
    out: &mut Vec<Finding>,
) -> u64 {
    let trace = input.trace;
    let who = name_of(vq, f);
    let meta = |i: usize| trace.packets[i].meta.as_ref().expect("filtered on meta");
    let queue: Vec<f64> = idxs.iter().map(|&i| f64::from(meta(i).vq_bytes)).collect();
    let t0 = trace.packets.first().map_or(0, |p| p.ts_ns);
    let over_time: Vec<(f64, f64)> = idxs
        .iter()
        .map(|&i| {
            (
                secs(trace.packets[i].ts_ns, t0),
                f64::from(meta(i).vq_bytes),
            )
        })
        .collect();
    let marks = idxs.iter().filter(|&&i| meta(i).aqm == Aqm::Mark).count();
    let drops = idxs.iter().filter(|&&i| meta(i).aqm == Aqm::Drop).count();
    let overflows = idxs
        .iter()
        .filter(|&&i| meta(i).aqm == Aqm::Overflow)
        .count();
    out.extend(
        Finding::summarized(A, "queue", Unit::Bytes, queue, |d| {
            format!(
                "{who}: estimated occupancy at {} packets: median {:.0}B, p99 {:.0}B, max {:.0}B",
                d.count, d.p50, d.p99, d.max
            )
        })
        .map(|f| f.series(who.clone(), over_time)),
    );
    out.push(Finding::measurement(
        A,
        "marks",
        marks as f64,
        Unit::Count,
        format!("{who}: {marks} of {} packets marked CE", idxs.len()),
    ));
    out.push(Finding::measurement(
        A,
        "drops",
        drops as f64,
        Unit::Count,
        format!("{who}: {drops} of {} packets dropped", idxs.len()),
    ));
    if overflows > 0 {
        out.push(Finding::measurement(
            A,
            "overflows",
            overflows as f64,
            Unit::Count,
            format!(
                "{who}: {overflows} of {} packets found the emulated buffer full (the port tail-drops them)",
                idxs.len()
            ),
        ));
    }
    let cnms: Vec<usize> = idxs.iter().copied().filter(|&i| meta(i).cnm > 0).collect();
    let qcn = f.and_then(|f| f.qcn.as_ref());
    if qcn.is_some() || !cnms.is_empty() {
        qcn_findings(input, &who, idxs, &cnms, out);
    }
    let Some(f) = f else { return 0 };
    let mut checks = 0;
    if let Some(d) = &f.distributed {
        checks += distributed(input, &who, idxs, f, d, out);
    }
    for &i in &cnms {
        checks += 1;
        let fb = meta(i).cnm;
        match qcn {
            None => out.push(
                Finding::violation(
                    A,
                    "wrong-decision",
                    QCN_RULE,
                    format!("{who}: a CNM (|Fb| {fb}) from a queue without `qcn`"),
                )
                .evidence([evidence(trace, i)]),
            ),
            Some(q) if fb > q.fb_max => out.push(
                Finding::violation(
                    A,
                    "wrong-decision",
                    QCN_RULE,
                    format!("{who}: a CNM with |Fb| {fb} above fb_max = {}", q.fb_max),
                )
                .evidence([evidence(trace, i)]),
            ),
            Some(_) => {}
        }
    }
    let mut wrong = |i: usize, rule: &'static str, msg: String| {
        out.push(
            Finding::violation(A, "wrong-decision", rule, format!("{who}: {msg}"))
                .evidence([evidence(trace, i)]),
        );
    };
    if let Some(dc) = &f.dctcp {
        let k = dc.k.0;
        for &i in idxs {
            let m = meta(i);
            let q = u64::from(m.vq_bytes);
            if m.aqm == Aqm::Overflow {
                continue; // the port tail-drops it; DCTCP never saw it
            }
            checks += 1;
            match m.aqm {
                Aqm::Mark if q <= k => {
                    wrong(i, DCTCP_RULE, format!("marked at {q}B, not above K = {k}B"))
                }
                Aqm::Drop => wrong(
                    i,
                    DCTCP_RULE,
                    format!("dropped at {q}B: a DCTCP queue only marks"),
                ),
                Aqm::Mark => {}
                _ if q > k => {
                    let p = &trace.packets[i];
                    // Not-ECT packets pass unmarked; an ECN-capable one must
                    // carry the mark (the trace shows it as forwarded).
                    if wirelab_trace::ip_ecn(p.link, &p.data).is_some_and(|e| e != 0) {
                        wrong(
                            i,
                            DCTCP_RULE,
                            format!("ECN-capable packet at {q}B above K = {k}B not marked"),
                        );
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(r) = &f.red {
        // Replays the switch's EWMA (vaqm.h vq_red: avg in 2^-16 bytes, w_q
        // in 2^-16) over the queue each packet saw. A dropped packet left
        // the queue after the average took it in: its bytes are added back.
        let w_q = ((r.w_q * 65536.0).round() as u64).max(1);
        let (min, max) = (r.min.0 << 16, r.max.0 << 16);
        let mut avg: u64 = 0;
        let mut avgs = Vec::with_capacity(idxs.len());
        for &i in idxs {
            let m = meta(i);
            if m.aqm == Aqm::Overflow {
                continue; // not in the queue, not in the average
            }
            let mut q = u64::from(m.vq_bytes);
            if m.aqm == Aqm::Drop {
                q += u64::from(trace.packets[i].orig_len);
            }
            let qb = q << 16;
            if qb >= avg {
                avg += ((qb - avg) * w_q) >> 16;
            } else {
                avg -= ((avg - qb) * w_q) >> 16;
            }
            avgs.push(avg as f64 / 65536.0);
            checks += 1;
            let a = avg as f64 / 65536.0;
            match m.aqm {
                Aqm::Mark | Aqm::Drop if avg < min => wrong(
                    i,
                    RED_RULE,
                    format!(
                        "{} with the average at {a:.0}B below min = {}B",
                        m.aqm, r.min.0
                    ),
                ),
                Aqm::Mark if avg >= max => wrong(
                    i,
                    RED_RULE,
                    format!(
                        "marked with the average at {a:.0}B at or above max = {}B",
                        r.max.0
                    ),
                ),
                Aqm::Mark | Aqm::Drop => {}
                _ if avg >= max => wrong(
                    i,
                    RED_RULE,
                    format!(
                        "passed with the average at {a:.0}B at or above max = {}B",
                        r.max.0
                    ),
                ),
                _ => {}
            }
        }
        out.extend(Finding::summarized(A, "red-average", Unit::Bytes, avgs, |d| {
            format!(
                "{who}: RED's average (w_q {}): median {:.0}B, p99 {:.0}B, max {:.0}B; thresholds {}B..{}B",
                r.w_q, d.p50, d.p99, d.max, r.min.0, r.max.0
            )
        }));
    }
    checks
}

/// The shares (%) of byte errors within 1, 2 and 3 MTU: NetBump §6.2's
/// measure of an estimate.
fn within_mtus(err: &[f64]) -> (f64, f64, f64) {
    let share = |m: u64| {
        100.0 * err.iter().filter(|e| **e <= (m * MTU_FRAME) as f64).count() as f64
            / err.len().max(1) as f64
    };
    (share(1), share(2), share(3))
}

/// The estimate against the real queue (NetBump Fig. 10): the error and
/// the real occupancy, over every sample.
/// Seconds from `t0` (the trace's first packet) to `ts`, both ns.
fn secs(ts: u64, t0: u64) -> f64 {
    ts.saturating_sub(t0) as f64 / 1e9
}

fn truth(f: &VqFacts, t0: u64, out: &mut Vec<Finding>) {
    if f.truth.is_empty() {
        return;
    }
    let who = name_of(f.id, Some(f));
    let err: Vec<f64> = f.truth.iter().map(|p| p.error() as f64).collect();
    let actual: Vec<f64> = f.truth.iter().map(|p| p.actual_bytes as f64).collect();
    let (w1, w2, w3) = within_mtus(&err);
    out.extend(Finding::summarized(A, "error", Unit::Bytes, err, |d| {
        format!(
            "{who}: |virtual - real| over {} samples of the real queue: within 1 MTU ({MTU_FRAME}B) {w1:.1}%, \
             2 MTU {w2:.1}%, 3 MTU {w3:.1}%; median {:.0}B, p99 {:.0}B, max {:.0}B (NetBump §6.2.2: 2 MTU 95%)",
            d.count, d.p50, d.p99, d.max
        )
    }));
    // NetBump Fig. 10: the real queue and the estimate, over time.
    let real: Vec<(f64, f64)> = f
        .truth
        .iter()
        .map(|p| (secs(p.ts_ns, t0), p.actual_bytes as f64))
        .collect();
    let estimate: Vec<(f64, f64)> = f
        .truth
        .iter()
        .map(|p| (secs(p.ts_ns, t0), p.virtual_bytes as f64))
        .collect();
    out.extend(
        Finding::summarized(A, "real-queue", Unit::Bytes, actual, |d| {
            format!(
                "{who}: the real queue behind the port: median {:.0}B, p99 {:.0}B, max {:.0}B",
                d.p50, d.p99, d.max
            )
        })
        .map(|f| {
            f.series(format!("{who}: real (qdisc)"), real)
                .series(format!("{who}: estimate"), estimate)
        }),
    );
}

/// QCN at one queue: the CNMs it sent, their feedback, and each source's
/// sending rate into the queue over time (NetBump Fig. 17's throughput).
fn qcn_findings(input: &Input, who: &str, idxs: &[usize], cnms: &[usize], out: &mut Vec<Finding>) {
    let trace = input.trace;
    let meta = |i: usize| trace.packets[i].meta.as_ref().expect("filtered on meta");
    let fbs: Vec<f64> = cnms.iter().map(|&i| f64::from(meta(i).cnm)).collect();
    out.push(
        Finding::measurement(
            A,
            "cnms",
            cnms.len() as f64,
            Unit::Count,
            format!(
                "{who}: {} CNMs sent back to the sources of {} packets",
                cnms.len(),
                idxs.len()
            ),
        )
        .evidence(cnms.iter().take(20).map(|&i| evidence(trace, i))),
    );
    out.extend(Finding::summarized(
        A,
        "qcn-feedback",
        Unit::Count,
        fbs,
        |d| {
            format!(
                "{who}: quantised |Fb| of the CNMs: median {:.0}, max {:.0} (6 bits)",
                d.p50, d.max
            )
        },
    ));
    // Bytes per source and 10 ms bin (at least 100 bins over the span).
    let (Some(&first), Some(&last)) = (idxs.first(), idxs.last()) else {
        return;
    };
    let (start, end) = (trace.packets[first].ts_ns, trace.packets[last].ts_ns);
    let bin = ((end - start) / 100).clamp(1_000_000, 10_000_000);
    let t0 = trace.packets.first().map_or(0, |p| p.ts_ns);
    let mut per: BTreeMap<std::net::IpAddr, Vec<u64>> = BTreeMap::new();
    let n = ((end - start) / bin + 1) as usize;
    for &i in idxs {
        let p = &trace.packets[i];
        let Some(src) = wirelab_trace::ip_source(p.link, &p.data) else {
            continue;
        };
        per.entry(src).or_insert_with(|| vec![0; n])[((p.ts_ns - start) / bin) as usize] +=
            u64::from(p.orig_len);
    }
    for (src, bytes) in per {
        let name = input
            .facts
            .and_then(|f| f.host_of(src))
            .map_or_else(|| src.to_string(), str::to_string);
        let rate = |b: u64| b as f64 * 8e9 / bin as f64;
        let pts: Vec<(f64, f64)> = bytes
            .iter()
            .enumerate()
            .map(|(k, &b)| (secs(start + k as u64 * bin + bin / 2, t0), rate(b)))
            .collect();
        let busy: Vec<f64> = bytes.iter().filter(|b| **b > 0).map(|&b| rate(b)).collect();
        out.extend(
            Finding::summarized(A, "send-rate", Unit::BitsPerSec, busy, |d| {
                format!(
                    "{who}: {name} sent into the queue at median {}, p99 {} ({} bins of {})",
                    crate::fmt_value(d.p50, Unit::BitsPerSec),
                    crate::fmt_value(d.p99, Unit::BitsPerSec),
                    d.count,
                    crate::fmt_duration(bin)
                )
            })
            .map(|f| f.series(name.clone(), pts)),
        );
    }
}

/// Each QCN reaction point: its rate over time, and whether every CNM the
/// switch sent to its host arrived. Returns the checks made.
fn reaction_points(input: &Input, t0: u64, out: &mut Vec<Finding>) -> u64 {
    let Some(facts) = input.facts else { return 0 };
    let mut checks = 0;
    for rp in &facts.qcn {
        let addrs = facts.addresses_of(&rp.host);
        let sent: Vec<usize> = input
            .trace
            .packets
            .iter()
            .enumerate()
            .filter(|(_, p)| p.meta.as_ref().is_some_and(|m| m.cnm > 0))
            .filter(|(_, p)| {
                wirelab_trace::ip_source(p.link, &p.data).is_some_and(|s| addrs.contains(&s))
            })
            .map(|(i, _)| i)
            .collect();
        checks += 1;
        if rp.cnms != sent.len() as u64 {
            out.push(
                Finding::violation(
                    A,
                    "cnm-lost",
                    CNM_RULE,
                    format!(
                        "the reaction point on {} received {} CNMs; the switch sent it {}",
                        rp.host,
                        rp.cnms,
                        sent.len()
                    ),
                )
                .evidence(sent.iter().take(20).map(|&i| evidence(input.trace, i))),
            );
        }
        let mut pts: Vec<(f64, f64)> = vec![(0.0, rp.line_rate_bps as f64)];
        pts.extend(
            rp.points
                .iter()
                .map(|p| (secs(p.ts_ns, t0), p.current_bps as f64)),
        );
        let rates: Vec<f64> = rp.points.iter().map(|p| p.current_bps as f64).collect();
        let host = rp.host.clone();
        let cnms = rp.cnms;
        let line = rp.line_rate_bps as f64;
        out.extend(
            Finding::summarized(A, "rp-rate", Unit::BitsPerSec, rates, |d| {
                format!(
                    "the reaction point on {host} ({cnms} CNMs) limited it to median {}, min {} (line rate {})",
                    crate::fmt_value(d.p50, Unit::BitsPerSec),
                    crate::fmt_value(d.min, Unit::BitsPerSec),
                    crate::fmt_value(line, Unit::BitsPerSec)
                )
            })
            .map(|f| f.series(format!("{} limiter", rp.host), pts)),
        );
    }
    checks
}

/// Distributed NetBump (§3.2.2, §6.2.3): the run's packets into this queue
/// replayed through bumps that each forward some hosts' packets and hear
/// of the rest by updates, for every delay and batch size the spec asks
/// for (`crate::distributed`). First the replay is checked against the
/// switch: one bucket seeing every packet must give the trace's estimate,
/// packet for packet. Returns the checks made.
fn distributed(
    input: &Input,
    who: &str,
    idxs: &[usize],
    f: &VqFacts,
    d: &wirelab_spec::vaqm::Distributed,
    out: &mut Vec<Finding>,
) -> u64 {
    use crate::distributed::{replay, Arrival, Exchange};
    let trace = input.trace;
    let meta = |i: usize| trace.packets[i].meta.as_ref().expect("filtered on meta");
    let Some(facts) = input.facts else { return 0 };
    let bump_of = |i: usize| {
        let p = &trace.packets[i];
        let src = wirelab_trace::ip_source(p.link, &p.data)?;
        let host = facts.host_of(src)?;
        d.bumps.iter().position(|b| b.iter().any(|h| h == host))
    };
    // Dropped packets never reach the queue (the switch takes their bytes
    // off again); everything else is an arrival, overflows included (the
    // buffer check leaves them out, as the switch does).
    let kept: Vec<usize> = idxs
        .iter()
        .copied()
        .filter(|&i| meta(i).aqm != Aqm::Drop)
        .collect();
    let arrivals: Vec<Arrival> = kept
        .iter()
        .map(|&i| Arrival {
            ts_ns: meta(i).ts,
            len: trace.packets[i].orig_len,
            bump: bump_of(i),
        })
        .collect();
    // The truth samples are on the trace's clock (epoch); packet metadata
    // `ts` is the switch's (monotonic): the packets' own capture time
    // bridges the two.
    let offset = kept
        .first()
        .map_or(0, |&i| trace.packets[i].ts_ns as i128 - meta(i).ts as i128);
    let probes: Vec<u64> = f
        .truth
        .iter()
        .map(|p| (p.ts_ns as i128 - offset) as u64)
        .collect();
    let n = d.bumps.len();
    let delays = if d.delays.is_empty() {
        vec![0]
    } else {
        d.delays.iter().map(|t| t.0).collect()
    };
    let batches = if d.batches.is_empty() {
        vec![1]
    } else {
        d.batches.clone()
    };
    let mut checks = 1;
    let sync = replay(
        &arrivals,
        n,
        f.rate_bps,
        f.buffer_bytes,
        Exchange {
            delay_ns: 0,
            batch: 1,
        },
        &[],
    );
    if let Some(k) = (0..kept.len()).find(|&k| sync.in_sync[k] != u64::from(meta(kept[k]).vq_bytes))
    {
        out.push(
            Finding::violation(
                A,
                "replay-mismatch",
                REPLAY_RULE,
                format!(
                    "{who}: replaying the trace gives {}B after this packet; the switch reported {}B",
                    sync.in_sync[k],
                    meta(kept[k]).vq_bytes
                ),
            )
            .evidence([evidence(trace, kept[k])]),
        );
        return checks; // the model does not describe this queue
    }
    let span_s = match (arrivals.first(), arrivals.last()) {
        (Some(a), Some(b)) if b.ts_ns > a.ts_ns => (b.ts_ns - a.ts_ns) as f64 / 1e9,
        _ => 0.0,
    };
    for &delay in &delays {
        for &batch in &batches {
            checks += 1;
            let r = replay(
                &arrivals,
                n,
                f.rate_bps,
                f.buffer_bytes,
                Exchange {
                    delay_ns: delay,
                    batch,
                },
                &probes,
            );
            let rate = if span_s > 0.0 {
                r.update_bytes as f64 / span_s
            } else {
                0.0
            };
            for b in 0..n {
                let hosts = if d.bumps[b].is_empty() {
                    "sees none".to_string()
                } else {
                    d.bumps[b].join(", ")
                };
                let label = format!(
                    "bump {}, {}, batch {batch}",
                    b + 1,
                    wirelab_spec::Nanos(delay)
                );
                // Against the in-sync estimate, where the bump decides: at
                // its own packets (or at every packet, for a bump that
                // forwards none).
                let own: Vec<usize> = (0..arrivals.len())
                    .filter(|&k| arrivals[k].bump == Some(b) || d.bumps[b].is_empty())
                    .collect();
                let err: Vec<f64> = own
                    .iter()
                    .map(|&k| r.bumps[b][k].abs_diff(r.in_sync[k]) as f64)
                    .collect();
                let (w1, w2, w3) = within_mtus(&err);
                out.extend(
                    Finding::summarized(A, "distributed-error", Unit::Bytes, err, |s| {
                        format!(
                            "{who}: {label} ({hosts}): |estimate - in sync| at {} packets: within 1 MTU {w1:.1}%, 2 MTU {w2:.1}%, \
                             3 MTU {w3:.1}%; median {:.0}B, p99 {:.0}B, max {:.0}B; updates {} ({:.0} B/s) \
                             (NetBump Fig. 11: under 2 MTU at 25 us)",
                            s.count, s.p50, s.p99, s.max, r.updates, rate
                        )
                    })
                    .map(|f| f.label(label.clone())),
                );
                if f.truth.is_empty() {
                    continue;
                }
                let real: Vec<f64> = r.at_probes[b]
                    .iter()
                    .zip(&f.truth)
                    .map(|(e, t)| e.abs_diff(t.actual_bytes) as f64)
                    .collect();
                let (w1, w2, w3) = within_mtus(&real);
                out.extend(
                    Finding::summarized(A, "distributed-truth-error", Unit::Bytes, real, |s| {
                        format!(
                            "{who}: {label} ({hosts}): |estimate - real queue| at {} samples: within 1 MTU {w1:.1}%, \
                             2 MTU {w2:.1}%, 3 MTU {w3:.1}%; median {:.0}B, p99 {:.0}B \
                             (NetBump Fig. 12: within 3 MTU 90%)",
                            s.count, s.p50, s.p99
                        )
                    })
                    .map(|f| f.label(label.clone())),
                );
            }
        }
    }
    checks
}
