//! User vAQM disciplines (wirelab_ext.h, NetBump Table 1): the shipped
//! examples compile, link into the pipeline and decide as the built-in
//! disciplines do; classify and forward hooks steer packets; a broken
//! discipline fails with clang's or the verifier's message and leaves
//! nothing loaded. `BPF_PROG_TEST_RUN` with crafted timestamps; needs root.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

mod common;
use common::{have_bpf, run_frame};
use etherparse::IpEcn;
use wirelab_dataplane::ext::{self, CompileError, Extension};
use wirelab_dataplane::{
    verdict, wl_mirror_hdr, Aqm, Config, Discipline, Error, Switch, VqConfig, EXT_PARAMS,
};

const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const LO_IFINDEX: u32 = 1;
const OUT_IFINDEX: u32 = 4242;
const OTHER_IFINDEX: u32 = 4343;
const LEN: usize = 1000;
const PASS: Option<Aqm> = Some(Aqm::None);
const MARK: Option<Aqm> = Some(Aqm::Mark);
const DROP: Option<Aqm> = Some(Aqm::Drop);
const US: u64 = 1_000;
const T0: u64 = 1_000_000;

fn frame(dport: u16, ecn: IpEcn) -> Vec<u8> {
    common::udp_frame(B, dport, LEN, ecn)
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../specs/vaqm/ext")
        .join(name)
}

fn params(v: &[u64]) -> [u64; EXT_PARAMS] {
    let mut p = [0; EXT_PARAMS];
    p[..v.len()].copy_from_slice(v);
    p
}

/// A switch whose port 2 (towards B) feeds virtual queue 1 at 8 Mbit/s
/// (1 byte per µs), with the extension hooks in the pipeline.
fn switch(discipline: Discipline, ext: Option<&Extension>) -> Switch {
    let sw = Switch::load_with(config(ext.is_some()), ext).expect("switch loads");
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_port(OUT_IFINDEX, 2).unwrap();
    sw.add_port(OTHER_IFINDEX, 3).unwrap();
    sw.add_fwd(MAC_B, OUT_IFINDEX, 2).unwrap();
    let q = VqConfig {
        rate_bps: 8_000_000,
        buffer_bytes: 0,
        discipline,
    };
    sw.set_vq(1, &q).unwrap();
    sw.vq_for_port(2, 1).unwrap();
    sw
}

fn config(extension: bool) -> Config {
    Config {
        vaqm: true,
        test_clock: true,
        extension,
        ..Config::default()
    }
}

/// A switch running the discipline `source` on queue 1.
fn with_discipline(source: &Path, p: &[u64], work: &Path) -> (Switch, Vec<&'static str>) {
    let e = ext::build(source, work).expect("the discipline builds");
    let sw = switch(Discipline::Extension { params: params(p) }, Some(&e));
    (sw, e.hooks)
}

fn send(sw: &Switch, t: u64, input: &[u8]) -> (u32, Vec<u8>, wl_mirror_hdr) {
    sw.set_test_clock(t).unwrap();
    let (v, out, mut records) = run_frame(sw, input);
    (v, out, records.pop().expect("mirrored").0)
}

/// Held by every test of this file while it has switches loaded, so that
/// one checking that a failed load left no switch behind
/// (`loaded_switches`) is not misled by another test's switch loaded in
/// between: a `make test` run failed so ("[124146] after, [] before").
static SWITCHES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This file's lock on loading switches (a test that failed while holding
/// it poisons it; the next ones go on).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SWITCHES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ids of the loaded switch programs.
fn loaded_switches() -> Vec<u32> {
    libbpf_rs::query::ProgInfoIter::default()
        .filter(|p| p.name.to_string_lossy() == wirelab_dataplane::PROG_NAME)
        .map(|p| p.id)
        .collect()
}

