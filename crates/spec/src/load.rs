//! `wirelab load`'s document: Norma's load test (seed 002; issue 20). A
//! tester port sends one stream of template frames through a device under
//! test (DUT) to a second tester port, at a rate (and burst) the control
//! plane turns into a meter and cascaded skip units (§5.2), edited on the
//! way out (App. C), counted by version bit on both sides (§6.1).
//!
//! ```yaml
//! dut: {kind: router}
//! duration: 3s
//! interval: 500ms
//! stream:
//!   size: 64            # frame bytes with the FCS, as RFC 2544 counts them
//!   pps: 100000         # or rate: 50mbit (on the wire, with preamble and gap)
//!   burst: {packets: 100, peak_pps: 1000000}
//!   edits:
//!     - {field: udp.sport, step: {from: 1000, to: 1999}}
//! expect:
//!   - {metric: lost, at_most: 0}
//!   - {metric: latency_p99, at_most: 1ms}
//! ```
//!
//! Parsed without touching the host: whether the machine can send the
//! rate is the run's business; whether the port could carry it is checked
//! here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Amount, BitsPerSec, Invalid, Nanos, SpecError, Unit};

/// Bytes a frame occupies on the wire beyond its own: preamble, start of
/// frame and the inter-frame gap (IEEE 802.3 §4.4.2), which port speeds
/// count and RFC 2544's maximum frame rates include.
pub const WIRE_OVERHEAD: u64 = 20;
/// Ethernet header and FCS around an IP packet of MTU bytes.
pub const FRAME_OVERHEAD: u32 = 18;
/// Edits the generator applies per frame (`WL_LOAD_EDITS`).
pub const MAX_EDITS: usize = 8;
/// Entries of the indirect step mode's tables, all edits together
/// (`WL_LOAD_TABLE`).
pub const MAX_TABLE: usize = 256;
/// Cascaded units the generator has (`WL_LOAD_UNITS`): the control plane
/// uses them all (trims and the burst).
pub const UNITS: usize = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Short name; defaults to the file name.
    #[serde(default)]
    pub name: Option<String>,
    /// The claim this test checks, in a sentence.
    #[serde(default)]
    pub description: Option<String>,
    /// The device under test, between the tester's two ports.
    pub dut: Dut,
    #[serde(default)]
    pub ports: Ports,
    /// How long the stream runs.
    #[serde(default = "default_duration")]
    pub duration: Nanos,
    /// Between the version flips: one measured line each (iperf3's -i).
    #[serde(default = "default_interval")]
    pub interval: Nanos,
    /// How long a retired version is left to drain before it is read: more
    /// than the DUT can hold a packet (§6.1). Default: 10 ms more than the
    /// DUT's egress queue can hold one (`LoadSpec::grace`).
    #[serde(default)]
    pub grace: Option<Nanos>,
    /// A stream of template frames (stateless) ...
    #[serde(default)]
    pub stream: Option<Stream>,
    /// ... or several at once, each with its own template, rate, pattern
    /// and editor, generated on a thread (and CPU) of its own and measured
    /// apart (each to its own destination port) as well as together ...
    #[serde(default)]
    pub streams: Vec<Stream>,
    /// ... or emulated TCP clients and servers around the DUT (§4).
    #[serde(default)]
    pub stateful: Option<crate::efsm::Stateful>,
    /// Every Nth frame (by sequence number) as sent and as received goes
    /// into the results folder's sample.pcapng (0: none).
    #[serde(default = "default_sample_every")]
    pub sample_every: u32,
    /// An RFC 2544 search instead of one run at the stream's rate.
    #[serde(default)]
    pub search: Option<Search>,
    #[serde(default)]
    pub expect: Vec<LoadExpect>,
}

/// An RFC 2544 search: one of
/// - §26.1's throughput: the fastest rate at which the DUT forwards every
///   frame offered (or, with `loss`, all but that share: a partial-drop
///   rate), found by binary search between 0 and the stream's rate, each
///   trial a run of `trial`;
/// - §26.4's back-to-back frames: the longest burst at the stream's rate
///   the DUT forwards without losing a frame, by binary search on the
///   burst's length, the search repeated and its results averaged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Search {
    #[serde(default)]
    pub throughput: Option<Throughput>,
    #[serde(default)]
    pub back_to_back: Option<BackToBack>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackToBack {
    /// The longest burst tried: the search's upper bound.
    #[serde(default = "default_b2b_max")]
    pub max_frames: u32,
    /// The search stops when the longest burst that passed and the
    /// shortest that failed are this many frames apart.
    #[serde(default = "one")]
    pub resolution: u32,
    /// The search is repeated this many times and the mean reported
    /// (§26.4 asks for at least 50).
    #[serde(default = "one")]
    pub repeat: u32,
    /// How long a burst is left to drain from the DUT before it is
    /// counted (with the version's grace).
    #[serde(default = "default_b2b_drain")]
    pub drain: Nanos,
}

fn default_b2b_max() -> u32 {
    10_000
}
fn default_b2b_drain() -> Nanos {
    Nanos(100_000_000)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    /// The share of frames a passing trial may lose (0: RFC 2544's
    /// throughput, none).
    #[serde(default)]
    pub loss: f64,
    /// The search stops when the rates that passed and failed are this
    /// close, as a share of the stream's rate.
    #[serde(default = "default_resolution")]
    pub resolution: f64,
    /// Each trial's length (RFC 2544 §24 asks for 60 s; shorter trials
    /// find a rate that may not hold as long).
    #[serde(default = "default_trial")]
    pub trial: Nanos,
    /// At most this many trials.
    #[serde(default = "default_trials")]
    pub max_trials: u32,
}

fn default_resolution() -> f64 {
    0.01
}
fn default_trial() -> Nanos {
    Nanos(2_000_000_000)
}
fn default_trials() -> u32 {
    20
}

fn default_duration() -> Nanos {
    Nanos(3_000_000_000)
}
fn default_interval() -> Nanos {
    Nanos(1_000_000_000)
}
fn default_sample_every() -> u32 {
    1000
}
/// What the default grace adds to the DUT's own queue (§6.1: the stacks
/// and the veths hold a packet too).
const GRACE_MARGIN: Nanos = Nanos(10_000_000);

/// The DUT: a namespace of its own between the tester's ports, set up and
/// torn down by wirelab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dut {
    pub kind: DutKind,
    /// A bottleneck at the DUT's port towards the receiver: a token bucket
    /// (tbf) of this rate and buffer, so bursts above the rate queue and,
    /// past the buffer, drop (a small-buffer DUT, Norma §9 Fig. 8).
    #[serde(default)]
    pub egress: Option<Egress>,
    /// A router learns a neighbour from an ARP reply nobody asked for
    /// (Linux's `arp_accept` on its ports; off by default, as in Linux):
    /// what Norma §8's ARP-learning test needs of a DUT.
    #[serde(default)]
    pub arp_accept: bool,
    /// A router whose neighbour table holds about this many more entries
    /// than the host's holds at the start (Norma §8: an ARP-learning test
    /// finds the DUT's table size). Linux has one ARP table for every
    /// namespace, limited host-wide (`gc_thresh3`), so this lowers the
    /// host's limit for the run and puts it back after; the run asks for
    /// the user's consent (`wirelab load --host-wide`).
    #[serde(default)]
    pub neighbour_limit: Option<u32>,
}

/// The largest `dut.neighbour_limit`.
pub const MAX_NEIGHBOUR_LIMIT: u32 = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Egress {
    pub rate: BitsPerSec,
    /// Bytes the queue holds (at least one frame).
    pub buffer: crate::Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DutKind {
    /// Linux forwarding IPv4 between two subnets.
    Router,
    /// A Linux bridge joining the two ports in one subnet.
    Bridge,
    /// A router with a stateful nftables firewall: conntrack, established
    /// replies only, and the sender's address masqueraded (source NAT).
    Nat,
    /// wirelab's own switch pipeline between the two ports, forwarding
    /// each to the other and capturing every frame (one subnet, as a
    /// bridge).
    Switch,
    /// haproxy (Debian's) as an HTTP load balancer: it listens on the
    /// router's address on the sending side and balances over the
    /// receiving side's servers, a config generated from the spec.
    Haproxy,
}

impl DutKind {
    pub fn name(self) -> &'static str {
        match self {
            DutKind::Router => "router",
            DutKind::Bridge => "bridge",
            DutKind::Nat => "nat",
            DutKind::Haproxy => "haproxy",
            DutKind::Switch => "switch",
        }
    }
    /// Whether it routes (two subnets, a neighbour table).
    pub fn routes(self) -> bool {
        !matches!(self, DutKind::Bridge | DutKind::Switch)
    }
}

/// The tester's ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    /// The port speed a stream must fit in, frames on the wire with their
    /// preamble and gap (veth has none of its own; this is the port being
    /// emulated).
    #[serde(default = "default_speed")]
    pub speed: BitsPerSec,
    /// IP MTU of every link.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

fn default_speed() -> BitsPerSec {
    BitsPerSec(10_000_000_000)
}
fn default_mtu() -> u32 {
    1500
}

impl Default for Ports {
    fn default() -> Ports {
        Ports {
            speed: default_speed(),
            mtu: default_mtu(),
        }
    }
}

