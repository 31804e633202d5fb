//! The terminal summary of a run: short by default, `-v` for every row.

use wirelab_analyze::fmt_duration as us;

use wirelab_lab::Summary;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

pub fn print(s: &Summary, verbose: bool) {
    print_lab(s);
    print_switch(s);
    print!("{}", wirelab_report::terminal::render(&s.analysis, verbose));
    print_workload(s, verbose);
    for v in &s.expect {
        println!(
            "  expect     {} {}: {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.claim,
            v.observed
        );
    }
    println!("  results    {}/ (report.html)", s.results);
    println!("{}", s.verdict);
}

/// The hosts and the connections.
fn print_lab(s: &Summary) {
    println!(
        "wirelab run {} (run {}, {} ms)",
        s.name, s.run_id, s.duration_ms
    );
    let hosts: Vec<String> = s
        .hosts
        .iter()
        .map(|h| {
            let mut t = format!("{} {} port {}", h.name, h.ip, h.port);
            if let Some(b) = &h.bottleneck {
                t.push_str(&format!(" bottleneck {b}"));
            }
            t
        })
        .collect();
    println!(
        "  lab        {} hosts + switch, mtu {}, {}: {}",
        s.hosts.len(),
        s.mtu,
        s.hosts
            .first()
            .map_or("", |h| h.congestion_control.as_str()),
        hosts.join(", ")
    );
    if let Some(n) = s.dctcp_repairs.filter(|&n| n > 0) {
        println!(
            "  dctcp      {n} window(s) repaired after the kernel skipped a congestion-control callback (see crates/dataplane/bpf/dctcp.bpf.c)"
        );
    }
    for c in &s.connections {
        let isn = c.data_isn.map_or("-".to_string(), |i| format!("{i:#010x}"));
        println!(
            "  conn {:<5} {} -> {} {} {}x{}B depth {}, data mss {}, isn {}",
            c.id,
            c.requester,
            c.responder,
            c.verb,
            c.messages,
            c.message_size,
            c.tx_depth,
            c.data_mss,
            isn
        );
        if c.tracking_cpu_moves > 0 {
            println!(
                "  warning: conn {} was tracked on more than one CPU ({} moves); \
                 its packet indices and iterations may have raced",
                c.id, c.tracking_cpu_moves
            );
        }
    }
}

