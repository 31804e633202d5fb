//! The streaming reader: pcapng in the forms tools write (several
//! interfaces and link types, sections in both byte orders, timestamp
//! resolutions and offsets, comments, simple packets), damage named at its
//! offset, and a buffer that does not grow with the file.

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use wirelab_trace::{read, read_bytes, Link, Reader};

mod common;
use common::{capinfos, golden, tool};

fn frame(payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40000, 5001, 1, 65535)
        .write(&mut f, &vec![0u8; payload])
        .unwrap();
    f
}

/// A pcapng writer whose section header has this byte order.
fn writer(be: bool) -> PcapNgWriter<Vec<u8>> {
    let shb = SectionHeaderBlock {
        endianness: if be {
            Endianness::Big
        } else {
            Endianness::Little
        },
        major_version: 1,
        minor_version: 0,
        section_length: -1,
        options: vec![],
    };
    PcapNgWriter::with_section_header(Vec::new(), shb).unwrap()
}

/// A pcapng section: one interface, with this byte order, resolution and
/// offset, holding `frames` as EPBs (the first with a comment) and one SPB.
fn section(be: bool, resol: u8, offset_s: u64, raw_ts: &[u64], name: &str) -> Vec<u8> {
    let mut w = writer(be);
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
            InterfaceDescriptionOption::IfTsResol(resol),
            InterfaceDescriptionOption::IfTsOffset(offset_s),
        ],
    })
    .unwrap();
    for (n, &ts) in raw_ts.iter().enumerate() {
        let data = frame(10 + n);
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            // pcap-file writes the Duration's nanoseconds as the raw count.
            timestamp: Duration::from_nanos(ts),
            original_len: data.len() as u32,
            data: Cow::Owned(data),
            options: if n == 0 {
                vec![EnhancedPacketOption::Comment(Cow::Borrowed(
                    "not wirelab's",
                ))]
            } else {
                vec![]
            },
        })
        .unwrap();
    }
    let data = frame(3);
    w.write_pcapng_block(SimplePacketBlock {
        original_len: data.len() as u32,
        data: Cow::Owned(data),
    })
    .unwrap();
    w.into_inner()
}

/// Two sections, little- then big-endian, µs then ns with an offset:
/// every packet is read, its interface numbered over the file, its time
/// in ns since the epoch (as tshark's frame.time_epoch gives it:
/// pcap-parser 0.17 reads a big-endian if_tsoffset as little-endian).
#[test]
fn sections_in_both_byte_orders_with_their_own_resolutions_and_offsets() {
    let mut bytes = section(
        false,
        6,
        0,
        &[1_700_000_000_000_001, 1_700_000_000_000_002],
        "a",
    );
    bytes.extend(section(true, 9, 100, &[5, 7], "b"));
    let t = read_bytes(&bytes).unwrap();
    assert!(t.truncated.is_none(), "{:?}", t.truncated);
    assert_eq!(t.interfaces, ["a", "b"]);
    let got: Vec<(u64, u32, u64, bool)> = t
        .packets
        .iter()
        .map(|p| (p.frame, p.interface, p.ts_ns, p.tcp().is_ok()))
        .collect();
    assert_eq!(
        got,
        [
            (1, 0, 1_700_000_000_000_001_000, true),
            (2, 0, 1_700_000_000_000_002_000, true),
            (3, 0, 0, true), // the SPB: no timestamp
            (4, 1, 100_000_000_005, true),
            (5, 1, 100_000_000_007, true),
            (6, 1, 0, true),
        ]
    );
    // A comment that is not wirelab's metadata is not read as it.
    assert!(t.packets.iter().all(|p| p.meta.is_none()));
    assert_eq!(t.packets[3].data, frame(10));
}