/// One stream of UDP template frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    /// Frame size with the FCS, as RFC 2544 counts it (64 to MTU + 18) ...
    #[serde(default)]
    pub size: u32,
    /// ... or a size mix: `imix` (the simple IMIX: 64, 594 and 1518 bytes
    /// in 7:4:1) or `[{size, weight}]`, frames taken in turn, interleaved.
    #[serde(default)]
    pub sizes: Option<Sizes>,
    /// The average rate in packets per second ...
    #[serde(default)]
    pub pps: Option<f64>,
    /// ... or in bits per second on the wire (frames with preamble and gap).
    #[serde(default)]
    pub rate: Option<BitsPerSec>,
    /// Bursts of `packets` at a peak rate, averaging the rate above
    /// (Norma Fig. 11).
    #[serde(default)]
    pub burst: Option<Burst>,
    /// On for `on`, off for `off`, again and again, at the rate above
    /// while on (Norma Fig. 11's on/off pattern: a burst unit).
    #[serde(default)]
    pub on_off: Option<OnOff>,
    /// The rate changes to each step's `pps` at its time (a multiple of
    /// the interval, so each interval has one rate).
    #[serde(default)]
    pub steps: Vec<RateStep>,
    /// From the rate above to `to_pps` in equal steps, one every `every`
    /// (a multiple of the interval), over the duration.
    #[serde(default)]
    pub ramp: Option<Ramp>,
    /// An IEEE 802.1Q tag with this VLAN ID on every frame.
    #[serde(default)]
    pub vlan: Option<u16>,
    /// The IP version: 4, or 6 (RFC 5180's benchmarking range
    /// 2001:2::/48).
    #[serde(default = "four")]
    pub ip: u8,
    /// The transport header: `udp`, or `tcp` (a stateless stream of
    /// segments with `tcp_flags`, sequence number 1, window 65535: what a
    /// DUT's forwarding or filtering of TCP sees, not a connection; for
    /// those, `stateful:`). Under `vxlan` it is the inner frame's: the
    /// outer header is UDP (RFC 7348 §5).
    #[serde(default)]
    pub l4: L4Kind,
    /// TCP's flags as tcpdump prints them, any of `FSRPAUEW` (FIN, SYN,
    /// RST, PSH, ACK, URG, ECE, CWR). Default: `A`.
    #[serde(default)]
    pub tcp_flags: Option<String>,
    /// Every frame VXLAN-encapsulated (RFC 7348): outer UDP to port 4789
    /// from `sport`, this VNI, an inner Ethernet + IPv4 + UDP (or TCP,
    /// `l4`) frame to `dport`. The sink counts the outer frames; the
    /// editor's fields are the outer headers' (`udp.sport` is RFC 7348
    /// §5's entropy port).
    #[serde(default)]
    pub vxlan: Option<VxlanSpec>,
    /// Bytes at the start of the (inner) payload, before the stamp, in hex
    /// (`"474554 20"`: spaces are ignored): an application header.
    #[serde(default)]
    pub raw: Option<String>,
    #[serde(default = "default_sport")]
    pub sport: u16,
    /// The sink counts the stream's frames by this destination port.
    /// Under VXLAN it is the inner frame's, and the sink counts the outer
    /// port, 4789.
    #[serde(default = "default_dport")]
    pub dport: u16,
    /// Norma's packet editor (App. C), in order.
    #[serde(default)]
    pub edits: Vec<EditSpec>,
    /// ARP replies (RFC 826) instead of IP frames, from the sending port's
    /// MAC to the DUT, announcing `count` addresses from `from` on, one a
    /// frame in turn, as the sender's (Norma §8's ARP-learning test: the
    /// DUT must learn them before it can forward to them). A DUT consumes
    /// them: they are counted as sent, not received.
    #[serde(default)]
    pub arp: Option<ArpAnnounce>,
    /// The tester port that sends the stream: `tx` (the default), or `rx`,
    /// towards the DUT's other side (only ARP replies: what an rx stream
    /// sends is not measured).
    #[serde(default)]
    pub port: SendPort,
    /// How late the generator may fall behind its schedule (descheduled
    /// on a busy host) and still send the frames it owes, back to back,
    /// so the average rate holds exactly (as `iperf3 -b` does). Later, it
    /// gives the slots up and counts them. Default: 64 slots' worth or
    /// 200 µs, the longer (a batch of frames leaves together, and the DUT
    /// forwards it then: `MIN_TOLERANCE_NS`), so a stall never turns into
    /// a burst the DUT would be blamed for.
    /// Frames sent behind their time are counted either way.
    #[serde(default)]
    pub catch_up: Option<Nanos>,
}

/// The longest `catch_up` a stream may ask for.
pub const MAX_CATCH_UP: Nanos = Nanos(1_000_000_000);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArpAnnounce {
    pub from: std::net::Ipv4Addr,
    pub count: u32,
}

impl ArpAnnounce {
    /// The last address announced.
    pub fn last(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::from(u32::from(self.from).saturating_add(self.count.saturating_sub(1)))
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SendPort {
    #[default]
    Tx,
    Rx,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum L4Kind {
    #[default]
    Udp,
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VxlanSpec {
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
}

/// VXLAN header and the inner Ethernet, IPv4 and UDP (or TCP) headers.
pub const fn vxlan_overhead(inner: L4Kind) -> u16 {
    8 + 14 + 20 + inner.header_len()
}

impl L4Kind {
    /// The header's length (TCP without options).
    pub const fn header_len(self) -> u16 {
        match self {
            L4Kind::Udp => 8,
            L4Kind::Tcp => 20,
        }
    }
}

/// TCP's flags by tcpdump's letters, in RFC 9293 §3.1's bit order from
/// FIN (bit 0) to CWR (bit 7).
pub const TCP_FLAG_LETTERS: &str = "FSRPAUEW";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Sizes {
    Named(String),
    List(Vec<SizeWeight>),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SizeWeight {
    pub size: u32,
    #[serde(default = "one")]
    pub weight: u32,
}

/// The simple IMIX: 7 frames of 64 bytes, 4 of 594, 1 of 1518.
pub const SIMPLE_IMIX: [(u32, u32); 3] = [(64, 7), (594, 4), (1518, 1)];
/// Frames in a mix's pattern (`WL_LOAD_SIZES`): the weights' sum.
pub const MAX_MIX: u32 = 64;

impl Stream {
    /// `catch_up`, zero when not asked for (the generator's default).
    pub fn catch_up_time(&self) -> std::time::Duration {
        self.catch_up
            .map_or(std::time::Duration::ZERO, |c| c.as_std())
    }

    /// (network header, L4 header) offsets of the stack (the outer ones
    /// under VXLAN).
    pub fn offsets(&self) -> (u16, u16) {
        let l3 = 14 + if self.vlan.is_some() { 4 } else { 0 };
        (l3, l3 + if self.ip == 6 { 40 } else { 20 })
    }
    /// The outer transport: UDP under VXLAN (RFC 7348 §5), else `l4`.
    pub fn outer_l4(&self) -> L4Kind {
        if self.vxlan.is_some() {
            L4Kind::Udp
        } else {
            self.l4
        }
    }
    /// Every header's bytes, to the start of the (inner) payload.
    pub fn headers(&self) -> u16 {
        self.offsets().1
            + self.outer_l4().header_len()
            + self.vxlan.map_or(0, |_| vxlan_overhead(self.l4))
    }
    /// The header stack as a path, "Ethernet/VLAN 100/IPv6/TCP PA/raw 16 B";
    /// None for plain Ethernet/IPv4/UDP.
    pub fn stack_name(&self) -> Option<String> {
        let mut v = vec!["Ethernet".to_string()];
        if let Some(t) = self.vlan {
            v.push(format!("VLAN {t}"));
        }
        v.push(format!("IPv{}", self.ip));
        let l4 = match self.l4 {
            L4Kind::Udp => "UDP".to_string(),
            L4Kind::Tcp => format!(
                "TCP {}",
                self.tcp_flags.as_deref().unwrap_or("A").to_uppercase()
            ),
        };
        match self.vxlan {
            Some(x) => v.push(format!("UDP/VXLAN {}/Ethernet/IPv4/{l4}", x.vni)),
            None => v.push(l4),
        }
        let raw = self.raw_bytes().len();
        if raw > 0 {
            v.push(format!("raw {raw} B"));
        }
        let s = v.join("/");
        (s != "Ethernet/IPv4/UDP").then_some(s)
    }
    /// The raw bytes (validation checked the hex).
    pub fn raw_bytes(&self) -> Vec<u8> {
        self.raw
            .as_deref()
            .map(|h| parse_hex(h).unwrap_or_default())
            .unwrap_or_default()
    }
    /// TCP's flags as bits (FIN the lowest); `A` without `tcp_flags`.
    pub fn tcp_flag_bits(&self) -> u8 {
        tcp_flags(self.tcp_flags.as_deref().unwrap_or("A")).unwrap_or(0)
    }
    /// (size, weight) of every frame size (one of weight 1 without a mix).
    pub fn mix(&self) -> Vec<(u32, u32)> {
        match &self.sizes {
            None => vec![(self.size, 1)],
            Some(Sizes::Named(_)) => SIMPLE_IMIX.to_vec(),
            Some(Sizes::List(l)) => l.iter().map(|w| (w.size, w.weight)).collect(),
        }
    }
    /// The mean frame size (with the FCS), by weight.
    pub fn mean_size(&self) -> f64 {
        let m = self.mix();
        let w: u32 = m.iter().map(|x| x.1).sum();
        m.iter()
            .map(|&(z, k)| f64::from(z) * f64::from(k))
            .sum::<f64>()
            / f64::from(w.max(1))
    }
    pub fn largest(&self) -> u32 {
        self.mix().iter().map(|x| x.0).max().unwrap_or(0)
    }
    /// The frames' sizes in the order they are sent, one pattern: each
    /// size as often as its weight, spread evenly (smooth weighted
    /// round-robin, as nginx balances), without the FCS. Empty without a
    /// mix.
    pub fn pattern(&self) -> Vec<u16> {
        if self.sizes.is_none() {
            return Vec::new();
        }
        let m = self.mix();
        let total: i64 = m.iter().map(|x| i64::from(x.1)).sum();
        let mut current = vec![0i64; m.len()];
        (0..total)
            .map(|_| {
                for (c, x) in current.iter_mut().zip(&m) {
                    *c += i64::from(x.1);
                }
                let (i, _) = current
                    .iter()
                    .enumerate()
                    .max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i)))
                    .expect("a mix has a size");
                current[i] -= total;
                (m[i].0 - 4) as u16
            })
            .collect()
    }
}

/// Hex digits, spaces ignored, into bytes.
fn parse_hex(h: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<(usize, char)> = h.char_indices().filter(|(_, c)| *c != ' ').collect();
    if let Some((i, c)) = digits.iter().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!("{c:?} at character {i} is not a hex digit"));
    }
    if digits.len() % 2 == 1 {
        return Err(format!("{} hex digits: bytes take two each", digits.len()));
    }
    Ok(digits
        .chunks(2)
        .map(|p| (p[0].1.to_digit(16).unwrap() * 16 + p[1].1.to_digit(16).unwrap()) as u8)
        .collect())
}

/// tcpdump's flag letters into TCP's flag bits.
fn tcp_flags(s: &str) -> Result<u8, String> {
    s.chars().try_fold(0u8, |bits, c| {
        match TCP_FLAG_LETTERS.find(c.to_ascii_uppercase()) {
            Some(k) => Ok(bits | 1 << k),
            None => Err(format!(
                "{c:?} is not a TCP flag: any of {TCP_FLAG_LETTERS} (FIN, SYN, RST, PSH, ACK, URG, ECE, CWR)"
            )),
        }
    })
}

fn four() -> u8 {
    4
}