/// The switch: its queues, its events, the integrity of its capture.
fn print_switch(s: &Summary) {
    for q in &s.vaqm {
        let what = match (&q.port, q.destinations.is_empty()) {
            (Some(p), true) => format!("port to {p}"),
            (Some(p), false) => format!("port to {p} + {}", q.destinations.join(", ")),
            (None, _) => q.destinations.join(", "),
        };
        println!(
            "  vq {:<7} {what}, {} {}: {} packets, {} marked, {} dropped, {} overflowed{}",
            q.id,
            q.rate,
            q.discipline,
            q.packets,
            q.marks,
            q.drops,
            q.overflows,
            if q.unmarkable > 0 {
                format!(" ({} Not-ECT)", q.unmarkable)
            } else {
                String::new()
            }
        );
        if q.cpu_moves > 0 {
            println!(
                "  warning: vq {} was updated from more than one CPU ({} moves); \
                 its estimate may have raced",
                q.id, q.cpu_moves
            );
        }
    }
    if let Some(f) = &s.flowtables {
        let tables: Vec<String> = f
            .tables
            .iter()
            .map(|t| format!("table {} {:.1}", t.table, t.masks_per_packet))
            .collect();
        let o = &f.optimiser;
        println!(
            "  flowtables {:.1} masks searched per packet ({}), {} packets, {} missed, {} dropped{}; device {}, order {}{}",
            f.masks_per_packet,
            tables.join(", "),
            f.packets,
            f.misses,
            f.drops,
            if f.encaps + f.decaps + f.tunnel_errors > 0 {
                format!(
                    ", {} encapsulated, {} decapsulated, {} tunnel errors",
                    f.encaps, f.decaps, f.tunnel_errors
                )
            } else {
                String::new()
            } + &if f.rewrites + f.rewrite_errors > 0 {
                format!(
                    ", {} rewritten, {} rewrite errors",
                    f.rewrites, f.rewrite_errors
                )
            } else {
                String::new()
            },
            f.device,
            o.policy.name(),
            if o.tally.ticks > 0 {
                format!(
                    " ({} reorders, {} flows activated, {} evicted, {} masks removed)",
                    o.tally.reorders,
                    o.tally.activations,
                    o.tally.evictions,
                    o.tally.masks_removed
                )
            } else {
                String::new()
            }
        );
        if let Some(o) = &f.offload {
            println!(
                "  offload    {} flows offloaded ({} again after aging), {} aged out, {} unmatched; slow path forwarded {} packets, dropped {}{}",
                o.tally.offloads,
                o.tally.reoffloads,
                o.tally.aged,
                o.tally.unmatched,
                o.slow_path_packets,
                o.slow_path_drops,
                if o.deleting_ms > 0.0 {
                    format!("; {:.1} ms waiting on deletions", o.deleting_ms)
                } else {
                    String::new()
                }
            );
        }
    }
    if let Some(r) = &s.reorder {
        println!(
            "  reorder    {} held, {} sent right after the packets that overtook them{}{}",
            r.held,
            r.released,
            if r.failed > 0 {
                format!(
                    "; {} not held (one of that direction was held already) or lost",
                    r.failed
                )
            } else {
                String::new()
            },
            if r.never_released > 0 {
                format!(
                    "; {} never sent: fewer packets than `after` followed (their receiver never got them)",
                    r.never_released
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(r) = &s.record {
        println!(
            "  record     {} records ({} bytes) in {}/{}{}",
            r.records,
            r.bytes,
            s.results,
            r.folder,
            if r.incomplete > 0 {
                format!(
                    "; {} events or connections did not fit: incomplete",
                    r.incomplete
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(o) = &s.ovs {
        println!(
            "  ovs        {} packets: {} EMC hits, {} megaflow hits at {:.2} subtable lookups each, {} upcalls; {} megaflows in {} masks, {} OpenFlow rules; ovs-vswitchd {:.0} ns CPU per packet beyond idle",
            o.packets,
            o.emc_hits,
            o.megaflow_hits,
            o.subtable_lookups_per_hit,
            o.upcalls,
            o.megaflows,
            o.megaflow_masks,
            o.rules,
            o.cpu_ns_per_packet
        );
    }
    for e in &s.events {
        let hit: Vec<String> = e.hit.iter().map(|h| h.to_string()).collect();
        println!(
            "  event {:<4} conn {} {} iteration {} {} (armed at index {}): {} hit{}{}",
            e.id,
            e.conn,
            e.target,
            e.iteration,
            e.action,
            e.armed_index,
            e.hits,
            if e.hits == 1 { "" } else { "s" },
            if hit.is_empty() {
                String::new()
            } else {
                format!(" at {}", hit.join(" "))
            }
        );
    }
    let i = &s.integrity;
    println!(
        "  integrity  {}: {} received by the switch, {} by the kernel, {} mirrored, {} in the trace, {} lost",
        if i.valid { "VALID" } else { "INVALID" },
        i.switch_rx,
        i.kernel_rx,
        i.mirrored,
        i.in_trace,
        i.mirror_lost
    );
    for r in &i.reasons {
        println!("             INVALID because {r}");
    }
}

/// Each connection's message completion times.
fn print_workload(s: &Summary, verbose: bool) {
    for w in &s.workload {
        let mut mct: Vec<u64> = w.messages.iter().map(|m| m.mct_ns).collect();
        mct.sort_unstable();
        println!(
            "  mct {:<6} conn {}: {}/{} messages, p50 {} p99 {} max {}, goodput {:.2} Mbit/s{}",
            "",
            w.id,
            w.messages.len(),
            w.expected_messages,
            us(percentile(&mct, 0.5)),
            us(percentile(&mct, 0.99)),
            us(mct.last().copied().unwrap_or(0)),
            w.goodput_bps as f64 / 1e6,
            w.error
                .as_ref()
                .map_or(String::new(), |e| format!(" ERROR {e}"))
        );
        if let Some(p) = &w.perftest {
            // As ib_*_bw and ib_*_lat print them (their units).
            println!(
                "  perftest   conn {}: {} B × {}: BW peak {:.3} average {:.3} Gb/sec, MsgRate {:.6} Mpps; \
                 t_min {:.2} t_typical {:.2} t_avg {:.2} t_stdev {:.2} 99% {:.2} 99.9% {:.2} t_max {:.2} usec",
                w.id,
                p.bytes,
                p.iterations,
                p.bw_peak_gbps,
                p.bw_average_gbps,
                p.msg_rate_mpps,
                p.t_min_us,
                p.t_typical_us,
                p.t_avg_us,
                p.t_stdev_us,
                p.t_p99_us,
                p.t_p999_us,
                p.t_max_us
            );
        }
        if verbose {
            for m in &w.messages {
                println!("             message {} mct {}", m.message, us(m.mct_ns));
            }
        }
    }
}