/// A packet block without options is read from its fixed fields, one
/// with options by pcap-parser: the same packets either way, in both byte
/// orders and at every padding of the data. (A block whose options carry
/// wirelab's metadata must go the second way: every golden trace's
/// metadata depends on it.)
#[test]
fn a_packet_block_reads_the_same_with_and_without_options() {
    for be in [false, true] {
        let mut w = writer(be);
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
        for payload in 10..18 {
            let data = frame(payload);
            for options in [
                vec![],
                vec![EnhancedPacketOption::Comment(Cow::Borrowed("x"))],
            ] {
                w.write_pcapng_block(EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: Duration::from_micros(1_000 + payload as u64),
                    // Snapped: the original was longer than what was kept.
                    original_len: data.len() as u32 + 7,
                    data: Cow::Borrowed(&data),
                    options,
                })
                .unwrap();
            }
        }
        let t = read_bytes(&w.into_inner()).unwrap();
        assert!(t.truncated.is_none(), "{:?}", t.truncated);
        assert_eq!(t.packets.len(), 16);
        for pair in t.packets.chunks(2) {
            let view = |p: &wirelab_trace::Packet| {
                (p.ts_ns, p.orig_len, p.data.clone(), p.interface, p.link)
            };
            assert_eq!(view(&pair[0]), view(&pair[1]), "big-endian: {be}");
            assert_eq!(pair[0].orig_len as usize, pair[0].data.len() + 7);
        }
        assert_eq!(t.packets[0].data, frame(10));
        // pcap-file writes the Duration's ns as the raw count, in µs.
        assert_eq!(t.packets[0].ts_ns, 1_010_000_000);
    }
}

/// mergecap's pcapng of an Ethernet and a raw-IP capture: two interfaces
/// of two link types. Every packet is read (as capinfos counts them), and
/// the same packet gives the same TCP view behind either link.
#[test]
fn a_merged_pcapng_of_two_link_types_reads_whole() {
    let dir = tempfile::tempdir().unwrap();
    let g = read(&golden()).unwrap();
    // The same packets as raw IP (LINKTYPE_RAW), one second later.
    let raw = dir.path().join("raw.pcap");
    {
        use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
        let hdr = PcapHeader {
            datalink: DataLink::RAW,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(std::fs::File::create(&raw).unwrap(), hdr).unwrap();
        for p in &g.packets {
            let ts = Duration::from_nanos(p.ts_ns + 1_000_000_000);
            w.write_packet(&PcapPacket::new(ts, p.orig_len - 14, &p.data[14..]))
                .unwrap();
        }
    }
    let merged = dir.path().join("merged.pcapng");
    tool(
        "mergecap",
        &[
            "-F",
            "pcapng",
            "-w",
            merged.to_str().unwrap(),
            golden().to_str().unwrap(),
            raw.to_str().unwrap(),
        ],
    );
    let t = read(&merged).unwrap();
    assert!(t.truncated.is_none());
    assert_eq!(t.packets.len(), capinfos(&merged));
    assert_eq!(t.packets.len(), 2 * g.packets.len());
    let links: std::collections::BTreeSet<String> =
        t.packets.iter().map(|p| format!("{:?}", p.link)).collect();
    assert_eq!(links.len(), 2, "{links:?}");
    for (a, b) in t.packets[..g.packets.len()]
        .iter()
        .zip(&t.packets[g.packets.len()..])
    {
        assert_eq!(a.link, Link::Ethernet);
        assert_eq!(b.link, Link::RawIp);
        assert_eq!(
            a.tcp().ok(),
            b.tcp().ok().map(|mut v| {
                v.tcp_offset += 14;
                v
            })
        );
    }
}

/// An interface of a link type wirelab does not read (802.11 here) beside
/// an Ethernet one: its packets are counted, not parsed, and the Ethernet
/// packets are all read.
#[test]
fn an_unread_link_type_beside_ethernet_does_not_stop_the_file() {
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    for link in [DataLink::IEEE802_11, DataLink::ETHERNET] {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: link,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
    }
    for id in [0, 1, 0, 1] {
        let data = frame(20);
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: id,
            timestamp: Duration::from_micros(1),
            original_len: data.len() as u32,
            data: Cow::Owned(data),
            options: vec![],
        })
        .unwrap();
    }
    let t = read_bytes(&w.into_inner()).unwrap();
    assert_eq!(t.packets.len(), 4);
    let tcp: Vec<bool> = t.packets.iter().map(|p| p.tcp().is_ok()).collect();
    assert_eq!(tcp, [false, true, false, true]);
    assert_eq!(t.packets[0].link, Link::Unread(105));
}

