//! The CRI client's container event streams: the CRI's own
//! `GetContainerEvents` (containerd 1.7+, the kubelet's evented PLEG) where
//! the runtime has it, otherwise containerd's event service
//! (`/containerd.services.events.v1.Events/Subscribe`: task create, start,
//! exit, OOM and delete in the CRI's `k8s.io` namespace), which containerd
//! 1.6 serves on the socket podwarden dials. Both are server streams
//! without a deadline, followed on the calling thread.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_core::Stream;
use grpcio::CallOption;

use super::{CriRuntime, convert_err, pb};
use crate::base::cancel::CancelToken;
use crate::runtime::events::{ContainerEvent, Exit, Kind, Note, Source};
use crate::runtime::{Op, Result, RuntimeError};

/// A stream that neither failed nor delivered within this long counts as
/// open: servers send nothing on a stream before its first event.
const OPEN_AFTER: Duration = Duration::from_millis(300);

/// How often a quiet stream is polled again on its own, a safety net: the
/// token unparks the thread when it is cancelled, and the call's waker when
/// a message comes or the stream fails (containerd killed: seen within
/// milliseconds). An idle agent's thread sleeps this long. A poll that
/// finds news no waker told of says so in the log (never seen since the
/// stall that once made this one second: two short soaks with this poll
/// at 60 s, containerd killed twice in each, settled at once); the
/// evented relist comes within 30 s anyway.
const CANCEL_POLL: Duration = Duration::from_secs(30);

/// containerd's filter: the CRI's tasks and containers (a container or
/// sandbox created or removed has no task event: while the stream is open
/// the relist is rare, and these keep its list current).
const CONTAINERD_FILTER: &str = r#"namespace==k8s.io,topic~="^/(tasks|containers)/""#;

pub(super) fn watch(rt: &CriRuntime, cancel: &CancelToken, on: &mut dyn FnMut(Note)) -> Result<()> {
    if !rt.no_cri_events.load(Ordering::Relaxed) {
        let req = pb::api::GetEventsRequest::new();
        let rx = rt
            .runtime
            .get_container_events_opt(&req, CallOption::default())
            .map_err(|e| convert_err(Op::GetContainerEvents, e))?;
        match follow(rx, Op::GetContainerEvents, Source::Cri, cancel, on, cri_event) {
            Err(RuntimeError::Unimplemented { .. }) => {
                log::debug!("the runtime has no CRI GetContainerEvents; trying containerd's event service");
                rt.no_cri_events.store(true, Ordering::Relaxed);
            }
            other => return other,
        }
    }
    let mut req = pb::containerd_events::api::SubscribeRequest::new();
    req.filters.push(CONTAINERD_FILTER.to_string());
    let rx = rt
        .containerd_events
        .subscribe_opt(&req, CallOption::default())
        .map_err(|e| convert_err(Op::GetContainerEvents, e))?;
    // an exit is shown from its event on (the CRI shows it a moment later)
    let mut noted = |n: Note| {
        if let Note::Event(e) = &n {
            rt.exits.note(e);
            // an OOM told after the exit: a status kept without it is stale
            if e.kind == Kind::Oom {
                rt.finished.forget(&e.container_id);
            }
        }
        on(n)
    };
    follow(rx, Op::GetContainerEvents, Source::Containerd, cancel, &mut noted, containerd_event)
}

fn cri_event(r: pb::api::ContainerEventResponse) -> Option<ContainerEvent> {
    use pb::api::ContainerEventType as T;
    let kind = match r.container_event_type.enum_value() {
        Ok(T::CONTAINER_CREATED_EVENT) => Kind::Created,
        Ok(T::CONTAINER_STARTED_EVENT) => Kind::Started,
        Ok(T::CONTAINER_STOPPED_EVENT) => Kind::Exited,
        Ok(T::CONTAINER_DELETED_EVENT) => Kind::Deleted,
        Err(_) => return None,
    };
    Some(ContainerEvent { container_id: r.container_id, kind, exit: None })
}

