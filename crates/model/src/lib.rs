//! ScalaCN's performance model (seed 001 §4.2): an RNIC's bandwidth and
//! latency as functions of Q_l and Q_r, the average matching-mask queries
//! of in-flight packets on the local and remote hosts.
//!
//! - Eq. 1, bandwidth: BW = u·exp(−((Q_l − m)² + (Q_r − n)²) / (2v²)) + w.
//!   The paper typesets the minus before the first square only; its
//!   "rotational symmetry" between Q_l and Q_r (§4.2, Fig. 10a) and the
//!   fitted parameters of Table 3 (m, n < 0: the peak lies before the
//!   grid, bandwidth falls as either Q grows) are those of the symmetric
//!   Gaussian, which is what is fitted here.
//! - Eq. 2, latency: LAT = a·Q_l + b·Q_r + c, by linear least squares.
//!
//! Goodness of fit is R² (1 − SS_res / SS_tot) on the points fitted;
//! accuracy is 1 − the mean relative error on points held out of the fit
//! (ScalaCN reports 98.9% for bandwidth and 98.5% for latency). No I/O
//! beyond reading a grid from CSV (`read_csv`).

//! `causal`: the combinatorial causal testing (§4.1) the model rests on.

pub mod causal;

/// The median; of an even count, the mean of the middle two. None when
/// there is nothing.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let h = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[h]
    } else {
        (v[h - 1] + v[h]) / 2.0
    })
}

use levenberg_marquardt::{LeastSquaresProblem, LevenbergMarquardt};
use nalgebra::{DMatrix, DVector, Dyn, Matrix3, Owned, Vector3};
use serde::Serialize;

/// One measured configuration of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    pub ql: f64,
    pub qr: f64,
    /// Bandwidth (any unit; the fit keeps it).
    pub bw: f64,
    /// Latency (any unit).
    pub lat: f64,
    /// The device's own latency, when measured (the eSwitch's mask search
    /// per packet, in the same unit as `lat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<f64>,
}

/// Eq. 1's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rbf {
    pub u: f64,
    pub v: f64,
    pub m: f64,
    pub n: f64,
    pub w: f64,
}

impl Rbf {
    pub fn eval(&self, ql: f64, qr: f64) -> f64 {
        let d = (ql - self.m).powi(2) + (qr - self.n).powi(2);
        self.u * (-d / (2.0 * self.v * self.v)).exp() + self.w
    }
}

/// Eq. 2's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Plane {
    pub a: f64,
    pub b: f64,
    pub c: f64,
}

impl Plane {
    pub fn eval(&self, ql: f64, qr: f64) -> f64 {
        self.a * ql + self.b * qr + self.c
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} points: a fit needs at least {1}")]
    TooFew(usize, usize),
    #[error("the grid does not vary in both Q_l and Q_r: the plane is not determined")]
    Degenerate,
    #[error("the bandwidth fit did not converge")]
    NoConvergence,
    #[error("reading {path}: {msg}")]
    Read { path: String, msg: String },
    #[error("{path}, line {line}: {msg}")]
    Csv {
        path: String,
        line: u64,
        msg: String,
    },
}

/// Eq. 2 by least squares: the normal equations of [Q_l Q_r 1].
pub fn fit_plane(points: &[Point]) -> Result<Plane, Error> {
    fit_plane_to(points, |p| p.lat)
}

/// Eq. 2 fitted to another measure of the points (`y`).
pub fn fit_plane_to(points: &[Point], y: fn(&Point) -> f64) -> Result<Plane, Error> {
    if points.len() < 3 {
        return Err(Error::TooFew(points.len(), 3));
    }
    let mut ata = Matrix3::<f64>::zeros();
    let mut aty = Vector3::<f64>::zeros();
    for p in points {
        let x = Vector3::new(p.ql, p.qr, 1.0);
        ata += x * x.transpose();
        aty += x * y(p);
    }
    let s = ata.try_inverse().ok_or(Error::Degenerate)? * aty;
    Ok(Plane {
        a: s[0],
        b: s[1],
        c: s[2],
    })
}

/// Eq. 1's residuals and Jacobian over the points, for the solver.
struct RbfProblem<'a> {
    points: &'a [Point],
    p: DVector<f64>,
}

