//! Norma's stateful responder (bpf/efsm.bpf.c) through
//! `BPF_PROG_TEST_RUN`, against the executor without I/O
//! (wirelab_load::efsm) packet by packet: every transition of the
//! built-in HTTP server and client tables fires, with the program's reply
//! the reference's byte for byte (headers, payload, both checksums, which
//! etherparse checks too), and the counters alike at the end.
//!
//! Needs root (BPF). Without it every test is skipped with the reason.

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use wirelab_dataplane::efsm::Responder as Bpf;
use wirelab_load::efsm::{clock_isn, flag, Count, Payload, Responder, Side};
use wirelab_spec::efsm::{builtin, compile, EfsmRef};

mod common;
use common::have_bpf;

const TC_ACT_OK: u32 = 0;
const TC_ACT_SHOT: u32 = 2;
const TC_ACT_REDIRECT: u32 = 7;

const PEER: [u8; 4] = [198, 18, 1, 1];
const LOCAL: [u8; 4] = [198, 18, 2, 2];
const NOW: u64 = 5_000_000_000;

fn side(efsm: &str, payload: Option<Payload>, fin_after_data: bool, segments: u8) -> Side {
    Side {
        table: compile(&EfsmRef::Builtin(efsm.into()), "t").unwrap(),
        local_ip: u32::from_be_bytes(LOCAL),
        mss: 1460,
        segments_per_ack: segments,
        payload,
        fin_after_data,
        port_base: 20000,
        connections: 4,
        port_range: 40,
        requests: 1,
        draining: false,
    }
}