/// A block whose length field is damaged (a bit flipped high) is named
/// at its offset; the reader does not try to buffer gigabytes for it.
#[test]
fn a_damaged_block_length_is_named_at_its_offset() {
    let mut bytes = section(false, 6, 0, &[1, 2, 3], "a");
    let g = read_bytes(&bytes).unwrap();
    // The third block is the second EPB: SHB, IDB, EPB, EPB.
    let mut at = 0usize;
    for _ in 0..3 {
        at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    bytes[at + 7] = 0x40; // 1 GiB and more
    let t = read_bytes(&bytes).unwrap();
    assert_eq!(t.packets.len(), 1);
    assert_eq!(t.packets[0], g.packets[0]);
    let d = t.truncated.expect("the damage is reported");
    assert_eq!(d.offset, at as u64);
    assert!(d.detail.contains("block length"), "{}", d.detail);
}

/// A stream of packets that is never held whole: pcap records generated
/// on the fly, 200k of them (about 30 MB). The reader reads them all with
/// the buffer it started with.
#[test]
fn the_buffer_does_not_grow_with_the_file() {
    struct Gen {
        header: Vec<u8>,
        record: Vec<u8>,
        left: u32,
        pos: usize,
    }
    impl Read for Gen {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if !self.header.is_empty() {
                let n = self.header.len().min(buf.len());
                buf[..n].copy_from_slice(&self.header[..n]);
                self.header.drain(..n);
                return Ok(n);
            }
            if self.left == 0 {
                return Ok(0);
            }
            let n = (self.record.len() - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.record[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.record.len() {
                self.pos = 0;
                self.left -= 1;
            }
            Ok(n)
        }
    }
    let f = frame(100);
    // pcap file header: magic, version 2.4, zone, sigfigs, snaplen, Ethernet.
    let mut header = 0xa1b2c3d4u32.to_le_bytes().to_vec();
    header.extend(2u16.to_le_bytes());
    header.extend(4u16.to_le_bytes());
    for w in [0u32, 0, 65535, 1] {
        header.extend(w.to_le_bytes());
    }
    let mut record = Vec::new();
    for w in [1u32, 0, f.len() as u32, f.len() as u32] {
        record.extend(w.to_le_bytes());
    }
    record.extend(&f);
    let n = 200_000;
    let mut r = Reader::new(Gen {
        header,
        record,
        left: n,
        pos: 0,
    })
    .unwrap();
    let start = r.buffer_len();
    let mut count = 0u64;
    while let Some(p) = r.next() {
        assert_eq!(p.data.len(), f.len());
        count += 1;
    }
    assert!(r.damage().is_none(), "{:?}", r.damage());
    assert_eq!(count, u64::from(n));
    assert_eq!(r.buffer_len(), start);
    assert!(r.file_bytes() > 30_000_000);
}

/// The damaged forms in the fuzz corpus (`fuzz/corpus/read_trace/damaged-*`:
/// a flipped block length, a packet on an undeclared interface, a gzip
/// stream cut short, a record longer than any capture, a big-endian
/// section cut inside a block) are each an error or a named stop, never a
/// clean read.
#[test]
fn every_damaged_form_in_the_corpus_is_named() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/read_trace");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("damaged-") {
            continue;
        }
        seen += 1;
        match read_bytes(&std::fs::read(&path).unwrap()) {
            Err((why, _)) => assert!(!why.is_empty(), "{name}"),
            Ok(t) => {
                let d = t
                    .truncated
                    .unwrap_or_else(|| panic!("{name} read as clean"));
                assert!(
                    !t.packets.is_empty() && !d.detail.is_empty(),
                    "{name}: {d:?}"
                );
            }
        }
    }
    assert_eq!(seen, 5);
}

/// A gzip stream that stops after the file header but before the first
/// packet: the file cannot be read at all, and the error says the stream
/// is the cause, with no offset (it would be one in the decompressed
/// bytes, which a user cannot find).
#[test]
fn a_compressed_stream_cut_before_the_first_packet_is_an_error_without_offset() {
    use std::io::Write;
    let plain = std::fs::read(golden()).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    gz.write_all(&plain[..200]).unwrap();
    let gz = gz.finish().unwrap();
    // Stored blocks: the first 150 bytes hold the header and part of a block.
    let (why, at) = read_bytes(&gz[..150]).unwrap_err();
    assert_eq!(at, None, "{why}");
    assert!(
        why.starts_with("gzip: the stream ends early or is damaged before the first packet: "),
        "{why}"
    );
}