impl RbfProblem<'_> {
    fn rbf(&self) -> Rbf {
        Rbf {
            u: self.p[0],
            v: self.p[1],
            m: self.p[2],
            n: self.p[3],
            w: self.p[4],
        }
    }
}

impl LeastSquaresProblem<f64, Dyn, Dyn> for RbfProblem<'_> {
    type ResidualStorage = Owned<f64, Dyn>;
    type JacobianStorage = Owned<f64, Dyn, Dyn>;
    type ParameterStorage = Owned<f64, Dyn>;

    fn set_params(&mut self, x: &DVector<f64>) {
        self.p.copy_from(x);
    }
    fn params(&self) -> DVector<f64> {
        self.p.clone()
    }
    fn residuals(&self) -> Option<DVector<f64>> {
        let r = self.rbf();
        Some(DVector::from_iterator(
            self.points.len(),
            self.points.iter().map(|p| r.eval(p.ql, p.qr) - p.bw),
        ))
    }
    fn jacobian(&self) -> Option<DMatrix<f64>> {
        let r = self.rbf();
        let mut j = DMatrix::zeros(self.points.len(), 5);
        for (i, p) in self.points.iter().enumerate() {
            let (dl, dr) = (p.ql - r.m, p.qr - r.n);
            let d = dl * dl + dr * dr;
            let v2 = r.v * r.v;
            let e = (-d / (2.0 * v2)).exp();
            j[(i, 0)] = e; // ∂/∂u
            j[(i, 1)] = r.u * e * d / (v2 * r.v); // ∂/∂v
            j[(i, 2)] = r.u * e * dl / v2; // ∂/∂m
            j[(i, 3)] = r.u * e * dr / v2; // ∂/∂n
            j[(i, 4)] = 1.0; // ∂/∂w
        }
        Some(j)
    }
}

/// Eq. 1 by Levenberg-Marquardt, from several starting points (the peak
/// on the grid or before it, narrow or wide), keeping the best. Starting
/// points come from the data: w from the smallest bandwidth, u from the
/// range, the peak from where bandwidth is highest.
pub fn fit_rbf(points: &[Point]) -> Result<Rbf, Error> {
    if points.len() < 5 {
        return Err(Error::TooFew(points.len(), 5));
    }
    let (lo, hi) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.bw), h.max(p.bw)));
    let best = points
        .iter()
        .max_by(|a, b| a.bw.total_cmp(&b.bw))
        .expect("points");
    let span = |f: fn(&Point) -> f64| {
        let (a, b) = points
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(f(p)), b.max(f(p))));
        (b - a).max(1.0)
    };
    let s = span(|p| p.ql).max(span(|p| p.qr));
    let mut fits = Vec::new();
    for back in [0.0, 0.5, 1.0, 2.0] {
        for width in [0.5, 1.0, 2.0, 4.0] {
            let start = DVector::from_vec(vec![
                (hi - lo).max(f64::EPSILON) * (1.0 + back),
                s * width,
                best.ql - back * s,
                best.qr - back * s,
                lo,
            ]);
            let problem = RbfProblem { points, p: start };
            let (done, report) = LevenbergMarquardt::new()
                .with_patience(400)
                .minimize(problem);
            if report.objective_function.is_finite() && done.p.iter().all(|x| x.is_finite()) {
                fits.push((report.objective_function, done.rbf()));
            }
        }
    }
    fits.into_iter()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, mut r)| {
            r.v = r.v.abs(); // v enters squared
            r
        })
        .ok_or(Error::NoConvergence)
}

/// R² of `f` against `y` on the points.
pub fn goodness(points: &[Point], y: fn(&Point) -> f64, f: &dyn Fn(&Point) -> f64) -> f64 {
    let mean = points.iter().map(y).sum::<f64>() / points.len().max(1) as f64;
    let ss_tot: f64 = points.iter().map(|p| (y(p) - mean).powi(2)).sum();
    let ss_res: f64 = points.iter().map(|p| (y(p) - f(p)).powi(2)).sum();
    if ss_tot == 0.0 {
        return if ss_res == 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ss_res / ss_tot
}

/// 1 − the mean relative error of `f` against `y`.
pub fn accuracy(points: &[Point], y: fn(&Point) -> f64, f: &dyn Fn(&Point) -> f64) -> f64 {
    let n = points.len().max(1) as f64;
    1.0 - points
        .iter()
        .map(|p| ((f(p) - y(p)) / y(p)).abs())
        .sum::<f64>()
        / n
}

/// Both fits, their goodness on the points fitted and their accuracy on
/// the points held out.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bandwidth: Rbf,
    pub latency: Plane,
    pub fitted: usize,
    pub held_out: usize,
    pub bandwidth_goodness: f64,
    pub latency_goodness: f64,
    /// On the held-out points (the fitted ones when none is held out).
    pub bandwidth_accuracy: f64,
    pub latency_accuracy: f64,
    /// Eq. 2 fitted to the device's own latency, when every point has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_latency: Option<PlaneFit>,
}

