//! The `systemd` cgroup driver: the node's and the pods' slices are
//! systemd units, made and changed through systemd's D-Bus API on the
//! system bus, as the kubelet's systemd cgroup manager does.
//!
//! A slice is started as a transient unit
//! (`Manager.StartTransientUnit(name, "replace", properties, [])`) with
//! its limits as properties (`MemoryMax`, `CPUWeight`,
//! `CPUQuotaPerSecUSec`, `TasksMax`, the accounting switches); a slice
//! that exists already gets its limits through
//! `Manager.SetUnitProperties(name, runtime = true, properties)`. Each
//! call waits at most [`CALL_TIMEOUT`] for its answer and each job (the
//! start or the stop of a slice) at most [`JOB_TIMEOUT`]. A slice is
//! stopped (`Manager.StopUnit(name, "replace")`) when its pod is removed;
//! systemd then removes its cgroup.
//!
//! The properties are pure data ([`Property`]) made from [`Limits`], so
//! they are tested without a bus.

use std::time::{Duration, Instant};

use dbus::arg::{RefArg, Variant};
use dbus::blocking::Connection;
use parking_lot::Mutex;
use thiserror::Error;

use super::{CPU_PERIOD, Limits, Version, cpu_weight};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const JOB: &str = "org.freedesktop.systemd1.Job";

/// The longest podwarden waits for systemd's answer to one call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest podwarden waits for a slice's start or stop job.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// systemd's "infinity" for a `t` limit (no limit).
pub const INFINITY: u64 = u64::MAX;

/// Why systemd did not make, change or remove a slice. Every message
/// names systemd: with `cgroupDriver: systemd` the pod cannot start
/// without it.
#[derive(Debug, Error)]
pub enum SystemdError {
    #[error("cgroupDriver systemd: cannot reach systemd on the system bus: {}", describe(.source))]
    Connect {
        #[source]
        source: dbus::Error,
    },
    #[error("cgroupDriver systemd: systemd's {call} of {unit} failed: {}", describe(.source))]
    Call {
        call: &'static str,
        unit: String,
        #[source]
        source: dbus::Error,
    },
    #[error("cgroupDriver systemd: systemd's job for {unit} did not finish within {}s", .waited.as_secs())]
    Timeout { unit: String, waited: Duration },
    #[error("cgroupDriver systemd: systemd did not start {unit}: its ActiveState is {state}")]
    NotStarted { unit: String, state: String },
}

fn describe(e: &dbus::Error) -> String {
    format!("{} ({})", e.message().unwrap_or("no message"), e.name().unwrap_or("no error name"))
}

/// A unit property's value, as D-Bus will carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `t`
    U64(u64),
    /// `b`
    Bool(bool),
    /// `s`
    Str(String),
    /// `as`
    Strs(Vec<String>),
}

