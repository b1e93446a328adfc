//! Whether an image pull still makes progress (`imagePullProgressDeadline`),
//! judged from containerd's ingests as the CRI client reads them.

use std::time::Duration;

/// Whether a pull still makes progress, from containerd's ingests (the
/// downloads into its content store): it is stalled when, for the whole
/// deadline, the ingests stayed the same, or none began yet (resolving).
/// Once a download was seen, a time without any (unpacking, between
/// blobs) is not a stall. Any pull's progress counts for all.
pub(super) struct PullWatch {
    deadline: Duration,
    /// The ingests last seen (none when the pull began).
    last: Vec<(String, i64)>,
    downloaded: bool,
    pub(super) since: std::time::Instant,
    pub(super) next: std::time::Instant,
}

impl PullWatch {
    const EVERY: Duration = Duration::from_secs(1);

    pub(super) fn new(deadline: Duration) -> Self {
        let now = std::time::Instant::now();
        PullWatch { deadline, last: Vec::new(), downloaded: false, since: now, next: now + Self::EVERY }
    }

    /// How long there was no progress, once that reaches the deadline.
    /// Reads `ingests` about once a second; `None` from it (the runtime
    /// cannot tell) is never a stall.
    pub(super) fn stalled(&mut self, ingests: impl FnOnce() -> Option<Vec<(String, i64)>>) -> Option<Duration> {
        self.observe(std::time::Instant::now(), ingests)
    }

    pub(super) fn observe(
        &mut self,
        now: std::time::Instant,
        ingests: impl FnOnce() -> Option<Vec<(String, i64)>>,
    ) -> Option<Duration> {
        if self.deadline.is_zero() || now < self.next {
            return None;
        }
        self.next = now + Self::EVERY;
        let Some(seen) = ingests() else {
            self.since = now;
            return None;
        };
        self.downloaded |= !seen.is_empty();
        if seen != self.last || (seen.is_empty() && self.downloaded) {
            self.since = now;
        }
        self.last = seen;
        let idle = now - self.since;
        (idle >= self.deadline).then_some(idle)
    }
}
