//! One self-contained HTML page: verdicts, findings with their evidence, a
//! time–sequence graph per connection (first transmissions, retransmissions,
//! packets the switch dropped, the cumulative ACK and SACK blocks), latency
//! breakdown bars per loss and CDFs of MCT and RTT. Plots are inline SVG
//! (plotters), so the file opens anywhere without a network.

use std::fmt::Write;

use plotters::prelude::*;
use wirelab_analyze::report::Report;
use wirelab_analyze::{ConnAnalysis, Finding, Kind};

/// At most this many points per series: a million-packet trace still makes a
/// page a browser opens (every k-th point is kept; retransmissions and drops
/// are always kept).
const MAX_POINTS: usize = 20_000;
/// Connections drawn (the ones with the most retransmissions first).
const MAX_CONNS: usize = 8;

/// Text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn render(r: &Report) -> String {
    let a = &r.analysis;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>wirelab: {}</title><style>{}</style></head><body>",
        esc(&r.source),
        STYLE
    );
    let _ = write!(
        o,
        "<h1>wirelab analysis</h1><p><b>{}</b> · {} packets · {} connections</p><p>Vantage point: {}</p>",
        esc(&r.source),
        a.packets,
        a.connections.len(),
        esc(&a.vantage)
    );
    if let Some((off, why)) = &a.truncated {
        let _ = write!(o, "<p class=bad>The file is damaged at byte {off}: {}. Packets before it were analyzed.</p>", esc(why));
    }
    // Verdicts.
    o.push_str("<h2>Verdicts</h2><table><tr><th>analyzer</th><th>verdict</th><th>checks</th><th>violations</th><th>what it checks</th></tr>");
    for an in &r.analyzers {
        let class = match an.verdict {
            "violation" => "bad",
            "pass" => "good",
            _ => "",
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td class={class}>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            an.name,
            an.verdict,
            an.checks,
            an.violations,
            esc(an.about)
        );
    }
    o.push_str("</table>");
    if !r.expect.is_empty() {
        o.push_str("<h2>Expectations</h2><table><tr><th></th><th>claim</th><th>observed</th></tr>");
        for v in &r.expect {
            let _ = write!(
                o,
                "<tr><td class={}>{}</td><td>{}</td><td>{}</td></tr>",
                if v.pass { "good" } else { "bad" },
                if v.pass { "PASS" } else { "FAIL" },
                esc(&v.claim),
                esc(&v.observed)
            );
        }
        o.push_str("</table>");
    }
    // Plots.
    let mut conns: Vec<&ConnAnalysis> = a.connections.iter().collect();
    conns.sort_by_key(|c| std::cmp::Reverse(c.retransmissions.len()));
    // The capture's first packet: the plots' zero.
    let t0 = a.first_ts_ns.unwrap_or(0);
    o.push_str("<h2>Time–sequence</h2><p>Blue: first transmissions · red: retransmissions · black ×: dropped or corrupted by the switch · orange ▲: CE-marked · green: cumulative ACK · purple: SACK blocks.</p>");
    for c in conns.iter().take(MAX_CONNS) {
        let _ = write!(o, "<h3>conn {}</h3>{}", c.id, time_sequence(c, t0));
    }
    if conns.len() > MAX_CONNS {
        let _ = write!(
            o,
            "<p>{} more connections are in the JSON report.</p>",
            conns.len() - MAX_CONNS
        );
    }
    let lat = latency_groups(r);
    if !lat.is_empty() {
        o.push_str("<h2>Retransmission latency</h2><p>Per loss: NACK generation (receiver), reaction (sender), timeout, and the total from the lost transmission to the retransmission. Base round trips of the vantage point are removed (see each finding).</p>");
        o.push_str(&latency_bars(&lat));
    }
    let sweep = roce_sweep_series(r);
    if !sweep.is_empty() {
        o.push_str("<h2>RoCE: loss latency against the lost packet's relative PSN</h2><p>Lumina Figs. 5, 8 and 9: per device, how long the NAK (or the re-issued read) and the resend took, against the lost packet's position in its message. One colour per device; ● NACK generation, ▲ read NACK generation, × NACK reaction.</p>");
        o.push_str(&roce_sweep(&sweep));
    }
    for (name, title) in [
        ("mct", "Message completion time"),
        ("rtt", "RTT at the vantage point"),
    ] {
        let series: Vec<(String, Vec<f64>)> = r
            .analyzers
            .iter()
            .flat_map(|an| an.findings.iter())
            .filter(|f| f.analyzer == "flow" && f.name == name && !f.samples.is_empty())
            .map(|f| {
                (
                    format!("conn {}", f.connection.unwrap_or(0)),
                    f.samples.clone(),
                )
            })
            .collect();
        if !series.is_empty() {
            let _ = write!(
                o,
                "<h2>{title} (CDF)</h2>{}",
                cdf(&series, title, 1e3, "us")
            );
        }
    }
    // Distributed NetBump: one CDF per finding name, a line per variant.
    for (name, title) in [
        (
            "distributed-error",
            "Distributed bumps: |estimate - in-sync estimate| (NetBump Fig. 11)",
        ),
        (
            "distributed-truth-error",
            "Distributed bumps: |estimate - real queue| (NetBump Figs. 12-13)",
        ),
    ] {
        let series: Vec<(String, Vec<f64>)> = r
            .analyzers
            .iter()
            .flat_map(|an| an.findings.iter())
            .filter(|f| f.analyzer == "vaqm" && f.name == name && !f.samples.is_empty())
            .map(|f| (f.label.clone().unwrap_or_default(), f.samples.clone()))
            .collect();
        if !series.is_empty() {
            let _ = write!(
                o,
                "<h2>vaqm.{name}: {} (CDF)</h2>{}",
                esc(title),
                cdf(&series, "error", 1e3, "KB")
            );
        }
    }
    // Measurements over time (findings with series), one chart per finding
    // name: goodput per connection, fairness, virtual and real queues.
    let mut charts: Vec<(
        &str,
        &str,
        Option<wirelab_spec::Unit>,
        Vec<&wirelab_analyze::Series>,
    )> = Vec::new();
    for f in r.analyzers.iter().flat_map(|an| an.findings.iter()) {
        if f.series.is_empty() {
            continue;
        }
        match charts
            .iter_mut()
            .find(|c| c.0 == f.analyzer && c.1 == f.name)
        {
            Some(c) => c.3.extend(f.series.iter()),
            None => charts.push((f.analyzer, f.name, f.unit, f.series.iter().collect())),
        }
    }
    if !charts.is_empty() {
        o.push_str("<h2>Over time</h2><p>Seconds from the first packet of the trace.</p>");
        for (an, name, unit, series) in &charts {
            let title = match (*an, *name) {
                ("flow", "goodput") => "Goodput per connection (NetBump Fig. 15)",
                ("flow", "fairness") => "Jain's fairness index of the connections sending together",
                ("vaqm", "queue") => "Virtual queue estimate at each packet (NetBump Fig. 14)",
                ("vaqm", "real-queue") => {
                    "Real queue (qdisc tracepoints) and the estimate (NetBump Fig. 10)"
                }
                _ => name,
            };
            let _ = write!(
                o,
                "<h3>{an}.{name}: {}</h3>{}",
                esc(title),
                over_time(series, *unit)
            );
        }
    }
    // Findings.
    o.push_str("<h2>Findings</h2>");
    for an in &r.analyzers {
        if an.findings.is_empty() {
            continue;
        }
        let _ = write!(o, "<h3>{}</h3><table><tr><th>kind</th><th>conn</th><th>finding</th><th>message</th><th>rule</th><th>evidence</th></tr>", an.name);
        let mut fs: Vec<&Finding> = an.findings.iter().collect();
        fs.sort_by_key(|f| f.kind != Kind::Violation);
        for f in fs.iter().take(2000) {
            let ev: Vec<String> = f.evidence.iter().map(|e| e.to_string()).collect();
            let _ = write!(
                o,
                "<tr><td class={}>{:?}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if f.kind == Kind::Violation { "bad" } else { "" },
                f.kind,
                f.connection.map_or(String::new(), |c| c.to_string()),
                f.name,
                esc(&f.message),
                esc(f.rule.unwrap_or("")),
                ev.join(" ")
            );
        }
        if fs.len() > 2000 {
            let _ = write!(
                o,
                "<tr><td colspan=6>{} more in the JSON report</td></tr>",
                fs.len() - 2000
            );
        }
        o.push_str("</table>");
    }
    if !a.malformed.is_empty() {
        o.push_str("<h2>Malformed frames</h2><table><tr><th>frame</th><th>layer</th><th>offset</th><th>detail</th></tr>");
        for m in a.malformed.iter().take(1000) {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                m.frame,
                esc(&m.layer),
                m.offset,
                esc(&m.detail)
            );
        }
        o.push_str("</table>");
    }
    o.push_str("</body></html>\n");
    o
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}.bad{color:#b00;font-weight:bold}.good{color:#070}svg{max-width:100%;height:auto}";

fn time_sequence(c: &ConnAnalysis, t0: u64) -> String {
    let ms = |ts: u64| ts.saturating_sub(t0) as f64 / 1e6;
    let kb = |rel: u32| f64::from(rel) / 1024.0;
    let p = &c.plot;
    let pt = |&(ts, rel): &(u64, u32)| (ms(ts), kb(rel));
    let first: Vec<(f64, f64)> = p.first.kept().iter().map(pt).collect();
    let rtx: Vec<(f64, f64)> = p.rtx.iter().map(pt).collect();
    let lost: Vec<(f64, f64)> = p.lost.iter().map(pt).collect();
    let ce: Vec<(f64, f64)> = p.ce.iter().map(pt).collect();
    // A step: the cumulative ACK holds until the next one.
    let mut acks: Vec<(f64, f64)> = Vec::new();
    for a in p.acks.kept() {
        if let Some(&(_, prev)) = acks.last() {
            acks.push((ms(a.0), prev));
        }
        acks.push(pt(a));
    }
    let sacks: Vec<(f64, f64, f64)> = p
        .sacks
        .kept()
        .iter()
        .map(|&(ts, l, r)| (ms(ts), kb(l), kb(r)))
        .collect();
    let thin = |v: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        let k = v.len().div_ceil(MAX_POINTS).max(1);
        v.into_iter().step_by(k).collect()
    };
    let first = thin(first);
    let acks = thin(acks);
    let sack_step = sacks.len().div_ceil(MAX_POINTS).max(1);
    let xmax = first
        .iter()
        .chain(&rtx)
        .chain(&acks)
        .map(|p| p.0)
        .fold(0.0, f64::max)
        .max(1e-3);
    let ymax = first
        .iter()
        .chain(&rtx)
        .chain(&acks)
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut ch) = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax * 1.05)
        else {
            return String::new();
        };
        let _ = ch
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("relative sequence (KiB)")
            .draw();
        let _ = ch.draw_series(LineSeries::new(acks.iter().copied(), GREEN.stroke_width(1)));
        let _ = ch.draw_series(
            sacks
                .iter()
                .step_by(sack_step)
                .map(|&(x, l, r)| PathElement::new(vec![(x, l), (x, r)], MAGENTA.stroke_width(2))),
        );
        let _ = ch.draw_series(first.iter().map(|&p| Circle::new(p, 2, BLUE.filled())));
        let _ = ch.draw_series(rtx.iter().map(|&p| Circle::new(p, 4, RED.filled())));
        let _ = ch.draw_series(
            lost.iter()
                .map(|&p| Cross::new(p, 6, BLACK.stroke_width(2))),
        );
        let orange = RGBColor(255, 140, 0);
        let _ = ch.draw_series(
            ce.iter()
                .map(|&p| TriangleMarker::new(p, 7, orange.filled())),
        );
        let _ = root.present();
    }
    svg
}