/// A unit property: (name, value).
pub type Property = (&'static str, Value);

/// The unit of a cgroup named for the systemd driver: its last component
/// (`/kubepods.slice/kubepods-besteffort.slice` is
/// `kubepods-besteffort.slice`).
pub fn unit_of(cgroup: &str) -> &str {
    cgroup.rsplit('/').next().unwrap_or(cgroup)
}

/// The slice a slice is in, by systemd's naming: `a-b-c.slice` is in
/// `a-b.slice`, `a.slice` in the root slice `-.slice`.
pub fn parent_slice(unit: &str) -> String {
    let stem = unit.strip_suffix(".slice").unwrap_or(unit);
    match stem.rfind('-') {
        Some(i) => format!("{}.slice", &stem[..i]),
        None => "-.slice".into(),
    }
}

/// A CFS quota over [`CPU_PERIOD`] as systemd's CPU time per second (µs);
/// none: [`INFINITY`]. systemd writes `cpu.max` (or `cpu.cfs_quota_us`)
/// back over its own period, 100 ms, the kubelet's.
pub fn quota_per_sec(quota: Option<i64>) -> u64 {
    match quota.filter(|q| *q > 0) {
        None => INFINITY,
        Some(q) => (q as u64).saturating_mul(1_000_000) / CPU_PERIOD as u64,
    }
}

fn limit(v: Option<i64>) -> Value {
    Value::U64(v.filter(|v| *v > 0).map_or(INFINITY, |v| v as u64))
}

/// The properties of a slice with `limits` that can change while it runs:
/// the accounting switches and every limit, an absent one as infinity (so
/// an update also lifts a limit). cgroup v1 has `CPUShares` and
/// `MemoryLimit` where v2 has `CPUWeight` and `MemoryMax`.
pub fn resource_properties(version: Version, l: &Limits) -> Vec<Property> {
    let mut p: Vec<Property> = vec![
        ("CPUAccounting", Value::Bool(true)),
        ("MemoryAccounting", Value::Bool(true)),
        ("TasksAccounting", Value::Bool(true)),
    ];
    match version {
        Version::V2 => {
            if let Some(s) = l.cpu_shares {
                p.push(("CPUWeight", Value::U64(cpu_weight(s) as u64)));
            }
            p.push(("MemoryMax", limit(l.memory_bytes)));
        }
        Version::V1 => {
            if let Some(s) = l.cpu_shares {
                p.push(("CPUShares", Value::U64(s as u64)));
            }
            p.push(("MemoryLimit", limit(l.memory_bytes)));
        }
    }
    p.push(("CPUQuotaPerSecUSec", Value::U64(quota_per_sec(l.cpu_quota))));
    p.push(("TasksMax", limit(l.pids)));
    p
}

/// The properties of a new transient slice `unit`: a description, its
/// parent slice wanted and started before it, no default dependencies
/// (a slice of pods must not be stopped with `shutdown.target`'s
/// ordering), then [`resource_properties`].
pub fn start_properties(unit: &str, version: Version, l: &Limits) -> Vec<Property> {
    let parent = parent_slice(unit);
    let mut p: Vec<Property> = vec![
        ("Description", Value::Str(format!("podwarden pod cgroup {unit}"))),
        ("Wants", Value::Strs(vec![parent.clone()])),
        ("After", Value::Strs(vec![parent])),
        ("DefaultDependencies", Value::Bool(false)),
    ];
    p.extend(resource_properties(version, l));
    p
}

fn to_dbus(props: &[Property]) -> Vec<(&'static str, Variant<Box<dyn RefArg>>)> {
    props
        .iter()
        .map(|(k, v)| {
            let b: Box<dyn RefArg> = match v {
                Value::U64(n) => Box::new(*n),
                Value::Bool(b) => Box::new(*b),
                Value::Str(s) => Box::new(s.clone()),
                Value::Strs(s) => Box::new(s.clone()),
            };
            (*k, Variant(b))
        })
        .collect()
}

/// An error that says the connection itself is gone or stuck (the next
/// call reconnects).
fn transport(e: &dbus::Error) -> bool {
    matches!(
        e.name(),
        Some(
            "org.freedesktop.DBus.Error.NoReply"
                | "org.freedesktop.DBus.Error.Disconnected"
                | "org.freedesktop.DBus.Error.Timeout"
                | "org.freedesktop.DBus.Error.TimedOut"
                | "org.freedesktop.DBus.Error.ServiceUnknown"
        ) | None
    )
}

/// podwarden's connection to systemd (made at the first call, made again
/// after a broken one). Calls from several pod workers take turns on it.
#[derive(Default)]
pub struct Systemd {
    conn: Mutex<Option<Connection>>,
    /// A bus address instead of the system bus (tests).
    address: Option<String>,
}

impl std::fmt::Debug for Systemd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never waits for a call in flight
        let connected = self.conn.try_lock().map(|c| c.is_some());
        f.debug_struct("Systemd").field("connected", &connected).field("address", &self.address).finish()
    }
}

