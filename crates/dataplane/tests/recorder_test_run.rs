//! The DETER recorder's programs (bpf/recorder.bpf.c) through
//! `BPF_PROG_TEST_RUN`: the events they report for crafted arrivals (drops,
//! reordering, duplicates, IP-ID wrap, CE, ACK drops), and Algorithm 1 in
//! the kernel giving exactly the samples of the Rust reference
//! (wirelab_deter::sample) on the same send times.
//!
//! Needs root (BPF). Without it every test is skipped with the reason.

use std::net::{Ipv4Addr, SocketAddrV4};

use etherparse::{IpEcn, IpNumber, Ipv4Header, TcpHeader};
use rand::{Rng, SeedableRng};
use wirelab_dataplane::recorder::{RecEvent, RecKey, Recorder};
use wirelab_deter::ipid::{arrivals, IdCoder, Marks};
use wirelab_deter::sample::{recorded, Sampler};

mod common;
use common::have_bpf;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// A TCP frame from `src`:40001 or 5201 to the other, with IP-ID `id`.
fn frame(from_a: bool, id: u16, payload: usize, syn: bool, ce: bool) -> Vec<u8> {
    segment(from_a, id, payload, syn, ce, (1000, 0, false, false))
}

/// The same with (seq, ack, FIN, RST).
fn segment(
    from_a: bool,
    id: u16,
    payload: usize,
    syn: bool,
    ce: bool,
    (seq, ack, fin, rst): (u32, u32, bool, bool),
) -> Vec<u8> {
    let (src, dst, sport, dport) = if from_a {
        (A, B, 40001, 5201)
    } else {
        (B, A, 5201, 40001)
    };
    let mut tcp = TcpHeader::new(sport, dport, seq, 64240);
    tcp.syn = syn;
    tcp.ack = !syn;
    tcp.acknowledgment_number = ack;
    tcp.fin = fin;
    tcp.rst = rst;
    let mut ip = Ipv4Header::new(
        (tcp.header_len() + payload) as u16,
        64,
        IpNumber::TCP,
        src.octets(),
        dst.octets(),
    )
    .unwrap();
    ip.identification = id;
    ip.ecn = if ce {
        IpEcn::CongestionExperienced
    } else {
        IpEcn::Ect0
    };
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    ip.write(&mut out).unwrap();
    tcp.write(&mut out).unwrap();
    out.resize(out.len() + payload, 0x5a);
    out
}

/// A's view of the connection.
fn key_at_a() -> RecKey {
    RecKey {
        local: SocketAddrV4::new(A, 40001),
        remote: SocketAddrV4::new(B, 5201),
    }
}

fn events(r: &Recorder) -> Vec<RecEvent> {
    let mut out = Vec::new();
    r.drain(|_, k, _, _, e| {
        assert_eq!(k, key_at_a(), "{e:?}");
        out.push(e);
    })
    .unwrap();
    out
}

/// One arrival, as a fixture row: what arrives at A, what it reports.
struct Row {
    what: &'static str,
    id: u16,
    ce: bool,
    want: &'static [RecEvent],
}

