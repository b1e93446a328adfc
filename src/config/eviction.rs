//! Node-pressure eviction as the config states it: the kubelet's signals,
//! threshold amounts (a quantity or a percentage), and the thresholds
//! `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod` and
//! `evictionMinimumReclaim` make together (`Config::thresholds`).

use std::collections::BTreeMap;
use std::time::Duration;

use thiserror::Error;

use super::Config;
use super::duration::parse_duration;
use crate::model::quantity::{self, QuantityError};

/// An eviction signal, the kubelet's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
    /// What the pods' cgroup (`kubepods`) has left of its limit: not
    /// configured, it copies each hard `memory.available` threshold when
    /// `enforceNodeAllocatable` has `pods`, as in the kubelet.
    AllocatableMemoryAvailable,
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// A threshold's value: an amount (bytes, inodes, PIDs) or a percentage
/// of the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Quantity(u64),
    Percent(f64),
}

impl Amount {
    fn parse(s: &str) -> Result<Amount, AmountError> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.parse().map_err(|_| AmountError::NotPercent(s.to_string()))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(AmountError::PercentRange(s.to_string()));
            }
            return Ok(Amount::Percent(v));
        }
        let n = quantity::bytes(s).map_err(|source| AmountError::Quantity { text: s.to_string(), source })?;
        u64::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .map(Amount::Quantity)
            .ok_or_else(|| AmountError::NotPositive(s.to_string()))
    }

    /// `0%` and `100%` turn a threshold off, as in the kubelet.
    fn is_off(self) -> bool {
        matches!(self, Amount::Percent(p) if p == 0.0 || p == 100.0)
    }

    /// The amount for a capacity of `capacity`.
    pub fn of(self, capacity: u64) -> u64 {
        match self {
            Amount::Quantity(n) => n,
            Amount::Percent(p) => (capacity as f64 * p / 100.0) as u64,
        }
    }

    /// As the config wrote it.
    pub fn text(self) -> String {
        match self {
            Amount::Quantity(n) => crate::model::quantity::format_bytes(n as i64),
            Amount::Percent(p) => format!("{p}%"),
        }
    }
}

/// One eviction threshold: met when the signal's available amount is
/// below `value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Amount,
    /// Zero for a hard threshold.
    pub grace: Duration,
    pub soft: bool,
    pub min_reclaim: Option<Amount>,
}

/// Why a threshold's value is refused.
#[derive(Debug, PartialEq, Error)]
pub enum AmountError {
    #[error("{0:?}: expected a percentage such as 10%")]
    NotPercent(String),
    #[error("{0:?}: a percentage must be from 0% to 100%")]
    PercentRange(String),
    #[error("{text:?}: {source}")]
    Quantity { text: String, source: QuantityError },
    #[error("{0:?}: must be positive")]
    NotPositive(String),
}

/// An eviction field's entry refused: the field (`evictionHard`), the key
/// (the signal's name as written) and why.
#[derive(Debug, PartialEq, Error)]
#[error("{field}.{key}: {reason}")]
pub struct ThresholdError {
    pub field: &'static str,
    pub key: String,
    pub reason: ThresholdReason,
}

/// What is wrong with an eviction entry.
#[derive(Debug, PartialEq, Error)]
pub enum ThresholdReason {
    #[error("unknown signal: expected one of {}", Signal::ALL.map(Signal::name).join(", "))]
    UnknownSignal,
    #[error(transparent)]
    Amount(#[from] AmountError),
    #[error("needs a grace period in evictionSoftGracePeriod")]
    NoGracePeriod,
    #[error("{0:?}: expected a duration such as 1m30s")]
    GracePeriod(String),
    #[error("has no threshold in evictionSoft")]
    NoThreshold,
}

impl Config {
    /// The eviction thresholds, hard ones first; or the field, key and
    /// what is wrong with it.
    pub fn thresholds(&self) -> Result<Vec<Threshold>, ThresholdError> {
        let refused = |field: &'static str, k: &str, reason: ThresholdReason| ThresholdError {
            field,
            key: k.to_string(),
            reason,
        };
        let signal = |field: &'static str, k: &str| {
            Signal::parse(k).ok_or_else(|| refused(field, k, ThresholdReason::UnknownSignal))
        };
        let amount = |field: &'static str, k: &str, v: &str| Amount::parse(v).map_err(|e| refused(field, k, e.into()));
        let mut reclaim = BTreeMap::new();
        for (k, v) in &self.eviction_minimum_reclaim {
            let s = signal("evictionMinimumReclaim", k)?;
            reclaim.insert(s, amount("evictionMinimumReclaim", k, v)?);
        }
        let mut out = Vec::new();
        for (k, v) in &self.eviction_hard {
            let s = signal("evictionHard", k)?;
            let value = amount("evictionHard", k, v)?;
            if value.is_off() {
                continue;
            }
            let min_reclaim = reclaim.get(&s).copied();
            out.push(Threshold { signal: s, value, grace: Duration::ZERO, soft: false, min_reclaim });
            if s == Signal::MemoryAvailable && self.enforce_node_allocatable.iter().any(|e| e == "pods") {
                let signal = Signal::AllocatableMemoryAvailable;
                out.push(Threshold { signal, value, grace: Duration::ZERO, soft: false, min_reclaim });
            }
        }
        for (k, v) in &self.eviction_soft {
            let s = signal("evictionSoft", k)?;
            let value = amount("evictionSoft", k, v)?;
            if value.is_off() {
                continue;
            }
            let grace = (self.eviction_soft_grace_period.get(k))
                .ok_or_else(|| refused("evictionSoft", k, ThresholdReason::NoGracePeriod))?;
            let grace = parse_duration(grace)
                .ok_or_else(|| refused("evictionSoftGracePeriod", k, ThresholdReason::GracePeriod(grace.clone())))?;
            out.push(Threshold { signal: s, value, grace, soft: true, min_reclaim: reclaim.get(&s).copied() });
        }
        for k in self.eviction_soft_grace_period.keys() {
            signal("evictionSoftGracePeriod", k)?;
            if !self.eviction_soft.contains_key(k) {
                return Err(refused("evictionSoftGracePeriod", k, ThresholdReason::NoThreshold));
            }
        }
        Ok(out)
    }
}