fn containerd_event(e: pb::containerd_events::api::Envelope) -> Option<ContainerEvent> {
    let kind = match e.topic.as_str() {
        "/tasks/create" => Kind::Created,
        "/tasks/start" => Kind::Started,
        "/tasks/exit" => Kind::Exited,
        "/tasks/oom" => Kind::Oom,
        "/tasks/delete" => Kind::Deleted,
        // `ContainerCreate` and `ContainerDelete` carry the ID as field 1,
        // as the task events do
        "/containers/create" => Kind::Created,
        "/containers/delete" => Kind::Deleted,
        _ => return None,
    };
    let body = e.event.as_ref()?;
    if kind == Kind::Exited {
        let exit: pb::containerd_events::api::TaskExit = protobuf::Message::parse_from_bytes(&body.value).ok()?;
        // an exec'd process (a probe's, `kubectl exec`'s): the container runs on
        if exit.id != exit.container_id {
            return None;
        }
        let at = exit.exited_at.get_or_default();
        let at_ns = at.seconds.saturating_mul(1_000_000_000).saturating_add(i64::from(at.nanos));
        let code = exit.exit_status as i32;
        return Some(ContainerEvent { container_id: exit.container_id, kind, exit: Some(Exit { code, at_ns }) });
    }
    let task: pb::containerd_events::api::TaskEvent = protobuf::Message::parse_from_bytes(&body.value).ok()?;
    Some(ContainerEvent { container_id: task.container_id, kind, exit: None })
}

/// Follow one server stream until it ends (an error), fails or `cancel`
/// fires (`Ok`). `Opened` is noted on the first message, or once the
/// stream went [`OPEN_AFTER`] without failing.
fn follow<T>(
    mut rx: grpcio::ClientSStreamReceiver<T>,
    op: Op,
    source: Source,
    cancel: &CancelToken,
    on: &mut dyn FnMut(Note),
    convert: impl Fn(T) -> Option<ContainerEvent>,
) -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::task::{Context, Poll, Wake, Waker};
    /// Unparks the thread, and notes that it did.
    struct Unpark(std::thread::Thread, AtomicBool);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.1.store(true, Ordering::SeqCst);
            self.0.unpark();
        }
    }
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicBool::new(false)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    cancel.unpark_me_on_cancel();
    let open_at = Instant::now() + OPEN_AFTER;
    let mut open = false;
    // the last park ran out its time without the waker
    let mut unwoken = false;
    loop {
        let polled = std::pin::Pin::new(&mut rx).poll_next(&mut cx);
        if std::mem::take(&mut unwoken) && polled.is_ready() {
            log::warn!(
                "the runtime's event stream ({}) had news that did not wake its thread: seen {CANCEL_POLL:?} late at most",
                source.name()
            );
        }
        match polled {
            Poll::Ready(Some(Ok(item))) => {
                if !open {
                    open = true;
                    on(Note::Opened(source));
                }
                if let Some(e) = convert(item) {
                    on(Note::Event(e));
                }
                continue;
            }
            Poll::Ready(Some(Err(e))) => return Err(convert_err(op, e)),
            Poll::Ready(None) => return Err(RuntimeError::Unavailable(format!("{op}: the runtime ended the stream"))),
            Poll::Pending => {}
        }
        if cancel.is_cancelled() {
            rx.cancel();
            return Ok(());
        }
        let now = Instant::now();
        if !open && now >= open_at {
            open = true;
            on(Note::Opened(source));
        }
        let wait = if open { CANCEL_POLL } else { open_at.saturating_duration_since(now).min(CANCEL_POLL) };
        let parked = Instant::now();
        std::thread::park_timeout(wait);
        unwoken = !unpark.1.swap(false, Ordering::SeqCst) && parked.elapsed() >= wait;
    }
}
