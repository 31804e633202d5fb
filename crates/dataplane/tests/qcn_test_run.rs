//! The QCN congestion point (NetBump §4.3, IEEE 802.1Qau) under
//! `BPF_PROG_TEST_RUN`: Fb, its quantisation and the sampling against the
//! reference in `wirelab_qcn::cp`, and the CNM the switch builds, parsed
//! back with `wirelab_qcn::cnm`. The sampled frame is cloned out of a real
//! device, so each test runs in a network namespace of its own whose
//! loopback is the egress port (nothing leaves that namespace). Needs root.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;

mod common;
use common::{have_bpf, run_frame};
use etherparse::IpEcn;
use wirelab_dataplane::{verdict, Config, Discipline, Switch, VqConfig};
use wirelab_qcn::cnm::{units64, Cnm};
use wirelab_qcn::cp::{self, CpParams, P_ONE};

const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const LO_IFINDEX: u32 = 1;
const LEN: usize = 1000;
const T0: u64 = 1_000_000;

/// This test thread inside a fresh namespace with its loopback up; back in
/// the original one, and the namespace deleted, on drop (also on panic).
struct PrivateNetns {
    name: String,
    home: std::fs::File,
}

impl PrivateNetns {
    fn enter(tag: &str) -> PrivateNetns {
        let name = format!("wlfx-{tag}-{}", std::process::id());
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let home = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
        let g = PrivateNetns { name, home };
        ip(&["-n", &g.name, "link", "set", "lo", "up"]);
        let ns = std::fs::File::open(format!("/run/netns/{}", g.name)).unwrap();
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        g
    }
}