#[test]
fn arrivals_report_drops_reordering_wrap_and_ce() {
    if !have_bpf() {
        return;
    }
    let r = Recorder::load(5_000, true, 0, false).unwrap();
    use RecEvent::*;
    let rows = [
        Row {
            what: "a SYN-ACK (IP-ID 0) is not followed",
            id: 0,
            ce: false,
            want: &[],
        },
        Row {
            what: "the first packet after the handshake",
            id: 65530,
            ce: false,
            want: &[Start { id: 65530, segs: 1 }],
        },
        Row {
            what: "in sequence: counted, no event",
            id: 65531,
            ce: false,
            want: &[],
        },
        Row {
            what: "in sequence",
            id: 65532,
            ce: false,
            want: &[],
        },
        Row {
            what: "65533 dropped: 65534 comes after 2 in sequence",
            id: 65534,
            ce: false,
            want: &[Arrive {
                run: 2,
                id: 65534,
                segs: 1,
            }],
        },
        Row {
            what: "in sequence",
            id: 65535,
            ce: false,
            want: &[],
        },
        Row {
            what: "the ID wraps: 0 follows 65535 in sequence; CE starts (4 unmarked before)",
            id: 0,
            ce: true,
            want: &[Ce {
                run: 5,
                marked: false,
            }],
        },
        Row {
            what: "65533 arrives late, after 65535 and 0 in sequence: reordering, not a drop",
            id: 65533,
            ce: true,
            want: &[Arrive {
                run: 2,
                id: 65533,
                segs: 1,
            }],
        },
        Row {
            what: "a duplicate of 0",
            id: 0,
            ce: false,
            want: &[
                Arrive {
                    run: 0,
                    id: 0,
                    segs: 1,
                },
                Ce {
                    run: 2,
                    marked: true,
                },
            ],
        },
        Row {
            what: "in sequence after the wrap",
            id: 1,
            ce: false,
            want: &[],
        },
        Row {
            what: "2 and 3 dropped",
            id: 4,
            ce: false,
            want: &[Arrive {
                run: 1,
                id: 4,
                segs: 1,
            }],
        },
    ];
    for (i, row) in rows.iter().enumerate() {
        let syn = i == 0;
        let v = r
            .test_run(false, &frame(false, row.id, 100, syn, row.ce))
            .unwrap();
        assert_eq!(
            v as i32, -1,
            "{}: TCX_NEXT, the recorder never drops",
            row.what
        );
        assert_eq!(events(&r), row.want, "row {i}: {}", row.what);
    }
    let s = r.state(&key_at_a()).expect("followed");
    assert!(s.rx_started);
    assert_eq!((s.rx_run, s.ce_run, s.ce_marked), (0, 3, false));

    // The events and the final state, assembled as the Rust coder does
    // arrival by arrival.
    let mut coder = IdCoder::default();
    let mut marks = Marks::default();
    let mut direct = IdCoder::default();
    for row in &rows[1..] {
        direct.arrive(row.id, 1);
    }
    for row in &rows {
        for e in row.want {
            match *e {
                Start { id, segs } => coder.arrive(id, segs),
                Arrive { run, id, segs } => {
                    coder.advance(run);
                    coder.arrive(id, segs);
                }
                Ce { run, marked } => marks.extend(marked, run),
                other => unreachable!("not an arrival: {other:?}"),
            }
        }
    }
    coder.advance(s.rx_run);
    marks.extend(s.ce_marked, s.ce_run);
    let codes = coder.finish().unwrap();
    assert_eq!(codes, direct.finish().unwrap());
    let a = arrivals(&codes.1);
    // Offsets from 65530: 65533 is 3 (late), 2 and 3 are 8 and 9 (lost).
    assert_eq!(a.late, [3, 6], "{a:?}");
    assert_eq!(a.lost, [8, 9], "{a:?}");
    assert_eq!(marks.marked(), [5, 6]);
}

/// ACKs are arrivals too (DETER §4 footnote 7: a data drop and an ACK drop
/// must be told apart): pure ACKs arriving at the sender with a gap.
#[test]
fn an_ack_drop_is_an_arrival_gap_at_the_sender() {
    if !have_bpf() {
        return;
    }
    let r = Recorder::load(5_000, true, 0, false).unwrap();
    for id in [700u16, 701, 703, 704] {
        r.test_run(false, &frame(false, id, 0, false, false))
            .unwrap();
    }
    assert_eq!(
        events(&r),
        [
            RecEvent::Start { id: 700, segs: 1 },
            RecEvent::Arrive {
                run: 1,
                id: 703,
                segs: 1
            }
        ]
    );
    assert_eq!(r.state(&key_at_a()).unwrap().rx_run, 1);
    // Departures are counted apart from arrivals.
    r.test_run(true, &frame(true, 9, 1448, false, false))
        .unwrap();
    let s = r.state(&key_at_a()).unwrap();
    assert_eq!((s.tx_count, s.rx_run), (1, 1));
}

