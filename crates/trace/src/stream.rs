//! Streaming capture reader: pcap and pcapng records, one at a time, in a
//! buffer that holds one block (1 MiB to start), whatever the file's size.
//!
//! rusticata's `pcap-parser` parses the records (pcap in both byte orders,
//! µs and ns, the Kuznetzov layout; every pcapng block type, both byte
//! orders, several sections). It parses slices and says when it needs more
//! bytes; this file only keeps the buffer full. pcap-parser's own
//! `PcapReaderIterator` is not used: it cannot read the Nokia and RedHat
//! pcap layouts (`probe_record_layout`), does not say at which file offset
//! it stopped, and refuses a block larger than its fixed buffer.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::meta::Meta;
use crate::{Damage, Link, NotTcp, Packet, Tcp};

/// A record longer than this is damage, not a packet (pcapng block
/// lengths and pcap captured lengths are read before the data: a flipped
/// bit would otherwise make the reader buffer the rest of the file).
/// libpcap's largest snap length is 256 KiB.
pub const MAX_RECORD: usize = 64 << 20;

/// Bytes read at a time (the buffer grows for a longer record). Small
/// enough that what the kernel copied is still in the core's cache when
/// it is parsed: 64 KiB analyzed a 1 M-packet trace in 0.195-0.208 s,
/// 256 KiB and 1 MiB in 0.200-0.228 s (three interleaved rounds of 20).
const START_BUFFER: usize = 1 << 16;

/// One packet as the reader holds it: valid until the next call to
/// [`Reader::next`].
#[derive(Debug, Clone, PartialEq)]
pub struct PacketRef<'a> {
    /// 1-based position in the file (Wireshark's frame number).
    pub frame: u64,
    /// Capture timestamp, ns since the epoch.
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
    pub interface: u32,
    pub link: Link,
    pub meta: Option<Meta>,
}

impl PacketRef<'_> {
    pub fn tcp(&self) -> Result<Tcp, NotTcp> {
        crate::parse(self.link, self.data)
    }

    pub fn to_owned(&self) -> Packet {
        Packet {
            frame: self.frame,
            ts_ns: self.ts_ns,
            orig_len: self.orig_len,
            data: self.data.to_vec(),
            interface: self.interface,
            link: self.link,
            meta: self.meta,
        }
    }
}

/// A pcapng interface as its packets need it.
#[derive(Clone, Copy)]
struct Interface {
    resol: u8,
    /// if_tsoffset (pcapng §4.2): seconds to add to every timestamp.
    offset_s: i64,
    link: Link,
    snaplen: u32,
    /// Index in [`Reader::interfaces`] (over every section).
    global: u32,
}

enum Format {
    Pcap {
        link: Link,
        be: bool,
        /// Vendor bytes after the 16-byte record header.
        extra: usize,
        /// ns per unit of the sub-second field.
        sub_second: u64,
    },
    PcapNg {
        be: bool,
        /// This section's interfaces, by interface id.
        ifs: Vec<Interface>,
    },
}

/// What one record turned out to be.
enum Step {
    Packet(Frame, Option<Meta>),
    /// A block that is not a packet (or one that declares an interface).
    Skip(usize),
    /// More bytes are needed.
    Incomplete,
    /// The bytes here are not a record.
    Bad(String),
}

/// Counts the bytes read from the file itself (before decompression), for
/// progress against the file's size.
struct Counting<R> {
    inner: R,
    n: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads packets one at a time from a pcap or pcapng stream, gzip- or
/// zstd-compressed or not. Damage after the first packet ends the stream
/// and is kept in [`Reader::damage`]; damage before it is an error.
pub struct Reader<'s> {
    src: Box<dyn Read + Send + 's>,
    /// "gzip" or "zstd" when the stream is compressed.
    compressed: Option<&'static str>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Offset in the (decompressed) stream of `buf[0]`.
    base: u64,
    fmt: Format,
    frames: u64,
    damage: Option<Damage>,
    interfaces: Vec<String>,
    file_bytes: Arc<AtomicU64>,
}

/// Why a stream could not be read at all: what, and the byte offset when
/// the problem is at one.
pub type Fail = (String, Option<u64>);

