//! A connection longer than the history the model keeps (`KEEP`): its
//! memory stays bounded, verdicts within the history are unchanged, and a
//! retransmission reaching further back is counted, not misjudged.

use wirelab_analyze::model::KEEP;
use wirelab_analyze::report::build;
use wirelab_analyze::Options;
use wirelab_trace::{Link, Packet, Trace};

const MSS: u32 = 1000;

struct Gen {
    t: Trace,
    ts: u64,
}

impl Gen {
    fn push(&mut self, from_client: bool, seq: u32, ack: u32, len: u32, syn: bool) {
        let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        let b0 = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b1 = if from_client {
            b0.ipv4(a, b, 64).tcp(40000, 5001, seq, 65535)
        } else {
            b0.ipv4(b, a, 64).tcp(5001, 40000, seq, 65535)
        };
        let b2 = if syn { b1.syn() } else { b1 };
        let b3 = if syn && !from_client {
            b2.ack(ack)
        } else if syn {
            b2
        } else {
            b2.ack(ack)
        };
        let mut data = Vec::new();
        b3.write(&mut data, &vec![0u8; len as usize]).unwrap();
        self.ts += 10_000;
        self.t.packets.push(Packet {
            frame: self.t.packets.len() as u64 + 1,
            ts_ns: self.ts,
            orig_len: data.len() as u32,
            data,
            interface: 0,
            link: Link::Ethernet,
            meta: None,
        });
    }
}

#[test]
fn history_beyond_keep_is_forgotten_and_counted_not_misjudged() {
    let mut g = Gen {
        t: Trace::default(),
        ts: 1_000_000_000,
    };
    let (isn, server_isn) = (1000u32, 5000u32);
    g.push(true, isn, 0, 0, true);
    g.push(false, server_isn, isn + 1, 0, true);
    g.push(true, isn + 1, server_isn + 1, 0, false);
    let n = 2 * KEEP as u32 + 100;
    let seq = |k: u32| isn + 1 + k * MSS;
    for k in 0..n {
        g.push(true, seq(k), server_isn + 1, MSS, false);
        g.push(false, server_isn + 1, seq(k + 1), 0, false);
    }
    // 1 s later: the first segment again (beyond the history), and one
    // acknowledged 50 segments before the end (within it).
    g.ts += 1_000_000_000;
    g.push(true, seq(0), server_isn + 1, MSS, false);
    g.push(true, seq(n - 50), server_isn + 1, MSS, false);
    let r = build(
        "long",
        &g.t,
        Options::default(),
        None,
        &["loss-recovery"],
        &[],
        &|_| {},
    );
    let c = &r.analysis.connections[0];
    assert_eq!(c.first_transmissions, n);
    assert_eq!(c.forgotten_retransmissions, 1);
    // The recent one is judged as before: acknowledged data resent.
    assert_eq!(c.retransmissions.len(), 1);
    assert!(c.retransmissions[0].already_acked);
    assert_eq!(c.retransmissions[0].packet, n - 50 + 1);
    let f = &r.analyzers[0].findings;
    let named = |name: &str| f.iter().filter(|f| f.name == name).count();
    assert_eq!(named("acked-data-retransmitted"), 1, "{f:#?}");
    assert_eq!(named("forgotten-retransmission"), 1, "{f:#?}");
    // RTT samples: one per segment, counted exactly though the values are
    // a sample.
    assert_eq!(c.rtt.count(), u64::from(n));
}
