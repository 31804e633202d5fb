//! wirelab's per-packet metadata (Lumina §3.4: mirror sequence number, switch
//! timestamp, event type; plus ingress port, connection, data packet index and
//! iteration) carried as a pcapng EPB comment:
//!
//! `wirelab seq=12 ts=8812345678 port=1 conn=1 dir=data idx=5 iter=2 first=0 event=drop#2`
//!
//! and, for a packet that went through a virtual queue of the vAQM stage,
//! ` vq=1 vqlen=3000 aqm=mark` (queue, its estimated bytes, the verdict),
//! and ` cnm=12` when a QCN queue sent a CNM with quantised |Fb| 12 back to
//! the packet's source because of it.
//!
//! A comment keeps the captured headers exactly as they were on the wire and
//! is shown by Wireshark/tshark as `frame.comment`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What the switch's event stage did to a packet: the one definition of the
/// switch's actions. The BPF side numbers them in `enum wl_action`
/// (`wirelab.h`), and `wirelab_dataplane` converts between the two. The
/// spec's `action:` is the request; this is what was applied. The RoCE
/// simulator's switch applies the same actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Action {
    #[default]
    None,
    Drop,
    /// Set CE on an ECN-capable packet (RFC 3168).
    Ecn,
    /// Flip a payload bit; only the receiver's checksum (or ICRC) catches it.
    Corrupt,
    /// An `ecn` event hit a Not-ECT packet: RFC 3168 §5 forbids marking it,
    /// so it went on unchanged.
    EcnNotEct,
    /// An `edit` event set (true) or cleared MigReq (IBTA §9.2.4) and
    /// patched the ICRC (Lumina §6.2.3).
    MigReq(bool),
    /// A `reorder` event held the packet and sent it after the next ones
    /// of its end: its receiver got it after them.
    Reorder,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::None,
        Action::Drop,
        Action::Ecn,
        Action::Corrupt,
        Action::EcnNotEct,
        Action::MigReq(true),
        Action::MigReq(false),
        Action::Reorder,
    ];

    /// The name in a trace comment and in results files.
    pub fn name(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Drop => "drop",
            Action::Ecn => "ecn",
            Action::Corrupt => "corrupt",
            Action::EcnNotEct => "ecn-not-ect",
            Action::MigReq(true) => "edit:migreq=1",
            Action::MigReq(false) => "edit:migreq=0",
            Action::Reorder => "reorder",
        }
    }

    /// The packet did not reach its receiver intact: dropped, or damaged so
    /// that its receiver discards it.
    pub fn loses(self) -> bool {
        matches!(self, Action::Drop | Action::Corrupt)
    }
}

/// The vAQM stage's verdict on a packet (NetBump §4; `enum wl_aqm_verdict`
/// in `wirelab_ext.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Aqm {
    #[default]
    None,
    Mark,
    Drop,
    /// Forwarded into a full emulated buffer: the downstream queue will
    /// tail-drop it, so the estimate does not count it.
    Overflow,
}

impl Aqm {
    pub const ALL: [Aqm; 4] = [Aqm::None, Aqm::Mark, Aqm::Drop, Aqm::Overflow];

    pub fn name(self) -> &'static str {
        match self {
            Aqm::None => "none",
            Aqm::Mark => "mark",
            Aqm::Drop => "drop",
            Aqm::Overflow => "overflow",
        }
    }
}

/// Both vocabularies are written and read by name, in comments and JSON.
macro_rules! by_name {
    ($t:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|a| a.name() == s)
                    .ok_or_else(|| {
                        let names: Vec<_> = <$t>::ALL.iter().map(|a| a.name()).collect();
                        format!(
                            concat!("unknown ", $what, " `{}`; known: {}"),
                            s,
                            names.join(", ")
                        )
                    })
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
by_name!(Action, "switch action");
by_name!(Aqm, "vAQM verdict");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Meta {
    pub seq: u64,
    /// Switch ingress time, ns, from one clock (CLOCK_MONOTONIC).
    pub ts: u64,
    /// When the sending host's stack released the packet, on the same
    /// clock, where the packet carried it (a Linux TCP segment's delivery
    /// time); 0 = not known.
    pub sent: u64,
    pub port: u32,
    /// 0 = not a connection of the spec.
    pub conn: u32,
    pub data_dir: bool,
    pub index: u32,
    pub iter: u32,
    pub first_tx: bool,
    pub event: Action,
    pub event_id: u32,
    /// The vAQM stage's virtual queue (0 = none), its estimated occupancy
    /// in bytes after this packet, and its verdict.
    pub vq: u32,
    pub vq_bytes: u32,
    pub aqm: Aqm,
    /// QCN: the quantised |Fb| of the CNM this packet caused, 0 = none.
    pub cnm: u32,
    /// Flow-table masks the packet searched in the eSwitch stage (ScalaCN's
    /// per-packet cost), 0 = none or no flow tables.
    pub masks: u16,
    /// A flow table dropped it (a drop entry, a failed encap or rewrite,
    /// the slow path past its capacity).
    pub es_drop: bool,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            seq: 0,
            ts: 0,
            sent: 0,
            port: 0,
            conn: 0,
            data_dir: false,
            index: 0,
            iter: 0,
            first_tx: false,
            event: Action::None,
            event_id: 0,
            vq: 0,
            vq_bytes: 0,
            aqm: Aqm::None,
            cnm: 0,
            masks: 0,
            es_drop: false,
        }
    }
}

const TAG: &str = "wirelab ";

