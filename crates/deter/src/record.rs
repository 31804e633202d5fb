//! One connection's record (DETER Table 1, as far as a stock kernel shows
//! it; issue 21) and its file: written once, when the connection ends.
//!
//! The file is `MAGIC`, then the body's length and CRC-32 (both u32,
//! little-endian), then the body: the record in postcard (serde with
//! varint integers), compressed with zstd. Times are deltas, so most take
//! a byte or two before compression; Algorithm 1's samples are deltas too
//! (index and gap from the sample before, time from where it puts them:
//! `sample_deltas`). A file
//! cut short or damaged is refused with the byte offset where it stops
//! making sense; the writer writes to a temporary name and renames it
//! (`rename(2)` is atomic), so a killed recorder leaves either a whole
//! file or none.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::ipid::{IdCode, Marks};
use crate::sample::Sample;

/// The file's first bytes: the format and its version.
pub const MAGIC: &[u8; 8] = b"WLDETER7";

/// Versions this one reads as its own: WLDETER6 is this format without
/// the `Drain` call, which it adds at the end of `CallKind` (postcard
/// numbers variants in order, so the others keep their numbers).
const SUBSETS: [&[u8; 8]; 1] = [b"WLDETER6"];

/// Earlier versions' headers: WLDETER1 an uncompressed body with whole
/// samples; WLDETER2 sample times as deltas from the sample before (now
/// from where it puts them, `sample_deltas`); WLDETER3 the record's
/// series as rows, in ns (now columns, calls and events to the
/// microsecond); WLDETER4 a retransmission without the socket's
/// threshold and count; WLDETER5 without its segments. Their fields read as this version's would decode
/// to wrong values, so they are refused by name.
const EARLIER: [&[u8; 8]; 5] = [
    b"WLDETER1",
    b"WLDETER2",
    b"WLDETER3",
    b"WLDETER4",
    b"WLDETER5",
];

/// zstd's level for the body: records are written once per connection,
/// at its end, off the packet path, but a recorder writes every one of
/// them. On a 65 KB columnar body level 19 took 9% more off than level 3,
/// at 16 times the time (8.3 ms against 0.5).
const ZSTD_LEVEL: i32 = 3;

/// A body never decompresses past this (a damaged or hostile frame must
/// not exhaust memory): far above what a connection's record holds.
const MAX_BODY: u64 = 1 << 30;

/// The extension of a record file.
pub const EXTENSION: &str = "deter";

/// The socket's congestion control in `ConnRecord::settings` (setsockopt's
/// name for it).
pub const TCP_CONGESTION: &str = "TCP_CONGESTION";
/// The receive and send buffers the application asked for (setsockopt's
/// value, bytes), when it set them.
pub const SO_RCVBUF: &str = "SO_RCVBUF";
pub const SO_SNDBUF: &str = "SO_SNDBUF";
/// Nagle's algorithm off ("1") or on ("0").
pub const TCP_NODELAY: &str = "TCP_NODELAY";
/// Corked ("1") when the socket was seen; absent otherwise.
pub const TCP_CORK: &str = "TCP_CORK";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnRecord {
    /// The recording host (its namespace's name).
    pub host: String,
    /// The connection seen from that host.
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    /// When the recording of it began and ended (CLOCK_MONOTONIC, ns).
    pub start_ns: u64,
    pub end_ns: u64,
    /// Stack settings that differ from the defaults: (name, value), as
    /// sysctl names them or `SO_*`/`TCP_*` for socket options.
    pub settings: Vec<(String, String)>,
    /// What arrived at this host: the first IP-ID and the codes.
    pub rx: Option<(u16, Vec<IdCode>)>,
    /// Which arrivals were CE-marked.
    pub ce: Marks,
    /// Packets this host sent, and Algorithm 1's samples of their times.
    pub tx_packets: u64,
    #[serde(with = "sample_deltas")]
    pub tx_samples: Vec<Sample>,
    pub calls: Calls,
    pub events: Events,
}