type Args = Vec<(&'static str, Variant<Box<dyn RefArg>>)>;

impl Systemd {
    pub fn new() -> Self {
        Self::default()
    }

    /// systemd on the bus at `address` (a D-Bus address,
    /// `unix:path=...`) instead of the system bus.
    pub fn at(address: &str) -> Self {
        Systemd { conn: Mutex::new(None), address: Some(address.to_string()) }
    }

    fn connect(&self) -> Result<Connection, dbus::Error> {
        match &self.address {
            None => Connection::new_system(),
            Some(a) => {
                let mut c = dbus::channel::Channel::open_private(a)?;
                c.register()?;
                Ok(Connection::from(c))
            }
        }
    }

    /// One call to `path` with the connection, reconnecting first when
    /// there is none; a transport error drops it.
    fn call<R>(
        &self,
        call: &'static str,
        unit: &str,
        f: impl FnOnce(&Connection) -> Result<R, dbus::Error>,
    ) -> Result<R, SystemdError> {
        let mut guard = self.conn.lock();
        if guard.is_none() {
            *guard = Some(self.connect().map_err(|source| SystemdError::Connect { source })?);
        }
        let Some(conn) = guard.as_ref() else { unreachable!("connected above") };
        let r = f(conn);
        if let Err(e) = &r
            && transport(e)
        {
            *guard = None;
        }
        r.map_err(|source| SystemdError::Call { call, unit: unit.to_string(), source })
    }

    fn manager<A: dbus::arg::AppendAll, R: dbus::arg::ReadAll>(
        &self,
        method: &'static str,
        unit: &str,
        args: A,
    ) -> Result<R, SystemdError> {
        self.call(method, unit, |c| c.with_proxy(DEST, PATH, CALL_TIMEOUT).method_call(MANAGER, method, args))
    }

    /// `unit`'s `ActiveState`; `None` when systemd has no such unit loaded.
    pub fn active_state(&self, unit: &str) -> Result<Option<String>, SystemdError> {
        let path = match self.manager::<_, (dbus::Path<'static>,)>("GetUnit", unit, (unit,)) {
            Ok((p,)) => p,
            Err(SystemdError::Call { source, .. }) if source.name() == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        self.call("Get ActiveState", unit, |c| {
            use dbus::blocking::stdintf::org_freedesktop_dbus::Properties;
            c.with_proxy(DEST, path, CALL_TIMEOUT).get::<String>(UNIT, "ActiveState")
        })
        .map(Some)
    }

    /// Wait (at most [`JOB_TIMEOUT`]) until job `job` is gone: systemd
    /// removes a job's object when the job is done.
    fn wait_job(&self, unit: &str, job: &dbus::Path<'static>) -> Result<(), SystemdError> {
        let deadline = Instant::now() + JOB_TIMEOUT;
        loop {
            let r = self.call("Get job State", unit, |c| {
                use dbus::blocking::stdintf::org_freedesktop_dbus::Properties;
                c.with_proxy(DEST, job.clone(), CALL_TIMEOUT).get::<String>(JOB, "State")
            });
            match r {
                // the job's object is gone: done
                Err(SystemdError::Call { source, .. }) if !transport(&source) => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) if Instant::now() >= deadline => {
                    return Err(SystemdError::Timeout { unit: unit.to_string(), waited: JOB_TIMEOUT });
                }
                Ok(_) => std::thread::sleep(POLL),
            }
        }
    }

    fn started(&self, unit: &str, job: &dbus::Path<'static>) -> Result<(), SystemdError> {
        self.wait_job(unit, job)?;
        match self.active_state(unit)? {
            Some(s) if s == "active" => Ok(()),
            s => Err(SystemdError::NotStarted {
                unit: unit.to_string(),
                state: s.unwrap_or_else(|| "unknown (not loaded)".into()),
            }),
        }
    }

    /// Make slice `unit` with `start` properties, or, when systemd has it
    /// already, set its `update` properties (and start it if it is not
    /// active); return when it is active.
    pub fn ensure_slice(&self, unit: &str, start: &[Property], update: &[Property]) -> Result<(), SystemdError> {
        let aux: Vec<(&str, Args)> = Vec::new();
        match self.manager::<_, (dbus::Path<'static>,)>(
            "StartTransientUnit",
            unit,
            (unit, "replace", to_dbus(start), aux),
        ) {
            Ok((job,)) => self.started(unit, &job),
            Err(SystemdError::Call { source, .. }) if source.name() == Some("org.freedesktop.systemd1.UnitExists") => {
                self.manager::<_, ()>("SetUnitProperties", unit, (unit, true, to_dbus(update)))?;
                if self.active_state(unit)?.as_deref() == Some("active") {
                    return Ok(());
                }
                let (job,): (dbus::Path<'static>,) = self.manager("StartUnit", unit, (unit, "replace"))?;
                self.started(unit, &job)
            }
            Err(e) => Err(e),
        }
    }

    /// Stop slice `unit` (systemd removes its cgroup); a unit systemd does
    /// not know is already gone.
    pub fn stop_slice(&self, unit: &str) -> Result<(), SystemdError> {
        match self.manager::<_, (dbus::Path<'static>,)>("StopUnit", unit, (unit, "replace")) {
            Ok((job,)) => self.wait_job(unit, &job),
            Err(SystemdError::Call { source, .. }) if source.name() == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_their_parents() {
        assert_eq!(unit_of("/kubepods.slice/kubepods-besteffort.slice"), "kubepods-besteffort.slice");
        assert_eq!(unit_of("kubepods.slice"), "kubepods.slice");
        assert_eq!(parent_slice("kubepods-burstable-pod12_ab.slice"), "kubepods-burstable.slice");
        assert_eq!(parent_slice("kubepods-burstable.slice"), "kubepods.slice");
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
    }

    #[test]
    fn a_pods_slice_properties() {
        let l = Limits {
            cpu_shares: Some(102),
            cpu_quota: Some(50_000),
            memory_bytes: Some(64 << 20),
            pids: Some(123),
            hugetlb: None,
        };
        let p = start_properties("kubepods-burstable-pod1.slice", Version::V2, &l);
        let get = |k: &str| p.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("Wants"), Some(Value::Strs(vec!["kubepods-burstable.slice".into()])));
        assert_eq!(get("After"), Some(Value::Strs(vec!["kubepods-burstable.slice".into()])));
        assert_eq!(get("DefaultDependencies"), Some(Value::Bool(false)));
        for a in ["CPUAccounting", "MemoryAccounting", "TasksAccounting"] {
            assert_eq!(get(a), Some(Value::Bool(true)), "{a}");
        }
        assert_eq!(get("CPUWeight"), Some(Value::U64(4)), "102 shares");
        assert_eq!(get("MemoryMax"), Some(Value::U64(64 << 20)));
        assert_eq!(get("CPUQuotaPerSecUSec"), Some(Value::U64(500_000)), "50 ms per 100 ms");
        assert_eq!(get("TasksMax"), Some(Value::U64(123)));
        assert_eq!(get("MemoryLimit"), None, "v1's name");
        // an update carries only what may change, every limit explicit
        let u = resource_properties(Version::V2, &Limits { cpu_shares: Some(2), ..Default::default() });
        let names: Vec<&str> = u.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "CPUAccounting",
                "MemoryAccounting",
                "TasksAccounting",
                "CPUWeight",
                "MemoryMax",
                "CPUQuotaPerSecUSec",
                "TasksMax"
            ]
        );
        assert!(u[4..].iter().all(|(_, v)| *v == Value::U64(INFINITY) || *v == Value::U64(1)));
        // cgroup v1: shares and MemoryLimit
        let v1 = resource_properties(Version::V1, &l);
        assert!(v1.contains(&("CPUShares", Value::U64(102))));
        assert!(v1.contains(&("MemoryLimit", Value::U64(64 << 20))));
        assert_eq!(quota_per_sec(Some(1000)), 10_000, "the least quota, 1 ms per 100 ms");
        assert_eq!(quota_per_sec(Some(0)), INFINITY);
    }
}