impl<'s> Reader<'s> {
    /// Starts reading `src`: detects compression by its magic number, reads
    /// the file header.
    pub fn new(src: impl Read + Send + 's) -> Result<Self, Fail> {
        let file_bytes = Arc::new(AtomicU64::new(0));
        let mut counted = Counting {
            inner: src,
            n: file_bytes.clone(),
        };
        let mut magic = Vec::with_capacity(4);
        (&mut counted)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(|e| (format!("cannot read: {e}"), None))?;
        let whole = std::io::Cursor::new(magic.clone()).chain(counted);
        let (compressed, src): (_, Box<dyn Read + Send + 's>) = if magic.starts_with(&[0x1f, 0x8b])
        {
            (
                Some("gzip"),
                Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(
                    whole,
                ))),
            )
        } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            let d = zstd::stream::read::Decoder::new(whole)
                .map_err(|e| (format!("zstd: {e}"), None))?;
            (Some("zstd"), Box::new(d))
        } else {
            (None, Box::new(whole))
        };
        let mut r = Reader {
            src,
            compressed,
            buf: vec![0; START_BUFFER],
            start: 0,
            end: 0,
            eof: false,
            base: 0,
            // Replaced by the header below.
            fmt: Format::PcapNg {
                be: false,
                ifs: Vec::new(),
            },
            frames: 0,
            damage: None,
            interfaces: Vec::new(),
            file_bytes,
        };
        r.header().map_err(|(e, at)| match r.compressed {
            Some(kind) => (format!("{kind}: {e}"), at),
            None => (e, at),
        })?;
        Ok(r)
    }

    /// Reads the file header (pcap) or checks the first block is a
    /// section header (pcapng).
    fn header(&mut self) -> Result<(), Fail> {
        use pcap_parser::pcap::parse_pcap_header;
        let stream_err = |e: std::io::Error| {
            (
                format!("the stream ends early or is damaged before the first packet: {e}"),
                None,
            )
        };
        while self.end < 24 && !self.eof {
            self.more().map_err(stream_err)?;
        }
        let bytes = &self.buf[..self.end];
        if bytes.len() < 4 {
            return Err(("shorter than a file header".into(), None));
        }
        if bytes[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            // The section header is read as the first block.
            return Ok(());
        }
        let (rest, hdr) = parse_pcap_header(bytes).map_err(|_| {
            let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            if bytes.len() < 24
                && matches!(
                    magic,
                    0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1 | 0xa1b2cd34 | 0x34cdb2a1
                )
            {
                ("shorter than a file header".to_string(), None)
            } else {
                (
                    format!("not a pcap or pcapng file (magic number {magic:#010x})"),
                    None,
                )
            }
        })?;
        let Some(link) = u32::try_from(hdr.network.0).ok().and_then(Link::of) else {
            return Err((
                format!(
                    "link type {}; wirelab reads Ethernet, raw IP, Linux cooked (SLL, SLL2) and loopback captures",
                    hdr.network.0
                ),
                Some(20),
            ));
        };
        self.start = bytes.len() - rest.len();
        // The layout is told by the first records: read up to 3 of them
        // (or as much as there is) before deciding.
        while self.end - self.start < 3 * (16 + 12 + 65536) && !self.eof {
            if self.end == self.buf.len() {
                break;
            }
            self.more().map_err(stream_err)?;
        }
        let extra = crate::probe_record_layout(
            &self.buf[self.start..self.end],
            hdr.is_bigendian(),
            hdr.is_modified_format(),
        );
        self.fmt = Format::Pcap {
            link,
            be: hdr.is_bigendian(),
            extra,
            sub_second: if hdr.is_nanosecond_precision() {
                1
            } else {
                1000
            },
        };
        self.interfaces.push("if0".into());
        Ok(())
    }

    /// Reads more of the stream into the buffer: moves what is left to the
    /// front, grows the buffer when one record fills it. Ok(false) at the
    /// end of the stream.
    fn more(&mut self) -> std::io::Result<bool> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(MAX_RECORD + 64);
            self.buf.resize(grown, 0);
        }
        loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.eof = true;
                    return Err(e);
                }
            }
        }
    }

    /// The next packet, or None at the end of the stream or at damage
    /// (then [`Reader::damage`] says where).
    // Inlined into the caller's loop: returned through memory, the packet
    // was written field by field and read back as 16-byte words, which
    // the CPU cannot forward; two thirds of the analysis loop's own
    // samples stalled on that read (perf annotate), and inlining it
    // removed 3% of `wirelab analyze`'s time (25 interleaved runs).
    #[allow(clippy::should_implement_trait)] // a lending iterator
    #[inline(always)]
    pub fn next(&mut self) -> Option<PacketRef<'_>> {
        loop {
            if self.damage.is_some() {
                return None;
            }
            let avail = &self.buf[self.start..self.end];
            // Almost every block of a pcapng file: taken here without
            // going through `Step`. Built in one place and matched in
            // another, the enum lived on the stack, and copying it into
            // the packet read wider words than had been written, which
            // the CPU cannot forward (over a third of this function's
            // samples stalled on that read, perf).
            if let Format::PcapNg { be, ifs } = &self.fmt {
                if let Some(e) = next_plain_epb(avail, *be, ifs) {
                    let at = self.start;
                    self.start += e.len;
                    self.frames += 1;
                    return Some(PacketRef {
                        frame: self.frames,
                        ts_ns: e.ts_ns,
                        orig_len: e.orig_len,
                        data: &self.buf[at + e.data.0..at + e.data.1],
                        interface: e.interface,
                        link: e.link,
                        meta: None,
                    });
                }
            }
            let step = match &mut self.fmt {
                Format::Pcap {
                    link,
                    be,
                    extra,
                    sub_second,
                } => pcap_step(avail, *link, *be, *extra, *sub_second),
                Format::PcapNg { be, ifs } => ng_step(avail, be, ifs, &mut self.interfaces),
            };
            match step {
                Step::Packet(
                    Frame {
                        len,
                        data: (from, to),
                        ts_ns,
                        orig_len,
                        interface,
                        link,
                    },
                    meta,
                ) => {
                    let at = self.start;
                    self.start += len;
                    self.frames += 1;
                    return Some(PacketRef {
                        frame: self.frames,
                        ts_ns,
                        orig_len,
                        data: &self.buf[at + from..at + to],
                        interface,
                        link,
                        meta,
                    });
                }
                Step::Skip(len) => self.start += len,
                Step::Incomplete => {
                    let left = self.end - self.start;
                    if self.eof {
                        if left > 0 {
                            self.stop(format!(
                                "record {}: the file ends inside it ({left} bytes left)",
                                self.frames + 1
                            ));
                        }
                        return None;
                    }
                    if let Err(e) = self.more() {
                        // A decoder error adds no bytes: the record being
                        // read is the last, and the stream is the cause.
                        let kind = self.compressed.unwrap_or("file");
                        self.stop(format!("the {kind} stream ends early or is damaged: {e}"));
                        return None;
                    }
                }
                Step::Bad(why) => {
                    let why = format!("record {}: {why}", self.frames + 1);
                    self.stop(why);
                    return None;
                }
            }
        }
    }

    fn stop(&mut self, detail: String) {
        let detail = match self.compressed {
            Some(kind) if !detail.contains(kind) => format!("{kind}: {detail}"),
            _ => detail,
        };
        self.damage = Some(Damage {
            offset: self.base + self.start as u64,
            detail,
        });
    }

    /// Where the stream stopped early, if it did.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Packets read so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Interface names, by interface index (over every pcapng section).
    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    /// Bytes read from the underlying file so far (compressed bytes when
    /// it is compressed), for progress against its size.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes.load(Ordering::Relaxed)
    }

    /// The buffer's size: one block at most, whatever the file's size.
    pub fn buffer_len(&self) -> usize {
        self.buf.len()
    }

    /// "gzip" or "zstd" when the stream is compressed.
    pub fn compressed(&self) -> Option<&'static str> {
        self.compressed
    }
}

