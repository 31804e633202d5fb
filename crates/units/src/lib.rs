//! Units live in types (STYLE.md habit 1). Each parses from the spellings a
//! network engineer writes (`200ms`, `64KiB`, `100mbit`) and keeps integers.

use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A span of time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

/// A count of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

/// A rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BitsPerSec(pub u64);

impl Nanos {
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }
    pub fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0)
    }
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..end].parse().ok()?;
    Some((n, s[end..].trim()))
}

fn scaled(n: f64, mult: f64) -> Option<u64> {
    let v = n * mult;
    (v.is_finite() && v >= 0.0 && v <= u64::MAX as f64).then(|| v.round() as u64)
}

impl std::str::FromStr for Nanos {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, unit) = split_number(s).ok_or_else(|| format!("`{s}` is not a duration"))?;
        let mult = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "" => return Err(format!("`{s}` needs a unit: ns, us, ms or s")),
            u => {
                return Err(format!(
                    "unknown time unit `{u}` in `{s}` (use ns, us, ms or s)"
                ))
            }
        };
        scaled(n, mult)
            .map(Nanos)
            .ok_or_else(|| format!("`{s}` is out of range"))
    }
}

impl std::str::FromStr for Bytes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, unit) = split_number(s).ok_or_else(|| format!("`{s}` is not a size"))?;
        let mult = match unit {
            "" | "B" => 1.0,
            "KB" | "kB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            "KiB" => 1024.0,
            "MiB" => 1048576.0,
            "GiB" => 1073741824.0,
            u => {
                return Err(format!(
                    "unknown size unit `{u}` in `{s}` (use B, KB, KiB, MB, MiB, GB, GiB)"
                ))
            }
        };
        scaled(n, mult)
            .map(Bytes)
            .ok_or_else(|| format!("`{s}` is out of range"))
    }
}

impl std::str::FromStr for BitsPerSec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, unit) = split_number(s).ok_or_else(|| format!("`{s}` is not a rate"))?;
        let mult = match unit.to_ascii_lowercase().as_str() {
            "bit" | "bps" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            _ => return Err(format!("`{s}` needs a rate unit: bit, kbit, mbit or gbit")),
        };
        scaled(n, mult)
            .map(BitsPerSec)
            .ok_or_else(|| format!("`{s}` is out of range"))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= 1_000_000_000 && n % 1_000_000 == 0 {
            write!(f, "{}s", n as f64 / 1e9)
        } else if n >= 1_000_000 && n % 1000 == 0 {
            write!(f, "{}ms", n as f64 / 1e6)
        } else if n >= 1000 {
            write!(f, "{}us", n as f64 / 1e3)
        } else {
            write!(f, "{n}ns")
        }
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B", self.0)
    }
}

impl fmt::Display for BitsPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 && b % 1_000_000 == 0 {
            write!(f, "{}gbit", b as f64 / 1e9)
        } else if b >= 1_000_000 && b % 1000 == 0 {
            write!(f, "{}mbit", b as f64 / 1e6)
        } else if b >= 1000 {
            write!(f, "{}kbit", b as f64 / 1e3)
        } else {
            write!(f, "{b}bit")
        }
    }
}

/// Accepts either a string with a unit or, where `bare` names one, a plain
/// integer in that unit.
macro_rules! unit_serde {
    ($t:ty, $what:literal, $bare:expr, $pattern:literal, $example:literal) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        write!(f, "{} such as `{}`", $what, $example)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$t, E> {
                        s.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$t, E> {
                        match $bare {
                            Some(_) => Ok(<$t>::from_bare(v)),
                            None => Err(E::custom(format!(
                                "`{v}` needs a unit, e.g. `{}`",
                                $example
                            ))),
                        }
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$t, E> {
                        if v < 0 {
                            return Err(E::custom(format!("must not be negative, got {v}")));
                        }
                        self.visit_u64(v as u64)
                    }
                }
                d.deserialize_any(V)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl JsonSchema for $t {
            fn schema_name() -> String {
                stringify!($t).to_string()
            }
            fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
                let mut s = schemars::schema::SchemaObject::default();
                let mut text = schemars::schema::SchemaObject {
                    instance_type: Some(schemars::schema::InstanceType::String.into()),
                    ..Default::default()
                };
                text.string().pattern = Some($pattern.to_string());
                let mut alts = vec![text.into()];
                if $bare.is_some() {
                    alts.push(
                        schemars::schema::SchemaObject {
                            instance_type: Some(schemars::schema::InstanceType::Integer.into()),
                            ..Default::default()
                        }
                        .into(),
                    );
                }
                s.subschemas().any_of = Some(alts);
                s.metadata().description = Some(format!("{}, e.g. `{}`", $what, $example));
                s.into()
            }
        }
    };
}

impl Nanos {
    fn from_bare(v: u64) -> Nanos {
        Nanos(v)
    }
}
impl Bytes {
    fn from_bare(v: u64) -> Bytes {
        Bytes(v)
    }
}
impl BitsPerSec {
    fn from_bare(v: u64) -> BitsPerSec {
        BitsPerSec(v)
    }
}

unit_serde!(
    Nanos,
    "a duration",
    None::<()>,
    r"^[0-9.]+\s*(ns|us|µs|ms|s)$",
    "200ms"
);
unit_serde!(
    Bytes,
    "a size in bytes",
    Some(()),
    r"^[0-9.]+\s*(B|KB|kB|MB|GB|KiB|MiB|GiB)?$",
    "64KiB"
);
unit_serde!(
    BitsPerSec,
    "a rate",
    None::<()>,
    r"^[0-9.]+\s*([kKmMgG]?(bit|bps))$",
    "100mbit"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_spellings() {
        assert_eq!("200ms".parse::<Nanos>().unwrap(), Nanos(200_000_000));
        assert_eq!("1.5s".parse::<Nanos>().unwrap(), Nanos(1_500_000_000));
        assert_eq!("10us".parse::<Nanos>().unwrap(), Nanos(10_000));
        assert_eq!("64KiB".parse::<Bytes>().unwrap(), Bytes(65536));
        assert_eq!("100KB".parse::<Bytes>().unwrap(), Bytes(100_000));
        assert_eq!("1448".parse::<Bytes>().unwrap(), Bytes(1448));
        assert_eq!(
            "100mbit".parse::<BitsPerSec>().unwrap(),
            BitsPerSec(100_000_000)
        );
        assert_eq!(
            "1Gbit".parse::<BitsPerSec>().unwrap(),
            BitsPerSec(1_000_000_000)
        );
    }

    #[test]
    fn rejects_missing_or_unknown_units_with_the_value() {
        let e = "200".parse::<Nanos>().unwrap_err();
        assert!(e.contains("needs a unit"), "{e}");
        let e = "3 fortnights".parse::<Nanos>().unwrap_err();
        assert!(e.contains("unknown time unit `fortnights`"), "{e}");
        let e = "10 furlongs".parse::<Bytes>().unwrap_err();
        assert!(e.contains("`furlongs`"), "{e}");
        assert!("fast".parse::<BitsPerSec>().is_err());
    }

    #[test]
    fn displays_round_trip() {
        for s in ["200ms", "1.5s", "10us", "7ns"] {
            let n: Nanos = s.parse().unwrap();
            assert_eq!(n.to_string().parse::<Nanos>().unwrap(), n);
        }
        let r: BitsPerSec = "250mbit".parse().unwrap();
        assert_eq!(r.to_string(), "250mbit");
    }
}