/// A socket call as DETER records it (§4): its kind, size and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Call {
    pub kind: CallKind,
    pub bytes: u64,
    pub flags: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CallKind {
    Send,
    Recv,
    Close,
    /// Reads that kept up with the network, from this call's time: each
    /// took all the data that had just arrived (the recorder's
    /// `wl_rec_recv`), `bytes` in all, `flags` of them. Their times and
    /// sizes are the data's, not the application's, so a replay reads as
    /// the data comes until it has `bytes`. A reader that keeps up makes
    /// a read per arrival, and recorded one by one they cost more than
    /// DETER's whole budget (§5; 1.3 bytes a read).
    Drain,
}

/// Socket calls, with DETER's socket-call patterns (§4): each distinct
/// (kind, size, flags) stored once, each call as (time delta, pattern).
/// Times are kept to the microsecond (`US`): a replay issues the calls
/// from user space, where a microsecond is below its own jitter, and ns
/// deltas cost the receiver's record most of its bytes. In the file the
/// deltas and the patterns are two columns, which zstd models apart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "CallColumns", try_from = "CallColumns")]
pub struct Calls {
    pub patterns: Vec<Call>,
    /// (ns since the previous call, or since `start_ns`, a multiple of
    /// `US`; pattern index).
    pub seq: Vec<(u64, u32)>,
    last_ns: Option<u64>,
}

/// The precision of a call's or an event's time in a record (ns).
pub const US: u64 = 1_000;

/// `t_ns` to the microsecond before it, counted from `start_ns`.
fn to_us(start_ns: u64, t_ns: u64) -> u64 {
    start_ns + t_ns.saturating_sub(start_ns) / US * US
}

/// A delta-coded series in the file: the deltas in `US`, then the values.
#[derive(Serialize, Deserialize)]
struct Series<T> {
    dt_us: Vec<u64>,
    values: Vec<T>,
}

impl<T: Copy> Series<T> {
    fn of(seq: &[(u64, T)]) -> Series<T> {
        Series {
            dt_us: seq.iter().map(|x| x.0 / US).collect(),
            values: seq.iter().map(|x| x.1).collect(),
        }
    }

    /// Back into (ns delta, value) pairs.
    fn pairs(self, what: &str) -> Result<Vec<(u64, T)>, String> {
        if self.dt_us.len() != self.values.len() {
            return Err(format!(
                "{what}: {} times for {} entries",
                self.dt_us.len(),
                self.values.len()
            ));
        }
        Ok(self
            .dt_us
            .into_iter()
            .map(|d| d.saturating_mul(US))
            .zip(self.values)
            .collect())
    }
}

#[derive(Serialize, Deserialize)]
struct CallColumns {
    patterns: Vec<Call>,
    calls: Series<u32>,
}

impl From<Calls> for CallColumns {
    fn from(c: Calls) -> Self {
        CallColumns {
            calls: Series::of(&c.seq),
            patterns: c.patterns,
        }
    }
}

impl TryFrom<CallColumns> for Calls {
    type Error = String;
    fn try_from(c: CallColumns) -> Result<Self, String> {
        Ok(Calls {
            seq: c.calls.pairs("calls")?,
            patterns: c.patterns,
            last_ns: None,
        })
    }
}

impl Calls {
    /// Each call names a pattern the record holds (`decode` checks: a
    /// deserializer's own message does not survive postcard).
    fn check(&self) -> Result<(), String> {
        match self
            .seq
            .iter()
            .find(|x| x.1 as usize >= self.patterns.len())
        {
            Some(p) => Err(format!(
                "a call names pattern {} of {}",
                p.1,
                self.patterns.len()
            )),
            None => Ok(()),
        }
    }

    /// A call at `t_ns` (not before the previous one), kept to the
    /// microsecond; `start_ns` is the record's.
    pub fn push(&mut self, start_ns: u64, t_ns: u64, call: Call) {
        let p = match self.patterns.iter().position(|c| *c == call) {
            Some(p) => p,
            None => {
                self.patterns.push(call);
                self.patterns.len() - 1
            }
        };
        let t = to_us(start_ns, t_ns);
        let prev = self.last_ns.unwrap_or(start_ns);
        self.seq.push((t.saturating_sub(prev), p as u32));
        self.last_ns = Some(t.max(prev));
    }

