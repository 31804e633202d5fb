//! The campaign's report.html: one self-contained page (inline SVG by
//! plotters, as the run report) with the score of every run and the pool's
//! median and best over the campaign, the pool's size and diversity, each
//! objective's record, and the anomalies with their saved specs.

use std::fmt::Write;

use plotters::prelude::*;
use wirelab_report::html::esc;

use crate::campaign::{Anomaly, Meta, Outcome, Record};
use crate::target::Objective;

/// The page for a campaign's records and outcome.
pub fn render(
    meta: &Meta,
    objectives: &[Objective],
    records: &[Record],
    outcome: &Outcome,
) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>wirelab fuzz</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}\
         .bad{{color:#b00}}code{{background:#f4f4f4}}</style></head><body>\
         <h1>wirelab fuzz</h1><p><code>{}</code>, device <b>{}</b>, seed {}, {} lab(s) at once, {} search</p>\
         <p>{} runs ({} baselines and reference runs), best score {:.2}, stopped: {}, {:.1} min</p>",
        esc(&meta.target_path),
        esc(meta.device.as_deref().unwrap_or("as the seed spec says")),
        meta.seed,
        meta.jobs,
        match meta.mode {
            crate::Mode::Genetic => "genetic (Lumina Algorithm 1)",
            crate::Mode::Random => "uniform random",
        },
        outcome.runs,
        outcome.baseline_runs,
        outcome.best,
        outcome.stopped.describe(),
        outcome.elapsed_ms as f64 / 60_000.0,
    );
    o.push_str("<h2>Score over the campaign</h2>");
    o.push_str(&scores(records));
    o.push_str("<h2>The pool</h2>");
    o.push_str(&pool(records));
    o.push_str("<h2>Objectives</h2><table><tr><th>objective</th><th>weight</th><th>runs with s ≥ 1</th><th>largest s</th><th>at run</th></tr>");
    for (i, ob) in objectives.iter().enumerate() {
        let s = |r: &Record| r.s.get(i).copied().unwrap_or(0.0);
        let hits = records.iter().filter(|r| s(r) >= 1.0).count();
        let best = records
            .iter()
            .filter(|r| s(r) > 0.0)
            .max_by(|a, b| s(a).total_cmp(&s(b)).then(b.n.cmp(&a.n)));
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{hits}</td><td>{:.2}</td><td>{}</td></tr>",
            esc(&ob.label()),
            ob.weight,
            best.map_or(0.0, s),
            best.map_or(String::new(), |r| r.n.to_string())
        );
    }
    o.push_str("</table><h2>Anomalies</h2>");
    if outcome.anomalies.is_empty() {
        o.push_str("<p>None confirmed.</p>");
    } else {
        o.push_str(&anomalies(&outcome.anomalies, true));
    }
    if !outcome.unconfirmed.is_empty() {
        o.push_str("<h3>Not shown again</h3><p>Runs that scored as anomalies but did not show it every time they were re-run: not saved.</p>");
        o.push_str(&anomalies(&outcome.unconfirmed, false));
    }
    o.push_str("<h2>Best runs</h2><table><tr><th>run</th><th>spec</th><th>parent</th><th>score</th><th>verdict</th><th>s per objective</th></tr>");
    let mut best: Vec<&Record> = records.iter().collect();
    best.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.n.cmp(&b.n)));
    for r in best.iter().take(20) {
        let s: Vec<String> = r.s.iter().map(|v| format!("{v:.2}")).collect();
        let _ = write!(
            o,
            "<tr><td>{}</td><td><a href=\"specs/{h}.yaml\">{h}</a></td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            r.n,
            r.parent.as_deref().unwrap_or(""),
            r.score,
            esc(&r.observation.verdict),
            s.join(", "),
            h = r.hash
        );
    }
    o.push_str("</table></body></html>\n");
    o
}

fn anomalies(list: &[Anomaly], saved: bool) -> String {
    let mut o = String::from(
        "<table><tr><th>objective</th><th>run</th><th>s</th><th>shown again</th><th>shrunk</th><th>confirmed</th><th>spec</th></tr>",
    );
    for a in list {
        let file = a.file.as_deref().map_or(String::new(), |f| {
            let name = std::path::Path::new(f)
                .file_name()
                .map_or(f.to_string(), |n| n.to_string_lossy().into_owned());
            format!("<a href=\"anomalies/{0}\">{0}</a>", esc(&name))
        });
        let _ = write!(
            o,
            "<tr><td class=\"{}\">{}</td><td>{}</td><td>{:.2}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{file}</td></tr>",
            if saved { "bad" } else { "" },
            esc(&a.objective),
            a.run,
            a.s,
            a.reproduced,
            a.confirm,
            if a.steps.is_empty() { "-".to_string() } else { esc(&a.steps.join("; ")) },
            if saved { format!("{}/{}", a.confirmed, a.confirm) } else { "-".into() },
        );
    }
    o.push_str("</table>");
    o
}

/// Every run's score (pool members in colour), the pool's median when it
/// was judged, and the best so far.
fn scores(records: &[Record]) -> String {
    let xmax = records.len().max(1) as f64;
    let ymax = records.iter().map(|r| r.score).fold(1.0, f64::max) * 1.08;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 360)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut ch) = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        else {
            return String::new();
        };
        let _ = ch.configure_mesh().x_desc("run").y_desc("score").draw();
        let dots = |joined: bool| {
            records
                .iter()
                .filter(move |r| r.joined == joined)
                .map(|r| (r.n as f64, r.score))
                .collect::<Vec<_>>()
        };
        for (joined, colour, label) in [
            (false, RGBColor(170, 170, 170), "run"),
            (true, BLUE, "run that joined the pool"),
        ] {
            if let Ok(d) = ch.draw_series(
                dots(joined)
                    .into_iter()
                    .map(|p| Circle::new(p, 3, colour.filled())),
            ) {
                d.label(label)
                    .legend(move |(x, y)| Circle::new((x + 7, y), 3, colour.filled()));
            }
        }
        let mut best = 0.0f64;
        let best_line: Vec<(f64, f64)> = records
            .iter()
            .map(|r| {
                best = best.max(r.score);
                (r.n as f64, best)
            })
            .collect();
        let median: Vec<(f64, f64)> = records.iter().map(|r| (r.n as f64, r.median)).collect();
        for (pts, colour, label) in [
            (best_line, RED, "best so far"),
            (median, GREEN, "pool median"),
        ] {
            if let Ok(d) = ch.draw_series(LineSeries::new(pts, colour.stroke_width(2))) {
                d.label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], colour));
            }
        }
        let _ = ch
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE)
            .draw();
        let _ = root.present();
    }
    svg
}

/// The pool's size and how many distinct specs it holds, after each run.
fn pool(records: &[Record]) -> String {
    let xmax = records.len().max(1) as f64;
    let ymax = records.iter().map(|r| r.pool).max().unwrap_or(1).max(1) as f64 * 1.1;
    let line =
        |f: fn(&Record) -> usize| records.iter().map(|r| (r.n as f64, f(r) as f64)).collect();
    let lines = vec![
        ("pool size".to_string(), line(|r| r.pool)),
        ("distinct specs".to_string(), line(|r| r.distinct)),
    ];
    wirelab_report::html::lines_chart(lines, (xmax, ymax, "run".into(), "members"), 2)
}
