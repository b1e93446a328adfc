//! The field deserializers: each reads its value as JSON first, so a value
//! of the wrong type gets the field's own message (what is allowed), not
//! serde's "invalid type"; the message is an error's `allowed` part, and
//! serde_path_to_error names the field.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::duration::{DurationError, parse_duration_checked};
use super::{PRIORITY_GRACE_ALLOWED, PriorityGrace, Reserved};
use crate::model::pss::Level;
use crate::model::quantity;

/// A map of strings to strings.
type StringMap = BTreeMap<String, String>;

const NON_EMPTY: &str = "expected a non-empty string";

/// What a field allows, when its value is not that: the error of a
/// field check (serde's custom error, named by its path).
#[derive(Debug)]
struct Allowed(std::borrow::Cow<'static, str>);

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&'static str> for Allowed {
    fn from(s: &'static str) -> Self {
        Allowed(s.into())
    }
}

impl From<String> for Allowed {
    fn from(s: String) -> Self {
        Allowed(s.into())
    }
}

/// `check` applied to the value read as JSON; its error is the message.
fn checked<'de, D: Deserializer<'de>, T>(
    d: D,
    check: impl FnOnce(&Value) -> Result<T, Allowed>,
) -> Result<T, D::Error> {
    let v = Value::deserialize(d)?;
    check(&v).map_err(de::Error::custom)
}

/// The same as a seed, for an entry of a list or map (so the error's
/// path names the entry).
struct Checked<F>(F);

impl<'de, T, F: FnOnce(&Value) -> Result<T, Allowed>> DeserializeSeed<'de> for Checked<F> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        checked(d, self.0)
    }
}

fn non_empty(v: &Value) -> Result<&str, Allowed> {
    v.as_str().filter(|s| !s.trim().is_empty()).ok_or_else(|| NON_EMPTY.into())
}

pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, |v| non_empty(v).map(String::from))
}

pub fn some_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    string(d).map(Some)
}

/// A string, or `""` (which [`super::Config::validate`] makes the
/// default).
pub fn string_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, |v| match v {
        Value::String(s) if s.is_empty() => Ok(String::new()),
        v => non_empty(v).map(String::from),
    })
}

fn absolute(v: &Value) -> Result<PathBuf, Allowed> {
    match v {
        Value::String(s) if s.starts_with('/') => Ok(s.into()),
        Value::String(_) => Err("expected an absolute path".into()),
        _ => Err(NON_EMPTY.into()),
    }
}

pub fn path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    checked(d, absolute)
}

/// An absolute path, or `""` (which [`super::Config::validate`] makes
/// the default).
pub fn path_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    checked(d, |v| match v {
        Value::String(s) if s.is_empty() => Ok(PathBuf::new()),
        v => absolute(v),
    })
}

/// A Go duration string. One too large for a `Duration` saturates:
/// [`super::Config::validate`] refuses it as out of range.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked(d, |v| {
        let s = v.as_str().ok_or("expected a duration string such as 30s")?;
        match parse_duration_checked(s) {
            Ok(d) => Ok(d),
            Err(DurationError::TooLarge) => Ok(Duration::MAX),
            Err(DurationError::Negative) => Err("must not be negative".into()),
            Err(DurationError::Syntax) => Err("expected a duration such as 30s, 1m30s or 500ms".into()),
        }
    })
}

/// A map of strings to strings (`{memory.available: 100Mi}`).
pub fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<StringMap, D::Error> {
    fn entry(m: &mut StringMap, key: &str, v: &Value) -> Result<(), Allowed> {
        let s = v.as_str().ok_or("expected a string value")?;
        m.insert(key.into(), s.into());
        Ok(())
    }
    d.deserialize_any(MapOf { allowed: "expected a map such as {memory.available: 100Mi}", entry })
}

/// A quantity of bytes (`10Mi`, `1G`, `4096`), at most 1Ti.
pub fn byte_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    checked(d, |v| {
        let n = match (v.as_str(), v.as_u64()) {
            (Some(s), _) => quantity::bytes(s).map_err(|e| e.to_string())?,
            (None, Some(n)) => i64::try_from(n).unwrap_or(i64::MAX),
            _ => return Err("expected a quantity such as 10Mi".into()),
        };
        u64::try_from(n)
            .ok()
            .filter(|n| *n <= 1 << 40)
            .ok_or_else(|| "expected a quantity from 0 to 1Ti, such as 10Mi".into())
    })
}

/// An integer from `MIN` to `MAX`.
pub fn int<'de, D: Deserializer<'de>, T: TryFrom<i64>, const MIN: i64, const MAX: i64>(d: D) -> Result<T, D::Error> {
    checked(d, |v| {
        v.as_i64()
            .filter(|n| (MIN..=MAX).contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| format!("expected an integer from {MIN} to {MAX}").into())
    })
}

pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    checked(d, |v| v.as_bool().ok_or_else(|| "expected true or false".into()))
}

pub fn level<'de, D: Deserializer<'de>>(d: D) -> Result<Level, D::Error> {
    checked(d, |v| Level::parse(non_empty(v)?).ok_or_else(|| "expected privileged, baseline or restricted".into()))
}