/// A plane, its goodness on the points fitted and its accuracy on the
/// points held out.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PlaneFit {
    pub plane: Plane,
    pub goodness: f64,
    pub accuracy: f64,
}

/// Fits on every point but each `hold_out_every`-th (0: none held out),
/// then scores the held-out points.
pub fn evaluate(points: &[Point], hold_out_every: usize) -> Result<Report, Error> {
    let (mut fit, mut test) = (Vec::new(), Vec::new());
    for (i, p) in points.iter().enumerate() {
        if hold_out_every > 0 && i % hold_out_every == hold_out_every - 1 {
            test.push(*p);
        } else {
            fit.push(*p);
        }
    }
    let bw = fit_rbf(&fit)?;
    let lat = fit_plane(&fit)?;
    let scored = if test.is_empty() { &fit } else { &test };
    let fbw = |p: &Point| bw.eval(p.ql, p.qr);
    let flat = |p: &Point| lat.eval(p.ql, p.qr);
    let dev = |p: &Point| p.dev.unwrap_or(f64::NAN);
    let device_latency = if points.iter().all(|p| p.dev.is_some()) {
        let plane = fit_plane_to(&fit, dev)?;
        let f = |p: &Point| plane.eval(p.ql, p.qr);
        Some(PlaneFit {
            plane,
            goodness: goodness(&fit, dev, &f),
            accuracy: accuracy(scored, dev, &f),
        })
    } else {
        None
    };
    Ok(Report {
        bandwidth: bw,
        latency: lat,
        fitted: fit.len(),
        held_out: test.len(),
        bandwidth_goodness: goodness(&fit, |p| p.bw, &fbw),
        latency_goodness: goodness(&fit, |p| p.lat, &flat),
        bandwidth_accuracy: accuracy(scored, |p| p.bw, &fbw),
        latency_accuracy: accuracy(scored, |p| p.lat, &flat),
        device_latency,
    })
}

/// A measured grid from CSV with the header `ql,qr,bandwidth,latency`,
/// or `ql,qr,bandwidth,latency,device_latency`.
pub fn read_csv(path: &std::path::Path) -> Result<Vec<Point>, Error> {
    let at = |line: u64, msg: String| Error::Csv {
        path: path.display().to_string(),
        line,
        msg,
    };
    let mut r = csv::Reader::from_path(path).map_err(|e| Error::Read {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    let all = ["ql", "qr", "bandwidth", "latency", "device_latency"];
    let header = r.headers().map_err(|e| at(1, e.to_string()))?.clone();
    let want = match header.len() {
        4 => &all[..4],
        _ => &all[..],
    };
    if header.iter().map(str::trim).ne(want.iter().copied()) {
        return Err(at(
            1,
            format!(
                "the header must be `{}` or `{}`",
                all[..4].join(","),
                all.join(",")
            ),
        ));
    }
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| at(e.position().map_or(0, |p| p.line()), e.to_string()))?;
        let line = rec.position().map_or(0, |p| p.line());
        let mut v = [0f64; 5];
        for (i, name) in want.iter().enumerate() {
            let s = rec.get(i).unwrap_or("").trim();
            v[i] = s
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or_else(|| at(line, format!("{name}: `{s}` is not a number")))?;
        }
        if v[2] <= 0.0 || v[3] <= 0.0 || (want.len() == 5 && v[4] <= 0.0) {
            return Err(at(line, "bandwidth and latencies must be positive".into()));
        }
        out.push(Point {
            ql: v[0],
            qr: v[1],
            bw: v[2],
            lat: v[3],
            dev: (want.len() == 5).then_some(v[4]),
        });
    }
    Ok(out)
}