    /// The calls with their times.
    pub fn iter(&self, start_ns: u64) -> impl Iterator<Item = (u64, Call)> + '_ {
        let mut t = start_ns;
        self.seq.iter().map(move |&(dt, p)| {
            t += dt;
            (t, self.patterns[p as usize])
        })
    }
}

/// Kernel events a stock kernel shows (tracepoints, sock_ops; issue 21
/// item 1), delta-coded like the calls and, like them, to the
/// microsecond.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Series<Event>", try_from = "Series<Event>")]
pub struct Events {
    pub seq: Vec<(u64, Event)>,
    last_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A retransmission sent (tcp:tcp_retransmit_skb with err 0) of the
    /// segment starting at sequence number `seq`, with the socket's
    /// duplicate-ACK threshold then (`tcp_reordering`: 3 until a
    /// reordering widens it, DETER §5.2) and its `sacked_out` (SACKed
    /// segments; for a flow without SACK, the duplicate ACKs it counted).
    Retransmit {
        seq: u32,
        /// The segments the retransmitted skb carried (`tcp_skb_pcount`;
        /// the kernel's TcpRetransSegs counts these): one event can
        /// resend two lost segments.
        segments: u16,
        reordering: u32,
        sacked: u32,
    },
    /// Congestion state set (tcp:tcp_cong_state_set; Open 0, Disorder 1,
    /// CWR 2, Recovery 3, Loss 4: Loss is entered on a retransmission
    /// timeout).
    CongState(u8),
    /// The socket's state changed (sock:inet_sock_set_state; TCP_CLOSE 7).
    State(u8),
    /// Segments the kernel counted as retransmitted (its `total_retrans`,
    /// carried by the next retransmission or state change) for which no
    /// Retransmit event came: the tracepoint's program did not run.
    Unseen(u32),
}

/// In the file a retransmission's sequence number is its distance from the
/// one before (zigzag, wrapping; the first from 0): a random 32-bit
/// number costs five bytes, and a steady loss pattern repeats the same
/// distance (on the bench's every-40th drop, the events' column went from
/// 3.5 KB to 0.5 KB).
fn retransmits_as_deltas(values: &mut [Event], decode: bool) {
    let mut last = 0u32;
    for e in values {
        if let Event::Retransmit { seq, .. } = e {
            if decode {
                let d = (*seq >> 1) as i32 ^ -((*seq & 1) as i32);
                *seq = last.wrapping_add(d as u32);
                last = *seq;
            } else {
                let d = seq.wrapping_sub(last) as i32;
                last = *seq;
                *seq = ((d << 1) ^ (d >> 31)) as u32;
            }
        }
    }
}

impl From<Events> for Series<Event> {
    fn from(e: Events) -> Self {
        let mut s = Series::of(&e.seq);
        retransmits_as_deltas(&mut s.values, false);
        s
    }
}

impl TryFrom<Series<Event>> for Events {
    type Error = String;
    fn try_from(mut s: Series<Event>) -> Result<Self, String> {
        retransmits_as_deltas(&mut s.values, true);
        Ok(Events {
            seq: s.pairs("events")?,
            last_ns: None,
        })
    }
}

impl Events {
    pub fn push(&mut self, start_ns: u64, t_ns: u64, e: Event) {
        let t = to_us(start_ns, t_ns);
        let prev = self.last_ns.unwrap_or(start_ns);
        self.seq.push((t.saturating_sub(prev), e));
        self.last_ns = Some(t.max(prev));
    }

    pub fn iter(&self, start_ns: u64) -> impl Iterator<Item = (u64, Event)> + '_ {
        let mut t = start_ns;
        self.seq.iter().map(move |&(dt, e)| {
            t += dt;
            (t, e)
        })
    }
}

/// Where and why a record file does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub detail: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.detail)
    }
}

impl std::error::Error for Damage {}

