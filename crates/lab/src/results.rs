//! The results folder of a run: summary.json, facts.json (typed, read back
//! by `wirelab analyze`), analysis.json, report.html, counters.json and
//! workload.log, beside plan.json and trace.pcapng written during the run.

use std::path::Path;

use wirelab_analyze::report::Report;
use wirelab_analyze::RunFacts;
use wirelab_capture::PortCounts;

use crate::summary::Summary;
use crate::{During, Error};

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), Error> {
    std::fs::write(path, bytes).during(format!("writing {}", path.display()))
}

fn json(v: &impl serde::Serialize) -> Result<Vec<u8>, Error> {
    serde_json::to_vec_pretty(v).during("encoding JSON")
}

/// Writes the HTML report (temporary file and rename: never half a page).
pub fn write_html(path: &Path, report: &Report) -> Result<(), Error> {
    let tmp = path.with_extension("html.tmp");
    write(&tmp, wirelab_report::html::render(report))?;
    std::fs::rename(&tmp, path).during(format!("writing {}", path.display()))
}

pub(crate) fn write_run(
    dir: &Path,
    s: &Summary,
    facts: &RunFacts,
    log: &str,
    ports: &[PortCounts],
) -> Result<(), Error> {
    write(&dir.join("summary.json"), json(s)?)?;
    wirelab_analyze::results::write(dir, facts).during("writing the run's facts")?;
    write(&dir.join("analysis.json"), json(&s.analysis)?)?;
    write_html(&dir.join("report.html"), &s.analysis)?;
    let counters = serde_json::json!({
        "hosts": s.counters,
        "switch_ports": ports,
    });
    write(&dir.join("counters.json"), json(&counters)?)?;
    let mut wl = log.to_string();
    for r in &s.workload {
        for m in &r.messages {
            wl.push_str(&format!(
                "conn {} message {} {} posted {} completed {} mct_ns {}\n",
                r.id,
                m.message,
                m.verb.name(),
                m.posted_ns,
                m.completed_ns,
                m.mct_ns
            ));
        }
        if let Some(e) = &r.error {
            wl.push_str(&format!("conn {} error: {e}\n", r.id));
        }
    }
    write(&dir.join("workload.log"), wl)
}
