//! The fitters on synthetic grids with known parameters: ScalaCN's Table 3
//! (seed 001 §4.2) for a CX-6 and a CX-7, on a 21 × 21 grid of Q_l and
//! Q_r (0 to 100 mask queries in steps of 5).

use wirelab_model::{evaluate, fit_plane, fit_rbf, read_csv, Plane, Point, Rbf};

const CX6: (Rbf, Plane) = (
    Rbf {
        u: 324.47,
        v: 42.13,
        m: -26.92,
        n: -49.71,
        w: 26.28,
    },
    Plane {
        a: 0.047,
        b: 0.068,
        c: 2.69,
    },
);
const CX7: (Rbf, Plane) = (
    Rbf {
        u: 739.52,
        v: 48.66,
        m: -33.53,
        n: -52.88,
        w: 29.32,
    },
    Plane {
        a: 0.036,
        b: 0.045,
        c: 2.57,
    },
);

/// The grid, each value off by up to ±`noise` (relative), from a fixed
/// sequence so the test is the same every time.
fn grid((bw, lat): (Rbf, Plane), noise: f64) -> Vec<Point> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut jitter = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        1.0 + noise * ((x % 2001) as f64 / 1000.0 - 1.0)
    };
    let mut v = Vec::new();
    for i in 0..21 {
        for j in 0..21 {
            let (ql, qr) = (5.0 * i as f64, 5.0 * j as f64);
            v.push(Point {
                ql,
                qr,
                bw: bw.eval(ql, qr) * jitter(),
                lat: lat.eval(ql, qr) * jitter(),
                dev: None,
            });
        }
    }
    v
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs().max(1e-9)
}

#[test]
fn exact_grids_give_back_table_3s_parameters() {
    for (name, truth) in [("CX-6", CX6), ("CX-7", CX7)] {
        let pts = grid(truth, 0.0);
        let r = fit_rbf(&pts).unwrap();
        let t = truth.0;
        for (what, g, w) in [
            ("u", r.u, t.u),
            ("v", r.v, t.v),
            ("m", r.m, t.m),
            ("n", r.n, t.n),
            ("w", r.w, t.w),
        ] {
            assert!(close(g, w, 1e-3), "{name} {what}: {g} against {w} ({r:?})");
        }
        let p = fit_plane(&pts).unwrap();
        assert!(
            close(p.a, truth.1.a, 1e-9)
                && close(p.b, truth.1.b, 1e-9)
                && close(p.c, truth.1.c, 1e-9),
            "{name}: {p:?}"
        );
    }
}

#[test]
fn with_two_percent_noise_held_out_points_are_predicted_within_scalacns_accuracy() {
    for (name, truth) in [("CX-6", CX6), ("CX-7", CX7)] {
        // Every 5th configuration is held out of the fit.
        let r = evaluate(&grid(truth, 0.02), 5).unwrap();
        assert_eq!((r.fitted, r.held_out), (353, 88));
        assert!(r.bandwidth_accuracy >= 0.98, "{name}: {r:?}");
        assert!(r.latency_accuracy >= 0.98, "{name}: {r:?}");
        assert!(r.bandwidth_goodness >= 0.99, "{name}: {r:?}");
        // The noise is what the fit cannot explain: bandwidth varies far
        // more over the grid than 2%, latency less.
        assert!(r.latency_goodness > 0.9, "{name}: {r:?}");
    }
}

#[test]
fn a_fit_refuses_what_does_not_determine_it() {
    let one_line: Vec<Point> = (0..10)
        .map(|i| Point {
            ql: i as f64,
            qr: 0.0,
            bw: 10.0,
            lat: 1.0,
            dev: None,
        })
        .collect();
    assert_eq!(
        fit_plane(&one_line).unwrap_err().to_string(),
        "the grid does not vary in both Q_l and Q_r: the plane is not determined"
    );
    assert_eq!(
        fit_rbf(&one_line[..3]).unwrap_err().to_string(),
        "3 points: a fit needs at least 5"
    );
}

#[test]
fn a_grid_is_read_from_csv_and_a_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("grid.csv");
    std::fs::write(&good, "ql,qr,bandwidth,latency\n0,0,100,2.5\n5,0,90,2.7\n").unwrap();
    let pts = read_csv(&good).unwrap();
    assert_eq!(pts.len(), 2);
    assert_eq!((pts[1].ql, pts[1].bw), (5.0, 90.0));
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "ql,qr,bandwidth,latency\n0,0,100,2.5\n5,x,90,2.7\n").unwrap();
    let e = read_csv(&bad).unwrap_err().to_string();
    assert!(
        e.ends_with("bad.csv, line 3: qr: `x` is not a number"),
        "{e}"
    );
    let e = read_csv(&dir.path().join("none.csv"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("reading ") && e.contains("none.csv: No such file"),
        "{e}"
    );
    let header = dir.path().join("header.csv");
    std::fs::write(&header, "a,b\n1,2\n").unwrap();
    let e = read_csv(&header).unwrap_err().to_string();
    assert!(
        e.contains("line 1: the header must be `ql,qr,bandwidth,latency`"),
        "{e}"
    );
}