#[test]
fn the_dctcp_example_decides_exactly_as_the_built_in_dctcp() {
    if !have_bpf() {
        return;
    }
    let _one = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let (user, hooks) = with_discipline(&example("dctcp.c"), &[2500], work.path());
    assert_eq!(hooks, ["wl_ext_process"]);
    let built_in = switch(Discipline::Dctcp { k_bytes: 2500 }, None);
    let ect = frame(9000, IpEcn::Ect0);
    let not_ect = frame(9000, IpEcn::NotEct);
    // Back to back (1000, 2000, 3000 > K: marked, 4000), a Not-ECT packet
    // above K (queued unmarked), then 2.5 ms idle: 5000 - 2500 + 1000.
    let times = [T0, T0, T0, T0, T0, T0 + 2500 * US, T0 + 2501 * US];
    let mut seen = Vec::new();
    for (i, t) in times.into_iter().enumerate() {
        let p = if i == 4 { &not_ect } else { &ect };
        let (vu, ou, mu) = send(&user, t, p);
        let (vb, ob, mb) = send(&built_in, t, p);
        assert_eq!(
            (vu, &ou, mu.vq_bytes, mu.verdict()),
            (vb, &ob, mb.vq_bytes, mb.verdict()),
            "packet {i}"
        );
        seen.push((mu.vq_bytes, mu.verdict()));
        // A mark is CE on the wire.
        let ce = ou[15] & 3 == 3;
        assert_eq!(ce, mu.verdict() == MARK, "packet {i}");
    }
    assert_eq!(
        seen,
        [
            (1000, PASS),
            (2000, PASS),
            (3000, MARK),
            (4000, MARK),
            (5000, PASS),
            (3500, MARK),
            (4499, MARK),
        ]
    );
    let s = user.vq_state(1).unwrap();
    assert_eq!((s.pkts, s.marks, s.unmarkable), (7, 4, 1));
}

#[test]
fn the_red_example_passes_below_min_drops_above_max_and_spaces_marks_by_count() {
    if !have_bpf() {
        return;
    }
    let _one = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    // min 2500, max 4500, w_q = 1 (the average is the queue), max_p = 1:
    // at a queue of 3000, p_b = 1/4, so count reaches 1/p_b = 4 and forces
    // a mark within every 4 packets (Floyd & Jacobson §7).
    let (sw, hooks) = with_discipline(&example("red.c"), &[2500, 4500, 65536, 65536], work.path());
    assert_eq!(hooks, ["wl_ext_vaqm", "wl_ext_process"]);
    let p = frame(9000, IpEcn::Ect0);
    // 1000, 2000 below min: pass.
    for i in 0..2 {
        let (v, _, m) = send(&sw, T0, &p);
        assert_eq!(
            (v, m.vq_bytes, m.verdict()),
            (verdict::REDIRECT, 1000 * (i + 1), PASS)
        );
    }
    // Hold the queue at 3000: each packet comes as 1000 bytes drained.
    let mut since_mark = 0;
    let mut marks = 0;
    for i in 0..40u64 {
        let (_, _, m) = send(&sw, T0 + i * 1000 * US, &p);
        assert_eq!(m.vq_bytes, 3000, "packet {i}");
        if m.verdict() == MARK {
            marks += 1;
            since_mark = 0;
        } else {
            assert_eq!(m.verdict(), PASS);
            since_mark += 1;
            assert!(
                since_mark < 4,
                "more than 1/p_b unmarked packets in a row at {i}"
            );
        }
    }
    assert!(marks >= 10, "{marks} marks in 40 packets at p_b = 1/4");
    // Fill to 5000 at once: 3000 and 4000 are in range, 5000 >= max drops
    // and leaves the queue again.
    let t = T0 + 40 * 1000 * US;
    send(&sw, t, &p);
    send(&sw, t, &p);
    let (v, _, m) = send(&sw, t, &p);
    assert_eq!((v, m.verdict(), m.vq_bytes), (verdict::SHOT, DROP, 4000));
    assert_eq!(sw.vq_state(1).unwrap().drops, 1);
}

