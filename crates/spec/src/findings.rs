//! How `expect:` names analyzer findings, and the amounts it compares them
//! with. The names themselves belong to the analyzers: they come in a
//! [`Catalog`] (`wirelab_analyze::catalog()`), against which a spec naming
//! an unknown analyzer or finding is rejected before anything runs.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::{BitsPerSec, Bytes, Nanos};

/// An analyzer's name as a spec writes it (`analyzers:`, and the part of
/// `finding:` before the dot). Which analyzers exist is theirs to say: each
/// declares itself and its findings, and the [`Catalog`] they make is what
/// a spec is checked against.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AnalyzerName(pub String);

/// A definition of its own (a string here), which `json_schema` fills with
/// the catalog's names and what each analyzer does.
impl JsonSchema for AnalyzerName {
    fn schema_name() -> String {
        "AnalyzerName".into()
    }

    fn json_schema(g: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        String::json_schema(g)
    }
}

impl AnalyzerName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a finding's value measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Nanos,
    Bytes,
    BitsPerSec,
    Count,
}

/// One analyzer, as it declares itself.
#[derive(Debug, Clone, Copy)]
pub struct AnalyzerEntry {
    pub name: &'static str,
    /// One line: what it checks or measures.
    pub about: &'static str,
    /// The findings `expect:` can name as `<name>.<finding>`, with the unit
    /// of their values. Violations are counted (`loss-recovery.no-backoff`
    /// is how many there were), and `violations` counts them all.
    pub findings: &'static [(&'static str, Unit)],
}

/// The analyzers there are and the findings they offer. The spec's
/// `analyzers:` and `expect:` are checked against it before anything runs.
/// `wirelab_analyze::catalog()` builds it from the analyzers themselves, so
/// an analyzer and its findings are declared once, in its own module.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub analyzers: Vec<AnalyzerEntry>,
    /// The kernel counters an `expect: counter:` may name (nstat names),
    /// when the caller knows them: they are the running kernel's, which
    /// this crate does not read (`wirelab_lab::catalog()` does). `None`:
    /// not checked.
    pub counters: Option<BTreeSet<String>>,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&AnalyzerEntry> {
        self.analyzers.iter().find(|a| a.name == name)
    }

    /// Every analyzer's name, in the order they run by default.
    pub fn names(&self) -> Vec<&'static str> {
        self.analyzers.iter().map(|a| a.name).collect()
    }

    /// The unit of finding `analyzer.name`; `None` when there is none.
    pub fn unit_of(&self, finding: &str) -> Option<Unit> {
        let (analyzer, name) = finding.split_once('.')?;
        let a = self.get(analyzer)?;
        a.findings.iter().find(|(n, _)| *n == name).map(|(_, u)| *u)
    }

    /// Every finding, `analyzer.name`, with its unit.
    pub fn findings(&self) -> Vec<(String, Unit)> {
        self.analyzers
            .iter()
            .flat_map(|a| {
                a.findings
                    .iter()
                    .map(|(n, u)| (format!("{}.{n}", a.name), *u))
            })
            .collect()
    }

    /// `Err` names the analyzers there are.
    pub fn check(&self, name: &str) -> Result<(), String> {
        match self.get(name) {
            Some(_) => Ok(()),
            None => Err(format!(
                "unknown analyzer `{name}` (known: {})",
                self.names().join(", ")
            )),
        }
    }
}

/// How the values of a finding are combined before the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stat {
    /// Each value must satisfy the bounds (the default).
    Every,
    Min,
    Max,
    Mean,
    P50,
    P99,
    /// How many values there are.
    Count,
}

/// A number, or a quantity with a unit (`100us`, `64KiB`, `1gbit`, `10%`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Amount {
    Number(f64),
    Text(String),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Number(n) => write!(f, "{n}"),
            Amount::Text(t) => f.write_str(t),
        }
    }
}

impl Amount {
    /// The amount in the unit's base (ns, bytes, bit/s, count).
    pub fn value_in(&self, unit: Unit) -> Result<f64, String> {
        match (self, unit) {
            (Amount::Number(n), Unit::Count | Unit::Bytes) => Ok(*n),
            (Amount::Number(n), _) => Err(format!(
                "`{n}` needs a unit ({})",
                match unit {
                    Unit::Nanos => "e.g. 100us, 2ms",
                    _ => "e.g. 100mbit, 1gbit",
                }
            )),
            (Amount::Text(t), Unit::Count) => t
                .parse::<f64>()
                .map_err(|_| format!("`{t}` is not a count")),
            (Amount::Text(t), Unit::Nanos) => t.parse::<Nanos>().map(|n| n.0 as f64),
            (Amount::Text(t), Unit::Bytes) => t.parse::<Bytes>().map(|n| n.0 as f64),
            (Amount::Text(t), Unit::BitsPerSec) => t.parse::<BitsPerSec>().map(|n| n.0 as f64),
        }
    }

    /// A tolerance: a percentage of `of`, or an absolute amount.
    pub fn tolerance(&self, unit: Unit, of: f64) -> Result<f64, String> {
        if let Amount::Text(t) = self {
            if let Some(p) = t.strip_suffix('%') {
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{t}` is not a percentage"))?;
                return Ok(of.abs() * p / 100.0);
            }
        }
        self.value_in(unit)
    }
}
