//! The worker thread of one pod, and the handle that owns it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use super::lifecycle::{AfterWork, Outcome, WorkKind};
use super::{Inner, StartWork, SyncError, WorkItem};

/// How long the thread of a finished worker waits to be handed the next
/// pod before it exits. Spawning a thread costs ~50-100 us here; a pod that
/// churns (or a burst of manifests) reuses idle threads instead.
const LINGER: Duration = Duration::from_secs(1);

/// What a worker thread is given: one pod to run to the end.
pub(super) struct Assignment {
    uid: String,
    notified: Receiver<()>,
    /// Never sent on: dropped when the pod's worker loop ends, which the
    /// handle sees as a disconnect.
    _done: Sender<()>,
}

/// Owns a pod worker: holds its notifier and learns when it ended. Each pod
/// worker has its own OS thread for as long as it runs; dropping the handle
/// disconnects the notifier and waits (bounded) for the worker to end.
pub(super) struct WorkerHandle {
    notify: Sender<()>,
    done: Receiver<()>,
}

fn set_thread_name(uid: &str) {
    let short: String = uid.chars().take(8).collect();
    if let Ok(name) = std::ffi::CString::new(format!("pod-{short}")) {
        crate::sys::set_current_thread_name(&name);
    }
}

impl WorkerHandle {
    /// Start the worker of pod `uid` on an idle worker thread, or on a new one.
    pub(super) fn spawn(inner: Arc<Inner>, uid: &str) -> std::io::Result<Self> {
        let (notify, notified) = crossbeam_channel::bounded(1);
        let (done_tx, done) = crossbeam_channel::bounded::<()>(0);
        let mut a = Assignment { uid: uid.to_string(), notified, _done: done_tx };
        // An idle thread takes it if there is one.
        while let Some(idle) = inner.idle.lock().pop() {
            match idle.send(a) {
                Ok(()) => return Ok(WorkerHandle { notify, done }),
                Err(e) => a = e.into_inner(),
            }
        }
        let short: String = uid.chars().take(8).collect();
        inner.threads.fetch_add(1, Ordering::SeqCst);
        let inner2 = inner.clone();
        let res =
            crate::base::thread::spawn(format!("pod-{short}"), Some(crate::base::thread::WORKER_STACK), move || {
                thread_main(&inner2, a);
                inner2.threads.fetch_sub(1, Ordering::SeqCst);
            });
        match res {
            Ok(_detached) => Ok(WorkerHandle { notify, done }),
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
        if let Err(RecvTimeoutError::Timeout) = self.done.recv_timeout(Duration::from_secs(2)) {
            log::warn!("a pod worker did not end within 2s of its removal; leaving it detached");
        }
    }
}

/// A worker thread: runs its pod's worker to the end, then waits up to
/// [`LINGER`] in the idle list for another pod.
fn thread_main(inner: &Arc<Inner>, first: Assignment) {
    let (assign_tx, assign_rx) = crossbeam_channel::bounded::<Assignment>(1);
    let mut a = first;
    loop {
        run(inner, &a.uid, &a.notified);
        drop(a);
        inner.idle.lock().push(assign_tx.clone());
        a = match assign_rx.recv_timeout(LINGER) {
            Ok(next) => next,
            Err(_) => {
                let mut idle = inner.idle.lock();
                match idle.iter().position(|s| s.same_channel(&assign_tx)) {
                    Some(pos) => {
                        idle.swap_remove(pos);
                        return;
                    }
                    // taken from the list just now: the pod is on its way
                    None => {
                        drop(idle);
                        match assign_rx.recv() {
                            Ok(next) => next,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
        set_thread_name(&a.uid);
    }
}

fn run(inner: &Arc<Inner>, uid: &str, rx: &Receiver<()>) {
    let mut deadline: Option<Instant> = None;
    let mut run_now = false;
    let mut ran = false;
    loop {
        if !run_now {
            // about to wait, maybe for a minute: the stack the pass
            // touched goes back to the kernel (see the function)
            if std::mem::take(&mut ran) {
                crate::sys::release_stack_below_here();
            }
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
        ran = true;
        match inner.complete_work(uid, &item, outcome, started.elapsed()) {
            AfterWork::Exit => return,
            AfterWork::Transition => run_now = true,
            AfterWork::Wait(d) => deadline = Some(crate::base::cancel::deadline_in(d)),
            AfterWork::WaitForUpdate => {}
        }
    }
}

// not inlined: the pass's frames stay below `run`'s, whose waits give
// them back (sys::release_stack_below_here)
#[inline(never)]
fn run_pass(inner: &Inner, item: &WorkItem) -> Outcome {
    let syncer = &inner.syncer;
    let ctx = &item.ctx;
    let who = match &item.work.pod {
        Some(p) => crate::model::pod_ref(p),
        None => match &item.work.running_pod {
            Some(r) => format!("{}/{} {} (runtime only)", r.namespace, r.name, r.uid),
            None => ctx.uid.clone(),
        },
    };
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<Outcome, SyncError> {
        match (item.kind, &item.work.pod, &item.work.running_pod) {
            (WorkKind::Sync, Some(pod), _) => {
                let r = syncer.sync_pod(ctx, item.work.update_type, pod)?;
                Ok(Outcome::Ok { terminal: r.terminal, requeue_after: r.requeue_after })
            }
            (WorkKind::Terminating, Some(pod), _) => {
                syncer.sync_terminating_pod(ctx, pod, item.grace, &item.status_fns)?;
                Ok(Outcome::Ok { terminal: true, requeue_after: None })
            }
            (WorkKind::Terminating, None, Some(rp)) => {
                syncer.sync_terminating_runtime_pod(ctx, rp, item.grace)?;
                Ok(Outcome::Ok { terminal: true, requeue_after: None })
            }
            (WorkKind::Terminated, Some(pod), _) => {
                syncer.sync_terminated_pod(ctx, pod, item.remove_content)?;
                Ok(Outcome::Ok { terminal: true, requeue_after: None })
            }
            (kind, _, _) => Err(SyncError::Invalid(format!("no pod to run {kind:?} work with"))),
        }
    }));
    match result {
        Ok(Ok(o)) => o,
        Ok(Err(SyncError::Cancelled)) => {
            log::debug!("pod {who}: {:?} pass interrupted", item.kind);
            Outcome::Cancelled
        }
        Ok(Err(e)) if e.is_permanent() => {
            log::error!("pod {who}: {:?} failed: {e}; not retried (this error cannot heal); going on", item.kind);
            Outcome::Failed
        }
        Ok(Err(e)) => {
            log::warn!("pod {who}: {:?} failed: {e}; retrying after back-off", item.kind);
            Outcome::Err
        }
        // One pod's bug must not stop the others (nor, by restarting the
        // agent, all of them in a loop): the pass is retried after back-off,
        // and the thread lives on.
        Err(payload) => {
            let msg = crate::base::thread::panic_message(payload.as_ref());
            log::error!("pod {who}: {:?} pass panicked: {msg}; retrying after back-off", item.kind);
            Outcome::Err
        }
    }
}
