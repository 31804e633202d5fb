//! The `Workload` trait: Lumina's control-plane hand-off (seed 000 §3.3),
//! written once for every transport.
//!
//! 1. `prepare`: create sockets or QPs inside the hosts' namespaces, send
//!    nothing, and report the flows the switch must classify before the
//!    first packet leaves (5-tuples, or (src, dst, dst QPN) for RoCE).
//! 2. `connect`: complete whatever handshake the transport has, through the
//!    armed switch, and report each connection's runtime metadata (data
//!    MSS; for RoCE the QPNs and initial PSNs) so that events addressed by
//!    logical packet can be armed.
//! 3. `run`: send the messages until done or stopped.
//!
//! The run engine (`wirelab-lab`) calls these in order and arms the switch
//! between them; it never looks at the transport. A new workload is a new
//! implementation plus one line in `for_plan`.

use std::net::{Ipv4Addr, SocketAddrV4};

use wirelab_dataplane::{FlowKey, Track};
use wirelab_plan::Plan;
use wirelab_spec::Transport;

use crate::roce::DeviceCounters;
use crate::{ConnMeta, ConnReport, Error, Stop};

/// What the switch must classify, reported by `Workload::prepare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// One direction of a 5-tuple; `data`: this direction carries the
    /// connection's data packets (the ones events count); `from_responder`:
    /// the responder sends it (wire events count each end's packets).
    Tuple {
        key: FlowKey,
        conn: u32,
        data: bool,
        from_responder: bool,
    },
    /// One direction of a RoCE QP connection: srcIP, dstIP and dstQPN
    /// identify it (Lumina §3.3, Fig. 2); `track` says which data slot
    /// its packets are numbered in.
    Qp {
        saddr: Ipv4Addr,
        daddr: Ipv4Addr,
        dst_qpn: u32,
        conn: u32,
        track: Track,
    },
}

/// What a finished workload reports.
#[derive(Debug, Default)]
pub struct Finished {
    /// One per connection, in id order.
    pub reports: Vec<ConnReport>,
    /// RoCE: each host's device counters before and after.
    pub device_counters: Vec<DeviceCounters>,
}

/// A workload, driven through the hand-off by the run engine.
pub trait Workload: Send {
    /// Step 1: sockets or QPs exist, nothing is sent; the flows to arm.
    fn prepare(&mut self, plan: &Plan) -> Result<Vec<Flow>, Error>;
    /// Step 2: handshakes done through the armed switch; runtime metadata
    /// of every connection, in id order.
    fn connect(&mut self, plan: &Plan) -> Result<Vec<ConnMeta>, Error>;
    /// Step 3: the messages.
    fn run(self: Box<Self>, plan: &Plan, stop: &Stop) -> Result<Finished, Error>;
}

/// The workload a plan asks for.
pub fn for_plan(plan: &Plan) -> Box<dyn Workload> {
    match plan.conns.first().map(|c| c.transport) {
        Some(Transport::Roce) => Box::new(Roce::default()),
        Some(Transport::Udp) => Box::new(Udp),
        _ => Box::new(Tcp::default()),
    }
}

/// Both directions of each connection's 5-tuple, the data direction marked.
fn tuple_flows(plan: &Plan) -> Vec<Flow> {
    plan.conns
        .iter()
        .flat_map(|c| {
            let fwd = FlowKey {
                saddr: c.requester_ip,
                daddr: c.responder_ip,
                sport: c.sport,
                dport: c.dport,
            };
            let rev = FlowKey {
                saddr: c.responder_ip,
                daddr: c.requester_ip,
                sport: c.dport,
                dport: c.sport,
            };
            [
                Flow::Tuple {
                    key: fwd,
                    conn: c.id,
                    data: c.requester_sends_data(),
                    from_responder: false,
                },
                Flow::Tuple {
                    key: rev,
                    conn: c.id,
                    data: c.responder_sends_data(),
                    from_responder: true,
                },
            ]
        })
        .collect()
}

