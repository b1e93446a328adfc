//! The worker thread of one pod, and the handle that owns it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use super::lifecycle::{AfterWork, Outcome, WorkKind};
use super::{Inner, StartWork, SyncError, WorkItem};

/// Owns a worker thread: holds its notifier and join handle. Dropping it
/// disconnects the notifier, waits (bounded) for the thread to end, and
/// joins it.
pub(super) struct WorkerHandle {
    notify: Sender<()>,
    done: Receiver<()>,
    join: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    pub(super) fn spawn(inner: Arc<Inner>, uid: &str) -> std::io::Result<Self> {
        let (notify, rx) = crossbeam_channel::bounded(1);
        let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
        let short: String = uid.chars().take(8).collect();
        let uid = uid.to_string();
        inner.threads.fetch_add(1, Ordering::SeqCst);
        let inner2 = inner.clone();
        let res = crate::thread::spawn(format!("pod-{short}"), Some(crate::thread::WORKER_STACK), move || {
            let _done = done_tx; // disconnects `done` when the thread ends
            run(&inner2, &uid, &rx);
            inner2.threads.fetch_sub(1, Ordering::SeqCst);
        });
        match res {
            Ok(join) => Ok(WorkerHandle {
                notify,
                done,
                join: Some(join),
            }),
            Err(e) => {
                inner.threads.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Wake the worker; a wake-up already queued is enough.
    pub(super) fn notify(&self) {
        match self.notify.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        // Replacing the sender disconnects the worker's notifier.
        let (tx, _) = crossbeam_channel::bounded(1);
        drop(std::mem::replace(&mut self.notify, tx));
        match self.done.recv_timeout(Duration::from_secs(2)) {
            Err(RecvTimeoutError::Timeout) => {
                log::warn!("a pod worker did not end within 2s of its removal; leaving it detached");
            }
            _ => {
                if let Some(j) = self.join.take() {
                    let _ = j.join();
                }
            }
        }
    }
}

fn run(inner: &Arc<Inner>, uid: &str, rx: &Receiver<()>) {
    let mut deadline: Option<Instant> = None;
    let mut run_now = false;
    loop {
        if !run_now {
            let woke = match deadline {
                Some(d) => rx.recv_deadline(d),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match woke {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    deadline = None;
                    if !inner.requeue_last(uid) {
                        continue;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        run_now = false;
        let item = match inner.start_work(uid, rx) {
            StartWork::Gone => return,
            StartWork::Idle => continue,
            StartWork::Run(item) => item,
        };
        deadline = None;
        let started = Instant::now();
        let outcome = run_pass(inner, &item);
        match inner.complete_work(uid, &item, outcome, started.elapsed()) {
            AfterWork::Exit => return,
            AfterWork::Transition => run_now = true,
            AfterWork::Wait(d) => deadline = Some(Instant::now() + d),
            AfterWork::WaitForUpdate => {}
        }
    }
}

fn run_pass(inner: &Inner, item: &WorkItem) -> Outcome {
    let syncer = &inner.syncer;
    let ctx = &item.ctx;
    let uid = ctx.uid.as_str();
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<Outcome, SyncError> {
        match (item.kind, &item.work.pod, &item.work.running_pod) {
            (WorkKind::Sync, Some(pod), _) => {
                let r = syncer.sync_pod(ctx, item.work.update_type, pod)?;
                Ok(Outcome::Ok {
                    terminal: r.terminal,
                    requeue_after: r.requeue_after,
                })
            }
            (WorkKind::Terminating, Some(pod), _) => {
                syncer.sync_terminating_pod(ctx, pod, item.grace, &item.status_fns)?;
                Ok(Outcome::Ok {
                    terminal: true,
                    requeue_after: None,
                })
            }
            (WorkKind::Terminating, None, Some(rp)) => {
                syncer.sync_terminating_runtime_pod(ctx, rp, item.grace)?;
                Ok(Outcome::Ok {
                    terminal: true,
                    requeue_after: None,
                })
            }
            (WorkKind::Terminated, Some(pod), _) => {
                syncer.sync_terminated_pod(ctx, pod, item.remove_content)?;
                Ok(Outcome::Ok {
                    terminal: true,
                    requeue_after: None,
                })
            }
            (kind, _, _) => Err(SyncError::Other(format!("no pod to run {kind:?} work with"))),
        }
    }));
    match result {
        Ok(Ok(o)) => o,
        Ok(Err(SyncError::Cancelled)) => {
            log::debug!("pod {uid}: {:?} pass interrupted", item.kind);
            Outcome::Cancelled
        }
        Ok(Err(e)) => {
            log::warn!("pod {uid}: {:?} failed: {e}; retrying after back-off", item.kind);
            Outcome::Err
        }
        Err(_) => {
            log::error!("pod {uid}: {:?} pass panicked; retrying after back-off", item.kind);
            Outcome::Err
        }
    }
}