/// Latency findings of one loss: (label, [(name, ns)]).
type Group = (String, Vec<(&'static str, f64)>);

fn latency_groups(r: &Report) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for f in r
        .analyzers
        .iter()
        .filter(|a| a.name == "retransmission-latency")
        .flat_map(|a| a.findings.iter())
    {
        let v = f.value.unwrap_or(0.0);
        if f.name == "total" {
            out.push((
                format!(
                    "{}: conn {} pkt {}",
                    out.len() + 1,
                    f.connection.unwrap_or(0),
                    f.packet.unwrap_or(0)
                ),
                vec![("total", v)],
            ));
        } else if let Some(g) = out.last_mut() {
            g.1.push((f.name, v));
        }
    }
    out.truncate(40);
    out
}

fn latency_bars(groups: &[Group]) -> String {
    let names = ["nack-generation", "reaction", "timeout", "total"];
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(214, 39, 40),
        RGBColor(120, 120, 120),
    ];
    // Microseconds on a log axis: a 20us reaction and a 200ms timeout in
    // one picture.
    let vmax = groups
        .iter()
        .flat_map(|g| g.1.iter().map(|x| x.1))
        .fold(10_000.0, f64::max)
        / 1e3;
    let h = 60 + 28 * groups.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, h)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut ch) = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(120)
            .build_cartesian_2d((0.1f64..vmax * 1.5).log_scale(), 0f64..groups.len() as f64)
        else {
            return String::new();
        };
        let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        let _ = ch
            .configure_mesh()
            .x_desc("latency (us, log scale)")
            .y_labels(groups.len() + 1)
            .y_label_formatter(&|y| {
                // Labels sit at integer ticks; a loss's bars fill [i, i+1).
                let i = y.round() as usize;
                if (y - y.round()).abs() < 1e-6 {
                    labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw();
        for (i, g) in groups.iter().enumerate() {
            for (k, (name, v)) in g.1.iter().enumerate() {
                let slot = names.iter().position(|n| n == name).unwrap_or(3);
                let y0 = i as f64 + 0.1 + 0.2 * k as f64;
                let _ = ch.draw_series(std::iter::once(Rectangle::new(
                    [(0.1, y0), ((v / 1e3).max(0.1), y0 + 0.18)],
                    colors[slot].filled(),
                )));
            }
        }
        let _ = root.present();
    }
    let legend: Vec<String> = names
        .iter()
        .zip(colors)
        .map(|(n, c)| {
            format!(
                "<span style=\"color:rgb({},{},{})\">■</span> {n}",
                c.0, c.1, c.2
            )
        })
        .collect();
    format!("<p>{}</p>{svg}", legend.join(" &nbsp; "))
}

/// RoCE loss latencies: ((measurement, device), [(relative PSN in the
/// message, µs)]), from the roce-retransmission-latency findings.
type SweepSeries = Vec<((&'static str, String), Vec<(u32, f64)>)>;

fn roce_sweep_series(r: &Report) -> SweepSeries {
    let mut m: std::collections::BTreeMap<(&'static str, String), Vec<(u32, f64)>> =
        Default::default();
    for f in r
        .analyzers
        .iter()
        .flat_map(|a| a.findings.iter())
        .filter(|f| {
            f.analyzer == "roce-retransmission-latency"
                && f.kind == Kind::Measurement
                && matches!(
                    f.name,
                    "nack-generation" | "read-nack-generation" | "nack-reaction"
                )
        })
    {
        let (Some(x), Some(v)) = (f.in_message.or(f.packet), f.value) else {
            continue;
        };
        let dev = f.device.clone().unwrap_or_else(|| "?".into());
        m.entry((f.name, dev)).or_default().push((x, v / 1e3));
    }
    m.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            (k, v)
        })
        .collect()
}

fn roce_sweep(series: &SweepSeries) -> String {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let xmax = pts.clone().map(|p| p.0).max().unwrap_or(1).max(2);
    let ymax = pts.clone().map(|p| p.1).fold(1.0, f64::max);
    let ymin = pts.map(|p| p.1).fold(f64::INFINITY, f64::min).max(0.1);
    let devices: Vec<&String> = {
        let mut d: Vec<&String> = series.iter().map(|s| &s.0 .1).collect();
        d.sort();
        d.dedup();
        d
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        let _ = root.fill(&WHITE);
        // Log scale: a default device answers in tens of µs, the slow paths
        // Lumina found take hundreds of µs to tens of ms.
        let Ok(mut ch) = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0u32..xmax + 1, (ymin / 2.0..ymax * 8.0).log_scale())
        else {
            return String::new();
        };
        let _ = ch
            .configure_mesh()
            .x_desc("relative PSN of the lost packet in its message")
            .y_desc("latency (us)")
            .draw();
        for ((name, dev), v) in series {
            let n = devices.iter().position(|d| *d == dev).unwrap_or(0);
            let color = Palette99::pick(n);
            let label = format!("{name}, {dev}");
            let _ = match *name {
                "nack-reaction" => ch.draw_series(
                    v.iter()
                        .map(|&(x, y)| Cross::new((x, y), 5, color.stroke_width(2))),
                ),
                "read-nack-generation" => ch.draw_series(
                    v.iter()
                        .map(|&(x, y)| TriangleMarker::new((x, y), 5, color.filled())),
                ),
                _ => ch.draw_series(
                    v.iter()
                        .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
                ),
            };
            if let Ok(l) = ch.draw_series(LineSeries::new(v.iter().copied(), color.stroke_width(1)))
            {
                l.label(label).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 15, y)], Palette99::pick(n))
                });
            }
        }
        let _ = ch
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE)
            .draw();
        let _ = root.present();
    }
    svg
}

