//! How image pulls are admitted and paced, as the kubelet's image manager
//! does it: the pull policy (`Always` for `:latest` or no tag), the back-off
//! per pod and image (10 s doubling to 5 min: `ImagePullBackOff`), pulls
//! one at a time (`serializeImagePulls`) or at most `maxParallelImagePulls`
//! at once ([`PullGate`]), and durations as the kubelet's pull messages
//! print them.
//!
//! A pull has no deadline (the kubelet sets none: a large image on a slow
//! link takes what it takes); it ends when the runtime answers or its
//! caller cancels it. The pull itself is a step of a pod's set-up
//! (`pod::phases`).

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::base::cancel::CancelToken;
use crate::model::Container;

/// The kubelet's image pull back-off.
pub const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The deadline of a pull: none to speak of (a cancelled pass ends it).
pub const PULL_DEADLINE: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many pulls may run at once (0: any number).
pub struct PullGate {
    max: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

impl PullGate {
    pub fn new(max: usize) -> Self {
        PullGate { max, running: Mutex::new(0), freed: Condvar::new() }
    }

    /// Wait for a turn; `None` when `cancel` fired first. The turn ends
    /// when the returned [`PullTurn`] is dropped.
    pub fn enter(&self, cancel: &CancelToken) -> Option<PullTurn<'_>> {
        self.enter_within(cancel, None)
    }

    /// [`PullGate::enter`], waiting at most `max_wait` for a turn: then
    /// the caller goes in beside the others (a turn held by a call that
    /// hangs never holds up the rest for longer).
    pub fn enter_within(&self, cancel: &CancelToken, max_wait: Option<Duration>) -> Option<PullTurn<'_>> {
        let until = max_wait.map(crate::base::cancel::deadline_in);
        let mut n = self.running.lock();
        while self.max > 0 && *n >= self.max && until.is_none_or(|u| std::time::Instant::now() < u) {
            if cancel.is_cancelled() {
                return None;
            }
            self.freed.wait_for(&mut n, Duration::from_millis(100));
        }
        *n += 1;
        Some(PullTurn(self))
    }
}

/// A pull's turn through the [`PullGate`]; dropping it lets the next in.
pub struct PullTurn<'a>(&'a PullGate);

impl Drop for PullTurn<'_> {
    fn drop(&mut self) {
        *self.0.running.lock() -= 1;
        self.0.freed.notify_one();
    }
}

/// The kubelet's default pull policy: Always for `:latest` or no tag.
pub fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or_default();
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// A duration as Go prints it in the kubelet's pull message (`1.234s`,
/// `512ms`).
pub fn go_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        let s = format!("{:.3}", d.as_secs_f64());
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_messages_print_durations_as_go_does() {
        assert_eq!(go_duration(Duration::from_millis(512)), "512ms");
        assert_eq!(go_duration(Duration::from_millis(1234)), "1.234s");
        assert_eq!(go_duration(Duration::from_secs(3)), "3s");
        assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
    }

    #[test]
    fn the_gate_lets_max_pulls_through_at_once() {
        let gate = PullGate::new(1);
        let cancel = CancelToken::new();
        let first = gate.enter(&cancel).unwrap();
        cancel.cancel();
        assert!(gate.enter(&cancel).is_none(), "a second waits, and gives up when cancelled");
        drop(first);
        assert!(gate.enter(&cancel).is_some());
        let any = PullGate::new(0);
        let _a = any.enter(&cancel).unwrap();
        let _b = any.enter(&cancel).unwrap();
    }

    #[test]
    fn a_turn_waited_for_too_long_is_taken_beside_the_others() {
        let gate = PullGate::new(1);
        let cancel = CancelToken::new();
        let _held = gate.enter(&cancel).unwrap();
        let t = std::time::Instant::now();
        let late = gate.enter_within(&cancel, Some(Duration::from_millis(300)));
        assert!(late.is_some(), "a turn after the longest wait");
        assert!(t.elapsed() >= Duration::from_millis(300), "it waited {:?}", t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(2), "it waited {:?}", t.elapsed());
        drop(late);
        cancel.cancel();
        assert!(gate.enter_within(&cancel, Some(Duration::from_secs(5))).is_none(), "cancelled while waiting");
    }
}
