//! Devices on virtual time: any number of [`Device`]s joined by one switch
//! with a fixed one-way delay and a hook that decides each packet's fate:
//! one of wirelab's switch actions (pass, drop, CE-mark, corrupt, MigReq).
//! The transport's own tests, the analyzers' profile tests and the drop
//! sweeps run on it; nothing here touches a socket or a clock.

use std::net::Ipv4Addr;

use crate::packet::{self, Packet, Reth, Syndrome};
use crate::{Completion, Device, Rx, Tx};

/// What the switch does with a packet: the lab switch's own actions
/// (`wirelab_trace::Action`), so a simulated trace reads like a real one.
pub use wirelab_trace::Action;

/// One packet as the switch saw it, before its fate.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Switch time, ns.
    pub t: u64,
    /// Index of the sending device.
    pub from: usize,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub ecn: u8,
    pub opcode: u8,
    pub psn: u32,
    pub dqpn: u32,
    pub ack_req: bool,
    pub migreq: bool,
    pub syndrome: Option<Syndrome>,
    pub reth: Option<Reth>,
    /// Payload bytes.
    pub len: usize,
    pub fate: Action,
    /// The RoCE bytes (BTH to ICRC) as sent.
    pub bytes: Vec<u8>,
}

impl Seen {
    /// The packet as it left the switch: an IPv4 packet with its UDP header,
    /// the fate applied (ECN set, a bit flipped, MigReq rewritten).
    pub fn ip_packet(&self) -> Vec<u8> {
        let h = packet::Ipv4Udp::lab(self.src, self.dst, self.sport);
        let (ecn, roce) = applied(self.fate, self.ecn, &h, self.bytes.clone());
        let mut out = h.header(ecn, roce.len());
        out.extend_from_slice(&roce);
        out
    }
}

/// The bytes and ECN field after the switch's action.
fn applied(fate: Action, ecn: u8, h: &packet::Ipv4Udp, mut roce: Vec<u8>) -> (u8, Vec<u8>) {
    match fate {
        // A reorder changes when the packet arrives, not its bytes.
        Action::None | Action::Drop | Action::EcnNotEct | Action::Reorder => (ecn, roce),
        Action::Ecn => (3, roce),
        Action::Corrupt => {
            // The last payload byte, just before the ICRC: wirelab's switch
            // flips a bit there too, so only the ICRC can tell.
            let n = roce.len();
            roce[n - packet::ICRC_LEN - 1] ^= 1;
            (ecn, roce)
        }
        Action::MigReq(v) => {
            if v {
                roce[1] |= 0x40;
            } else {
                roce[1] &= !0x40;
            }
            packet::seal_ipv4(h, &mut roce);
            (ecn, roce)
        }
    }
}

type Hook = Box<dyn FnMut(&Seen, &[Seen]) -> Action>;

pub struct Sim {
    pub devs: Vec<Device>,
    /// Which device answers for an address (a device may hold several GIDs).
    owners: Vec<(Ipv4Addr, usize)>,
    pub now: u64,
    pub delay: u64,
    /// Every packet the switch saw, in order.
    pub log: Vec<Seen>,
    /// Completions, with the device that reported them.
    pub done: Vec<(usize, Completion)>,
    flight: Vec<(u64, usize, Tx, u8)>,
    hook: Hook,
}

impl Sim {
    pub fn new(delay: u64) -> Sim {
        Sim {
            devs: Vec::new(),
            owners: Vec::new(),
            now: 0,
            delay,
            log: Vec::new(),
            done: Vec::new(),
            flight: Vec::new(),
            hook: Box::new(|_, _| Action::None),
        }
    }

    /// Adds a device that owns `addrs`; returns its index.
    pub fn add(&mut self, dev: Device, addrs: &[Ipv4Addr]) -> usize {
        self.devs.push(dev);
        let i = self.devs.len() - 1;
        self.owners.extend(addrs.iter().map(|a| (*a, i)));
        i
    }

    /// Decides each packet's fate; sees the packet and everything before it.
    pub fn set_hook(&mut self, f: impl FnMut(&Seen, &[Seen]) -> Action + 'static) {
        self.hook = Box::new(f);
    }

    fn owner(&self, ip: Ipv4Addr) -> Option<usize> {
        self.owners.iter().find(|o| o.0 == ip).map(|o| o.1)
    }

    /// Runs until nothing is left to do or the next thing would happen
    /// after `limit` ns of virtual time.
    pub fn run(&mut self, limit: u64) {
        loop {
            for from in 0..self.devs.len() {
                while let Some(tx) = self.devs[from].poll_transmit(self.now) {
                    let p = Packet::parse(&tx.bytes).expect("the device builds valid packets");
                    let mut seen = Seen {
                        t: self.now,
                        from,
                        src: tx.src,
                        dst: tx.dst,
                        sport: tx.sport,
                        ecn: tx.ecn,
                        opcode: p.bth.opcode,
                        psn: p.bth.psn,
                        dqpn: p.bth.dqpn,
                        ack_req: p.bth.ack_req,
                        migreq: p.bth.migreq,
                        syndrome: p.aeth.map(|a| a.0),
                        reth: p.reth,
                        len: p.payload.len(),
                        fate: Action::None,
                        bytes: tx.bytes.clone(),
                    };
                    seen.fate = match (self.hook)(&seen, &self.log) {
                        // As the lab switch: RFC 3168 §5 forbids marking a
                        // Not-ECT packet, so it goes on unchanged.
                        Action::Ecn if tx.ecn == 0 => Action::EcnNotEct,
                        a => a,
                    };
                    self.log.push(seen.clone());
                    if seen.fate == Action::Drop {
                        continue;
                    }
                    let Some(to) = self.owner(tx.dst) else {
                        continue;
                    };
                    let h = packet::Ipv4Udp::lab(tx.src, tx.dst, tx.sport);
                    let (ecn, bytes) = applied(seen.fate, tx.ecn, &h, tx.bytes.clone());
                    self.flight
                        .push((self.now + self.delay, to, Tx { bytes, ..tx }, ecn));
                }
            }
            for (i, d) in self.devs.iter_mut().enumerate() {
                while let Some(c) = d.poll_completion() {
                    self.done.push((i, c));
                }
            }
            let next = self
                .flight
                .iter()
                .map(|f| f.0)
                .chain(self.devs.iter().filter_map(|d| d.poll_timeout()))
                .min();
            let Some(next) = next else { return };
            if next > limit {
                return;
            }
            self.now = next.max(self.now);
            let now = self.now;
            let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.flight)
                .into_iter()
                .partition(|f| f.0 <= now);
            self.flight = rest;
            for (_, to, tx, ecn) in due {
                self.devs[to].handle_datagram(
                    now,
                    Rx {
                        src: tx.src,
                        dst: tx.dst,
                        sport: tx.sport,
                        ecn,
                        bytes: &tx.bytes,
                        arrived: None,
                    },
                );
            }
            for d in &mut self.devs {
                d.handle_timeout(now);
            }
        }
    }
}