/// Cumulative distributions, one line per labelled sample set; values
/// divided by `scale` and shown in `unit`.
fn cdf(series: &[(String, Vec<f64>)], title: &str, scale: f64, unit: &str) -> String {
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(1.0, f64::max)
        / scale;
    let lines = series
        .iter()
        .take(16)
        .map(|(label, samples)| {
            let mut v = samples.clone();
            v.sort_by(f64::total_cmp);
            let k = v.len().div_ceil(MAX_POINTS).max(1);
            let len = v.len() as f64;
            let pts = v
                .iter()
                .enumerate()
                .step_by(k)
                .map(|(i, x)| (x / scale, (i + 1) as f64 / len))
                .collect();
            (label.clone(), pts)
        })
        .collect();
    let axes = (xmax * 1.05, 1.0, format!("{title} ({unit})"), "fraction");
    lines_chart(lines, axes, 2)
}

/// Lines over time, one per series; values scaled to a readable unit.
fn over_time(series: &[&wirelab_analyze::Series], unit: Option<wirelab_spec::Unit>) -> String {
    use wirelab_spec::Unit;
    let (scale, ylabel) = match unit {
        Some(Unit::Bytes) => (1e-3, "KB"),
        Some(Unit::BitsPerSec) => (1e-6, "Mbit/s"),
        Some(Unit::Nanos) => (1e-3, "us"),
        _ => (1.0, ""),
    };
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let xmax = pts().map(|p| p.0).fold(1e-3, f64::max);
    let ymax = pts().map(|p| p.1 * scale).fold(1e-9, f64::max);
    let lines = series
        .iter()
        .take(16)
        .map(|s| {
            let k = s.points.len().div_ceil(MAX_POINTS / 4).max(1);
            let line = s
                .points
                .iter()
                .step_by(k)
                .map(|p| (p.0, p.1 * scale))
                .collect();
            (s.label.clone(), line)
        })
        .collect();
    lines_chart(lines, (xmax * 1.02, ymax * 1.08, "s".into(), ylabel), 1)
}