/// Algorithm 1 in the kernel and in Rust agree sample for sample on random
/// send-time series (bursts, idle periods, rate changes), and every
/// inferred time is within th.
#[test]
fn algorithm_1_in_the_kernel_matches_the_reference() {
    if !have_bpf() {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
    for (round, th) in [5_000u64, 1_000, 20_000].into_iter().enumerate() {
        let r = Recorder::load(th, true, 0, false).unwrap();
        let mut reference = Sampler::new(th);
        let mut t = 1_000_000_000u64 + round as u64;
        let mut gap = 1_200u64;
        let (mut kernel, mut want, mut times) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..600u64 {
            if rng.gen_bool(0.02) {
                gap = rng.gen_range(100..30_000);
            }
            t += gap + rng.gen_range(0..=gap / 3) + if rng.gen_bool(0.01) { 3_000_000 } else { 0 };
            times.push(t);
            r.set_test_clock(t).unwrap();
            r.test_run(true, &frame(true, i as u16, 1448, false, false))
                .unwrap();
            want.extend(reference.sample(i, t));
            r.drain(|_, _, _, _, e| match e {
                RecEvent::Sample {
                    index,
                    time_ns,
                    lo,
                    hi,
                } => {
                    let prev = kernel.last().map(|s: &wirelab_deter::sample::Sample| s.gap);
                    kernel.push(recorded(index, time_ns, lo, hi, prev))
                }
                other => panic!("only samples on departure: {other:?}"),
            })
            .unwrap();
        }
        let s = r.state(&key_at_a()).unwrap();
        assert_eq!(s.tx_count, 600);
        let prev = kernel.last().map(|s| s.gap);
        kernel.push(recorded(s.s_index, s.s_time, s.lo, s.hi, prev));
        want.extend(reference.finish());
        assert_eq!(kernel, want, "th {th}");
        assert!(
            kernel.len() > 3 && kernel.len() < 300,
            "{} samples",
            kernel.len()
        );
        for (i, &real) in times.iter().enumerate() {
            let got = wirelab_deter::sample::infer(&kernel, i as u64).unwrap();
            assert!(
                got.abs_diff(real) <= th,
                "th {th}: packet {i}: {got} vs {real}"
            );
        }
        assert_eq!(r.lost(), 0);
    }
}

/// After this host's FIN is acknowledged, the peer may answer from a
/// time-wait or control socket with IP-IDs of another series; a RST always
/// does. Neither is followed, so neither looks like a drop.
#[test]
fn arrivals_after_our_fin_was_acknowledged_and_resets_are_not_followed() {
    if !have_bpf() {
        return;
    }
    let r = Recorder::load(5_000, true, 0, false).unwrap();
    let from_b = |id: u16, ack: u32, fin: bool, rst: bool| {
        r.test_run(
            false,
            &segment(false, id, 0, false, false, (9000, ack, fin, rst)),
        )
        .unwrap();
    };
    from_b(300, 5000, false, false);
    from_b(301, 5000, false, false);
    from_b(40000, 0, false, true); // a RST from the control socket
                                   // A sends its FIN: seq 5000 with 100 bytes, so its ACK is 5101.
    r.test_run(
        true,
        &segment(true, 7, 100, false, false, (5000, 9000, true, false)),
    )
    .unwrap();
    from_b(302, 5100, false, false); // acknowledges the data, not the FIN
    from_b(12345, 5101, true, false); // acknowledges the FIN: not followed
    assert_eq!(events(&r), [RecEvent::Start { id: 300, segs: 1 }]);
    let s = r.state(&key_at_a()).unwrap();
    assert_eq!(s.rx_run, 2, "301 and 302 in sequence");
}
