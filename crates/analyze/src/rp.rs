//! QCN reaction points as a run saw them (NetBump §4.3): each rate change
//! of each host's limiter, and the CNMs it received. A run writes the
//! changes as `qcn-rp.csv` in its results folder, read back by `wirelab
//! analyze` on the folder (and by any plotting tool).

use std::path::Path;

use serde::{Deserialize, Serialize};

pub const RP_FILE: &str = "qcn-rp.csv";

/// One change of a reaction point's rate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpPoint {
    pub host: String,
    /// ns since the epoch, the trace's clock.
    pub ts_ns: u64,
    pub current_bps: u64,
    pub target_bps: u64,
    /// The CNM's quantised |Fb|; 0 for a cycle's recovery.
    pub fb: u8,
}

/// One host's reaction point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RpFacts {
    pub host: String,
    /// CNMs its socket received during the run.
    pub cnms: u64,
    pub line_rate_bps: u64,
    /// Kept in `RP_FILE`.
    #[serde(skip)]
    pub points: Vec<RpPoint>,
}

pub fn write_csv(path: &Path, points: &[RpPoint]) -> Result<(), csv::Error> {
    crate::truth::write_rows(path, points)
}

/// Reads a `qcn-rp.csv`; the error names the record that is wrong.
pub fn read_csv(path: &Path) -> Result<Vec<RpPoint>, csv::Error> {
    crate::truth::read_rows(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_round_trip_through_the_csv_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RP_FILE);
        let pts = vec![
            RpPoint {
                host: "s1".into(),
                ts_ns: 1_700_000_000_000_000_000,
                current_bps: 500_000_000,
                target_bps: 1_000_000_000,
                fb: 32,
            },
            RpPoint {
                host: "s1".into(),
                ts_ns: 1_700_000_000_001_000_000,
                current_bps: 750_000_000,
                target_bps: 1_000_000_000,
                fb: 0,
            },
        ];
        write_csv(&path, &pts).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("host,ts_ns,current_bps,target_bps,fb\ns1,1700000000000000000,500000000,1000000000,32\n"),
            "{text}"
        );
        assert_eq!(read_csv(&path).unwrap(), pts);
        std::fs::write(
            &path,
            "host,ts_ns,current_bps,target_bps,fb\ns1,1,fast,0,0\n",
        )
        .unwrap();
        let e = read_csv(&path).unwrap_err().to_string();
        assert!(e.contains("line: 2"), "{e}");
    }
}