/// Labelled lines from 0 to (xmax, ymax), with a legend (also the fuzz
/// campaign's page).
pub fn lines_chart(
    lines: Vec<(String, Vec<(f64, f64)>)>,
    (xmax, ymax, xdesc, ydesc): (f64, f64, String, &str),
    stroke: u32,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 360)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut ch) = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        else {
            return String::new();
        };
        let _ = ch.configure_mesh().x_desc(xdesc).y_desc(ydesc).draw();
        for (n, (label, pts)) in lines.into_iter().enumerate() {
            let color = Palette99::pick(n).stroke_width(stroke);
            if let Ok(d) = ch.draw_series(LineSeries::new(pts, color)) {
                d.label(label).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 15, y)], Palette99::pick(n))
                });
            }
        }
        let _ = ch
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw();
        let _ = root.present();
    }
    svg
}

/// The page of a load test (`wirelab load`, Norma): what ran and its
/// claims, the rate asked, sent and received per interval, and the
/// one-way latency's distribution from the run's histogram.
pub type IntervalRates = (f64, f64, Option<f64>, Option<f64>);

pub struct LoadPage<'a> {
    pub title: &'a str,
    pub verdict: &'a str,
    /// (what, value) lines: the DUT, the stream, the rate plan, totals.
    pub facts: Vec<(String, String)>,
    /// (claim, pass, observed).
    pub claims: Vec<(String, bool, String)>,
    /// Per interval: (end time s, requested, sent, received pps), or the
    /// three rates `series` names.
    pub intervals: Vec<IntervalRates>,
    /// The three rates' names and their unit (in thousands).
    pub series: [&'a str; 3],
    pub unit: &'a str,
    /// The latency histogram: (bucket's highest value ns, frames).
    pub latency: &'a [(u64, u64)],
    /// The first bursts as they arrived: (µs since the first frame,
    /// frames so far); empty: none shown.
    pub pattern: &'a [(f64, f64)],
}