fn default_sport() -> u16 {
    40000
}
fn default_dport() -> u16 {
    7001
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    pub packets: u32,
    #[serde(default)]
    pub peak_pps: Option<f64>,
    /// The peak as bits per second on the wire.
    #[serde(default)]
    pub peak: Option<BitsPerSec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OnOff {
    pub on: Nanos,
    pub off: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateStep {
    pub at: Nanos,
    pub pps: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    pub to_pps: f64,
    pub every: Nanos,
}

/// The header fields the editor may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Field {
    #[serde(rename = "ipv4.src")]
    Ipv4Src,
    #[serde(rename = "ipv4.dst")]
    Ipv4Dst,
    #[serde(rename = "ipv4.tos")]
    Ipv4Tos,
    #[serde(rename = "ipv4.ttl")]
    Ipv4Ttl,
    #[serde(rename = "udp.sport")]
    UdpSport,
    #[serde(rename = "tcp.sport")]
    TcpSport,
}

impl Field {
    /// (offset in an untagged Ethernet + IPv4 + UDP frame, width).
    pub fn place(self) -> (u16, u8) {
        self.place_in(14, 34)
    }
    /// (offset in a frame whose network header is at `l3` and UDP header
    /// at `l4`, width).
    pub fn place_in(self, l3: u16, l4: u16) -> (u16, u8) {
        match self {
            Field::Ipv4Tos => (l3 + 1, 1),
            Field::Ipv4Ttl => (l3 + 8, 1),
            Field::Ipv4Src => (l3 + 12, 4),
            Field::Ipv4Dst => (l3 + 16, 4),
            Field::UdpSport | Field::TcpSport => (l4, 2),
        }
    }
    pub fn is_ipv4(self) -> bool {
        !matches!(self, Field::UdpSport | Field::TcpSport)
    }
    /// The transport a port field belongs to (None: an IPv4 field).
    pub fn l4(self) -> Option<L4Kind> {
        match self {
            Field::UdpSport => Some(L4Kind::Udp),
            Field::TcpSport => Some(L4Kind::Tcp),
            _ => None,
        }
    }
    /// The largest value the field holds.
    pub fn max(self) -> u64 {
        (1u64 << (8 * u32::from(self.place().1))) - 1
    }
}

/// One edit: exactly one of `step`, `table`, `random`, `ranged`; a step
/// or table with `carry` is Norma's cascaded step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditSpec {
    pub field: Field,
    /// App. C 1) direct step: from, from + by, ..., wrapping past `to`.
    #[serde(default)]
    pub step: Option<Step>,
    /// App. C 2) indirect step: the values in turn.
    #[serde(default)]
    pub table: Option<Vec<u32>>,
    /// App. C 4) direct random: the low `bits` bits random.
    #[serde(default)]
    pub random: Option<Random>,
    /// App. C 5) ranged random: a value in [from, to].
    #[serde(default)]
    pub ranged: Option<Ranged>,
    /// App. C 3) cascaded step: step only when edit `carry` (0-based, an
    /// earlier step or table) wrapped in the same frame.
    #[serde(default)]
    pub carry: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A number, or an IPv4 address (`198.18.2.16`) for an address field.
    #[serde(deserialize_with = "u32_or_ipv4")]
    pub from: u32,
    #[serde(deserialize_with = "u32_or_ipv4")]
    pub to: u32,
    #[serde(default = "one")]
    pub by: u32,
}

fn one() -> u32 {
    1
}

