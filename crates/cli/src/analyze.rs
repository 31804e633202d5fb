//! `wirelab analyze`: any pcap/pcapng through the analyzers; next to a run's
//! results (summary.json, plan.json) the run's counters, workload and
//! rto_min are used too.

use std::path::Path;

use anyhow::{Context, Result};
use wirelab_analyze::report::Report;
use wirelab_analyze::{Options, RunFacts};
use wirelab_spec::AnalyzerName;

use crate::code;

/// What the analysis may assume, from each host's (rto_min,
/// net.ipv4.tcp_early_retrans): the smallest rto_min (`default_rto` when no
/// host sets one), and TLP unless a host turns it off.
pub fn options(
    hosts: impl Iterator<Item = (Option<u64>, Option<String>)>,
    default_rto: Option<u64>,
) -> Options {
    let mut o = Options::default();
    let mut rto = None::<u64>;
    for (r, early_retrans) in hosts {
        let r = r.unwrap_or(o.min_rto_ns);
        rto = Some(rto.map_or(r, |x| x.min(r)));
        // tcp_early_retrans 3 and 4 enable TLP (ip-sysctl.rst).
        if early_retrans.is_some_and(|v| !matches!(v.trim(), "3" | "4")) {
            o.tlp = false;
        }
    }
    o.min_rto_ns = rto.or(default_rto).unwrap_or(o.min_rto_ns);
    o
}

/// Facts and analysis options of a run whose results folder holds `trace`.
fn run_context(trace: &Path, min_rto_ns: u64) -> (Option<RunFacts>, Options) {
    let dir = trace.parent().unwrap_or(Path::new("."));
    let read = |name: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(dir.join(name)).ok()?).ok()
    };
    let hosts: Vec<(Option<u64>, Option<String>)> = read("plan.json")
        .and_then(|p| p["hosts"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|h| {
            let rto = h["stack"]["rto_min"]
                .as_str()
                .and_then(|r| r.parse::<wirelab_spec::Nanos>().ok())
                .map(|n| n.0);
            let er = h["stack"]["sysctls"]["net.ipv4.tcp_early_retrans"]
                .as_str()
                .map(String::from);
            (rto, er)
        })
        .collect();
    let opts = if hosts.is_empty() {
        options(std::iter::empty(), Some(min_rto_ns))
    } else {
        options(hosts.into_iter(), None)
    };
    let Some(s) = read("summary.json") else {
        return (None, opts);
    };
    if s["schema"] != "wirelab.run/1" {
        return (None, opts);
    }
    let mut f = RunFacts::default();
    for h in s["hosts"].as_array().into_iter().flatten() {
        if let (Some(n), Some(ip)) = (
            h["name"].as_str(),
            h["ip"].as_str().and_then(|i| i.parse().ok()),
        ) {
            f.addresses.insert(n.to_string(), ip);
        }
    }
    if let Some(c) = s["counters"].as_object() {
        for (host, m) in c {
            let m = m
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                .collect();
            f.counters.insert(host.clone(), m);
        }
    }
    for w in s["workload"].as_array().into_iter().flatten() {
        let Some(id) = w["id"].as_u64() else { continue };
        let msgs = w["messages"].as_array().cloned().unwrap_or_default();
        f.mct_ns.insert(
            id as u32,
            msgs.iter().filter_map(|m| m["mct_ns"].as_u64()).collect(),
        );
        f.completed.insert(
            id as u32,
            (
                msgs.len() as u32,
                w["expected_messages"].as_u64().unwrap_or(0) as u32,
            ),
        );
    }
    (Some(f), opts)
}

/// A progress bar on stderr for long traces (hidden when stderr is not a
/// terminal).
pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if total < 200_000 {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} {bar:40} {pos}/{len} packets ({per_sec}, {eta})",
        )
        .expect("a valid template"),
    );
    pb.set_message(what.to_string());
    pb
}

pub fn run(
    trace: &Path,
    json: bool,
    html: Option<&Path>,
    verbose: bool,
    analyzers: &[String],
    min_rto_ns: u64,
) -> Result<u8> {
    let mut names = Vec::new();
    for a in analyzers {
        match AnalyzerName::from_name(a) {
            Some(n) => names.push(n),
            None => {
                let known: Vec<&str> = AnalyzerName::ALL.iter().map(|a| a.name()).collect();
                eprintln!(
                    "wirelab: --analyzers: unknown analyzer `{a}` (known: {})",
                    known.join(", ")
                );
                return Ok(code::ERROR);
            }
        }
    }
    if names.is_empty() {
        names = AnalyzerName::ALL.to_vec();
    }
    let t = match wirelab_trace::read(trace) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("wirelab: {e}");
            return Ok(code::ERROR);
        }
    };
    let (facts, opts) = run_context(trace, min_rto_ns);
    let pb = progress_bar(t.packets.len() as u64, "analyzing");
    let report = wirelab_analyze::report::build(
        &trace.display().to_string(),
        &t,
        opts,
        facts.as_ref(),
        &names,
        &[],
        &|n| pb.set_position(n),
    );
    pb.finish_and_clear();
    if let Some(h) = html {
        write_html(h, &report)?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", wirelab_report::terminal::render(&report, verbose));
        if let Some(h) = html {
            println!("  report     {}", h.display());
        }
    }
    Ok(if report.violations() > 0 {
        code::EXPECT_FAILED
    } else {
        code::OK
    })
}

/// Writes the HTML report (temporary file and rename: never half a page).
pub fn write_html(path: &Path, report: &Report) -> Result<()> {
    let tmp = path.with_extension("html.tmp");
    std::fs::write(&tmp, wirelab_report::html::render(report))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
