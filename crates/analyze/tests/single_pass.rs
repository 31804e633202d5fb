//! The model reads a capture once and picks each connection's data
//! direction from its first packets; a connection whose lead changes
//! hands later is built again in a second pass, with exactly the result a
//! model told its direction gives.

use wirelab_analyze::model::{Finished, Model};

mod common;

const MSS: u32 = 1000;

/// A connection whose client first uploads 80 segments (ahead by more
/// than the model waits for), then downloads 300, one of them lost and
/// retransmitted: the server is the data sender. With a plain upload
/// before it, numbered first.
fn flipping() -> wirelab_trace::Trace {
    let (isn, sisn) = (1000u32, 5000u32);
    let mut g = common::TcpGen::new();
    g.handshake(isn, sisn);
    let up = |k: u32| isn + 1 + k * MSS;
    for k in 0..80 {
        g.push(true, up(k), sisn + 1, MSS, false);
        g.push(false, sisn + 1, up(k + 1), 0, false);
    }
    let c = up(80);
    let down = |k: u32| sisn + 1 + k * MSS;
    for k in 0..300 {
        if k == 150 {
            // Lost after the capture point: three duplicate ACKs, then
            // the fast retransmission.
            g.push(false, down(k), c, MSS, false);
            for j in 1..=3 {
                g.push(false, down(k + j), c, MSS, false);
                g.push(true, c, down(k), 0, false);
            }
            g.push(false, down(k), c, MSS, false);
            g.push(true, c, down(k + 4), 0, false);
        } else if !(151..154).contains(&k) {
            g.push(false, down(k), c, MSS, false);
            g.push(true, c, down(k + 1), 0, false);
        }
    }
    // The same exchange from another port, ahead of it in the capture, as
    // a plain upload: its first 80 segments only.
    let mut t = wirelab_trace::Trace::default();
    for p in g.t.packets.iter().take(3 + 2 * 80) {
        let mut p = p.clone();
        // Client port 40000 -> 40001 (TCP source or destination port).
        let tcp = 14 + 20;
        let (sport, dport) = (tcp, tcp + 2);
        for at in [sport, dport] {
            if p.data[at..at + 2] == 40000u16.to_be_bytes() {
                p.data[at..at + 2].copy_from_slice(&40001u16.to_be_bytes());
                // The TCP checksum covers the ports: adjust it (RFC 1624).
                let ck = u16::from_be_bytes([p.data[tcp + 16], p.data[tcp + 17]]);
                let sum = u32::from(!ck) + u32::from(!40000u16) + 40001;
                let sum = (sum & 0xffff) + (sum >> 16);
                let sum = (sum & 0xffff) + (sum >> 16);
                p.data[tcp + 16..tcp + 18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            }
        }
        p.ts_ns -= 1;
        t.packets.push(p);
    }
    t.packets.extend(g.t.packets);
    t.packets.sort_by_key(|p| p.ts_ns);
    for (i, p) in t.packets.iter_mut().enumerate() {
        p.frame = i as u64 + 1;
    }
    t
}

fn one_pass(t: &wirelab_trace::Trace, threads: usize) -> Finished {
    let mut m = Model::new(wirelab_analyze::Options::default());
    m.threads(threads);
    for p in &t.packets {
        m.add(&p.as_ref());
    }
    m.finish(None)
}

#[test]
fn a_connection_whose_lead_changes_hands_is_built_again_with_its_true_direction() {
    let t = flipping();
    for threads in [0, 1, 2] {
        let Finished::Again(again) = one_pass(&t, threads) else {
            panic!("the first guess (the client, 80 KB ahead) should be found wrong");
        };
        assert_eq!(again.connections(), 1, "only the flipping connection");
    }
    let a = wirelab_analyze::model::build(&t, wirelab_analyze::Options::default(), &|_| {});
    assert_eq!(a.connections.len(), 2);
    let (upload, flip) = (&a.connections[0], &a.connections[1]);
    // Numbered in order of first appearance, whichever pass built them.
    assert_eq!((upload.id, flip.id), (1, 2));
    assert_eq!(upload.data_src.1, 40001);
    assert_eq!(upload.first_transmissions, 80);
    assert_eq!(flip.data_src.1, 5001, "the server sent more");
    assert_eq!(flip.first_transmissions, 300);
    assert_eq!(flip.retransmissions.len(), 1);
    assert_eq!(flip.handshake_rtt_ns, Some(20_000));
    // The same with workers, and from a file.
    let json = serde_json::to_string(&a).unwrap();
    for threads in [1, 2] {
        let Finished::Again(again) = one_pass(&t, threads) else {
            unreachable!()
        };
        let mut m = again.model();
        for p in &t.packets {
            m.add(&p.as_ref());
        }
        let Finished::Done(redone) = m.finish(None) else {
            panic!("a third pass")
        };
        assert_eq!(
            serde_json::to_string(&again.complete(redone)).unwrap(),
            json
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flip.pcap");
    write_pcap(&t, &path);
    let r = wirelab_analyze::report::stream(
        &path,
        wirelab_analyze::Options::default(),
        None,
        &["loss-recovery"],
        0,
        &|_| {},
    )
    .unwrap();
    let ids: Vec<_> = r
        .analysis
        .connections
        .iter()
        .map(|c| {
            (
                c.id,
                c.data_src.1,
                c.first_transmissions,
                c.retransmissions.len(),
            )
        })
        .collect();
    assert_eq!(ids, vec![(1, 40001, 80, 0), (2, 5001, 300, 1)]);
}

/// A connection whose direction is clear from its first packets is built
/// in one pass.
#[test]
fn a_bulk_transfer_needs_one_pass() {
    let mut t = flipping();
    // The upload only: both connections' first 163 packets.
    t.packets.truncate(2 * (3 + 2 * 80));
    assert!(matches!(one_pass(&t, 0), Finished::Done(_)));
}

fn write_pcap(t: &wirelab_trace::Trace, path: &std::path::Path) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let hdr = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), hdr).unwrap();
    for p in &t.packets {
        let ts = std::time::Duration::from_nanos(p.ts_ns);
        w.write_packet(&PcapPacket::new(ts, p.data.len() as u32, &p.data))
            .unwrap();
    }
}