pub fn load_page(p: &LoadPage) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>wirelab load: {}</title><style>{}</style></head><body>",
        esc(p.title),
        STYLE
    );
    let _ = write!(
        o,
        "<h1>wirelab load</h1><p><b>{}</b> · <span class={}>{}</span></p><table>",
        esc(p.title),
        if p.verdict == "PASS" { "good" } else { "bad" },
        esc(p.verdict)
    );
    for (k, v) in &p.facts {
        let _ = write!(o, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    o.push_str("</table><h2>Claims</h2><table>");
    for (c, pass, obs) in &p.claims {
        let _ = write!(
            o,
            "<tr><td class={}>{}</td><td>{}</td><td>{}</td></tr>",
            if *pass { "good" } else { "bad" },
            if *pass { "PASS" } else { "FAIL" },
            esc(c),
            esc(obs)
        );
    }
    o.push_str("</table><h2>Rate per interval</h2>");
    let series =
        |f: &dyn Fn(&(f64, f64, Option<f64>, Option<f64>)) -> Option<f64>| -> Vec<(f64, f64)> {
            p.intervals
                .iter()
                .filter_map(|i| f(i).map(|v| (i.0, v / 1e3)))
                .collect()
        };
    let lines = vec![
        (p.series[0].to_string(), series(&|i| Some(i.1))),
        (p.series[1].to_string(), series(&|i| i.2)),
        (p.series[2].to_string(), series(&|i| i.3)),
    ];
    let xmax = p.intervals.iter().map(|i| i.0).fold(1e-3, f64::max);
    let ymax = lines
        .iter()
        .flat_map(|l| l.1.iter().map(|x| x.1))
        .fold(1e-9, f64::max);
    o.push_str(&lines_chart(
        lines,
        (xmax * 1.02, ymax * 1.1, "s (interval's end)".into(), p.unit),
        2,
    ));
    if !p.pattern.is_empty() {
        o.push_str("<h2>Burst pattern</h2><p>The first bursts as the receiver got them: every frame's arrival, at µs scale (Norma Fig. 11).</p>");
        let xmax = p.pattern.iter().map(|x| x.0).fold(1e-3, f64::max);
        let ymax = p.pattern.iter().map(|x| x.1).fold(1.0, f64::max);
        o.push_str(&lines_chart(
            vec![("frames received".into(), p.pattern.to_vec())],
            (
                xmax * 1.02,
                ymax * 1.05,
                "µs since the first frame".into(),
                "frames",
            ),
            2,
        ));
    }
    let n: u64 = p.latency.iter().map(|b| b.1).sum();
    if n > 0 {
        o.push_str("<h2>One-way latency</h2><p>Every stamped frame, from the run's histogram (buckets under 1.6% wide).</p>");
        let mut seen = 0;
        let cdf: Vec<(f64, f64)> = p
            .latency
            .iter()
            .map(|&(hi, c)| {
                seen += c;
                (hi as f64 / 1e3, seen as f64 / n as f64)
            })
            .collect();
        let xmax = cdf.last().map_or(1.0, |x| x.0);
        o.push_str(&lines_chart(
            vec![("CDF".into(), cdf)],
            (xmax * 1.02, 1.0, "µs".into(), "fraction of frames"),
            2,
        ));
        let hist: Vec<(f64, f64)> = p
            .latency
            .iter()
            .map(|&(hi, c)| (hi as f64 / 1e3, c as f64))
            .collect();
        let ymax = hist.iter().map(|x| x.1).fold(1.0, f64::max);
        o.push_str(&lines_chart(
            vec![("frames per bucket".into(), hist)],
            (xmax * 1.02, ymax * 1.1, "µs".into(), "frames"),
            1,
        ));
    }
    o.push_str("</body></html>\n");
    o
}