impl Meta {
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{TAG}seq={} ts={} port={} conn={} dir={} idx={} iter={} first={} event={}",
            self.seq,
            self.ts,
            self.port,
            self.conn,
            if self.data_dir { "data" } else { "rev" },
            self.index,
            self.iter,
            self.first_tx as u8,
            self.event
        );
        if self.event_id != 0 {
            s.push_str(&format!("#{}", self.event_id));
        }
        if self.vq != 0 {
            s.push_str(&format!(
                " vq={} vqlen={} aqm={}",
                self.vq, self.vq_bytes, self.aqm
            ));
        }
        if self.cnm != 0 {
            s.push_str(&format!(" cnm={}", self.cnm));
        }
        if self.masks != 0 {
            s.push_str(&format!(" masks={}", self.masks));
        }
        if self.es_drop {
            s.push_str(" es=drop");
        }
        if self.sent != 0 {
            s.push_str(&format!(" sent={}", self.sent));
        }
        s
    }

    /// How long before the switch got the packet its sender's stack
    /// released it, where known: the host's own delay (its softirq
    /// handing the packet on), which is not the network's.
    pub fn sent_before_ns(&self) -> Option<u64> {
        (self.sent != 0 && self.sent <= self.ts).then(|| self.ts - self.sent)
    }

    /// The switch dropped the packet (an event, the vAQM stage or a flow
    /// table): it never reached its receiver.
    pub fn dropped(&self) -> bool {
        self.event == Action::Drop || self.aqm == Aqm::Drop || self.es_drop
    }

    /// `None` for a comment that is not ours.
    pub fn decode(c: &str) -> Option<Meta> {
        let rest = c.strip_prefix(TAG)?;
        let mut m = Meta::default();
        let mut have_seq = false;
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            match k {
                "seq" => {
                    m.seq = v.parse().ok()?;
                    have_seq = true;
                }
                "ts" => m.ts = v.parse().ok()?,
                "port" => m.port = v.parse().ok()?,
                "conn" => m.conn = v.parse().ok()?,
                "dir" => m.data_dir = v == "data",
                "idx" => m.index = v.parse().ok()?,
                "iter" => m.iter = v.parse().ok()?,
                "first" => m.first_tx = v == "1",
                "event" => {
                    let (e, id) = v.split_once('#').unwrap_or((v, "0"));
                    m.event = e.parse().ok()?;
                    m.event_id = id.parse().ok()?;
                }
                "vq" => m.vq = v.parse().ok()?,
                "vqlen" => m.vq_bytes = v.parse().ok()?,
                "aqm" => m.aqm = v.parse().ok()?,
                "cnm" => m.cnm = v.parse().ok()?,
                "masks" => m.masks = v.parse().ok()?,
                "es" => m.es_drop = v == "drop",
                "sent" => m.sent = v.parse().ok()?,
                _ => {} // newer writers may add keys
            }
        }
        have_seq.then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let m = Meta {
            seq: 12,
            ts: 8812345678,
            port: 1,
            conn: 1,
            data_dir: true,
            index: 5,
            iter: 2,
            first_tx: false,
            event: Action::Drop,
            event_id: 2,
            ..Default::default()
        };
        let s = m.encode();
        assert_eq!(
            s,
            "wirelab seq=12 ts=8812345678 port=1 conn=1 dir=data idx=5 iter=2 first=0 event=drop#2"
        );
        assert_eq!(Meta::decode(&s), Some(m.clone()));
        assert_eq!(Meta::decode("captured on my laptop"), None);
        assert_eq!(Meta::decode("wirelab port=1"), None, "seq is required");
        assert_eq!(
            Meta::decode("wirelab seq=1 event=explode"),
            None,
            "an action this reader does not know is not read as another"
        );
        for a in Action::ALL {
            assert_eq!(a.name().parse::<Action>(), Ok(a));
        }
        for a in Aqm::ALL {
            assert_eq!(a.name().parse::<Aqm>(), Ok(a));
        }
        assert!(m.dropped());

        let q = Meta {
            vq: 3,
            vq_bytes: 41000,
            aqm: Aqm::Drop,
            ..m.clone()
        };
        let s = q.encode();
        assert!(s.ends_with("event=drop#2 vq=3 vqlen=41000 aqm=drop"), "{s}");
        assert_eq!(Meta::decode(&s), Some(q.clone()));
        assert_eq!(q.sent_before_ns(), None, "not known");

        // The sender's departure time: 2.5 ms before the switch got it.
        let t = Meta {
            sent: 8809845678,
            ..m.clone()
        };
        let s = t.encode();
        assert!(s.ends_with(" sent=8809845678"), "{s}");
        assert_eq!(Meta::decode(&s), Some(t.clone()));
        assert_eq!(t.sent_before_ns(), Some(2_500_000));
        let cnm = Meta {
            aqm: Aqm::None,
            cnm: 12,
            ..q.clone()
        };
        let s = cnm.encode();
        assert!(s.ends_with("vq=3 vqlen=41000 aqm=none cnm=12"), "{s}");
        assert_eq!(Meta::decode(&s), Some(cnm));
        let aqm_only = Meta {
            event: Action::None,
            event_id: 0,
            ..q
        };
        assert!(aqm_only.dropped());
        let es = Meta {
            masks: 65,
            es_drop: true,
            ..Meta::default()
        };
        let s = es.encode();
        assert!(s.ends_with("event=none masks=65 es=drop"), "{s}");
        assert_eq!(Meta::decode(&s), Some(es.clone()));
        assert!(es.dropped(), "a flow table's drop never arrives");
        assert!(!Meta {
            es_drop: false,
            ..es
        }
        .dropped());
    }
}