impl Drop for PrivateNetns {
    fn drop(&mut self) {
        let _ = nix::sched::setns(self.home.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET);
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn params(p_min: u64, p_max: u64) -> CpParams {
    CpParams {
        q_eq: 3000,
        w: 2,
        fb_max: 63,
        p_min,
        p_max,
    }
}

/// Port 1 = this namespace's loopback (where test runs arrive), B behind
/// port 2 on `out_ifindex`, queue 1 for port 2 draining 1 byte per µs.
fn switch(p: CpParams, out_ifindex: u32) -> Switch {
    let sw = Switch::load(Config {
        vaqm: true,
        test_clock: true,
        ..Config::default()
    })
    .expect("switch loads");
    sw.add_port(LO_IFINDEX, 1).unwrap();
    sw.add_fwd(MAC_B, out_ifindex, 2).unwrap();
    sw.set_vq(
        1,
        &VqConfig {
            rate_bps: 8_000_000,
            buffer_bytes: 0,
            discipline: Discipline::Qcn(p),
        },
    )
    .unwrap();
    sw.vq_for_port(2, 1).unwrap();
    sw
}

#[test]
fn every_sample_with_negative_fb_sends_a_cnm_back_to_the_source() {
    if !have_bpf() {
        return;
    }
    let _ns = PrivateNetns::enter("cnm");
    let p = params(P_ONE, P_ONE); // sample every frame
    let sw = switch(p, LO_IFINDEX);
    let input = common::udp_frame(B, 9000, LEN, IpEcn::Ect0);
    let mut q_old = 0;
    let mut cnms = 0;
    // Four frames at one instant: Q = 1000, 2000, 3000, 4000.
    for k in 1..=4u64 {
        sw.set_test_clock(T0).unwrap();
        let (v, out, mut rec) = run_frame(&sw, &input);
        let m = rec.pop().expect("mirrored").0;
        let q = 1000 * k;
        let want = cp::feedback(&p, q, q_old);
        q_old = q;
        assert_eq!(
            (m.vq_bytes as u64, m.qcn_fb as u64),
            (q, want.quantised),
            "frame {k}"
        );
        assert_eq!(v, verdict::REDIRECT, "frame {k}");
        if want.quantised == 0 {
            // Fb >= 0 (frame 1: Q_off -2000 + 2 × 1000): forwarded as is.
            assert_eq!(out, input, "frame {k}");
            continue;
        }
        cnms += 1;
        // The output is the CNM (the frame itself went out cloned).
        let c = Cnm::parse(&out).unwrap_or_else(|e| panic!("frame {k}: {e}"));
        assert_eq!(c.dst, MAC_A, "to the frame's source");
        assert_eq!(c.src, [0x02, 0x77, 0x6c, 0, 0, 2], "from the egress port");
        assert_eq!(u64::from(c.quantised_fb), want.quantised);
        assert_eq!(c.cpid, 0x0277_6c00_0002_0001, "port MAC + queue 1");
        assert_eq!(c.q_offset, units64(want.q_off));
        assert_eq!(c.q_delta, units64(want.q_delta));
        assert_eq!(c.encapsulated_dst, MAC_B);
        assert_eq!(usize::from(c.encapsulated_len), LEN - 14);
        assert_eq!(c.encapsulated, input[14..14 + 64].to_vec());
        assert_eq!(out.len(), 38 + 64);
    }
    // Frames 2-4: Fb = -1000, -(0 + 2000) and -(1000 + 2000); quantised
    // |Fb| × 63 / (3000 × 5): 4, 8, 12.
    assert_eq!(cnms, 3);
    let c = sw.counters(1).unwrap();
    assert_eq!((c.cnm_sent, c.cnm_failed), (3, 0));
    let st = sw.vq_state(1).unwrap();
    assert_eq!((st.samples, st.last_qfb, st.q_old), (4, 12, 4000));
}

#[test]
fn a_queue_never_sampled_sends_nothing_however_long() {
    if !have_bpf() {
        return;
    }
    let _ns = PrivateNetns::enter("nosample");
    let sw = switch(params(0, 0), LO_IFINDEX);
    let input = common::udp_frame(B, 9000, LEN, IpEcn::Ect0);
    for _ in 0..50 {
        sw.set_test_clock(T0).unwrap();
        let (v, out) = sw.test_run(&input).unwrap();
        assert_eq!((v, out), (verdict::REDIRECT, input.clone()));
    }
    assert_eq!(sw.counters(1).unwrap().cnm_sent, 0);
    assert_eq!(sw.vq_state(1).unwrap().samples, 0);
}

#[test]
fn sampling_follows_the_probability_of_the_last_feedback() {
    if !have_bpf() {
        return;
    }
    // p_min 0, p_max 1: after a sample that saw no congestion nothing is
    // sampled again (p = 0); congestion is only seen if the first frame's
    // sample (p = 0 too) happened, so a queue starting idle stays silent.
    let _ns = PrivateNetns::enter("prob");
    let sw = switch(params(0, P_ONE), LO_IFINDEX);
    let input = common::udp_frame(B, 9000, LEN, IpEcn::Ect0);
    for _ in 0..20 {
        sw.set_test_clock(T0).unwrap();
        sw.test_run(&input).unwrap();
    }
    assert_eq!(sw.vq_state(1).unwrap().samples, 0);
    // With p_min = 1/2 about half the frames are sampled (xorshift draws).
    let sw = switch(params(P_ONE / 2, P_ONE / 2), LO_IFINDEX);
    for i in 0..400 {
        // 1 µs apart at 1 byte/µs: the queue keeps growing.
        sw.set_test_clock(T0 + i * 1000).unwrap();
        sw.test_run(&input).unwrap();
    }
    let s = sw.vq_state(1).unwrap().samples;
    assert!((150..=250).contains(&s), "{s} of 400 sampled at p = 1/2");
}

#[test]
fn a_frame_that_cannot_be_cloned_is_forwarded_without_a_cnm() {
    if !have_bpf() {
        return;
    }
    let _ns = PrivateNetns::enter("noclone");
    // Egress on an ifindex no device has: the clone fails.
    let sw = switch(params(P_ONE, P_ONE), 4242);
    let input = common::udp_frame(B, 9000, LEN, IpEcn::Ect0);
    for _ in 0..3 {
        sw.set_test_clock(T0).unwrap();
        let (v, out) = sw.test_run(&input).unwrap();
        assert_eq!((v, out), (verdict::REDIRECT, input.clone()));
    }
    let c = sw.counters(1).unwrap();
    assert_eq!(
        (c.cnm_sent, c.cnm_failed),
        (0, 2),
        "frames 2 and 3 had Fb < 0"
    );
}
