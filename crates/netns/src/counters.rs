//! Kernel counters of a namespace under the names `nstat` prints
//! (`TcpRetransSegs`, `TcpExtTCPTimeouts`, ...), read from
//! /proc/thread-self/net/{snmp,netstat}: the calling thread's namespace,
//! without spawning nstat.

use std::collections::BTreeMap;

/// Parses the two-line-per-group format of /proc/net/snmp and netstat:
/// `Tcp: RtoAlgorithm RtoMin ...` followed by `Tcp: 1 200 ...`.
pub fn parse_proc_net(text: &str, out: &mut BTreeMap<String, i64>) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((group, names)), Some((_, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<i64>() {
                out.insert(format!("{group}{n}"), v);
            }
        }
    }
}

/// Counters of the calling thread's namespace (call inside `in_netns`).
pub fn read_current() -> std::io::Result<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    for f in ["snmp", "netstat"] {
        let text = std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))?;
        parse_proc_net(&text, &mut out);
    }
    Ok(out)
}

/// after - before, keeping only counters that changed.
pub fn delta(
    before: &BTreeMap<String, i64>,
    after: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    after
        .iter()
        .filter_map(|(k, a)| {
            let d = a - before.get(k).copied().unwrap_or(0);
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nstat_names() {
        let text = "Tcp: RtoAlgorithm RtoMin RetransSegs\nTcp: 1 200 7\nIp: Forwarding\nIp: 2\n";
        let mut m = BTreeMap::new();
        parse_proc_net(text, &mut m);
        assert_eq!(m["TcpRetransSegs"], 7);
        assert_eq!(m["IpForwarding"], 2);
        let mut after = m.clone();
        after.insert("TcpRetransSegs".into(), 9);
        let d = delta(&m, &after);
        assert_eq!(d.len(), 1);
        assert_eq!(d["TcpRetransSegs"], 2);
    }
}
