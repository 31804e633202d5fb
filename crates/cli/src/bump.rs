//! `wirelab bump`: checks the bump's config (exit 2 when it is wrong), runs
//! it through `wirelab_lab::bump`, prints its summary.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use wirelab_lab::bump::Args;

use crate::code;

pub fn run(args: &Args, json: bool, abort: &AtomicBool) -> Result<u8> {
    let (spec, links) = match wirelab_lab::bump::load(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("wirelab: {:#}", anyhow::Error::from(e));
            return Ok(code::ERROR);
        }
    };
    eprintln!(
        "wirelab: bump between {} and {} in {} for {:?} (Ctrl-C stops it)",
        args.ifaces[0], args.ifaces[1], args.ns, args.duration
    );
    let (s, verdict) = wirelab_lab::bump::run(args, &spec, links, abort, &wirelab_lab::Quiet)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        println!(
            "wirelab bump {} {}<->{}: {} ({} packets, {})",
            s.namespace,
            s.interfaces[0],
            s.interfaces[1],
            s.verdict,
            s.integrity.in_trace,
            s.results
        );
        for q in &s.vaqm {
            println!(
                "  vq {} toward {}: {} packets, {} marked, {} dropped, {} overflowed",
                q.id,
                q.port.as_deref().unwrap_or("-"),
                q.packets,
                q.marks,
                q.drops,
                q.overflows
            );
        }
    }
    Ok(crate::run::exit_code(verdict))
}
