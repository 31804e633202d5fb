//! From what a recorder reports to each connection's record: the events
//! (only what was out of the ordinary) and, when the connection ends, the
//! state the events had not said yet (bpf/recorder.bpf.c in the
//! dataplane crate reports exactly these).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::ipid::IdCoder;
use crate::record::ConnRecord;
use crate::sample::{recorded, Sample};

/// One report about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// Its first arrival.
    Start { id: u16, segs: u16 },
    /// An arrival out of sequence, after `run` in-sequence IDs.
    Arrive { run: u32, id: u16, segs: u16 },
    /// A run of arrivals, CE-marked or not, ended.
    Ce { run: u32, marked: bool },
    /// Algorithm 1 line 6.
    Sample(Sample),
}

/// What the events had not said when the connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Final {
    pub rx_run: u32,
    pub ce_run: u32,
    pub ce_marked: bool,
    pub tx_count: u64,
    /// Algorithm 1's open segment: s.index, s.time and rec_range.
    pub s_index: u64,
    pub s_time: u64,
    pub lo: u64,
    pub hi: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

#[derive(Debug, Default)]
struct Building {
    rec: ConnRecord,
    ids: IdCoder,
    /// The next event number to apply, and those that came early.
    next: u32,
    early: std::collections::BTreeMap<u32, Ev>,
}

impl Building {
    fn apply(&mut self, ev: Ev) {
        match ev {
            Ev::Start { id, segs } => self.ids.arrive(id, segs),
            Ev::Arrive { run, id, segs } => {
                self.ids.advance(run);
                self.ids.arrive(id, segs);
            }
            Ev::Ce { run, marked } => self.rec.ce.extend(marked, run),
            Ev::Sample(s) => self.rec.tx_samples.push(s),
        }
    }
}

/// The connections of one host, being assembled.
#[derive(Debug, Default)]
pub struct Assembler {
    host: String,
    conns: HashMap<(SocketAddr, SocketAddr), Building>,
}

impl Assembler {
    pub fn new(host: &str) -> Assembler {
        Assembler {
            host: host.to_string(),
            conns: HashMap::new(),
        }
    }

    /// The connection's event number `seq` (they are applied in this
    /// order, which the order they were read in may not be: two CPUs
    /// report a connection's events independently).
    pub fn event(&mut self, local: SocketAddr, remote: SocketAddr, seq: u32, ev: Ev) {
        let b = self.conns.entry((local, remote)).or_default();
        b.early.insert(seq, ev);
        while let Some(ev) = b.early.remove(&b.next) {
            b.apply(ev);
            b.next += 1;
        }
    }

    /// The connection's record, once it ended (its events all given).
    pub fn finish(&mut self, local: SocketAddr, remote: SocketAddr, f: Final) -> ConnRecord {
        let mut b = self.conns.remove(&(local, remote)).unwrap_or_default();
        // Anything still out of order goes in by number (an event the ring
        // lost leaves a hole: counted by the recorder, not here).
        for (_, ev) in std::mem::take(&mut b.early) {
            b.apply(ev);
        }
        b.ids.advance(f.rx_run);
        b.rec.ce.extend(f.ce_marked, f.ce_run);
        if f.tx_count > 0 {
            b.rec
                .tx_samples
                .push(recorded(f.s_index, f.s_time, f.lo, f.hi));
        }
        let mut r = b.rec;
        r.host = self.host.clone();
        r.local = Some(local);
        r.remote = Some(remote);
        r.start_ns = f.first_ns;
        r.end_ns = f.last_ns;
        r.tx_packets = f.tx_count;
        r.rx = b.ids.finish();
        r
    }

    /// Connections with events and no record yet.
    pub fn open(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipid::arrivals;

    #[test]
    fn events_and_the_final_state_make_the_record() {
        let (l, r): (SocketAddr, SocketAddr) = (
            "198.18.0.2:5201".parse().unwrap(),
            "198.18.0.1:40000".parse().unwrap(),
        );
        let mut a = Assembler::new("b");
        // Read out of order: applied by number.
        a.event(
            l,
            r,
            1,
            Ev::Arrive {
                run: 4,
                id: 17,
                segs: 1,
            },
        );
        a.event(l, r, 0, Ev::Start { id: 10, segs: 1 });
        a.event(
            l,
            r,
            2,
            Ev::Ce {
                run: 6,
                marked: false,
            },
        );
        a.event(
            l,
            r,
            3,
            Ev::Sample(Sample {
                index: 0,
                time_ns: 100,
                gap: 1024,
            }),
        );
        assert_eq!(a.open(), 1);
        let rec = a.finish(
            l,
            r,
            Final {
                rx_run: 3,
                ce_run: 3,
                ce_marked: true,
                tx_count: 9,
                s_index: 5,
                s_time: 900,
                lo: 2048,
                hi: 4096,
                first_ns: 50,
                last_ns: 1000,
            },
        );
        assert_eq!(a.open(), 0);
        let (first, codes) = rec.rx.clone().unwrap();
        assert_eq!(first, 10);
        let got = arrivals(&codes);
        // 10..=14 in sequence, 15 and 16 skipped, 17, then 18..=20.
        assert_eq!(got.lost, [5, 6]);
        assert_eq!(got.order.len(), 9);
        assert_eq!(rec.ce.marked(), [6, 7, 8]);
        assert_eq!(rec.tx_samples.len(), 2);
        assert_eq!(
            rec.tx_samples[1],
            Sample {
                index: 5,
                time_ns: 900,
                gap: 3072
            }
        );
        assert_eq!(
            (rec.host.as_str(), rec.tx_packets, rec.start_ns, rec.end_ns),
            ("b", 9, 50, 1000)
        );
    }
}