/// A field's value as a number or, for an address, as `a.b.c.d`.
fn u32_or_ipv4<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        N(u32),
        S(String),
    }
    match V::deserialize(d)? {
        V::N(n) => Ok(n),
        V::S(s) => s.parse::<std::net::Ipv4Addr>().map(u32::from).map_err(|_| {
            serde::de::Error::custom(format!("`{s}` is neither a number nor an IPv4 address"))
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Random {
    pub bits: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ranged {
    pub from: u32,
    pub to: u32,
}

/// What a load test claims of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadExpect {
    pub metric: Metric,
    #[serde(default)]
    pub at_least: Option<Amount>,
    #[serde(default)]
    pub at_most: Option<Amount>,
    /// With `streams:`, this stream's figure (its index in the list)
    /// instead of all measured streams' together.
    #[serde(default)]
    pub stream: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Frames sent and received over the run.
    Sent,
    Received,
    /// Packets sent and not received, over the run (version counters).
    Lost,
    /// Lost over sent.
    LossRatio,
    /// |received rate − requested| / requested, first packet to last.
    RateError,
    /// Packets received per second, first packet to last.
    ReceivedPps,
    /// One-way latency over the run's stamped packets.
    LatencyMean,
    LatencyP50,
    LatencyP99,
    LatencyP999,
    LatencyP9999,
    LatencyMax,
    /// Sequence numbers received not above one seen before: reordered or
    /// duplicated.
    Late,
    /// The rate an RFC 2544 search found (packets per second offered in
    /// its best passing trial); needs `search:`.
    ThroughputPps,
    /// The longest burst a back-to-back search found the DUT forwarding
    /// whole (frames, the mean over its repeats); needs
    /// `search: {back_to_back}`.
    BackToBack,
    /// Stateful: connections the clients completed (their request
    /// answered and closed), over the run and per second.
    Connections,
    ConnectionsPerSecond,
    /// Stateful: requests the servers answered.
    Transactions,
    /// Stateful: resets either side received.
    Resets,
    /// Stateful: response bytes the clients received per second, as bits.
    Goodput,
    /// Neighbours the DUT learned on the receiving side over the run (an
    /// ARP stream's test).
    Learned,
}

impl Metric {
    pub fn unit(self) -> Unit {
        match self {
            Metric::LatencyMean
            | Metric::LatencyP50
            | Metric::LatencyP99
            | Metric::LatencyP999
            | Metric::LatencyP9999
            | Metric::LatencyMax => Unit::Nanos,
            Metric::Goodput => Unit::BitsPerSec,
            _ => Unit::Count,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Metric::Sent => "sent",
            Metric::Received => "received",
            Metric::Lost => "lost",
            Metric::LossRatio => "loss_ratio",
            Metric::RateError => "rate_error",
            Metric::ReceivedPps => "received_pps",
            Metric::LatencyMean => "latency_mean",
            Metric::LatencyP50 => "latency_p50",
            Metric::LatencyP99 => "latency_p99",
            Metric::LatencyP999 => "latency_p999",
            Metric::LatencyP9999 => "latency_p9999",
            Metric::LatencyMax => "latency_max",
            Metric::Late => "late",
            Metric::ThroughputPps => "throughput_pps",
            Metric::BackToBack => "back_to_back",
            Metric::Connections => "connections",
            Metric::ConnectionsPerSecond => "connections_per_second",
            Metric::Transactions => "transactions",
            Metric::Resets => "resets",
            Metric::Goodput => "goodput",
            Metric::Learned => "learned",
        }
    }
    /// A figure each stream of `streams:` has of its own.
    pub fn per_stream(self) -> bool {
        matches!(
            self,
            Metric::Sent
                | Metric::Received
                | Metric::Lost
                | Metric::LossRatio
                | Metric::RateError
                | Metric::ReceivedPps
                | Metric::LatencyMean
                | Metric::LatencyP50
                | Metric::LatencyP99
                | Metric::LatencyP999
                | Metric::LatencyP9999
                | Metric::LatencyMax
                | Metric::Late
        )
    }
    /// A stateful test's figure (not a stream's).
    pub fn stateful(self) -> bool {
        matches!(
            self,
            Metric::Connections
                | Metric::ConnectionsPerSecond
                | Metric::Transactions
                | Metric::Resets
                | Metric::Goodput
        )
    }
}

impl LoadExpect {
    /// The bounds in the metric's base unit (ns for latencies).
    pub fn bounds(&self) -> (Option<f64>, Option<f64>) {
        let v = |a: &Option<Amount>| a.as_ref().and_then(|a| a.value_in(self.metric.unit()).ok());
        (v(&self.at_least), v(&self.at_most))
    }
    /// "latency_p99 at most 1ms".
    pub fn describe(&self) -> String {
        let mut s = self.metric.name().to_string();
        if let Some(k) = self.stream {
            s.push_str(&format!(" of stream {k}"));
        }
        if let Some(a) = &self.at_least {
            s.push_str(&format!(" at least {a}"));
        }
        if let Some(a) = &self.at_most {
            s.push_str(&format!(" at most {a}"));
        }
        s
    }
}

impl Egress {
    /// The longest its queue holds a packet: a full buffer drained at the
    /// rate.
    pub fn hold(&self) -> Nanos {
        let ns = u128::from(self.buffer.0) * 8 * 1_000_000_000 / u128::from(self.rate.0.max(1));
        Nanos(ns.min(u128::from(u64::MAX)) as u64)
    }
}

impl LoadSpec {
    /// The longest the DUT's egress queue holds a packet (0 without one).
    pub fn egress_hold(&self) -> Nanos {
        self.dut.egress.as_ref().map_or(Nanos(0), Egress::hold)
    }

    /// The grace a run leaves a retired version (`grace`): given, or
    /// `GRACE_MARGIN` more than the DUT's egress queue holds a packet. A
    /// 10 ms grace behind a 300 KB queue at 100 Mbit/s (24 ms) read a
    /// burst's last frames before they came out, and counted them in no
    /// interval.
    pub fn grace(&self) -> Nanos {
        self.grace
            .unwrap_or(Nanos(self.egress_hold().0 + GRACE_MARGIN.0))
    }

    /// Each stream of a stateless test as a test of that one stream (with
    /// the rest of the spec as it is), for what is planned per stream: its
    /// rate, its pattern, its template. One stream: the spec itself.
    pub fn stream_views(&self) -> Vec<LoadSpec> {
        if self.streams.is_empty() {
            return vec![self.clone()];
        }
        self.streams
            .iter()
            .map(|st| LoadSpec {
                stream: Some(st.clone()),
                streams: Vec::new(),
                // The claims are the whole test's, checked once.
                expect: Vec::new(),
                ..self.clone()
            })
            .collect()
    }
    /// The stream of a stateless test of one stream (validation makes
    /// sure it has one; for `streams:`, see `stream_views`).
    pub fn stream(&self) -> &Stream {
        self.stream
            .as_ref()
            .expect("a load test without `stateful:` has a `stream:` (validated)")
    }
    /// Frames per second on the wire for `bits` per second.
    fn pps_of(&self, bits: BitsPerSec) -> f64 {
        bits.0 as f64 / ((self.stream().mean_size() + WIRE_OVERHEAD as f64) * 8.0)
    }
    /// The average rate asked for at the start (packets per second).
    pub fn pps(&self) -> f64 {
        match self.on_off_burst() {
            Some((_, avg)) => avg,
            None => self.rate_pps(),
        }
    }
    /// `pps` or `rate`, as written.
    fn rate_pps(&self) -> f64 {
        match (self.stream().pps, self.stream().rate) {
            (Some(p), _) => p,
            (None, Some(r)) => self.pps_of(r),
            (None, None) => 0.0,
        }
    }
    /// The burst's peak rate (packets per second); on/off's rate while on.
    pub fn peak_pps(&self) -> Option<f64> {
        if self.stream().on_off.is_some() {
            return Some(self.rate_pps());
        }
        let b = self.stream().burst.as_ref()?;
        b.peak_pps.or_else(|| b.peak.map(|r| self.pps_of(r)))
    }
    /// On/off as a burst: (packets while on, the average rate).
    pub fn on_off_burst(&self) -> Option<(u32, f64)> {
        let o = self.stream().on_off?;
        let p = self.rate_pps();
        let on = (p * o.on.0 as f64 / 1e9).round();
        Some((on as u32, p * o.on.0 as f64 / (o.on.0 + o.off.0) as f64))
    }
    /// The rate changes over time after the first: (offset, pps), in order.
    pub fn schedule(&self) -> Vec<(Nanos, f64)> {
        if let Some(r) = self.stream().ramp {
            let n = (self.duration.0 - 1) / r.every.0;
            let from = self.rate_pps();
            return (1..=n)
                .map(|k| {
                    let pps = from + (r.to_pps - from) * k as f64 / n as f64;
                    (Nanos(k * r.every.0), pps)
                })
                .collect();
        }
        self.stream().steps.iter().map(|s| (s.at, s.pps)).collect()
    }
    /// The fastest the port carries frames of this size.
    pub fn port_pps(&self) -> f64 {
        self.pps_of(self.ports.speed)
    }
    /// The template's length: the frame without its FCS (veth carries none).
    pub fn template_len(&self) -> usize {
        self.stream().largest() as usize - 4
    }
}

/// Parses and validates a load test.
pub fn parse(text: &str) -> Result<LoadSpec, SpecError> {
    crate::parse_yaml(text, validate)
}

/// Whether a YAML document is a load test (its top level has `dut:` and
/// `stream:` or `stateful:`), for commands that take either kind of file.
pub fn is_load_text(text: &str) -> bool {
    let top = |k: &str| text.lines().any(|l| l.starts_with(k));
    top("dut:") && (top("stream:") || top("streams:") || top("stateful:"))
}

/// Reads and parses a load test; its name defaults to the file's.
pub fn load(path: &std::path::Path) -> Result<LoadSpec, crate::LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| crate::LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut spec = parse(&text).map_err(|error| crate::LoadError::Invalid {
        path: path.display().to_string(),
        error,
    })?;
    if spec.name.is_none() {
        spec.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    }
    Ok(spec)
}

/// Streams generated at once (`WL_LOAD_STREAMS`).
pub const MAX_STREAMS: usize = 8;

fn validate(s: &LoadSpec) -> Result<(), Invalid> {
    if !s.streams.is_empty() {
        validate_streams(s)?;
    } else if s.stream.as_ref().is_some_and(|st| st.arp.is_some()) {
        return err(
            "stream.arp",
            "an ARP stream is for the DUT and is not measured: run it beside a measured one, in `streams:`",
        );
    } else {
        validate_one(s)?;
    }
    // What a neighbour limit is for, and what reports what it did.
    if s.dut.neighbour_limit.is_some() && !s.streams.iter().any(|st| st.arp.is_some()) {
        return err(
            "dut.neighbour_limit",
            "an ARP-learning test's: it needs a stream of `arp:` replies (in `streams:`) to fill the table",
        );
    }
    Ok(())
}

/// `streams:`: each as a test of its own, its errors named by its place
/// in the list; then what they share: the port's speed, and the sink's
/// means of telling them apart.
fn validate_streams(s: &LoadSpec) -> Result<(), Invalid> {
    if s.stream.is_some() {
        return err("streams", "`stream:` or `streams:`, not both");
    }
    if s.stateful.is_some() {
        return err("streams", "`streams:` or `stateful:`, not both");
    }
    if s.streams.len() > MAX_STREAMS {
        return err(
            "streams",
            format!("at most {MAX_STREAMS} streams, got {}", s.streams.len()),
        );
    }
    if s.search.is_some() {
        return err(
            "search",
            "a search runs one stream: `stream:`, not `streams:`",
        );
    }
    if s.streams.iter().all(|st| st.arp.is_some()) {
        return err(
            "streams",
            "every stream is ARP replies, for the DUT: nothing would be measured",
        );
    }
    let views = s.stream_views();
    for (k, v) in views.iter().enumerate() {
        validate_one(v).map_err(|(path, m)| {
            let path = match path.strip_prefix("stream") {
                Some(rest) if rest.is_empty() || rest.starts_with('.') => {
                    format!("streams[{k}]{rest}")
                }
                _ => path,
            };
            (path, m)
        })?;
    }
    // The sink tells streams apart by their outer transport and
    // destination port (VXLAN's is RFC 7348's 4789, whatever the inner).
    let sink_key = |st: &Stream| {
        let port = if st.vxlan.is_some() { 4789 } else { st.dport };
        (st.outer_l4(), port)
    };
    // An ARP stream is not measured: it has no port to tell apart.
    for (k, a) in s
        .streams
        .iter()
        .enumerate()
        .filter(|(_, a)| a.arp.is_none())
    {
        if let Some(j) = s.streams[..k]
            .iter()
            .position(|b| b.arp.is_none() && sink_key(b) == sink_key(a))
        {
            let (l4, port) = sink_key(a);
            return err(
                format!("streams[{k}].dport"),
                format!(
                    "{} to port {port} is streams[{j}]'s too: the receiving port tells streams apart by their destination port (one VXLAN stream at most)",
                    match l4 {
                        L4Kind::Udp => "UDP",
                        L4Kind::Tcp => "TCP",
                    }
                ),
            );
        }
    }
    let wire: f64 = views
        .iter()
        .map(|v| v.pps() * (v.stream().mean_size() + WIRE_OVERHEAD as f64) * 8.0)
        .sum();
    validate_expect(s)?;
    if wire > s.ports.speed.0 as f64 * (1.0 + 1e-9) {
        return err(
            "streams",
            format!(
                "together {:.3} Gbit/s on the wire, above the port's {}",
                wire / 1e9,
                s.ports.speed
            ),
        );
    }
    Ok(())
}

fn validate_one(s: &LoadSpec) -> Result<(), Invalid> {
    crate::validate_name(&s.name)?;
    let mtu = s.ports.mtu;
    if !(68..=9000).contains(&mtu) {
        return err("ports.mtu", format!("{mtu} is outside 68..9000"));
    }
    if s.ports.speed.0 == 0 {
        return err("ports.speed", "must be above 0");
    }
    validate_timing(s)?;
    if let Some(n) = s.dut.neighbour_limit {
        if !matches!(s.dut.kind, DutKind::Router | DutKind::Nat) || s.stateful.is_some() {
            return err(
                "dut.neighbour_limit",
                "a limit for a router's or a NAT's neighbour table, under a stream of frames (not `stateful:`)",
            );
        }
        if n == 0 || n > MAX_NEIGHBOUR_LIMIT {
            return err(
                "dut.neighbour_limit",
                format!("from 1 to {MAX_NEIGHBOUR_LIMIT} entries"),
            );
        }
    }
    let st = match (&s.stream, &s.stateful) {
        (Some(_), Some(_)) => return err("stateful", "`stream:` or `stateful:`, not both"),
        (None, None) => return err("dut", "a load test needs a `stream:` or a `stateful:`"),
        (None, Some(t)) => return validate_stateful(s, t),
        (Some(st), None) => st,
    };
    if s.dut.kind == DutKind::Haproxy {
        return err(
            "dut.kind",
            "haproxy forwards TCP connections: its test is `stateful:`, not a stream",
        );
    }
    validate_stack(s, st)?;
    validate_arp(s, st)?;
    validate_sizes(st, mtu)?;
    let pps = match (st.pps, st.rate) {
        (Some(_), Some(_)) => return err("stream", "`pps` or `rate`, not both"),
        (None, None) => return err("stream", "needs a rate: `pps` or `rate`"),
        (Some(p), None) if !p.is_finite() || p <= 0.0 => {
            return err("stream.pps", format!("must be above 0, got {p}"))
        }
        (None, Some(r)) if r.0 == 0 => return err("stream.rate", "must be above 0"),
        _ => s.pps(),
    };
    let at = if st.pps.is_some() {
        "stream.pps"
    } else {
        "stream.rate"
    };
    let fits = |what: &str, p: f64, at: &str| -> Result<(), Invalid> {
        let wire = p * (st.mean_size() + WIRE_OVERHEAD as f64) * 8.0;
        if wire > s.ports.speed.0 as f64 * (1.0 + 1e-9) {
            return err(
                at,
                format!(
                    "{what} of {p:.0} frames/s of {} bytes is {:.3} Gbit/s on the wire, \
                     above the port's {} (at most {:.0} frames/s)",
                    st.mean_size(),
                    wire / 1e9,
                    s.ports.speed,
                    s.port_pps()
                ),
            );
        }
        Ok(())
    };
    fits("a rate", pps, at)?;
    if let Some(b) = &st.burst {
        if b.packets == 0 {
            return err("stream.burst.packets", "must be at least 1");
        }
        let peak = match (b.peak_pps, b.peak) {
            (Some(_), Some(_)) => return err("stream.burst", "`peak_pps` or `peak`, not both"),
            (None, None) => return err("stream.burst", "needs its peak: `peak_pps` or `peak`"),
            _ => s.peak_pps().unwrap_or(0.0),
        };
        let at = if b.peak_pps.is_some() {
            "stream.burst.peak_pps"
        } else {
            "stream.burst.peak"
        };
        if !peak.is_finite() || peak < pps {
            return err(
                at,
                format!("the peak ({peak:.0}/s) must be at least the average ({pps:.0}/s)"),
            );
        }
        fits("a peak", peak, at)?;
    }
    if pps > 1e9 {
        return err(at, "the meter cannot go faster than 1 packet per ns");
    }
    validate_patterns(s, &fits)?;
    validate_edits(st)?;
    if let Some(e) = &s.dut.egress {
        if e.rate.0 == 0 {
            return err("dut.egress.rate", "must be above 0");
        }
        crate::frame_fits(mtu, e.buffer, "dut.egress.buffer".into())?;
    }
    if let Some(x) = &s.search {
        match (&x.throughput, &x.back_to_back) {
            (Some(_), Some(_)) => {
                return err(
                    "search",
                    "`throughput` or `back_to_back`, one search at a time",
                )
            }
            (None, None) => {
                return err("search", "names no search: `throughput` or `back_to_back`")
            }
            _ => {}
        }
    }
    if let Some(b) = s.search.as_ref().and_then(|x| x.back_to_back.as_ref()) {
        let at = "search.back_to_back";
        if !(2..=1_000_000).contains(&b.max_frames) {
            return err(format!("{at}.max_frames"), "from 2 to 1,000,000");
        }
        if b.resolution == 0 || b.resolution >= b.max_frames {
            return err(
                format!("{at}.resolution"),
                format!("from 1 to below max_frames ({})", b.max_frames),
            );
        }
        if !(1..=50).contains(&b.repeat) {
            return err(format!("{at}.repeat"), "from 1 to 50");
        }
        if b.drain.0 < 1_000_000 || b.drain.0 > 10_000_000_000 {
            return err(format!("{at}.drain"), "from 1ms to 10s");
        }
        if st.burst.is_some() || st.on_off.is_some() {
            return err(
                "stream",
                "a back-to-back search makes its own bursts: no `burst` or `on_off`",
            );
        }
    }
    if let Some(t) = s.search.as_ref().and_then(|x| x.throughput.as_ref()) {
        let at = "search.throughput";
        if !(0.0..1.0).contains(&t.loss) {
            return err(
                format!("{at}.loss"),
                format!("a share from 0 up to 1, got {}", t.loss),
            );
        }
        if !(t.resolution > 0.0 && t.resolution < 1.0) {
            return err(
                format!("{at}.resolution"),
                format!("a share above 0 and below 1, got {}", t.resolution),
            );
        }
        if t.trial.0 < 100_000_000 || t.trial.0 > 3_600_000_000_000 {
            return err(format!("{at}.trial"), "from 100ms to 1h");
        }
        if t.trial.0 < s.interval.0 {
            return err(
                format!("{at}.trial"),
                format!("{} is shorter than the interval {}", t.trial, s.interval),
            );
        }
        if !(1..=64).contains(&t.max_trials) {
            return err(format!("{at}.max_trials"), "from 1 to 64");
        }
        if st.burst.is_some() {
            return err(
                "stream.burst",
                "a throughput search sends a constant rate: no bursts",
            );
        }
    }
    validate_expect(s)
}

/// The stateful test's own checks; the timing and the claims are shared.
fn validate_stateful(s: &LoadSpec, t: &crate::efsm::Stateful) -> Result<(), Invalid> {
    crate::efsm::validate(t, s.ports.mtu)?;
    if s.search.is_some() {
        return err(
            "search",
            "a search varies a stream's rate: a stateful test has none",
        );
    }
    for (k, x) in s.expect.iter().enumerate() {
        if !x.metric.stateful() {
            return err(
                format!("expect[{k}].metric"),
                format!(
                    "`{}` is a stream's figure; a stateful test has none",
                    x.metric.name()
                ),
            );
        }
    }
    validate_expect(s)
}

fn validate_timing(s: &LoadSpec) -> Result<(), Invalid> {
    let (i, d) = (s.interval.0, s.duration.0);
    if i == 0 || d == 0 {
        let at = if i == 0 { "interval" } else { "duration" };
        return err(at, "must be above 0");
    }
    if i > d {
        return err(
            "interval",
            format!("{} is longer than the duration {}", s.interval, s.duration),
        );
    }
    if d / i > 100_000 {
        return err(
            "interval",
            "more than 100,000 intervals: choose a longer one",
        );
    }
    let hold = s.egress_hold();
    if let (Some(g), Some(e)) = (s.grace, &s.dut.egress) {
        if g.0 <= hold.0 {
            return err(
                "grace",
                format!(
                    "{g} is not longer than the DUT's egress queue holds a packet ({} at {}: {hold}): frames still queued when their interval is read would count in none (§6.1)",
                    e.buffer, e.rate
                ),
            );
        }
    }
    if s.grace().0 >= i {
        return err(
            if s.grace.is_some() {
                "grace"
            } else {
                "interval"
            },
            format!(
                "the grace {}{} must be shorter than the interval {}",
                s.grace(),
                if s.grace.is_some() {
                    String::new()
                } else {
                    format!(
                        " (the DUT's egress queue holds a packet {hold}, and {GRACE_MARGIN} more)"
                    )
                },
                s.interval
            ),
        );
    }
    if d > 3_600_000_000_000 {
        return err("duration", "at most 1h");
    }
    Ok(())
}

fn validate_expect(s: &LoadSpec) -> Result<(), Invalid> {
    for (k, x) in s.expect.iter().enumerate() {
        let at = format!("expect[{k}]");
        if x.metric.stateful() && s.stateful.is_none() {
            return err(
                format!("{at}.metric"),
                format!("`{}` counts a stateful test's connections", x.metric.name()),
            );
        }
        let search = |f: fn(&Search) -> bool| s.search.as_ref().is_some_and(f);
        if x.metric == Metric::ThroughputPps && !search(|x| x.throughput.is_some()) {
            return err(
                format!("{at}.metric"),
                "`throughput_pps` needs a `search: {throughput}`",
            );
        }
        if let Some(k) = x.stream {
            let at = format!("{at}.stream");
            let Some(st) = s.streams.get(k) else {
                return err(
                    at,
                    format!(
                        "names stream {k} of `streams:`, which has {}",
                        s.streams.len()
                    ),
                );
            };
            if st.arp.is_some() {
                return err(
                    at,
                    format!("stream {k} is ARP replies, for the DUT: not measured"),
                );
            }
            if !x.metric.per_stream() {
                return err(
                    at,
                    format!("`{}` is not a figure of one stream", x.metric.name()),
                );
            }
        }
        let arp = s.stream.iter().chain(&s.streams).any(|st| st.arp.is_some());
        if x.metric == Metric::Learned && !arp {
            return err(
                format!("{at}.metric"),
                "`learned` counts what an ARP stream (`arp:`) taught the DUT",
            );
        }
        if x.metric == Metric::BackToBack && !search(|x| x.back_to_back.is_some()) {
            return err(
                format!("{at}.metric"),
                "`back_to_back` needs a `search: {back_to_back}`",
            );
        }
        if x.at_least.is_none() && x.at_most.is_none() {
            return err(at, "needs `at_least` and/or `at_most`");
        }
        for (name, a) in [("at_least", &x.at_least), ("at_most", &x.at_most)] {
            if let Some(a) = a {
                match a.value_in(x.metric.unit()) {
                    Err(e) => return err(format!("{at}.{name}"), e),
                    Ok(v) if v < 0.0 => return err(format!("{at}.{name}"), "must not be negative"),
                    Ok(_) => {}
                }
            }
        }
        if let (Some(lo), Some(hi)) = x.bounds() {
            if lo > hi {
                return err(
                    format!("{at}.at_least"),
                    "is above `at_most`: no value can satisfy both",
                );
            }
        }
    }
    Ok(())
}

/// The header stack: IPv4 or IPv6, a VLAN ID, and what a DUT of this kind
/// forwards (the lab's routers route untagged IPv4: their namespaces have
/// IPv6 off and no VLAN interfaces).
fn validate_stack(s: &LoadSpec, st: &Stream) -> Result<(), Invalid> {
    if st.ip != 4 && st.ip != 6 {
        return err("stream.ip", format!("4 or 6, not {}", st.ip));
    }
    if let Some(v) = st.vlan {
        if !(1..=4094).contains(&v) {
            return err("stream.vlan", format!("a VLAN ID from 1 to 4094, not {v}"));
        }
    }
    let l2_only = matches!(s.dut.kind, DutKind::Bridge | DutKind::Switch);
    if !l2_only {
        if st.ip == 6 {
            return err(
                "stream.ip",
                format!(
                    "IPv6 through a {}: the lab routes IPv4 only (its namespaces have IPv6 off); \
                     a bridge or the switch forwards it",
                    s.dut.kind.name()
                ),
            );
        }
        if st.vlan.is_some() {
            return err(
                "stream.vlan",
                format!(
                    "tagged frames through a {}: the lab's routers have no VLAN interfaces; \
                     a bridge or the switch forwards them",
                    s.dut.kind.name()
                ),
            );
        }
    }
    if st.ip == 6 {
        if let Some(k) = st.edits.iter().position(|e| e.field.is_ipv4()) {
            return err(
                format!("stream.edits[{k}].field"),
                "an IPv4 field, and the stream's frames are IPv6",
            );
        }
    }
    if let Some(k) = st
        .edits
        .iter()
        .position(|e| e.field.l4().is_some_and(|l| l != st.outer_l4()))
    {
        let want = match st.outer_l4() {
            L4Kind::Udp => "udp.sport",
            L4Kind::Tcp => "tcp.sport",
        };
        let what = if st.vxlan.is_some() {
            "the editor edits the outer headers, and a VXLAN stream's is udp".to_string()
        } else {
            format!("the stream's transport is {:?}", st.l4).to_lowercase()
        };
        return err(
            format!("stream.edits[{k}].field"),
            format!("{what}: its port is {want}"),
        );
    }
    if let Some(f) = &st.tcp_flags {
        if st.l4 != L4Kind::Tcp {
            return err(
                "stream.tcp_flags",
                "flags of TCP, and the stream is UDP (`l4: tcp`)",
            );
        }
        tcp_flags(f).or_else(|m| err("stream.tcp_flags", m))?;
    }
    if let Some(v) = &st.vxlan {
        if v.vni >= 1 << 24 {
            return err("stream.vxlan.vni", format!("{} is above 24 bits", v.vni));
        }
    }
    let raw = match &st.raw {
        None => 0,
        Some(h) => {
            let b = parse_hex(h).or_else(|m| err("stream.raw", m))?;
            if b.is_empty() || b.len() > 256 {
                return err("stream.raw", format!("{} bytes: 1 to 256", b.len()));
            }
            b.len() as u32
        }
    };
    // Every frame holds its headers and raw bytes (and 4 bytes of FCS).
    // A frame of a mix too short for the stamp goes unstamped: counted,
    // without a latency.
    let headers = u32::from(st.headers()) + raw + 4;
    if let Some(&(z, _)) = st.mix().iter().find(|&&(z, _)| z < headers) {
        return err(
            if st.sizes.is_some() {
                "stream.sizes"
            } else {
                "stream.size"
            },
            format!(
                "a {z}-byte frame cannot hold its headers{}: at least {headers} bytes with the FCS",
                if raw > 0 { " and raw bytes" } else { "" }
            ),
        );
    }
    Ok(())
}

/// Every frame size fits Ethernet, the MTU and the generator; a mix is
/// `imix` or weights summing to at most 64.
/// Addresses one ARP stream may announce at most: Linux keeps one
/// neighbour table for every namespace (`gc_thresh3`, 1024 by default),
/// and a lab must not fill the host's.
pub const MAX_ANNOUNCED: u32 = 512;

/// An ARP stream (`arp:`), and what only it may do (`port: rx`).
fn validate_arp(s: &LoadSpec, st: &Stream) -> Result<(), Invalid> {
    let Some(a) = st.arp else {
        if st.port == SendPort::Rx {
            return err(
                "stream.port",
                "only an ARP stream (`arp:`) is sent from the receiving port: nothing measures what goes the other way",
            );
        }
        return Ok(());
    };
    if !s.dut.kind.routes() {
        return err(
            "stream.arp",
            format!(
                "a {} keeps no neighbour table: ARP learning is a router's (`router` or `nat`)",
                s.dut.kind.name()
            ),
        );
    }
    let other = st.sizes.is_some()
        || st.vlan.is_some()
        || st.ip != 4
        || st.l4 != L4Kind::Udp
        || st.tcp_flags.is_some()
        || st.vxlan.is_some()
        || st.raw.is_some()
        || !st.edits.is_empty();
    if other {
        return err(
            "stream.arp",
            "an ARP reply has no IP or transport header: no `sizes`, `vlan`, `ip`, `l4`, `tcp_flags`, `vxlan`, `raw` or `edits` (the announced address is stepped)",
        );
    }
    if st.size != 64 {
        return err("stream.size", "an ARP reply is a 64-byte frame: `size: 64`");
    }
    if a.count == 0 || a.count > MAX_ANNOUNCED {
        return err(
            "stream.arp.count",
            format!(
                "from 1 to {MAX_ANNOUNCED} addresses (Linux's neighbour table is the host's, not the lab's)"
            ),
        );
    }
    // The sending port's side of the router: 198.18.1.0/24 or
    // 198.18.2.0/24, past the lab's own addresses (.1 to .3).
    let net = match st.port {
        SendPort::Tx => 1,
        SendPort::Rx => 2,
    };
    let (f, l) = (a.from.octets(), a.last().octets());
    if f[..3] != [198, 18, net] || l[..3] != [198, 18, net] || f[3] < 10 || l[3] > 254 {
        return err(
            "stream.arp.from",
            format!(
                "the {} port's side of the router is 198.18.{net}.0/24: announce addresses from 198.18.{net}.10 to 198.18.{net}.254 ({} to {} asked)",
                match st.port {
                    SendPort::Tx => "sending",
                    SendPort::Rx => "receiving",
                },
                a.from,
                a.last()
            ),
        );
    }
    Ok(())
}

fn validate_sizes(st: &Stream, mtu: u32) -> Result<(), Invalid> {
    let largest = mtu + FRAME_OVERHEAD;
    let one = |size: u32, at: &str| -> Result<(), Invalid> {
        if size < 64 {
            return err(
                at,
                format!("{size} bytes is below Ethernet's minimum frame of 64"),
            );
        }
        if size > largest {
            return err(
                at,
                format!(
                    "a {size}-byte frame carries {} bytes of IP, above the MTU of {mtu} \
                     (the largest frame is {largest})",
                    size - FRAME_OVERHEAD
                ),
            );
        }
        if size > 2048 {
            return err(
                at,
                format!("the generator edits frames up to 2048 bytes, not {size}"),
            );
        }
        Ok(())
    };
    match (&st.sizes, st.size) {
        (None, size) => one(size, "stream.size"),
        (Some(_), 1..) => err("stream.sizes", "`size` or `sizes`, not both"),
        (Some(Sizes::Named(n)), _) => {
            if n != "imix" {
                return err(
                    "stream.sizes",
                    format!("`{n}`: the named mix is `imix` (64, 594 and 1518 bytes, 7:4:1)"),
                );
            }
            SIMPLE_IMIX
                .iter()
                .try_for_each(|&(z, _)| one(z, "stream.sizes"))
        }
        (Some(Sizes::List(l)), _) => {
            if l.is_empty() {
                return err("stream.sizes", "names no size");
            }
            for (k, w) in l.iter().enumerate() {
                one(w.size, &format!("stream.sizes[{k}].size"))?;
                if w.weight == 0 {
                    return err(format!("stream.sizes[{k}].weight"), "must be at least 1");
                }
            }
            let total: u32 = l.iter().map(|w| w.weight).sum();
            if total > MAX_MIX {
                return err(
                    "stream.sizes",
                    format!("weights summing to at most {MAX_MIX} (the generator's pattern), got {total}"),
                );
            }
            Ok(())
        }
    }
}

fn validate_patterns(
    s: &LoadSpec,
    fits: &dyn Fn(&str, f64, &str) -> Result<(), Invalid>,
) -> Result<(), Invalid> {
    let st = s.stream();
    let i = s.interval.0;
    let changes = !st.steps.is_empty() || st.ramp.is_some();
    if let Some(c) = st.catch_up {
        if c.0 > MAX_CATCH_UP.0 {
            return err(
                "stream.catch_up",
                format!("at most {MAX_CATCH_UP}: a longer stall is the host's, not a rate to keep"),
            );
        }
    }
    if let Some(o) = st.on_off {
        if st.burst.is_some() {
            return err("stream.on_off", "`on_off` or `burst`, not both");
        }
        if o.on.0 == 0 || o.off.0 == 0 {
            return err("stream.on_off", "`on` and `off` must be above 0");
        }
        let at = if st.pps.is_some() {
            "stream.pps"
        } else {
            "stream.rate"
        };
        fits("the rate while on", s.rate_pps(), at)?;
        match s.on_off_burst() {
            Some((n, _)) if n >= 1 => {}
            _ => {
                return err(
                    "stream.on_off.on",
                    format!("{} at the rate is less than one frame", o.on),
                )
            }
        }
    }
    if changes && (st.burst.is_some() || st.on_off.is_some()) {
        return err(
            "stream",
            "steps and ramps change a constant rate: no `burst` or `on_off` with them",
        );
    }
    if changes && s.search.is_some() {
        return err("search", "a search sets the rate itself: no steps or ramp");
    }
    if !st.steps.is_empty() && st.ramp.is_some() {
        return err("stream.ramp", "`steps` or `ramp`, not both");
    }
    let mut last = 0;
    for (k, x) in st.steps.iter().enumerate() {
        let at = format!("stream.steps[{k}]");
        if x.at.0 == 0 || x.at.0 % i != 0 || x.at.0 <= last || x.at.0 >= s.duration.0 {
            return err(
                format!("{at}.at"),
                format!(
                    "steps come in order, after 0 and before the duration ({}), at multiples of the interval ({})",
                    s.duration, s.interval
                ),
            );
        }
        last = x.at.0;
        if !x.pps.is_finite() || x.pps <= 0.0 {
            return err(format!("{at}.pps"), "must be above 0");
        }
        fits("a step", x.pps, &format!("{at}.pps"))?;
    }
    if let Some(r) = st.ramp {
        if r.every.0 == 0 || r.every.0 % i != 0 || r.every.0 >= s.duration.0 {
            return err(
                "stream.ramp.every",
                format!(
                    "a multiple of the interval ({}) below the duration ({})",
                    s.interval, s.duration
                ),
            );
        }
        if !r.to_pps.is_finite() || r.to_pps <= 0.0 {
            return err("stream.ramp.to_pps", "must be above 0");
        }
        fits("a ramp", r.to_pps, "stream.ramp.to_pps")?;
    }
    Ok(())
}

fn validate_edits(st: &Stream) -> Result<(), Invalid> {
    if st.edits.len() > MAX_EDITS {
        return err(
            "stream.edits",
            format!(
                "{} edits; the generator applies at most {MAX_EDITS}",
                st.edits.len()
            ),
        );
    }
    let mut table = 0usize;
    for (i, e) in st.edits.iter().enumerate() {
        let at = format!("stream.edits[{i}]");
        let modes = [
            e.step.is_some(),
            e.table.is_some(),
            e.random.is_some(),
            e.ranged.is_some(),
        ];
        if modes.iter().filter(|m| **m).count() != 1 {
            return err(
                at,
                "needs exactly one of `step`, `table`, `random`, `ranged`",
            );
        }
        let max = e.field.max();
        let field = serde_json::to_value(e.field).ok();
        let field = field
            .as_ref()
            .and_then(|v| v.as_str())
            .unwrap_or("the field");
        let in_field = |v: u32, at: String| -> Result<(), Invalid> {
            if u64::from(v) > max {
                return err(at, format!("{v} does not fit {field} (at most {max})"));
            }
            Ok(())
        };
        if let Some(s) = &e.step {
            if s.to < s.from {
                return err(format!("{at}.step.to"), "is below `from`");
            }
            if s.by == 0 || u64::from(s.by) > u64::from(s.to - s.from) + 1 {
                return err(
                    format!("{at}.step.by"),
                    format!("must be 1 to the range's length ({})", s.to - s.from + 1),
                );
            }
            in_field(s.to, format!("{at}.step.to"))?;
        }
        if let Some(t) = &e.table {
            if t.is_empty() {
                return err(format!("{at}.table"), "needs at least one value");
            }
            for (k, v) in t.iter().enumerate() {
                in_field(*v, format!("{at}.table[{k}]"))?;
            }
            table += t.len();
            if table > MAX_TABLE {
                return err(
                    format!("{at}.table"),
                    format!("the tables hold {MAX_TABLE} values in all, these {table}"),
                );
            }
        }
        if let Some(r) = &e.random {
            let bits = 8 * u32::from(e.field.place().1);
            if r.bits == 0 || u32::from(r.bits) > bits {
                return err(
                    format!("{at}.random.bits"),
                    format!("must be 1 to {bits} for {field}"),
                );
            }
        }
        if let Some(r) = &e.ranged {
            if r.to < r.from {
                return err(format!("{at}.ranged.to"), "is below `from`");
            }
            in_field(r.to, format!("{at}.ranged.to"))?;
        }
        if let Some(c) = e.carry {
            if c >= i {
                return err(
                    format!("{at}.carry"),
                    format!("names edit {c}, which is not before this one"),
                );
            }
            let src = &st.edits[c];
            if src.step.is_none() && src.table.is_none() {
                return err(
                    format!("{at}.carry"),
                    format!("edit {c} never wraps: only a `step` or `table` drives a cascade"),
                );
            }
            if e.step.is_none() && e.table.is_none() {
                return err(
                    format!("{at}.carry"),
                    "only a `step` or `table` can be cascaded",
                );
            }
        }
        for (j, other) in st.edits[..i].iter().enumerate() {
            if other.field == e.field {
                return err(
                    format!("{at}.field"),
                    format!("edit {j} already edits {field}"),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
dut: {kind: router}
duration: 2s
interval: 500ms
stream:
  size: 64
  pps: 100000
  edits:
    - {field: udp.sport, step: {from: 1000, to: 1999}}
    - {field: ipv4.src, table: [1, 2, 3], carry: 0}
expect:
  - {metric: lost, at_most: 0}
  - {metric: latency_p99, at_most: 1ms}
";

    fn bad(text: &str) -> SpecError {
        parse(text).unwrap_err()
    }

    #[test]
    fn a_good_test_parses_with_its_defaults() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.dut.kind, DutKind::Router);
        assert_eq!(s.ports.speed, BitsPerSec(10_000_000_000));
        assert_eq!((s.stream().sport, s.stream().dport), (40000, 7001));
        assert_eq!(s.pps(), 100000.0);
        assert_eq!(s.template_len(), 60);
        assert_eq!(s.expect[1].bounds(), (None, Some(1e6)));
        assert!(is_load_text(GOOD));
    }

    const TWO: &str = "\
dut: {kind: router}
streams:
  - size: 64
    pps: 1000
    dport: 9
  - size: 1518
    pps: 500
    dport: 5001
";

    #[test]
    fn an_arp_stream_is_checked_for_what_only_it_may_do() {
        let arp = "\
dut: {kind: router, arp_accept: true}
streams:
  - {arp: {from: 198.18.2.16, count: 64}, port: rx, size: 64, pps: 1000}
  - size: 64
    pps: 1000
    edits:
      - {field: ipv4.dst, step: {from: 198.18.2.16, to: 198.18.2.79}}
expect:
  - {metric: learned, at_least: 64}
";
        let s = parse(arp).unwrap();
        assert!(s.dut.arp_accept);
        let limited =
            parse(&arp.replace("arp_accept: true", "arp_accept: true, neighbour_limit: 32"))
                .unwrap();
        assert_eq!(limited.dut.neighbour_limit, Some(32));
        for (bad_dut, why) in [
            ("kind: bridge, neighbour_limit: 32", "a router's or a NAT's"),
            ("kind: router, neighbour_limit: 0", "from 1 to"),
            ("kind: router, neighbour_limit: 100000", "from 1 to"),
            (
                "kind: router, neighbour_limit: 32",
                "a stream of `arp:` replies",
            ),
        ] {
            let e = parse(&GOOD.replace("kind: router", bad_dut)).unwrap_err();
            assert_eq!(e.path, "dut.neighbour_limit", "{bad_dut}: {e}");
            assert!(e.message.contains(why), "{bad_dut}: {e}");
        }
        let st = &s.streams[0];
        assert_eq!(
            (st.port, st.arp.unwrap().last()),
            (SendPort::Rx, "198.18.2.79".parse().unwrap())
        );
        // An edit's bounds may be written as addresses.
        let step = s.streams[1].edits[0].step.unwrap();
        assert_eq!(
            step.from,
            u32::from(std::net::Ipv4Addr::new(198, 18, 2, 16))
        );
        let e = bad(&arp.replace("to: 198.18.2.79", "to: 198.18.2.x"));
        assert!(
            e.message.contains("neither a number nor an IPv4 address"),
            "{e}"
        );
        // Only a router keeps neighbours; only ARP goes from rx.
        let e = bad(&arp.replace("kind: router", "kind: bridge"));
        assert_eq!(e.path, "streams[0].arp");
        let e = bad(&arp.replace(
            "  - size: 64\n    pps: 1000\n",
            "  - size: 64\n    port: rx\n    pps: 1000\n",
        ));
        assert_eq!(e.path, "streams[1].port");
        // The addresses belong to the sending port's side, past the lab's.
        let e = bad(&arp.replace(
            "from: 198.18.2.16, count: 64",
            "from: 198.18.1.16, count: 64",
        ));
        assert_eq!(e.path, "streams[0].arp.from");
        let e = bad(&arp.replace("count: 64", "count: 250"));
        assert_eq!(e.path, "streams[0].arp.from");
        let e = bad(&arp.replace("count: 64", "count: 0"));
        assert_eq!(e.path, "streams[0].arp.count");
        // Not alone, not with an IP header's options, and `learned` needs it.
        let alone = "dut: {kind: router}\nstream: {arp: {from: 198.18.1.16, count: 4}, size: 64, pps: 10}\n";
        assert_eq!(bad(alone).path, "stream.arp");
        let e = bad(&arp.replace("port: rx, size: 64", "port: rx, size: 64, l4: tcp"));
        assert_eq!(e.path, "streams[0].arp");
        let e = bad(&TWO_WITH_LEARNED.to_string());
        assert_eq!(e.path, "expect[0].metric");
    }

    #[test]
    fn a_claim_on_one_stream_names_a_measured_one() {
        let with = |claim: &str| format!("{TWO}expect:\n  - {claim}\n");
        let s = parse(&with("{metric: lost, stream: 1, at_most: 0}")).unwrap();
        assert_eq!(s.expect[0].describe(), "lost of stream 1 at most 0");
        let e = bad(&with("{metric: lost, stream: 2, at_most: 0}"));
        assert_eq!((e.path.as_str(), e.line), ("expect[0].stream", Some(10)));
        assert!(e.message.contains("which has 2"), "{e}");
        let e = bad(&with("{metric: learned, stream: 0, at_least: 1}"));
        assert_eq!(e.path, "expect[0].stream");
        let one = format!("{GOOD}  - {{metric: lost, stream: 0, at_most: 0}}\n");
        let e = bad(&one);
        assert_eq!(e.path, "expect[2].stream");
    }

    const TWO_WITH_LEARNED: &str = "\
dut: {kind: router}
streams:
  - {size: 64, pps: 1000, dport: 9}
  - {size: 64, pps: 1000, dport: 10}
expect:
  - {metric: learned, at_least: 1}
";

    #[test]
    fn several_streams_are_checked_each_and_together() {
        let s = parse(TWO).unwrap();
        assert!(is_load_text(TWO));
        let v = s.stream_views();
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].pps(), v[1].pps()), (1000.0, 500.0));
        assert_eq!((v[0].template_len(), v[1].template_len()), (60, 1514));
        assert!(v.iter().all(|x| x.streams.is_empty() && x.stream.is_some()));
        // A stream's own error names its place in the list, and the line.
        let e = bad(&TWO.replace("pps: 500", "pps: 0"));
        assert_eq!((e.path.as_str(), e.line), ("streams[1].pps", Some(7)));
        let e = bad(&TWO.replace("size: 1518", "size: 9999"));
        assert_eq!(e.path, "streams[1].size");
        // The sink tells them apart by destination port.
        let e = bad(&TWO.replace("dport: 5001", "dport: 9"));
        assert_eq!((e.path.as_str(), e.line), ("streams[1].dport", Some(8)));
        assert!(e.message.contains("streams[0]'s too"), "{e}");
        // Together they must fit the port.
        let e = bad(&format!("ports: {{speed: 6500kbit}}\n{TWO}"));
        assert_eq!(e.path, "streams");
        assert!(e.message.contains("together"), "{e}");
        // Not with `stream:`, a search or `stateful:`.
        let both = format!("{TWO}stream: {{size: 64, pps: 10}}\n");
        assert_eq!(bad(&both).path, "streams");
        let search = format!("{TWO}search: {{throughput: {{}}}}\n");
        assert_eq!(bad(&search).path, "search");
        let many: String = (0..9)
            .map(|k| format!("  - {{size: 64, pps: 10, dport: {}}}\n", 100 + k))
            .collect();
        let e = bad(&format!("dut: {{kind: router}}\nstreams:\n{many}"));
        assert_eq!(e.path, "streams");
        assert!(e.message.contains("at most 8"), "{e}");
    }

    #[test]
    fn a_rate_in_bits_counts_the_frame_on_the_wire() {
        let s = parse(&GOOD.replace("pps: 100000", "rate: 84mbit")).unwrap();
        // 64 + 20 bytes on the wire: 672 bits a frame.
        assert!((s.pps() - 125_000.0).abs() < 1e-6, "{}", s.pps());
        // 10 Gbit/s carries 14,880,952 64-byte frames a second (RFC 2544's
        // maximum frame rate).
        assert_eq!(s.port_pps().floor(), 14_880_952.0);
    }

    #[test]
    fn a_rate_the_port_cannot_carry_names_the_field_and_line() {
        let e = bad(&GOOD.replace("pps: 100000", "pps: 20000000"));
        assert_eq!(e.path, "stream.pps");
        assert_eq!(e.line, Some(6));
        assert!(e.message.contains("above the port's 10gbit"), "{e}");
        let e = bad(&GOOD.replace(
            "pps: 100000",
            "pps: 100000\n  burst: {packets: 10, peak: 20gbit}",
        ));
        assert_eq!(e.path, "stream.burst.peak");
        assert_eq!(e.line, Some(7));
    }

    #[test]
    fn a_frame_above_the_mtu_is_refused() {
        let e = bad(&GOOD.replace("size: 64", "size: 1519"));
        assert_eq!((e.path.as_str(), e.line), ("stream.size", Some(5)));
        assert!(e.message.contains("above the MTU of 1500"), "{e}");
        assert!(parse(&GOOD.replace("size: 64", "size: 1518")).is_ok());
        let e = bad(&GOOD.replace("size: 64", "size: 63"));
        assert!(e.message.contains("minimum"), "{e}");
    }

    #[test]
    fn edits_are_checked_against_their_field_and_order() {
        let e = bad(&GOOD.replace("to: 1999", "to: 70000"));
        assert_eq!(e.path, "stream.edits[0].step.to");
        assert!(e.message.contains("udp.sport"), "{e}");
        let e = bad(&GOOD.replace("carry: 0", "carry: 1"));
        assert_eq!(
            (e.path.as_str(), e.line),
            ("stream.edits[1].carry", Some(9))
        );
        let e = bad(&GOOD.replace("table: [1, 2, 3]", "random: {bits: 8}"));
        assert_eq!(e.path, "stream.edits[1].carry");
        let e = bad(&GOOD.replace("ipv4.src, table", "udp.sport, table"));
        assert_eq!(e.path, "stream.edits[1].field");
        let e = bad(&GOOD.replace("{field: udp.sport, step", "{field: udp.dport, step"));
        assert!(e.message.contains("unknown variant"), "{e}");
        assert_eq!(e.line, Some(8));
    }

    /// §6.1: a retired version is read once the DUT has let go of its
    /// packets, so the grace outlasts the DUT's queue.
    #[test]
    fn the_grace_outlasts_the_dut_s_queue() {
        let with = |dut: &str| GOOD.replace("kind: router", dut);
        // No queue of its own: 10 ms.
        assert_eq!(parse(GOOD).unwrap().grace(), Nanos(10_000_000));
        // 300 KB at 100 Mbit/s hold a frame up to 24 ms: 34 ms.
        let q = with("kind: router, egress: {rate: 100mbit, buffer: 300000}");
        let s = parse(&q).unwrap();
        assert_eq!(s.egress_hold(), Nanos(24_000_000));
        assert_eq!(s.grace(), Nanos(34_000_000));
        // Given, it is kept, if longer than the queue holds.
        let s = parse(&q.replace("interval: 500ms", "interval: 500ms\ngrace: 30ms")).unwrap();
        assert_eq!(s.grace(), Nanos(30_000_000));
        let e = bad(&q.replace("interval: 500ms", "interval: 500ms\ngrace: 10ms"));
        assert_eq!(e.path, "grace");
        assert!(
            e.message.contains("10ms is not longer than the DUT's egress queue holds a packet (300000B at 100mbit: 24ms)"),
            "{e}"
        );
        // No queue of its own: any grace shorter than the interval.
        assert_eq!(
            parse(&GOOD.replace("interval: 500ms", "interval: 500ms\ngrace: 1ms"))
                .unwrap()
                .grace(),
            Nanos(1_000_000)
        );
        // A queue that outlasts the interval: the interval is too short.
        let e = bad(&with("kind: router, egress: {rate: 1mbit, buffer: 100000}"));
        assert_eq!(e.path, "interval");
        assert!(
            e.message.contains("must be shorter than the interval"),
            "{e}"
        );
    }

    #[test]
    fn timing_and_claims_are_checked() {
        let e = bad(&GOOD.replace("interval: 500ms", "interval: 5s"));
        assert_eq!(e.path, "interval");
        let e = bad(&GOOD.replace("at_most: 1ms", "at_most: 1"));
        assert_eq!(e.path, "expect[1].at_most");
        assert!(e.message.contains("needs a unit"), "{e}");
        let e = bad(&GOOD.replace("{metric: lost, at_most: 0}", "{metric: lost}"));
        assert_eq!(e.path, "expect[0]");
        let e = bad(&GOOD.replace("at_most: 0}", "at_least: 5, at_most: 1}"));
        assert_eq!(e.path, "expect[0].at_least");
        let e = bad(&GOOD.replace(
            "kind: router",
            "kind: bridge, egress: {rate: 1gbit, buffer: 1000}",
        ));
        assert_eq!(e.path, "dut.egress.buffer");
        let e = bad(&GOOD.replace("- {metric: lost", "- {metric: throughput_pps"));
        assert_eq!((e.path.as_str(), e.line), ("expect[0].metric", Some(11)));
        let s = parse(&GOOD.replace("expect:", "search: {throughput: {loss: 0.001}}\nexpect:"))
            .unwrap();
        let t = s.search.unwrap().throughput.unwrap();
        assert_eq!((t.loss, t.resolution, t.max_trials), (0.001, 0.01, 20));
        let e = bad(&GOOD.replace("expect:", "search: {throughput: {resolution: 0}}\nexpect:"));
        assert_eq!(e.path, "search.throughput.resolution");
        let e = bad(&GOOD.replace(
            "pps: 100000",
            "pps: 100000\n  steps: [{at: 750ms, pps: 1000}]",
        ));
        assert_eq!((e.path.as_str(), e.line), ("stream.steps[0].at", Some(7)));
        let e = bad(&GOOD.replace(
            "pps: 100000",
            "pps: 100000\n  ramp: {to_pps: 2e7, every: 500ms}",
        ));
        assert_eq!(e.path, "stream.ramp.to_pps");
        let r = parse(&GOOD.replace(
            "pps: 100000",
            "pps: 100000\n  ramp: {to_pps: 400000, every: 500ms}",
        ))
        .unwrap();
        // 2 s in steps of 500 ms: three steps after the start.
        let sched: Vec<_> = r
            .schedule()
            .iter()
            .map(|(t, p)| (t.0 / 1_000_000, *p as u64))
            .collect();
        assert_eq!(sched, vec![(500, 200000), (1000, 300000), (1500, 400000)]);
        let o = parse(&GOOD.replace(
            "pps: 100000",
            "pps: 100000\n  on_off: {on: 10ms, off: 30ms}",
        ))
        .unwrap();
        assert_eq!(o.on_off_burst(), Some((1000, 25000.0)));
        assert_eq!(o.pps(), 25000.0);
        let e = bad(&GOOD.replace("pps: 100000", "pps: 100000\n  on_off: {on: 1us, off: 30ms}"));
        assert_eq!(e.path, "stream.on_off.on");
        let e = bad(&GOOD.replace("kind: router", "kind: hub"));
        assert!(e.message.contains("unknown variant"), "{e}");
        let c = parse(&GOOD.replace("pps: 100000", "pps: 100000\n  catch_up: 50ms")).unwrap();
        assert_eq!(c.stream().catch_up, Some(Nanos(50_000_000)));
        let e = bad(&GOOD.replace("pps: 100000", "pps: 100000\n  catch_up: 2s"));
        assert_eq!(e.path, "stream.catch_up");
        assert!(e.message.contains("at most 1s"), "{e}");
    }

    #[test]
    fn a_size_mix_interleaves_its_sizes_by_weight() {
        let s = parse(&GOOD.replace("size: 64", "sizes: imix")).unwrap();
        let p = s.stream().pattern();
        assert_eq!(p.len(), 12);
        for (z, n) in [(60, 7), (590, 4), (1514, 1)] {
            assert_eq!(p.iter().filter(|&&x| x == z).count(), n, "{p:?}");
        }
        // Spread: never two 594s in a row, and the 64s at most two.
        assert!(p.windows(2).all(|w| !(w[0] == 590 && w[1] == 590)), "{p:?}");
        assert!(p.windows(3).all(|w| !w.iter().all(|&x| x == 60)), "{p:?}");
        assert!((s.stream().mean_size() - 4342.0 / 12.0).abs() < 1e-9);
        assert_eq!(s.template_len(), 1514);
        // A rate in bits counts the mean frame.
        let r = parse(
            &GOOD
                .replace("size: 64", "sizes: imix")
                .replace("pps: 100000", "rate: 1gbit"),
        )
        .unwrap();
        assert!((r.pps() - 1e9 / ((4342.0 / 12.0 + 20.0) * 8.0)).abs() < 1e-6);
        let l = parse(&GOOD.replace("size: 64", "sizes: [{size: 128, weight: 3}, {size: 1024}]"))
            .unwrap();
        assert_eq!(l.stream().pattern(), vec![124, 124, 1020, 124]);
        // Checked as sizes are.
        let e = bad(&GOOD.replace("size: 64", "size: 64\n  sizes: imix"));
        assert_eq!(e.path, "stream.sizes");
        let e = bad(&GOOD.replace("size: 64", "sizes: imx"));
        assert!(e.message.contains("`imx`"), "{e}");
        let e = bad(&GOOD.replace("size: 64", "sizes: [{size: 64}, {size: 9000}]"));
        assert_eq!((e.path.as_str(), e.line), ("stream.sizes[1].size", Some(5)));
        let e = bad(&GOOD.replace(
            "size: 64",
            "sizes: [{size: 64, weight: 60}, {size: 128, weight: 5}]",
        ));
        assert!(e.message.contains("at most 64"), "{e}");
    }

    #[test]
    fn a_back_to_back_search_is_checked() {
        let b = parse(&GOOD.replace(
            "expect:",
            "search: {back_to_back: {max_frames: 500}}\nexpect:",
        ))
        .unwrap();
        let x = b.search.unwrap().back_to_back.unwrap();
        assert_eq!((x.max_frames, x.resolution, x.repeat), (500, 1, 1));
        let e = bad(&GOOD.replace(
            "expect:",
            "search: {back_to_back: {}, throughput: {}}\nexpect:",
        ));
        assert_eq!(e.path, "search");
        let e = bad(&GOOD.replace("expect:", "search: {back_to_back: {repeat: 51}}\nexpect:"));
        assert_eq!(e.path, "search.back_to_back.repeat");
        let e = bad(&GOOD.replace("expect:", "search: {}\nexpect:"));
        assert!(e.message.contains("names no search"), "{e}");
        let e = bad(&GOOD.replace(
            "  - {metric: lost, at_most: 0}",
            "  - {metric: back_to_back, at_least: 10}",
        ));
        assert!(
            e.message.contains("needs a `search: {back_to_back}`"),
            "{e}"
        );
        let e = bad(&GOOD
            .replace(
                "pps: 100000",
                "pps: 100000\n  burst: {packets: 10, peak_pps: 200000}",
            )
            .replace("expect:", "search: {back_to_back: {}}\nexpect:"));
        assert_eq!(e.path, "stream");
    }

    #[test]
    fn a_header_stack_is_checked_against_its_dut_and_its_sizes() {
        let bridge = GOOD.replace("kind: router", "kind: bridge");
        let v = parse(
            &bridge
                .replace("size: 64", "size: 128\n  vlan: 7\n  ip: 6")
                .replace("    - {field: ipv4.src, table: [1, 2, 3], carry: 0}\n", ""),
        )
        .unwrap();
        assert_eq!(v.stream().offsets(), (18, 58));
        let e = bad(&bridge.replace("size: 64", "size: 128\n  ip: 6"));
        assert_eq!(
            (e.path.as_str(), e.line),
            ("stream.edits[1].field", Some(10))
        );
        let e = bad(&GOOD.replace("size: 64", "size: 128\n  ip: 6"));
        assert_eq!(e.path, "stream.ip");
        assert!(e.message.contains("a bridge or the switch"), "{e}");
        let e = bad(&GOOD.replace("size: 64", "size: 64\n  vlan: 5"));
        assert_eq!(e.path, "stream.vlan");
        let e = bad(&bridge.replace("size: 64", "size: 64\n  vlan: 4095"));
        assert!(e.message.contains("1 to 4094"), "{e}");
        let e = bad(&bridge
            .replace("size: 64", "sizes: imix\n  vlan: 5\n  ip: 6")
            .replace("    - {field: ipv4.src, table: [1, 2, 3], carry: 0}\n", ""));
        assert!(e.message.contains("at least 70 bytes"), "{e}");
    }

    #[test]
    fn tcp_vxlan_and_raw_stacks_are_checked_with_their_line() {
        let tcp = GOOD
            .replace(
                "size: 64",
                "size: 64\n  l4: tcp\n  tcp_flags: PA\n  raw: '47 45 54'",
            )
            .replace("udp.sport", "tcp.sport");
        let s = parse(&tcp).unwrap();
        assert_eq!(s.stream().headers(), 54);
        assert_eq!(s.stream().tcp_flag_bits(), 0x18);
        assert_eq!(s.stream().raw_bytes(), b"GET");
        // A port of the other transport, with its line.
        let e = bad(&tcp.replace("tcp.sport", "udp.sport"));
        assert_eq!(
            (e.path.as_str(), e.line),
            ("stream.edits[0].field", Some(11))
        );
        assert!(e.message.contains("tcp.sport"), "{e}");
        let e = bad(&tcp.replace("tcp_flags: PA", "tcp_flags: PAX"));
        assert_eq!(e.path, "stream.tcp_flags");
        assert!(e.message.contains("'X' is not a TCP flag"), "{e}");
        let e = bad(&GOOD.replace("size: 64", "size: 64\n  tcp_flags: S"));
        assert_eq!(e.path, "stream.tcp_flags");
        let e = bad(&tcp.replace("'47 45 54'", "'47 4g'"));
        assert_eq!((e.path.as_str(), e.line), ("stream.raw", Some(8)));
        assert!(e.message.contains("'g' at character 4"), "{e}");
        let e = bad(&tcp.replace("'47 45 54'", "'474'"));
        assert!(e.message.contains("3 hex digits"), "{e}");
        // 54 bytes of headers, 3 raw and the FCS: 61 fits 64, 62 raw does not.
        let e = bad(&tcp.replace("'47 45 54'", &format!("'{}'", "00".repeat(7))));
        assert_eq!(e.path, "stream.size");
        assert!(
            e.message.contains("headers and raw bytes: at least 65"),
            "{e}"
        );

        let vx = GOOD.replace("size: 64", "size: 128\n  vxlan: {vni: 5000}");
        assert_eq!(parse(&vx).unwrap().stream().headers(), 92);
        let e = bad(&vx.replace("vni: 5000", "vni: 16777216"));
        assert_eq!((e.path.as_str(), e.line), ("stream.vxlan.vni", Some(6)));
        // TCP inside: 12 more header bytes; the editor's port stays the
        // outer UDP one.
        let vt = vx.replace("size: 128", "size: 128\n  l4: tcp\n  tcp_flags: PA");
        let s = parse(&vt).unwrap();
        assert_eq!(s.stream().headers(), 104);
        assert_eq!(
            s.stream().stack_name().unwrap(),
            "Ethernet/IPv4/UDP/VXLAN 5000/Ethernet/IPv4/TCP PA"
        );
        let e = bad(&vt.replace("udp.sport", "tcp.sport"));
        assert_eq!(e.path, "stream.edits[0].field");
        assert!(e.message.contains("outer headers"), "{e}");
        // A mix whose frames all hold the headers; IMIX's 64-byte ones
        // cannot.
        parse(&vx.replace("size: 128", "sizes: [{size: 128}, {size: 1000}]")).unwrap();
        let e = bad(&vx.replace("size: 128", "sizes: imix"));
        assert_eq!(e.path, "stream.sizes");
        assert!(e.message.contains("cannot hold its headers"), "{e}");
        let e = bad(&vx.replace("size: 128", "size: 64"));
        assert!(e.message.contains("at least 96"), "{e}");
    }
}