/// Visitor methods refusing every value but the container the visitor
/// accepts, with its `allowed` message.
macro_rules! refuse_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom(self.allowed))
        }
    };
}

/// A map whose entries are checked one by one (errors name the entry:
/// `systemReserved.cpu`) and folded into a `T`.
struct MapOf<T> {
    allowed: &'static str,
    entry: fn(&mut T, &str, &Value) -> Result<(), Allowed>,
}

impl<'de, T: Default> Visitor<'de> for MapOf<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.allowed)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut acc = T::default();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value_seed(Checked(|v: &Value| (self.entry)(&mut acc, &key, v)))?;
        }
        Ok(acc)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(de::Error::custom(self.allowed))
    }
    refuse_scalars!();
}

/// A list whose items are checked one by one (errors name the item:
/// `shutdownGracePeriodByPodPriority[0]`).
struct ListOf<T> {
    allowed: &'static str,
    item: fn(&Value) -> Result<T, Allowed>,
    _t: PhantomData<T>,
}

impl<'de, T> Visitor<'de> for ListOf<T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.allowed)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::new();
        while let Some(x) = seq.next_element_seed(Checked(self.item))? {
            out.push(x);
        }
        Ok(out)
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<T>, A::Error> {
        Err(de::Error::custom(self.allowed))
    }
    refuse_scalars!();
}

impl<'de> Deserialize<'de> for Reserved {
    /// `{cpu: 100m, memory: 256Mi}`: quantities, in range of an i64
    /// (saturating; [`super::Config::validate`] bounds them).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fn entry(r: &mut Reserved, key: &str, v: &Value) -> Result<(), Allowed> {
            let s = v.as_str().ok_or("expected a quantity string")?;
            match key {
                "cpu" => r.cpu_millis = quantity::cpu_millis(s).map_err(|e| e.to_string())?,
                "memory" => r.memory_bytes = quantity::bytes(s).map_err(|e| e.to_string())?,
                "ephemeral-storage" | "pid" => r.not_enforced.push(key.into()),
                _ => return Err("expected one of cpu, memory, ephemeral-storage, pid".into()),
            }
            Ok(())
        }
        d.deserialize_any(MapOf { allowed: "expected a map such as {cpu: 100m, memory: 256Mi}", entry })
    }
}

/// `enforceNodeAllocatable`: `pods` or `none` (podwarden makes no
/// system or kube reserved cgroups).
pub fn enforce_node_allocatable<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    checked(d, |v| {
        let list = v.as_array().ok_or("expected a list such as [pods]")?;
        list.iter()
            .map(|e| match e.as_str() {
                Some(s @ ("pods" | "none")) => Ok(s.to_string()),
                Some(
                    s @ ("system-reserved"
                    | "kube-reserved"
                    | "system-reserved-compressible"
                    | "kube-reserved-compressible"),
                ) => Err(Allowed::from(format!("{s:?} is not enforced by podwarden (it enforces pods)"))),
                _ => Err(Allowed::from("expected pods or none")),
            })
            .collect()
    })
}

/// A list of sysctl names or `prefix*` patterns, each in a namespace
/// of its own (net, IPC), as the kubelet's allowlist requires.
pub fn sysctl_patterns<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    checked(d, |v| {
        let list = v.as_array().ok_or("expected a list of sysctl names such as [net.core.somaxconn, kernel.msg*]")?;
        list.iter()
            .map(|e| {
                let s = e.as_str().ok_or("expected a list of sysctl names")?;
                let name = s.strip_suffix('*').unwrap_or(s);
                // no `*` but the final one (stripped above)
                let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
                if !ok {
                    return Err(Allowed::from(format!("{s:?} is not a sysctl name or prefix* pattern")));
                }
                if crate::model::sysctl::namespace(name).is_none() {
                    return Err(Allowed::from(format!("the sysctl {s:?} is not known to be namespaced")));
                }
                Ok(s.to_string())
            })
            .collect()
    })
}

pub fn priority_classes<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, i32>, D::Error> {
    fn entry(m: &mut BTreeMap<String, i32>, key: &str, v: &Value) -> Result<(), Allowed> {
        let n = v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| *n < 1_000_000_000)
            .ok_or("expected an integer below 1000000000")?;
        m.insert(key.into(), n);
        Ok(())
    }
    d.deserialize_any(MapOf { allowed: "expected a map of class name to integer", entry })
}

pub fn priority_graces<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PriorityGrace>, D::Error> {
    fn item(v: &Value) -> Result<PriorityGrace, Allowed> {
        let priority = v.get("priority").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok());
        let secs = v.get("shutdownGracePeriodSeconds").and_then(Value::as_i64);
        match (priority, secs) {
            (Some(priority), Some(s)) if (0..=super::MAX_PERIOD.as_secs() as i64).contains(&s) => {
                Ok(PriorityGrace { priority, shutdown_grace_period_seconds: s })
            }
            _ => Err(PRIORITY_GRACE_ALLOWED.into()),
        }
    }
    d.deserialize_any(ListOf { allowed: "expected a list", item, _t: PhantomData })
}
