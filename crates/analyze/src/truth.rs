//! Ground truth for virtual queues (NetBump §6.2.2): samples of a real
//! bottleneck queue's occupancy next to the virtual queue's estimate at the
//! same instant, and the per-queue facts the `vaqm` analyzer judges with.
//! A run writes the samples as `queue-truth.csv` in its results folder, so
//! `wirelab analyze` on the folder and any plotting tool can read them.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One sample, taken right after the real queue enqueued or dequeued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthPoint {
    /// ns since the epoch, the trace's clock.
    pub ts_ns: u64,
    pub vq: u32,
    /// `enqueue` or `dequeue`.
    pub event: TruthEvent,
    /// Bytes in the real queue.
    pub actual_bytes: u64,
    /// Packets in the real queue.
    pub actual_packets: u32,
    /// The virtual queue's estimate, bytes.
    pub virtual_bytes: u64,
    /// The packet the real queue took in or sent, bytes (the first one of
    /// a bulk dequeue).
    pub packet_bytes: u32,
    /// Packets the event moved: 1, or more when the qdisc handed the
    /// device several at once.
    pub packets: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TruthEvent {
    Enqueue,
    Dequeue,
}

impl TruthPoint {
    /// |virtual - actual|, bytes.
    pub fn error(&self) -> u64 {
        self.virtual_bytes.abs_diff(self.actual_bytes)
    }
}

/// What the analyzer needs to know about one virtual queue of a run.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct VqFacts {
    pub id: u32,
    /// The host whose switch port the queue emulates, if any.
    pub port: Option<String>,
    pub rate_bps: u64,
    pub dctcp: Option<wirelab_spec::vaqm::Dctcp>,
    pub red: Option<wirelab_spec::vaqm::Red>,
    pub qcn: Option<wirelab_spec::vaqm::Qcn>,
    /// The emulated port's buffer (0 = unbounded), as the switch used it.
    pub buffer_bytes: u64,
    pub distributed: Option<wirelab_spec::vaqm::Distributed>,
    /// Ground-truth samples of the real queue behind the port (empty when
    /// the port has no bottleneck to compare with): kept in `TRUTH_FILE`.
    #[serde(skip)]
    pub truth: Vec<TruthPoint>,
}

pub const TRUTH_FILE: &str = "queue-truth.csv";

pub fn write_csv(path: &Path, points: &[TruthPoint]) -> Result<(), csv::Error> {
    write_rows(path, points)
}

/// Reads a `queue-truth.csv`; the error names the record that is wrong.
pub fn read_csv(path: &Path) -> Result<Vec<TruthPoint>, csv::Error> {
    read_rows(path)
}

/// The results folder's CSV files (`queue-truth.csv`, `qcn-rp.csv`): a
/// header from the field names, one row per record.
pub(crate) fn write_rows<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_path(path)?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// Reads such a file; the error names the record that is wrong.
pub(crate) fn read_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, csv::Error> {
    csv::Reader::from_path(path)?.deserialize().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_through_the_csv_file() {
        let dir = std::env::temp_dir().join(format!("wl-truth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(TRUTH_FILE);
        let pts = vec![
            TruthPoint {
                ts_ns: 1_700_000_000_000_000_000,
                vq: 1,
                event: TruthEvent::Enqueue,
                actual_bytes: 3028,
                actual_packets: 2,
                virtual_bytes: 3000,
                packet_bytes: 1514,
                packets: 1,
            },
            TruthPoint {
                ts_ns: 1_700_000_000_000_121_000,
                vq: 1,
                event: TruthEvent::Dequeue,
                actual_bytes: 1514,
                actual_packets: 1,
                virtual_bytes: 1600,
                packet_bytes: 1514,
                packets: 1,
            },
        ];
        write_csv(&path, &pts).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(
                "ts_ns,vq,event,actual_bytes,actual_packets,virtual_bytes,packet_bytes,packets\n1700000000000000000,1,enqueue,3028,2,3000,1514,1\n"
            ),
            "{text}"
        );
        assert_eq!(read_csv(&path).unwrap(), pts);
        assert_eq!((pts[0].error(), pts[1].error()), (28, 86));
        std::fs::write(&path, "ts_ns,vq,event,actual_bytes,actual_packets,virtual_bytes,packet_bytes,packets\n1,1,sideways,0,0,0,0,1\n").unwrap();
        let e = read_csv(&path).unwrap_err().to_string();
        assert!(e.contains("line: 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