fn out_of_order(step: &str) -> Error {
    Error::Io {
        conn: 0,
        what: format!("workload hand-off: `{step}` called out of order"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    }
}

/// Kernel TCP (`crate::prepare`, `connect`, `run`).
#[derive(Default)]
pub struct Tcp {
    prepared: Option<crate::Prepared>,
    connected: Option<crate::Connected>,
}

impl Workload for Tcp {
    fn prepare(&mut self, plan: &Plan) -> Result<Vec<Flow>, Error> {
        self.prepared = Some(crate::prepare(plan)?);
        Ok(tuple_flows(plan))
    }
    fn connect(&mut self, plan: &Plan) -> Result<Vec<ConnMeta>, Error> {
        let p = self
            .prepared
            .take()
            .ok_or_else(|| out_of_order("connect"))?;
        let c = crate::connect(plan, p)?;
        let meta = c.meta.clone();
        self.connected = Some(c);
        Ok(meta)
    }
    fn run(self: Box<Self>, plan: &Plan, stop: &Stop) -> Result<Finished, Error> {
        let c = self.connected.ok_or_else(|| out_of_order("run"))?;
        Ok(Finished {
            reports: crate::run(plan, c, stop),
            ..Finished::default()
        })
    }
}

/// Paced UDP senders (`crate::udp`): no handshake, nothing to hand off but
/// the 5-tuples.
pub struct Udp;

impl Workload for Udp {
    fn prepare(&mut self, plan: &Plan) -> Result<Vec<Flow>, Error> {
        Ok(tuple_flows(plan))
    }
    fn connect(&mut self, plan: &Plan) -> Result<Vec<ConnMeta>, Error> {
        Ok(plan
            .conns
            .iter()
            .map(|c| ConnMeta {
                id: c.id,
                requester: SocketAddrV4::new(c.requester_ip, c.sport),
                responder: SocketAddrV4::new(c.responder_ip, c.dport),
                // IPv4 and UDP headers (RFC 791, RFC 768).
                data_mss: plan.mtu - 28,
                roce: None,
            })
            .collect())
    }
    fn run(self: Box<Self>, plan: &Plan, stop: &Stop) -> Result<Finished, Error> {
        Ok(Finished {
            reports: crate::udp::run(plan, stop)?,
            ..Finished::default()
        })
    }
}

/// wirelab's RoCEv2 transport (`crate::roce`).
#[derive(Default)]
pub struct Roce {
    prepared: Option<crate::roce::Prepared>,
}

impl Workload for Roce {
    fn prepare(&mut self, plan: &Plan) -> Result<Vec<Flow>, Error> {
        let p = crate::roce::prepare(plan)?;
        let mut flows = Vec::new();
        for (c, m) in plan.conns.iter().zip(&p.meta) {
            // Data flows towards the responder for send/write, and back for
            // read (both ways for a combination), numbered from the
            // requester's initial PSN either way: a read request takes one
            // PSN per response packet and the responses carry those PSNs
            // (IBTA §9.7).
            let ipsn = m.ipsn;
            let (to_rs, to_rq) = match (c.requester_sends_data(), c.responder_sends_data()) {
                (true, true) => (Track::First { ipsn }, Track::Second { ipsn }),
                (true, false) => (Track::First { ipsn }, Track::No),
                (false, _) => (Track::No, Track::First { ipsn }),
            };
            let (rq, rs) = (c.requester_ip, c.responder_ip);
            flows.push(Flow::Qp {
                saddr: rq,
                daddr: rs,
                dst_qpn: m.responder_qpn,
                conn: c.id,
                track: to_rs,
            });
            flows.push(Flow::Qp {
                saddr: rs,
                daddr: rq,
                dst_qpn: m.requester_qpn,
                conn: c.id,
                track: to_rq,
            });
        }
        self.prepared = Some(p);
        Ok(flows)
    }
    fn connect(&mut self, plan: &Plan) -> Result<Vec<ConnMeta>, Error> {
        // RC QPs are connected out of band (the plan's 5-tuples and the
        // QPNs chosen in `prepare`): nothing crosses the wire here.
        let p = self
            .prepared
            .as_ref()
            .ok_or_else(|| out_of_order("connect"))?;
        Ok(plan
            .conns
            .iter()
            .zip(&p.meta)
            .map(|(c, m)| {
                let mtu = c.roce.map_or(1024, |r| r.mtu);
                ConnMeta {
                    id: c.id,
                    requester: SocketAddrV4::new(
                        c.requester_ip,
                        c.roce.map_or(c.sport, |r| r.requester_sport),
                    ),
                    responder: SocketAddrV4::new(c.responder_ip, wirelab_roce::packet::ROCEV2_PORT),
                    // One PSN per path-MTU payload: message-relative events
                    // resolve exactly as with a TCP MSS.
                    data_mss: mtu,
                    roce: Some(m.clone()),
                }
            })
            .collect())
    }
    fn run(self: Box<Self>, plan: &Plan, stop: &Stop) -> Result<Finished, Error> {
        let p = self.prepared.ok_or_else(|| out_of_order("run"))?;
        let (reports, device_counters) = crate::roce::run(plan, p, stop);
        Ok(Finished {
            reports,
            device_counters,
        })
    }
}

impl ConnMeta {
    /// The line `workload.log` keeps for this connection.
    pub fn describe(&self) -> String {
        match &self.roce {
            Some(m) => format!(
                "conn {}: QPN {:#x} -> {:#x}, IPSN {:#x}, path MTU {}",
                self.id, m.requester_qpn, m.responder_qpn, m.ipsn, self.data_mss
            ),
            None => format!(
                "conn {}: {} -> {} data mss {}",
                self.id, self.requester, self.responder, self.data_mss
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(yaml: &str) -> Plan {
        let spec = wirelab_spec::parse(yaml, wirelab_analyze::catalog()).unwrap();
        wirelab_plan::plan(&spec, "t0", 7).unwrap()
    }

    #[test]
    fn tcp_flows_mark_the_data_direction_of_each_verb() {
        let p = plan(
            "topology: {hosts: [{name: a}, {name: b}]}\ntraffic:\n  connections:\n    - {from: a, to: b, verb: write, messages: 1, message_size: 1000}\n    - {from: a, to: b, verb: read, messages: 1, message_size: 1000}\n",
        );
        let flows = tuple_flows(&p);
        assert_eq!(flows.len(), 4);
        let data: Vec<(u32, u16, bool)> = flows
            .iter()
            .map(|f| match f {
                Flow::Tuple {
                    key,
                    conn,
                    data,
                    from_responder,
                } => {
                    assert_eq!(*from_responder, key.sport == wirelab_plan::SERVICE_PORT);
                    (*conn, key.sport, *data)
                }
                Flow::Qp { .. } => panic!("a TCP plan has no QP flows"),
            })
            .collect();
        // write: requester -> responder carries data; read: the reverse.
        assert_eq!(
            data,
            vec![
                (1, wirelab_plan::source_port(1), true),
                (1, wirelab_plan::SERVICE_PORT, false),
                (2, wirelab_plan::source_port(2), false),
                (2, wirelab_plan::SERVICE_PORT, true),
            ]
        );
    }

    #[test]
    fn the_plan_picks_the_workload_and_steps_out_of_order_are_errors() {
        let p = plan(
            "topology: {hosts: [{name: a}, {name: b}]}\ntraffic:\n  connections:\n    - {from: a, to: b, verb: write, messages: 1, message_size: 1000}\n",
        );
        let mut w = for_plan(&p);
        // connect before prepare: an error, not a panic.
        let e = w.connect(&p).unwrap_err().to_string();
        assert!(e.contains("`connect` called out of order"), "{e}");
    }
}