/// A segment from the peer's `port` to the side's `local` port.
#[allow(clippy::too_many_arguments)]
fn seg(port: u16, local: u16, flags: u8, seq: u32, ack: u32, win: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(PEER, LOCAL, 64)
        .tcp(port, local, seq, win);
    let b = if flags & flag::SYN != 0 { b.syn() } else { b };
    let b = if flags & flag::ACK != 0 {
        b.ack(ack)
    } else {
        b
    };
    let b = if flags & flag::FIN != 0 { b.fin() } else { b };
    let b = if flags & flag::RST != 0 { b.rst() } else { b };
    let b = if flags & flag::PSH != 0 { b.psh() } else { b };
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

/// A reply's (flags, seq, ack, payload length), its checksums checked.
fn read(f: &[u8]) -> (u8, u32, u32, usize) {
    let s = SlicedPacket::from_ethernet(f).expect("a parsable reply");
    let Some(etherparse::NetSlice::Ipv4(ip)) = &s.net else {
        panic!("not IPv4")
    };
    let Some(TransportSlice::Tcp(t)) = &s.transport else {
        panic!("not TCP")
    };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 checksum");
    let want = t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap();
    assert_eq!(t.checksum(), want, "TCP checksum");
    (
        f[47],
        t.sequence_number(),
        t.acknowledgment_number(),
        t.payload().len(),
    )
}

struct Pair {
    reference: Responder,
    bpf: Bpf,
}

impl Pair {
    fn new(s: Side) -> Pair {
        let mut bpf = Bpf::load(true).expect("the responder loads");
        bpf.configure(&s, 0).expect("configured");
        bpf.set_test_clock(NOW).unwrap();
        Pair {
            reference: Responder::new(s),
            bpf,
        }
    }

    /// One packet through both: the program's verdict and output are the
    /// reference's. Returns the reference's replies.
    fn step(&mut self, what: &str, frame: &[u8]) -> Vec<Vec<u8>> {
        let want = self.reference.receive(frame, NOW);
        let (rv, out) = self.bpf.test_run(frame).expect("test run");
        match &want {
            None => assert_eq!(rv, TC_ACT_OK, "{what}: passed to the stack"),
            Some(r) if r.is_empty() => assert_eq!(rv, TC_ACT_SHOT, "{what}: no reply"),
            Some(r) => {
                assert_eq!(rv, TC_ACT_REDIRECT, "{what}: a reply");
                let last = r.last().unwrap();
                read(last);
                assert_eq!(&out, last, "{what}: the reply's bytes");
            }
        }
        want.unwrap_or_default()
    }

    /// The counters and the flows are the reference's.
    fn same_counts(&self) {
        let counts = self.bpf.counts().unwrap();
        assert_eq!(counts, self.reference.counts, "counters (rows, then Count)");
        assert_eq!(self.bpf.flows(), self.reference.flows.len(), "flows held");
    }

    /// The counters and the flows are the reference's; every row fired.
    fn finish(&self) {
        self.same_counts();
        let t = &self.reference.side.table;
        for (i, c) in self.reference.counts[..t.rows.len()].iter().enumerate() {
            assert!(*c > 0, "row {i} ({}) never fired", t.describe(i));
        }
    }
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: wirelab\r\n\r\n";

#[test]
fn every_transition_of_the_http_server_replies_as_the_reference_does() {
    if !have_bpf() {
        return;
    }
    let body = 4000;
    let mut p = Pair::new(side(
        "http-server",
        Some(Payload::http_response(body, 1460)),
        true,
        2,
    ));
    let len = p.reference.side.payload.as_ref().unwrap().len as u32;
    let isn = clock_isn(NOW);
    let w = 65535;
    // listen: a reset gets nothing, an unknown flow's ACK a reset.
    p.step("listen, RST", &seg(1000, 8080, flag::RST, 7, 0, w, &[]));
    p.step(
        "listen, unknown",
        &seg(1001, 8080, flag::ACK, 7, 99, w, b"x"),
    );
    // A whole exchange on port 1002.
    let r = p.step("listen, SYN", &seg(1002, 8080, flag::SYN, 100, 0, w, &[]));
    assert_eq!(read(&r[0]).0, flag::SYN | flag::ACK);
    p.step(
        "syn-received, ACK",
        &seg(1002, 8080, flag::ACK, 101, isn + 1, w, &[]),
    );
    p.step(
        "established, other data",
        &seg(1002, 8080, flag::ACK, 101, isn + 1, w, b"PUT"),
    );
    let after_get = 104 + GET.len() as u32;
    let r = p.step(
        "established, GET",
        &seg(1002, 8080, flag::ACK | flag::PSH, 104, isn + 1, w, GET),
    );
    assert_eq!(r.len(), 2, "two segments per ACK");
    let r = p.step(
        "sending, ACK",
        &seg(1002, 8080, flag::ACK, after_get, isn + 1 + 2920, w, &[]),
    );
    assert_eq!(
        read(&r[0]).0,
        flag::ACK | flag::PSH | flag::FIN,
        "FIN on the last"
    );
    let end = isn + 1 + len + 1;
    let r = p.step(
        "sending, ACK of all",
        &seg(1002, 8080, flag::ACK, after_get, end, w, &[]),
    );
    assert!(r.is_empty());
    p.step(
        "sending, other",
        &seg(1002, 8080, flag::SYN, after_get, 0, w, &[]),
    );
    let r = p.step(
        "sending, FIN",
        &seg(1002, 8080, flag::FIN | flag::ACK, after_get, end, w, &[]),
    );
    assert_eq!(read(&r[0]).2, after_get + 1);
    // The other ways out.
    p.step(
        "listen, SYN (1003)",
        &seg(1003, 8080, flag::SYN, 5, 0, w, &[]),
    );
    p.step(
        "syn-received, GET",
        &seg(1003, 8080, flag::ACK, 6, isn + 1, w, GET),
    );
    p.step(
        "sending, RST",
        &seg(1003, 8080, flag::RST, 6 + GET.len() as u32, 0, w, &[]),
    );
    p.step(
        "listen, SYN (1004)",
        &seg(1004, 8080, flag::SYN, 5, 0, w, &[]),
    );
    p.step(
        "syn-received, RST",
        &seg(1004, 8080, flag::RST, 6, 0, w, &[]),
    );
    for (port, last, flags) in [
        (1005, "established, RST", flag::RST),
        (1006, "established, FIN", flag::FIN | flag::ACK),
    ] {
        p.step("listen, SYN", &seg(port, 8080, flag::SYN, 5, 0, w, &[]));
        p.step(
            "syn-received, ACK",
            &seg(port, 8080, flag::ACK, 6, isn + 1, w, &[]),
        );
        p.step(last, &seg(port, 8080, flags, 6, isn + 1, w, &[]));
    }
    // A window of 2000 bytes lets one segment of two out.
    p.step(
        "listen, SYN (1007)",
        &seg(1007, 8080, flag::SYN, 5, 0, w, &[]),
    );
    let r = p.step(
        "syn-received, GET, small window",
        &seg(1007, 8080, flag::ACK, 6, isn + 1, 2000, GET),
    );
    assert_eq!(r.len(), 1);
    // A request before the response went whole: the response goes on.
    let r = p.step(
        "sending, GET before the response went whole",
        &seg(
            1007,
            8080,
            flag::ACK,
            6 + GET.len() as u32,
            isn + 1 + 1460,
            w,
            GET,
        ),
    );
    assert!(
        read(&r[0]).1 == isn + 1 + 1460,
        "the response's next segment"
    );
    // A reset once everything was acknowledged: an idle connection's
    // close (as haproxy closes its idle ones), not an exchange cut short.
    p.step(
        "listen, SYN (1009)",
        &seg(1009, 8080, flag::SYN, 5, 0, w, &[]),
    );
    p.step(
        "syn-received, GET (1009)",
        &seg(1009, 8080, flag::ACK, 6, isn + 1, w, GET),
    );
    let rcv = 6 + GET.len() as u32;
    p.step(
        "sending, ACK (1009)",
        &seg(1009, 8080, flag::ACK, rcv, isn + 1 + 2920, w, &[]),
    );
    p.step(
        "sending, RST once all was acknowledged",
        &seg(1009, 8080, flag::RST | flag::ACK, rcv, end, w, &[]),
    );
    // Not the side's: another address, and not TCP.
    let mut other = seg(1008, 8080, flag::SYN, 5, 0, w, &[]);
    other[33] = 9;
    p.step("another address", &other);
    let mut arp = other.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    p.step("not IPv4", &arp);
    assert_eq!(p.reference.counted(Count::FlowsCreated), 7);
    assert_eq!(p.reference.counted(Count::FlowsEnded), 6);
    p.finish();
}

#[test]
fn the_http_client_requests_acks_closes_and_reopens_as_the_reference_does() {
    if !have_bpf() {
        return;
    }
    let req = Payload::new(GET, GET.len() as u64, 1460);
    let mut s = side("http-client", Some(req), false, 2);
    s.requests = 2;
    let mut p = Pair::new(s);
    let w = 65535;
    // Our SYN (the generator's) left port 20006 with ISN 999.
    let r = p.step(
        "syn-sent, SYN|ACK",
        &seg(80, 20006, flag::SYN | flag::ACK, 7000, 1000, w, &[]),
    );
    assert_eq!(read(&r[0]).3, GET.len());
    let sent = 1000 + GET.len() as u32;
    p.step(
        "requested, other",
        &seg(80, 20006, flag::ACK, 7001, sent, w, &[]),
    );
    let resp = vec![b'w'; 1460];
    let r = p.step(
        "requested, data",
        &seg(80, 20006, flag::ACK | flag::PSH, 7001, sent, w, &resp),
    );
    assert_eq!(read(&r[0]).2, 7001 + 1460);
    let r = p.step(
        "requested, FIN",
        &seg(80, 20006, flag::FIN | flag::ACK, 8461, sent, w, b"end"),
    );
    assert_eq!(read(&r[0]).0, flag::FIN | flag::ACK);
    p.step(
        "closing, other",
        &seg(80, 20006, flag::ACK, 8465, sent, w, &[]),
    );
    let r = p.step(
        "closing, ACK of our FIN",
        &seg(80, 20006, flag::ACK, 8465, sent + 1, w, &[]),
    );
    // Slot 6 of 4 connections in a range of 40: next port 20010.
    assert_eq!(u16::from_be_bytes([r[0][34], r[0][35]]), 20010);
    // The ways a client's flow ends abnormally, and an unknown packet.
    p.step(
        "syn-sent, RST",
        &seg(80, 20001, flag::RST | flag::ACK, 1, 1, w, &[]),
    );
    p.step(
        "syn-sent, unknown",
        &seg(80, 20001, flag::ACK, 1, 1, w, b"?"),
    );
    p.step(
        "syn-sent, SYN|ACK (2)",
        &seg(80, 20002, flag::SYN | flag::ACK, 50, 10, w, &[]),
    );
    p.step("requested, RST", &seg(80, 20002, flag::RST, 51, 0, w, &[]));
    p.step(
        "syn-sent, SYN|ACK (3)",
        &seg(80, 20003, flag::SYN | flag::ACK, 50, 10, w, &[]),
    );
    p.step(
        "requested, FIN (3)",
        &seg(
            80,
            20003,
            flag::FIN | flag::ACK,
            51,
            10 + GET.len() as u32,
            w,
            &[],
        ),
    );
    p.step("closing, RST", &seg(80, 20003, flag::RST, 52, 0, w, &[]));
    // Keep-alive, two requests: a response whole in one segment gets
    // the next request, the second our FIN; the server's FIN then its
    // ACK and a new SYN.
    let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789";
    p.step(
        "syn-sent, SYN|ACK (4)",
        &seg(80, 20004, flag::SYN | flag::ACK, 300, 10, w, &[]),
    );
    let mut us = 10 + GET.len() as u32;
    let r = p.step(
        "requested, the response whole, a request left",
        &seg(80, 20004, flag::ACK | flag::PSH, 301, us, w, resp),
    );
    let (fl, s, a, n) = read(&r[0]);
    assert_eq!(
        (fl, s, a, n),
        (
            flag::ACK | flag::PSH,
            us,
            301 + resp.len() as u32,
            GET.len()
        )
    );
    assert_eq!(&r[0][54..], GET, "the request again, from its first byte");
    us += GET.len() as u32;
    let them = 301 + resp.len() as u32;
    let r = p.step(
        "requested, the last response whole",
        &seg(80, 20004, flag::ACK | flag::PSH, them, us, w, resp),
    );
    assert_eq!(read(&r[0]).0, flag::FIN | flag::ACK, "we close");
    let them = them + resp.len() as u32;
    p.step(
        "fin-wait, the ACK of our FIN",
        &seg(80, 20004, flag::ACK, them, us + 1, w, &[]),
    );
    let r = p.step(
        "fin-wait, the server's FIN",
        &seg(80, 20004, flag::FIN | flag::ACK, them, us + 1, w, &[]),
    );
    assert_eq!(r.len(), 2, "its ACK, then a SYN");
    assert_eq!(read(&r[0]).2, them + 1);
    assert_eq!(read(&r[1]).0, flag::SYN);
    // Two more: one whose close crosses the server's FIN, one reset.
    for port in [20005, 20007] {
        p.step(
            &format!("syn-sent, SYN|ACK ({port})"),
            &seg(80, port, flag::SYN | flag::ACK, 300, 10, w, &[]),
        );
        let mut them = 301;
        let mut ours = 10 + GET.len() as u32;
        for k in 0..2 {
            p.step(
                &format!("requested, response {k} whole ({port})"),
                &seg(80, port, flag::ACK | flag::PSH, them, ours, w, resp),
            );
            them += resp.len() as u32;
            ours += GET.len() as u32;
        }
        ours -= GET.len() as u32;
        if port == 20007 {
            p.step("fin-wait, RST", &seg(80, port, flag::RST, them, 0, w, &[]));
            break;
        }
        // The server's FIN before it had ours: ACKed, and the ACK of
        // ours then opens the next connection (a SYN alone).
        let r = p.step(
            "fin-wait, a FIN that crossed ours",
            &seg(80, port, flag::FIN | flag::ACK, them, ours, w, &[]),
        );
        assert_eq!((read(&r[0]).0, read(&r[0]).2), (flag::ACK, them + 1));
        let r = p.step(
            "closing, the ACK of our FIN",
            &seg(80, port, flag::ACK, them + 1, ours + 1, w, &[]),
        );
        assert_eq!((r.len(), read(&r[0]).0), (1, flag::SYN));
    }
    assert_eq!(p.reference.counted(Count::MessagesReceived), 6);
    p.finish();
}

#[test]
fn a_kept_alive_server_answers_each_request_whole_as_the_reference_does() {
    if !have_bpf() {
        return;
    }
    let mut p = Pair::new(side(
        "http-server",
        Some(Payload::http_response(2000, 1460)),
        false,
        2,
    ));
    let len = p.reference.side.payload.as_ref().unwrap().len as u32;
    let isn = clock_isn(NOW);
    let w = 65535;
    p.step("listen, SYN", &seg(1002, 8080, flag::SYN, 100, 0, w, &[]));
    let mut them = 101;
    let mut us = isn + 1;
    for k in 0..3 {
        let r = p.step(
            &format!("request {k}"),
            &seg(1002, 8080, flag::ACK | flag::PSH, them, us, w, GET),
        );
        assert_eq!(r.len(), 2, "request {k}: the whole response");
        assert!(
            r[0][54..].starts_with(b"HTTP/1.1 200 OK"),
            "request {k}: from its start"
        );
        assert_eq!(read(&r[1]).0, flag::ACK | flag::PSH, "no FIN: kept alive");
        them += GET.len() as u32;
        us += len;
        // A repeated request starts nothing again.
        let r = p.step(
            &format!("request {k} again"),
            &seg(
                1002,
                8080,
                flag::ACK | flag::PSH,
                them - GET.len() as u32,
                us,
                w,
                GET,
            ),
        );
        assert!(r.is_empty(), "request {k} again");
    }
    // The client closes: our FIN with its ACK.
    let r = p.step(
        "sending, FIN",
        &seg(1002, 8080, flag::FIN | flag::ACK, them, us, w, &[]),
    );
    let (fl, s, a, _) = read(&r[0]);
    assert_eq!((fl, s, a), (flag::FIN | flag::ACK, us, them + 1));
    assert_eq!(
        p.reference.counted(Count::MessagesReceived),
        3,
        "three requests"
    );
    assert!(p.reference.flows.is_empty());
    p.same_counts();
}

#[test]
fn the_syn_flood_responder_resets_every_syn_and_keeps_nothing() {
    if !have_bpf() {
        return;
    }
    let mut s = side("http-server", Some(Payload::new(b"x", 1, 1460)), false, 1);
    s.table = compile(&EfsmRef::Table(builtin("syn-flood").unwrap()), "t").unwrap();
    s.payload = None;
    let mut p = Pair::new(s);
    for k in 0..50u32 {
        let r = p.step(
            "SYN",
            &seg(3000 + k as u16, 80, flag::SYN, k * 1000, 0, 65535, &[]),
        );
        assert_eq!(read(&r[0]).0, flag::RST | flag::ACK);
    }
    p.step("an ACK", &seg(3000, 80, flag::ACK, 1, 1, 65535, &[]));
    p.finish();
}
