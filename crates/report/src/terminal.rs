//! The terminal summary: a few lines per connection, one per analyzer, and
//! every violation; `verbose` adds every finding.

use std::fmt::Write;

use wirelab_analyze::report::Report;
use wirelab_analyze::{fmt_duration as dur, Kind};

/// Renders the summary (each line starts with two spaces and a 10-column tag,
/// like the run summary it is part of).
pub fn render(r: &Report, verbose: bool) -> String {
    let mut o = String::new();
    let a = &r.analysis;
    // First, not last: everything below covers only part of the file.
    if let Some((off, why)) = &a.truncated {
        let _ = writeln!(
            o,
            "  truncated  read {} packets, up to byte {off}, where the file is damaged: {why}",
            a.packets
        );
    }
    let _ = writeln!(o, "  vantage    {} ({} packets)", a.vantage, a.packets);
    if let Some(c) = &a.clock_back {
        let _ = writeln!(
            o,
            "  clock      {} timestamps go back, by up to {} (first at frame {}): merged files, a clock step or several CPUs writing one file; analyzed in file order with each step read as no time passing, so a timing across a step is off by up to that much",
            c.steps,
            dur(c.max_ns),
            c.first_frame
        );
    }
    for c in &a.connections {
        let mut per_packet: std::collections::BTreeMap<u32, Vec<&wirelab_analyze::Retransmission>> =
            Default::default();
        for x in &c.retransmissions {
            per_packet.entry(x.packet).or_default().push(x);
        }
        if per_packet.is_empty() && !verbose && c.ce_marks.is_empty() && a.connections.len() > 8 {
            continue;
        }
        let b = c.base_rtt;
        let _ = writeln!(
            o,
            "  conn {:<5} {} -> {}: {} data packets, {} first transmissions, {} retransmitted; base RTT sender side {}, receiver side {} ({})",
            c.id,
            sock(c.data_src),
            sock(c.data_dst),
            c.data_packets,
            c.first_transmissions,
            c.retransmissions.len(),
            dur(b.sender_side_ns),
            dur(b.receiver_side_ns),
            b.source
        );
        // Shown whatever the verbosity: how the capture was taken changes
        // what its packets mean.
        if c.super_packets > 0 {
            let _ = writeln!(
                o,
                "  offload    conn {}: {} data packets larger than the MSS the receiver announced ({} bytes): the capture was taken with segmentation offload on (TSO/GSO/GRO); the analysis counts bytes and uses the announced MSS",
                c.id,
                c.super_packets,
                c.announced_mss.unwrap_or(0)
            );
        }
        // The capture, not the stack, lacks these bytes, and the checks
        // behind them were skipped.
        for g in &c.capture_gaps {
            let _ = writeln!(
                o,
                "  gap        conn {} bytes {}..{}: never seen reaching the receiver, yet it acknowledged them at {}",
                c.id, g.from, g.to, g.ack
            );
        }
        let shown = if verbose { usize::MAX } else { 8 };
        for (p, rs) in per_packet.iter().take(shown) {
            let parts: Vec<String> = rs.iter().map(|x| x.to_string()).collect();
            let _ = writeln!(
                o,
                "  retrans    conn {} packet {}: {}x {}",
                c.id,
                p,
                rs.len(),
                parts.join(", ")
            );
        }
        if per_packet.len() > shown {
            let _ = writeln!(
                o,
                "             ... {} more packets (-v)",
                per_packet.len() - shown
            );
        }
        if !c.ce_marks.is_empty() {
            let echoed = c.ce_marks.iter().filter(|m| m.echo.is_some()).count();
            let cwr = c.ce_marks.iter().filter(|m| m.cwr.is_some()).count();
            let _ = writeln!(
                o,
                "  ecn        conn {}: {} CE marks, {} echoed (ECE), {} answered by CWR",
                c.id,
                c.ce_marks.len(),
                echoed,
                cwr
            );
        }
        if !c.iteration_mismatches.is_empty() {
            let _ = writeln!(
                o,
                "  WARNING    conn {}: switch and analyzer disagree on index/iteration at {} packets (first {})",
                c.id,
                c.iteration_mismatches.len(),
                c.iteration_mismatches[0]
            );
        }
    }
    for an in &r.analyzers {
        let verdict = match an.verdict {
            "violation" => format!(
                "VIOLATION ({} checks, {} violations)",
                an.checks, an.violations
            ),
            "pass" => format!("pass ({} checks)", an.checks),
            "measured" => "measured".to_string(),
            v => v.to_string(),
        };
        let measures = an
            .findings
            .iter()
            .filter(|f| f.kind == Kind::Measurement)
            .count();
        let extra = if measures > 0 {
            format!(" ({measures} measurements)")
        } else {
            String::new()
        };
        let _ = writeln!(o, "  analyzer   {:<23} {verdict}{extra}", an.name);
        let mut shown = 0;
        for f in &an.findings {
            let show = f.kind == Kind::Violation || verbose;
            if !show {
                continue;
            }
            shown += 1;
            if shown > 10 && !verbose {
                let _ = writeln!(o, "             ... more (-v, or --json)");
                break;
            }
            let conn = f.connection.map_or(String::new(), |c| format!("conn {c} "));
            let tag = match f.kind {
                Kind::Violation => "VIOLATION ",
                _ => "",
            };
            let rule = f.rule.map_or(String::new(), |r| format!(" [{r}]"));
            let _ = writeln!(o, "             {tag}{conn}{}: {}{rule}", f.name, f.message);
        }
    }
    for m in a
        .malformed
        .iter()
        .take(if verbose { usize::MAX } else { 5 })
    {
        let _ = writeln!(
            o,
            "  malformed  frame {}: {} at byte {}: {}",
            m.frame, m.layer, m.offset, m.detail
        );
    }
    o
}

fn sock(s: (std::net::IpAddr, u16)) -> String {
    match s.0 {
        std::net::IpAddr::V6(a) => format!("[{a}]:{}", s.1),
        std::net::IpAddr::V4(a) => format!("{a}:{}", s.1),
    }
}