/// The file's bytes.
pub fn encode(r: &ConnRecord) -> Vec<u8> {
    let plain = postcard::to_stdvec(r).expect("a record serializes");
    let body = zstd::bulk::compress(&plain, ZSTD_LEVEL).expect("zstd compresses in memory");
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads a record file's bytes.
pub fn decode(bytes: &[u8]) -> Result<ConnRecord, Damage> {
    let damage = |offset: usize, detail: String| Damage {
        offset: offset as u64,
        detail,
    };
    if let Some(v) = EARLIER.iter().find(|m| bytes.starts_with(&m[..])) {
        return Err(damage(
            0,
            format!(
                "a record of an earlier wirelab ({}): record the run again",
                String::from_utf8_lossy(&v[..])
            ),
        ));
    }
    if bytes.len() < MAGIC.len()
        || (&bytes[..MAGIC.len()] != MAGIC && !SUBSETS.iter().any(|m| bytes.starts_with(&m[..])))
    {
        return Err(damage(
            0,
            format!(
                "not a wirelab DETER record (no {} header)",
                String::from_utf8_lossy(MAGIC)
            ),
        ));
    }
    let Some(head) = bytes.get(8..16) else {
        return Err(damage(
            bytes.len(),
            format!("cut short: {} bytes, the header needs 16", bytes.len()),
        ));
    };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    let Some(body) = bytes.get(16..16 + len) else {
        return Err(damage(
            bytes.len(),
            format!(
                "cut short: the body needs {len} bytes from byte 16, the file has {}",
                bytes.len() - 16
            ),
        ));
    };
    if crc32fast::hash(body) != crc {
        return Err(damage(
            16,
            "the body's CRC-32 does not match: damaged".into(),
        ));
    }
    if bytes.len() > 16 + len {
        return Err(damage(
            16 + len,
            format!("{} bytes after the record", bytes.len() - 16 - len),
        ));
    }
    let mut plain = Vec::new();
    let read = zstd::stream::read::Decoder::new(body).and_then(|d| {
        use std::io::Read;
        d.take(MAX_BODY + 1).read_to_end(&mut plain)
    });
    match read {
        Err(e) => return Err(damage(16, format!("the body does not decompress: {e}"))),
        Ok(n) if n as u64 > MAX_BODY => {
            return Err(damage(
                16,
                format!("the body decompresses past {MAX_BODY} bytes"),
            ))
        }
        Ok(_) => {}
    }
    let r: ConnRecord = postcard::from_bytes(&plain)
        .map_err(|e| damage(16, format!("the body does not decode: {e}")))?;
    r.calls
        .check()
        .map_err(|e| damage(16, format!("the body does not decode: {e}")))?;
    Ok(r)
}

/// Algorithm 1's samples as deltas from the sample before (the first from
/// zero), in columns (index, time, the gap's trailing zeros, the rest of
/// the gap), which zstd models apart:
/// - the index grows;
/// - a time is coded as its distance from where the sample before puts it
///   (`Sample::at`, as `infer` reads a record): Algorithm 1 starts a
///   sample only where that estimate misses by more than th, so the
///   distance is about th, where the time since the sample before is the
///   whole interval (on veth at th = 5 µs, a few µs against tens). Both
///   are counted in the grid the times are on (`sample::on_grid`: the
///   largest power of two, up to 1024 ns, that divides them all, written
///   first);
/// - a gap, as its change from the gap before, without the change's
///   trailing zeros (their count is its own column): `sample::recorded`
///   picks the change with the most.
///
/// Each field is a varint (zigzag for the signed ones).
mod sample_deltas {
    use super::Sample;
    use serde::{de::Error, Deserialize, Deserializer, Serialize, Serializer};

    const ZERO: Sample = Sample {
        index: 0,
        time_ns: 0,
        gap: 0,
    };

    #[derive(Serialize, Deserialize)]
    struct Columns {
        grid: u8,
        index: Vec<u64>,
        time: Vec<i64>,
        gap_zeros: Vec<u8>,
        gap: Vec<i64>,
    }

    pub fn serialize<S: Serializer>(v: &[Sample], s: S) -> Result<S::Ok, S::Error> {
        let grid = v
            .iter()
            .map(|x| x.time_ns.trailing_zeros())
            .min()
            .unwrap_or(0)
            .min(10);
        let mut c = Columns {
            grid: grid as u8,
            index: Vec::with_capacity(v.len()),
            time: Vec::with_capacity(v.len()),
            gap_zeros: Vec::with_capacity(v.len()),
            gap: Vec::with_capacity(v.len()),
        };
        let mut prev = ZERO;
        for x in v {
            c.index.push(x.index.wrapping_sub(prev.index));
            c.time
                .push(((x.time_ns >> grid).wrapping_sub(prev.at(x.index) >> grid)) as i64);
            let dg = x.gap.wrapping_sub(prev.gap);
            let zeros = if dg == 0 { 0 } else { dg.trailing_zeros() };
            c.gap_zeros.push(zeros as u8);
            c.gap.push((dg as i64) >> zeros);
            prev = *x;
        }
        c.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Sample>, D::Error> {
        let c = Columns::deserialize(d)?;
        let n = c.index.len();
        if c.time.len() != n || c.gap_zeros.len() != n || c.gap.len() != n {
            return Err(D::Error::custom(format!(
                "samples: {n} indices, {} times, {} and {} gap fields",
                c.time.len(),
                c.gap_zeros.len(),
                c.gap.len()
            )));
        }
        if c.grid > 10 || c.gap_zeros.iter().any(|&z| z > 63) {
            return Err(D::Error::custom("samples: a shift past its range"));
        }
        let grid = u32::from(c.grid);
        let mut prev = ZERO;
        Ok((0..n)
            .map(|i| {
                let index = prev.index.wrapping_add(c.index[i]);
                let dg = c.gap[i].wrapping_shl(u32::from(c.gap_zeros[i])) as u64;
                prev = Sample {
                    index,
                    time_ns: ((prev.at(index) >> grid).wrapping_add(c.time[i] as u64)) << grid,
                    gap: prev.gap.wrapping_add(dg),
                };
                prev
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipid::IdCoder;
    use crate::sample::Sampler;

    fn example() -> ConnRecord {
        let mut r = ConnRecord {
            host: "receiver".into(),
            local: Some("198.18.0.2:5201".parse().unwrap()),
            remote: Some("198.18.0.1:40000".parse().unwrap()),
            start_ns: 5_000_000_000,
            end_ns: 5_300_000_000,
            settings: vec![("net.ipv4.tcp_rmem".into(), "4096 131072 10485760".into())],
            ..Default::default()
        };
        let mut ids = IdCoder::default();
        let mut s = Sampler::new(5_000);
        for i in 0..1000u16 {
            if i % 97 != 5 {
                ids.arrive(30_000u16.wrapping_add(i), 1);
                r.ce.push(i % 50 == 0);
            }
            if let Some(x) = s.sample(u64::from(i), 5_000_000_000 + u64::from(i) * 1_230) {
                r.tx_samples.push(x);
            }
        }
        r.tx_samples.extend(s.finish());
        r.tx_packets = 1000;
        r.rx = ids.finish();
        for i in 0..100 {
            let call = Call {
                kind: if i % 2 == 0 {
                    CallKind::Send
                } else {
                    CallKind::Recv
                },
                bytes: 65_536,
                flags: 0,
            };
            r.calls.push(r.start_ns, r.start_ns + i * 1_000, call);
        }
        r.events.push(
            r.start_ns,
            r.start_ns + 200_000_000,
            Event::Retransmit {
                seq: 7,
                segments: 1,
                reordering: 3,
                sacked: 0,
            },
        );
        r.events
            .push(r.start_ns, r.start_ns + 200_001_010, Event::CongState(4));
        r.events
            .push(r.start_ns, r.start_ns + 200_001_020, Event::Unseen(3));
        // Sequence numbers that wrap, and go back.
        // A threshold widened by reordering (DETER §5.2), and the
        // duplicate ACKs counted when the sender resent.
        for (seq, segments, reordering, sacked) in [
            (u32::MAX - 10, 2, 10, 10),
            (20, 1, 10, 0),
            (5, 44, 300, 1),
            (5, 1, 3, 3),
        ] {
            r.events.push(
                r.start_ns,
                r.start_ns + 200_002_000,
                Event::Retransmit {
                    seq,
                    segments,
                    reordering,
                    sacked,
                },
            );
        }
        r
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = example();
        let bytes = encode(&r);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.calls.patterns, r.calls.patterns);
        assert_eq!(back.calls.seq, r.calls.seq);
        assert_eq!(back.rx, r.rx);
        assert_eq!(back.tx_samples, r.tx_samples);
        assert_eq!(back.ce, r.ce);
        assert_eq!(back.events.seq, r.events.seq);
        assert_eq!(back.settings, r.settings);
        assert_eq!(
            back.calls.iter(back.start_ns).nth(3).unwrap().0,
            r.start_ns + 3_000
        );
        assert_eq!(
            back.events
                .iter(back.start_ns)
                .map(|e| e.0)
                .collect::<Vec<_>>(),
            // To the microsecond.
            [
                r.start_ns + 200_000_000,
                r.start_ns + 200_001_000,
                r.start_ns + 200_001_000,
                r.start_ns + 200_002_000,
                r.start_ns + 200_002_000,
                r.start_ns + 200_002_000,
                r.start_ns + 200_002_000
            ]
        );
        // Two patterns for 100 calls; one sample for a constant rate.
        assert_eq!(back.calls.patterns.len(), 2);
        assert_eq!(back.tx_samples.len(), 1);
        // Compact: 1,000 packets each way, 100 calls, in a few hundred bytes.
        assert!(bytes.len() < 600, "{} bytes", bytes.len());
    }

    /// Columns that do not line up, or a call naming a pattern the record
    /// does not hold, are refused (a damaged body decodes to an error, not
    /// to a panic later).
    #[test]
    fn columns_that_do_not_line_up_are_refused() {
        let calls = |dt_us: Vec<u64>, values: Vec<u32>| {
            Calls::try_from(CallColumns {
                patterns: vec![Call {
                    kind: CallKind::Send,
                    bytes: 1,
                    flags: 0,
                }],
                calls: Series { dt_us, values },
            })
        };
        assert_eq!(
            calls(vec![1, 2], vec![0, 0]).unwrap().seq,
            [(1_000, 0), (2_000, 0)]
        );
        assert_eq!(
            calls(vec![1], vec![]).unwrap_err(),
            "calls: 1 times for 0 entries"
        );
        let events = Events::try_from(Series {
            dt_us: vec![],
            values: vec![Event::State(1)],
        });
        assert_eq!(events.unwrap_err(), "events: 0 times for 1 entries");
        // Through a whole file: the body's error, at the body.
        let mut r = example();
        r.calls.seq.push((0, 9));
        let e = decode(&encode(&r)).unwrap_err();
        assert_eq!(e.offset, 16);
        assert!(e.detail.contains("pattern 9 of 2"), "{e}");
    }

    #[test]
    fn damage_is_named_with_its_offset() {
        let bytes = encode(&example());
        let err = |b: &[u8]| decode(b).unwrap_err();
        assert_eq!(err(b"PK\x03\x04").offset, 0);
        assert!(err(&bytes[..12]).detail.contains("cut short"));
        let cut = err(&bytes[..bytes.len() - 3]);
        assert_eq!(cut.offset, bytes.len() as u64 - 3);
        assert!(cut.detail.contains("cut short"), "{cut}");
        let mut flipped = bytes.clone();
        flipped[40] ^= 0x10;
        let e = err(&flipped);
        assert_eq!(e.offset, 16);
        assert!(e.detail.contains("CRC-32"), "{e}");
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"xx");
        assert_eq!(err(&longer).offset, bytes.len() as u64);
        // An earlier version's file is named as such.
        for (v, name) in EARLIER
            .iter()
            .zip(["WLDETER1", "WLDETER2", "WLDETER3", "WLDETER4"])
        {
            let mut earlier = bytes.clone();
            earlier[..8].copy_from_slice(&v[..]);
            let e = err(&earlier);
            assert!(
                e.detail.contains(&format!("earlier wirelab ({name})")),
                "{e}"
            );
        }
        // WLDETER6 is this format without `Drain`: read as it is.
        let mut six = bytes.clone();
        six[..8].copy_from_slice(b"WLDETER6");
        assert!(decode(&six).is_ok());
        // A body whose CRC holds but which is not zstd.
        let junk = b"not zstd at all";
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&(junk.len() as u32).to_le_bytes());
        forged.extend_from_slice(&crc32fast::hash(junk).to_le_bytes());
        forged.extend_from_slice(junk);
        let e = err(&forged);
        assert_eq!(e.offset, 16);
        assert!(e.detail.contains("does not decompress"), "{e}");
    }

    /// A record of `n` packets sent `step` ns apart (th = 5 µs).
    fn sampled(
        seed: u64,
        n: u64,
        mut step: impl FnMut(&mut rand_chacha::ChaCha8Rng) -> u64,
    ) -> ConnRecord {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut s = Sampler::new(5_000);
        let mut r = ConnRecord::default();
        let mut t = 1_700_000_000_000_000u64;
        for i in 0..n {
            t += step(&mut rng);
            r.tx_samples.extend(s.sample(i, t));
        }
        r.tx_samples.extend(s.finish());
        r
    }

    /// Samples at irregular times and rates, as a VM sends: each reads
    /// back exactly through the deltas, in fewer bytes than whole samples.
    #[test]
    fn irregular_samples_read_back_through_their_deltas() {
        use rand::Rng;
        let r = sampled(7, 20_000, |rng| rng.gen_range(500..40_000));
        assert!(r.tx_samples.len() > 1_000, "{}", r.tx_samples.len());
        let bytes = encode(&r);
        assert_eq!(decode(&bytes).unwrap().tx_samples, r.tx_samples);
        let whole = postcard::to_stdvec(&r.tx_samples).unwrap().len();
        assert!(
            bytes.len() * 2 < whole,
            "{} bytes, whole samples {whole}",
            bytes.len()
        );
    }

    /// A sender at a steady rate with jitter (what a VM's veth shows):
    /// coding each sample's time from where the sample before puts it
    /// takes fewer bytes than coding it from the sample before, and reads
    /// back exactly.
    #[test]
    fn sample_times_coded_from_the_prediction_are_smaller() {
        use rand::Rng;
        let r = sampled(11, 50_000, |rng| {
            1_200 + rng.gen_range(0..4_000) * u64::from(rng.gen_bool(0.2))
        });
        let bytes = encode(&r);
        assert_eq!(decode(&bytes).unwrap().tx_samples, r.tx_samples);
        // The previous coding: every field from the sample before.
        let mut prev = (0u64, 0u64, 0u64);
        let from_before: Vec<(u64, u64, i64)> = r
            .tx_samples
            .iter()
            .map(|x| {
                let d = (
                    x.index - prev.0,
                    x.time_ns - prev.1,
                    x.gap.wrapping_sub(prev.2) as i64,
                );
                prev = (x.index, x.time_ns, x.gap);
                d
            })
            .collect();
        // The same record, its samples coded the previous way: an empty
        // list's one length byte replaced by that list.
        let ours = postcard::to_stdvec(&r).unwrap().len();
        let without = ConnRecord {
            tx_samples: Vec::new(),
            ..r.clone()
        };
        let before = postcard::to_stdvec(&without).unwrap().len() - 1
            + postcard::to_stdvec(&from_before).unwrap().len();
        eprintln!(
            "{} samples: {ours} bytes, {before} before",
            r.tx_samples.len()
        );
        assert!(
            (ours as f64) < 0.9 * before as f64,
            "{} samples: {ours} bytes coded from the prediction, {before} from the sample before",
            r.tx_samples.len()
        );
    }
}