#[test]
fn classify_and_forward_hooks_steer_packets_and_init_runs_once() {
    if !have_bpf() {
        return;
    }
    let _one = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("steer.c");
    // UDP port 9001 goes to queue 2 and out of port 3; init counts its
    // calls in state[0], process marks from the second packet of a queue.
    std::fs::write(
        &src,
        r#"#include "wirelab_ext.h"
WL_INIT(vq) { vq->state[0]++; vq->state[1] = vq->param[0]; return 0; }
WL_CLASSIFY(skb, p) { return p->dport == bpf_htons(9001) ? 2 : 0; }
WL_FORWARD(p) { return p->dport == bpf_htons(9001) ? 3 : 0; }
WL_ESTIMATE_QLEN(vq) { return vq->state[0] * 100000 + vq->state[1]; }
WL_PROCESS(skb, p, vq) { return vq->state[2]++ ? WL_AQM_MARK : WL_AQM_PASS; }
"#,
    )
    .unwrap();
    let (sw, hooks) = with_discipline(&src, &[7], work.path());
    assert_eq!(hooks.len(), 5);
    sw.set_vq(
        2,
        &VqConfig {
            rate_bps: 8_000_000,
            buffer_bytes: 0,
            discipline: Discipline::Extension {
                params: params(&[9]),
            },
        },
    )
    .unwrap();
    let to_q1 = frame(9000, IpEcn::Ect0);
    let to_q2 = frame(9001, IpEcn::Ect0);
    let (_, _, m) = send(&sw, T0, &to_q1);
    assert_eq!((m.vq, m.vq_bytes, m.verdict()), (1, 100_007, PASS));
    for i in 0..3u64 {
        let (v, _, m) = send(&sw, T0 + i, &to_q2);
        // init ran once for queue 2 (state[0] = 1), with its own param.
        assert_eq!((v, m.vq, m.vq_bytes), (verdict::REDIRECT, 2, 100_009));
        assert_eq!(m.verdict(), if i == 0 { PASS } else { MARK });
    }
    // forward() sent queue 2's packets out of port 3, queue 1's by the MAC
    // table out of port 2.
    assert_eq!(sw.counters(3).unwrap().tx_pkts, 3);
    assert_eq!(sw.counters(2).unwrap().tx_pkts, 1);
}

#[test]
fn a_broken_discipline_fails_with_the_compilers_or_verifiers_message_and_leaves_nothing() {
    if !have_bpf() {
        return;
    }
    let _one = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    // A syntax error: clang names the file and line.
    let bad_c = work.path().join("typo.c");
    std::fs::write(
        &bad_c,
        "#include \"wirelab_ext.h\"\nWL_PROCESS(skb, p, vq)\n{\n\treturn vq->byte;\n}\n",
    )
    .unwrap();
    match ext::build(&bad_c, work.path()) {
        Err(CompileError::Diagnostics { diagnostics, .. }) => {
            assert!(diagnostics.contains("typo.c:4:"), "{diagnostics}");
            assert!(diagnostics.contains("byte"), "{diagnostics}");
        }
        other => panic!("expected clang's diagnostics, got {other:?}"),
    }
    // A misspelt hook, or none at all, is refused by name.
    let none_c = work.path().join("none.c");
    std::fs::write(
        &none_c,
        "#include \"wirelab_ext.h\"\n\
         __u32 wl_ext_procss(struct wl_ext_vq *vq) { return 0; }\n",
    )
    .unwrap();
    let e = ext::build(&none_c, work.path()).unwrap_err().to_string();
    assert!(e.contains("wl_ext_procss") && e.contains("no hook"), "{e}");
    std::fs::write(&none_c, "#include \"wirelab_ext.h\"\n").unwrap();
    let e = ext::build(&none_c, work.path()).unwrap_err().to_string();
    assert!(e.contains("defines no hook"), "{e}");
    // Builds, but indexes param[] with a number from the packet: the
    // verifier refuses the pipeline, and no switch stays loaded.
    let unsafe_c = work.path().join("unbounded.c");
    std::fs::write(
        &unsafe_c,
        "#include \"wirelab_ext.h\"\n\
         WL_PROCESS(skb, p, vq) { return vq->param[p->dport]; }\n",
    )
    .unwrap();
    let e = ext::build(&unsafe_c, work.path()).expect("it compiles and links");
    let before = loaded_switches();
    match Switch::load_with(config(true), Some(&e)) {
        Err(Error::Load { log, .. }) => {
            // The verifier's own words, at the user's function.
            assert!(log.contains("wl_ext_process"), "{log}");
            assert!(log.contains("invalid access to memory"), "{log}");
        }
        Err(other) => panic!("expected the verifier's refusal, got {other}"),
        Ok(_) => panic!("the verifier accepted an unbounded index"),
    }
    // No switch may be loaded now that was not before (the other tests
    // of this file wait for this one: `one_at_a_time`).
    let after = loaded_switches();
    assert!(
        after.iter().all(|id| before.contains(id)),
        "nothing stays loaded: {after:?} after, {before:?} before"
    );
    // The switch refuses a discipline without the hooks, and the reverse.
    assert!(matches!(
        Switch::load_with(config(false), Some(&e)),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Switch::load_with(config(true), None),
        Err(Error::Config(_))
    ));
}