fn u32_at(b: &[u8], at: usize, be: bool) -> u32 {
    let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if be {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

/// One classic pcap record. The record header is four integers after
/// which come `extra` vendor bytes (`probe_record_layout`); read here in
/// one place for every layout rather than through pcap-parser's three
/// frame functions, which cover two of the five layouts.
fn pcap_step(b: &[u8], link: Link, be: bool, extra: usize, sub_second: u64) -> Step {
    let hdr = 16 + extra;
    if b.len() < hdr {
        return Step::Incomplete;
    }
    let caplen = u32_at(b, 8, be) as usize;
    if caplen > MAX_RECORD {
        return Step::Bad(format!(
            "captured length {caplen} is beyond any capture's (at most {MAX_RECORD})"
        ));
    }
    if b.len() < hdr + caplen {
        return Step::Incomplete;
    }
    let (sec, sub) = (u64::from(u32_at(b, 0, be)), u64::from(u32_at(b, 4, be)));
    Step::Packet(
        Frame {
            len: hdr + caplen,
            data: (hdr, hdr + caplen),
            ts_ns: sec * 1_000_000_000 + sub * sub_second,
            orig_len: u32_at(b, 12, be),
            interface: 0,
            link,
        },
        None,
    )
}

/// One pcapng block (pcapng draft, §3-4). The block's length is checked
/// before pcap-parser reads it, so a damaged length is reported here
/// rather than read as a request for gigabytes.
fn ng_step(b: &[u8], be: &mut bool, ifs: &mut Vec<Interface>, names: &mut Vec<String>) -> Step {
    use pcap_parser::pcapng::{parse_block_be, parse_block_le, Block};
    if b.len() < 12 {
        return Step::Incomplete;
    }
    let shb = b[..4] == [0x0a, 0x0d, 0x0d, 0x0a];
    // A section header carries its own byte order (its byte-order magic).
    let block_be = if shb {
        b[8..12] == [0x1a, 0x2b, 0x3c, 0x4d]
    } else {
        *be
    };
    if shb && !block_be && b[8..12] != [0x4d, 0x3c, 0x2b, 0x1a] {
        return Step::Bad("section header with an unknown byte-order magic".into());
    }
    let len = u32_at(b, 4, block_be) as usize;
    if len < 12 || len % 4 != 0 {
        return Step::Bad(format!("block length {len} (at least 12, a multiple of 4)"));
    }
    if len > MAX_RECORD {
        return Step::Bad(format!(
            "block length {len} is beyond any capture's (at most {MAX_RECORD})"
        ));
    }
    if b.len() < len {
        return Step::Incomplete;
    }
    // A plain Enhanced Packet Block never gets here: `Reader::next` took
    // it (`next_plain_epb`).
    let parse = if block_be {
        parse_block_be
    } else {
        parse_block_le
    };
    let block = match parse(&b[..len]) {
        Ok((_, block)) => block,
        Err(pcap_parser::nom::Err::Incomplete(_)) => {
            return Step::Bad("the block's contents run past its length".into())
        }
        Err(e) => return Step::Bad(format!("not a pcapng block: {e}")),
    };
    match block {
        Block::SectionHeader(_) => {
            // A new section: interface ids start again (§4.1).
            *be = block_be;
            ifs.clear();
            Step::Skip(len)
        }
        Block::InterfaceDescription(idb) => {
            let name = idb
                .if_name()
                .and_then(Result::ok)
                .map_or_else(|| format!("if{}", names.len()), str::to_string);
            let linktype = idb.linktype.0 as u32;
            // pcap-parser 0.17 reads if_tsoffset little-endian whatever
            // the section's byte order; read it here in the section's.
            let offset_s = idb
                .options
                .iter()
                .find(|o| o.code == pcap_parser::pcapng::OptionCode::IfTsoffset)
                .and_then(|o| <[u8; 8]>::try_from(o.value().get(..8)?).ok())
                .map_or(0, |w| {
                    if block_be {
                        i64::from_be_bytes(w)
                    } else {
                        i64::from_le_bytes(w)
                    }
                });
            ifs.push(Interface {
                resol: idb.if_tsresol,
                offset_s,
                link: Link::of(linktype).unwrap_or(Link::Unread(linktype)),
                snaplen: idb.snaplen,
                global: names.len() as u32,
            });
            names.push(name);
            Step::Skip(len)
        }
        Block::EnhancedPacket(epb) => {
            let Some(i) = ifs.get(epb.if_id as usize) else {
                return Step::Bad(format!("packet on undeclared interface {}", epb.if_id));
            };
            let raw = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
            let meta = epb
                .options
                .iter()
                .filter(|o| o.code == pcap_parser::pcapng::OptionCode::Comment)
                .find_map(|o| o.as_str().ok().and_then(Meta::decode));
            let from = epb.data.as_ptr() as usize - b.as_ptr() as usize;
            let caplen = (epb.caplen as usize).min(epb.data.len());
            Step::Packet(
                Frame {
                    len,
                    data: (from, from + caplen),
                    ts_ns: ts_ns(raw, i),
                    orig_len: epb.origlen,
                    interface: i.global,
                    link: i.link,
                },
                meta,
            )
        }
        Block::SimplePacket(spb) => {
            // No timestamp, interface 0 (§4.4); captured up to its snap length.
            let Some(i) = ifs.first() else {
                return Step::Bad("simple packet before any interface".into());
            };
            let from = spb.data.as_ptr() as usize - b.as_ptr() as usize;
            let mut caplen = (spb.origlen as usize).min(spb.data.len());
            if i.snaplen > 0 {
                caplen = caplen.min(i.snaplen as usize);
            }
            Step::Packet(
                Frame {
                    len,
                    data: (from, from + caplen),
                    ts_ns: 0,
                    orig_len: spb.origlen,
                    interface: i.global,
                    link: i.link,
                },
                None,
            )
        }
        _ => Step::Skip(len),
    }
}

/// Where a packet record's data lies in it, and the packet's fields.
struct Frame {
    len: usize,
    data: (usize, usize),
    ts_ns: u64,
    orig_len: u32,
    interface: u32,
    link: Link,
}

/// An Enhanced Packet Block without options (pcapng §4.3), the form of
/// almost every packet, read from its fixed fields; None for anything
/// else, which `pcap_parser` reads. Its parser builds a `Vec` of options
/// for every block, and with its framework that was a sixth of
/// `wirelab analyze`'s time (perf); the layout read here is seven 32-bit
/// words, the padded data and the trailing length.
#[inline(always)]
fn epb_fields(b: &[u8], be: bool, ifs: &[Interface]) -> Option<Frame> {
    const EPB: u32 = 6;
    let len = b.len();
    if len < 32 || u32_at(b, 0, be) != EPB || u32_at(b, len - 4, be) as usize != len {
        return None;
    }
    let caplen = u32_at(b, 20, be) as usize;
    // Options follow the data padded to 32 bits; with none, the trailing
    // length comes right after it.
    if 28 + caplen.div_ceil(4) * 4 + 4 != len {
        return None;
    }
    let i = ifs.get(u32_at(b, 8, be) as usize)?;
    let raw = (u64::from(u32_at(b, 12, be)) << 32) | u64::from(u32_at(b, 16, be));
    Some(Frame {
        len,
        data: (28, 28 + caplen),
        ts_ns: ts_ns(raw, i),
        orig_len: u32_at(b, 24, be),
        interface: i.global,
        link: i.link,
    })
}

/// The next block, if it is a complete plain Enhanced Packet Block of
/// this section (the checks `ng_step` makes first, then `epb_fields`);
/// anything else is left to `ng_step`.
#[inline(always)]
fn next_plain_epb(b: &[u8], be: bool, ifs: &[Interface]) -> Option<Frame> {
    if b.len() < 12 {
        return None;
    }
    let len = u32_at(b, 4, be) as usize;
    if len < 32 || len % 4 != 0 || len > MAX_RECORD || b.len() < len {
        return None;
    }
    epb_fields(&b[..len], be, ifs)
}

/// An EPB's timestamp in ns: if_tsresol units (§4.2: MSB clear 10^-n s,
/// set 2^-n s) plus if_tsoffset seconds.
fn ts_ns(raw: u64, i: &Interface) -> u64 {
    let ns = crate::tsresol_to_ns(raw, i.resol);
    let off = i.offset_s.saturating_mul(1_000_000_000);
    if off >= 0 {
        ns.saturating_add(off as u64)
    } else {
        ns.saturating_sub(off.unsigned_abs())
    }
}
