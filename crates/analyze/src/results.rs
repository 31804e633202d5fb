//! A run's results folder as analysis input: the run facts in
//! `summary.json` (schema `wirelab.run/1`) and the options its `plan.json`
//! implies. `wirelab analyze` uses these next to a results folder's trace,
//! and so do the golden tests.

use std::path::Path;

use serde_json::Value;

use crate::{Options, RunFacts};

impl Options {
    /// What the analysis may assume, from each host's (rto_min,
    /// net.ipv4.tcp_early_retrans): the smallest rto_min (`default_rto` when
    /// no host is given), TLP unless a host turns it off, and for wirelab's
    /// own RoCE device no slow-path bound and a wider timing slack.
    pub fn for_hosts(
        hosts: impl Iterator<Item = (Option<u64>, Option<String>)>,
        default_rto: Option<u64>,
    ) -> Options {
        let mut o = Options::default();
        let mut rto = None::<u64>;
        for (r, early_retrans) in hosts {
            // Hosts of a wirelab plan: their RoCE device is wirelab's own, a
            // user-space process sharing two cores with the lab, whose
            // answers took 72 µs to 2.2 ms in five runs of the same spec:
            // a latency bound would judge the scheduler, so latencies are
            // only measured (specs bound them with `expect:`).
            o.roce_slow_path_ns = None;
            o.roce_timing_slack_ns = crate::ROCE_TIMING_SLACK_USERSPACE_NS;
            o.roce_timer_start_slack_ns = crate::ROCE_TIMER_START_SLACK_LAB_NS;
            // The lab's kernels share the same two cores: `make test` runs
            // saw an out-of-order segment answered 4.1 ms late, a hole fill
            // 10.9 ms late, and a fast retransmission 4.4 ms after its loss
            // (170-300 µs in other runs). 30 ms stays below Linux's 40 ms
            // minimum delayed ACK, so a receiver that delays still stands out.
            o.ack_allowance_ns = o.ack_allowance_ns.max(crate::LAB_SCHEDULING_SLACK_NS);
            o.reaction_allowance_ns = o.reaction_allowance_ns.max(crate::LAB_SCHEDULING_SLACK_NS);
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
}

fn read(dir: &Path, name: &str) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(dir.join(name)).ok()?).ok()
}

/// The options a run's plan.json implies; `default_rto` without one.
pub fn options(dir: &Path, default_rto: u64) -> Options {
    let hosts: Vec<(Option<u64>, Option<String>)> = read(dir, "plan.json")
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
    if hosts.is_empty() {
        Options::for_hosts(std::iter::empty(), Some(default_rto))
    } else {
        Options::for_hosts(hosts.into_iter(), None)
    }
}

/// The run facts in a results folder's summary.json, if it has one.
pub fn facts(dir: &Path) -> Option<RunFacts> {
    let s = read(dir, "summary.json")?;
    if s["schema"] != "wirelab.run/1" {
        return None;
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
    for (host, m) in s["counters"].as_object().into_iter().flatten() {
        let m = m
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
            .collect();
        f.counters.insert(host.clone(), m);
    }
    for d in s["device_counters"].as_array().into_iter().flatten() {
        let Some(host) = d["host"].as_str() else {
            continue;
        };
        let m = d["after"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                Some((
                    k.clone(),
                    v.as_i64()? - d["before"][k].as_i64().unwrap_or(0),
                ))
            })
            .collect();
        f.device_counters.insert(host.to_string(), m);
    }
    if let Some(plan) = read(dir, "plan.json") {
        // The virtual queues, with the ground truth the run recorded.
        #[derive(serde::Deserialize)]
        struct Vq {
            id: u32,
            port: Option<(u32, String)>,
            rate: wirelab_spec::BitsPerSec,
            dctcp: Option<wirelab_spec::vaqm::Dctcp>,
            red: Option<wirelab_spec::vaqm::Red>,
            #[serde(default)]
            qcn: Option<wirelab_spec::vaqm::Qcn>,
            #[serde(default)]
            buffer: Option<wirelab_spec::Bytes>,
            #[serde(default)]
            distributed: Option<wirelab_spec::vaqm::Distributed>,
        }
        let truth = crate::truth::read_csv(&dir.join(crate::truth::TRUTH_FILE)).unwrap_or_default();
        for q in plan["vaqm"].as_array().into_iter().flatten() {
            let Ok(q) = serde_json::from_value::<Vq>(q.clone()) else {
                continue;
            };
            f.vaqm.push(crate::truth::VqFacts {
                id: q.id,
                port: q.port.map(|p| p.1),
                rate_bps: q.rate.0,
                dctcp: q.dctcp,
                red: q.red,
                qcn: q.qcn,
                buffer_bytes: q.buffer.map_or(0, |b| b.0),
                distributed: q.distributed,
                truth: truth.iter().filter(|p| p.vq == q.id).copied().collect(),
            });
        }
        // QCN reaction points: their rate changes, and the CNMs each
        // received (from the summary).
        let points = crate::rp::read_csv(&dir.join(crate::rp::RP_FILE)).unwrap_or_default();
        for rp in plan["reaction_points"].as_array().into_iter().flatten() {
            let Some(host) = rp["host"]
                .as_u64()
                .and_then(|h| plan["hosts"][h as usize]["name"].as_str())
            else {
                continue;
            };
            let cnms = s["reaction_points"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["host"].as_str() == Some(host))
                .and_then(|r| r["cnms"].as_u64())
                .unwrap_or(0);
            f.qcn.push(crate::rp::RpFacts {
                host: host.to_string(),
                cnms,
                line_rate_bps: rp["params"]["line_rate"].as_u64().unwrap_or(0),
                points: points.iter().filter(|p| p.host == host).cloned().collect(),
            });
        }
        for c in plan["conns"].as_array().into_iter().flatten() {
            let (Some(id), Some(t), Some(r)) = (
                c["id"].as_u64(),
                c["roce"]["timeout"].as_u64(),
                c["roce"]["retry_cnt"].as_u64(),
            ) else {
                continue;
            };
            if let Some(t) = wirelab_roce::local_ack_timeout_ns(t as u8) {
                f.roce_retransmit.insert(id as u32, (t, r as u32));
            }
        }
        for h in plan["hosts"].as_array().into_iter().flatten() {
            if let (Some(n), Some(p)) = (h["name"].as_str(), h["stack"]["roce"]["profile"].as_str())
            {
                f.roce_profile.insert(n.to_string(), p.to_string());
            }
            let (Some(n), Some(t)) = (
                h["name"].as_str(),
                h["stack"]["roce"]["min_time_between_cnps"].as_str(),
            ) else {
                continue;
            };
            if let Ok(t) = t.parse::<wirelab_spec::Nanos>() {
                f.cnp_interval_ns.insert(n.to_string(), t.0);
            }
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
    Some(f)
}
