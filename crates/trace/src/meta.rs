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

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Meta {
    pub seq: u64,
    /// Switch ingress time, ns, from one clock (CLOCK_MONOTONIC).
    pub ts: u64,
    pub port: u32,
    /// 0 = not a connection of the spec.
    pub conn: u32,
    pub data_dir: bool,
    pub index: u32,
    pub iter: u32,
    pub first_tx: bool,
    /// `none`, `drop`, `ecn`, `corrupt`, `ecn-not-ect`.
    pub event: String,
    pub event_id: u32,
    /// The vAQM stage's virtual queue (0 = none), its estimated occupancy
    /// in bytes after this packet, and its verdict: `none`, `mark`, `drop`,
    /// `overflow` (forwarded into a full emulated buffer, not counted).
    pub vq: u32,
    pub vq_bytes: u32,
    pub aqm: String,
    /// QCN: the quantised |Fb| of the CNM this packet caused, 0 = none.
    pub cnm: u32,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            seq: 0,
            ts: 0,
            port: 0,
            conn: 0,
            data_dir: false,
            index: 0,
            iter: 0,
            first_tx: false,
            event: "none".into(),
            event_id: 0,
            vq: 0,
            vq_bytes: 0,
            aqm: "none".into(),
            cnm: 0,
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
        s
    }

    /// The switch dropped the packet (an event or the vAQM stage): it never
    /// reached its receiver.
    pub fn dropped(&self) -> bool {
        self.event == "drop" || self.aqm == "drop"
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
                    m.event = e.to_string();
                    m.event_id = id.parse().ok()?;
                }
                "vq" => m.vq = v.parse().ok()?,
                "vqlen" => m.vq_bytes = v.parse().ok()?,
                "aqm" => m.aqm = v.to_string(),
                "cnm" => m.cnm = v.parse().ok()?,
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
            event: "drop".into(),
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
        assert!(m.dropped());

        let q = Meta {
            vq: 3,
            vq_bytes: 41000,
            aqm: "drop".into(),
            ..m.clone()
        };
        let s = q.encode();
        assert!(s.ends_with("event=drop#2 vq=3 vqlen=41000 aqm=drop"), "{s}");
        assert_eq!(Meta::decode(&s), Some(q.clone()));
        let cnm = Meta {
            aqm: "none".into(),
            cnm: 12,
            ..q.clone()
        };
        let s = cnm.encode();
        assert!(s.ends_with("vq=3 vqlen=41000 aqm=none cnm=12"), "{s}");
        assert_eq!(Meta::decode(&s), Some(cnm));
        let aqm_only = Meta {
            event: "none".into(),
            event_id: 0,
            ..q
        };
        assert!(aqm_only.dropped());
    }
}
