//! Cross-check against a tool nobody here wrote: wirelab's per-packet
//! classification (retransmission, fast retransmission, duplicate ACK)
//! against tshark's `tcp.analysis.*` flags, with every systematic
//! difference named. Shared by the golden traces' test (analyze crate) and
//! the captures made by tcpdump and dumpcap (cli crate).

// Each test file uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use wirelab_analyze::{analyze_keeping_segs, Options, Reason};

/// Per packet: (retransmission, fast retransmission, duplicate ACK).
pub type Flags = (bool, bool, bool);

/// tshark's flags per frame, with its out-of-order flag; None when tshark
/// is not installed.
pub fn flags(path: &Path) -> Option<BTreeMap<u64, (Flags, bool)>> {
    let out = Command::new("tshark")
        .args(["-r", path.to_str()?, "-T", "fields"])
        .args(["-e", "frame.number"])
        .args(["-e", "tcp.analysis.retransmission"])
        .args(["-e", "tcp.analysis.fast_retransmission"])
        .args(["-e", "tcp.analysis.duplicate_ack"])
        .args(["-e", "tcp.analysis.spurious_retransmission"])
        .args(["-e", "tcp.analysis.out_of_order"])
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let set = |i: usize| f.get(i).is_some_and(|x| !x.is_empty());
        let fast = set(2);
        // tshark marks a fast retransmission with both flags.
        let rtx = set(1) || fast || set(4);
        m.insert(f[0].parse().ok()?, ((rtx, fast, set(3)), set(5)));
    }
    Some(m)
}

/// Why the two may differ on a packet, if this difference is one we know.
pub fn explained(
    ours: Flags,
    theirs: Flags,
    tshark_ooo: bool,
    reason: Option<Reason>,
    outstanding: bool,
) -> Option<&'static str> {
    match (ours, theirs) {
        // RFC 5681 §2's duplicate ACK needs (a) outstanding data. tshark
        // counts a repeated ACK without it too: typically the receiver's
        // DSACK for a spurious retransmission of the last segment.
        ((a, b, false), (c, d, true)) if (a, b) == (c, d) && !outstanding => {
            Some("a repeated ACK with no data outstanding (RFC 5681 §2 (a))")
        }
        // tshark calls a segment "out-of-order", not a retransmission, when
        // it comes within 3ms of the previous one and no 2 duplicate ACKs
        // preceded it (its heuristic for reordering in the network). Its
        // bytes were sent before, so wirelab calls it what it is.
        ((true, _, false), (false, false, false)) if tshark_ooo => {
            Some("tshark's 3ms out-of-order heuristic")
        }
        // tshark's fast retransmission needs 2+ duplicate ACKs by RFC 5681's
        // definition (same window). Linux recovers by RACK (RFC 8985) after
        // one SACK, and its SACKs open the window, so to tshark those are
        // plain retransmissions.
        ((true, true, false), (true, false, false))
            if matches!(reason, Some(Reason::Rack | Reason::Sack)) =>
        {
            Some("RACK/SACK recovery without RFC 5681 duplicate ACKs")
        }
        // Bytes resent whose first transmission the capture lacks (the
        // capturing tool dropped it: a capture gap): wirelab judges a
        // retransmission against when its bytes were sent, so it names no
        // cause; tshark names one from the duplicate ACKs alone.
        ((true, false, a), (true, true, b)) if a == b && reason.is_none() => {
            Some("first transmission not captured: no cause judged")
        }
        _ => None,
    }
}

/// What a comparison found: packets compared, packets on which both
/// agree, the explained differences by reason.
#[derive(Debug, Default)]
pub struct Agreement {
    pub total: usize,
    pub agree: usize,
    pub why: BTreeMap<&'static str, usize>,
}

impl Agreement {
    pub fn share(&self) -> f64 {
        self.agree as f64 / self.total.max(1) as f64
    }
}

impl std::fmt::Display for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{}/{} packets ({:.2}%), differences: {:?}",
            self.agree,
            self.total,
            self.share() * 100.0,
            self.why
        )
    }
}

/// Compares wirelab's classification of every packet of `path` with
/// tshark's, adding to `into`. Panics on a difference no rule explains,
/// naming the file and frame. None when tshark is not installed.
pub fn compare(path: &Path, opts: Options, into: &mut Agreement) -> Option<()> {
    let theirs = flags(path)?;
    let trace = wirelab_trace::read(path).unwrap();
    let a = analyze_keeping_segs(&trace, opts);
    // Per frame: flags, the retransmission's reason, data outstanding.
    let mut ours: BTreeMap<u64, (Flags, Option<Reason>, bool)> = BTreeMap::new();
    for c in &a.connections {
        let reasons: BTreeMap<u64, Reason> = c
            .retransmissions
            .iter()
            .map(|r| (r.at.frame, r.reason))
            .collect();
        // The highest byte sent so far (relative: data starts at 1), and
        // the highest cumulative ACK: RFC 5681 §2 (a)'s outstanding data
        // lies between them (an older ACK captured late, as when a
        // receiver's ACKs leave from two CPUs, does not make any).
        let mut next_new = 1u32;
        let mut una = 1u32;
        for s in &c.segs {
            let frame = trace.packets[s.at.frame as usize - 1].frame;
            let rtx = s.data && s.tcp.payload_len > 0 && !s.first;
            let reason = reasons.get(&frame).copied();
            let fast = matches!(reason, Some(Reason::DupAcks | Reason::Sack | Reason::Rack));
            if s.data {
                let end = s.rel.wrapping_add(s.tcp.payload_len);
                if (end.wrapping_sub(next_new) as i32) > 0 {
                    next_new = end;
                }
            }
            if !s.data && s.tcp.has_ack && (s.rel.wrapping_sub(una) as i32) > 0 {
                una = s.rel;
            }
            let below = if s.data { s.rel } else { una };
            let outstanding = (next_new.wrapping_sub(below) as i32) > 0;
            ours.insert(frame, ((rtx, fast, s.dupack), reason, outstanding));
        }
    }
    for (frame, (t, ooo)) in &theirs {
        let (o, reason, outstanding) =
            ours.get(frame)
                .copied()
                .unwrap_or(((false, false, false), None, true));
        into.total += 1;
        if o == *t {
            into.agree += 1;
            continue;
        }
        match explained(o, *t, *ooo, reason, outstanding) {
            Some(w) => *into.why.entry(w).or_default() += 1,
            None => panic!(
                "{} frame {frame}: wirelab {o:?}, tshark {t:?} (out-of-order {ooo}), reason {reason:?}: unexplained",
                path.display()
            ),
        }
    }
    Some(())
}