/// More connections than the model's connection cache has slots, all on
/// the same ports (so every one maps to the same slot), interleaved packet
/// by packet: each is still analyzed from its own packets alone.
#[test]
fn interleaved_connections_that_share_a_cache_slot_stay_apart() {
    const CONNS: u8 = 250;
    const SEGS: u32 = 30;
    let frame = |client: u8, to_server: bool, seq: u32, ack: u32, len: usize| {
        let (c, s) = ([198, 18, 1, client], [198, 18, 0, 2]);
        let b = if to_server {
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(c, s, 64)
                .tcp(40000, 5001, seq, 65535)
        } else {
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
                .ipv4(s, c, 64)
                .tcp(5001, 40000, seq, 65535)
        };
        let payload = vec![0u8; len];
        let mut data = Vec::new();
        b.ack(ack).write(&mut data, &payload).unwrap();
        data
    };
    let mut t = wirelab_trace::Trace::default();
    let mut push = |data: Vec<u8>| {
        let n = t.packets.len() as u64;
        t.packets.push(wirelab_trace::Packet {
            frame: n + 1,
            ts_ns: 1_000_000_000 + n * 1_000,
            orig_len: data.len() as u32,
            data,
            interface: 0,
            link: wirelab_trace::Link::Ethernet,
            meta: None,
        });
    };
    // Connection c's client sends SEGS segments of c + 100 bytes each
    // (its ISN is c * 1000), each acknowledged; round robin over all.
    for k in 0..SEGS {
        for c in 1..=CONNS {
            let (isn, len) = (u32::from(c) * 1000, u32::from(c) + 100);
            let seq = isn + 1 + k * len;
            push(frame(c, true, seq, 1, len as usize));
            push(frame(c, false, 1, seq + len, 0));
        }
    }
    let Finished::Done(a) = one_pass(&t, 0) else {
        panic!("a bulk transfer each: one pass");
    };
    assert_eq!(a.connections.len(), usize::from(CONNS));
    for conn in &a.connections {
        let std::net::IpAddr::V4(ip) = conn.data_src.0 else {
            panic!("IPv4 only here");
        };
        let c = ip.octets()[3];
        assert_eq!(conn.data_src.1, 40000);
        assert_eq!(conn.packets, u64::from(2 * SEGS), "connection {c}");
        assert_eq!(conn.data_packets, u64::from(SEGS), "connection {c}");
        assert_eq!(conn.first_transmissions, SEGS, "connection {c}");
        assert_eq!(conn.smss, u32::from(c) + 100, "connection {c}");
        assert!(conn.retransmissions.is_empty(), "connection {c}");
    }
}
