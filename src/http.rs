//! The read-only HTTP endpoint (`address`:`readOnlyPort`): `/healthz`,
//! `/pods` (a v1 PodList, env values redacted), `/node` (the node report) and `/metrics` (Prometheus
//! text format). A small hand-written HTTP/1.1 responder for GET only: one
//! request per connection, bounded reads with timeouts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use crate::agent::Agent;
use crate::model::{self, Pod};

/// Owns the HTTP thread; dropping it stops and joins the thread.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Listen on `addr`; `/healthz` is ok while `Agent::health(healthy_within)`
    /// is; `/pods` redacts env values when `redact`.
    pub fn start(addr: SocketAddr, agent: Arc<Agent>, healthy_within: Duration, redact: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let join = crate::thread::spawn("http", None, move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                match conn {
                    Ok(s) => {
                        if let Err(e) = serve(s, &agent, healthy_within, redact) {
                            log::debug!("http: {e}");
                        }
                    }
                    Err(e) => log::warn!("http: accept failed: {e}"),
                }
            }
        })?;
        Ok(HttpServer { addr, stop, join: Some(join) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn respond(s: &mut TcpStream, code: u16, reason: &str, ctype: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        s,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    s.flush()
}

fn serve(mut s: TcpStream, agent: &Agent, healthy_within: Duration, redact: bool) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new((&s).take(16 * 1024));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // drain headers
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return respond(&mut s, 405, "Method Not Allowed", "text/plain", b"only GET\n");
    }
    match path {
        "/healthz" => match agent.health(healthy_within) {
            Ok(()) => respond(&mut s, 200, "OK", "text/plain", b"ok"),
            Err(e) => respond(&mut s, 500, "Internal Server Error", "text/plain", e.as_bytes()),
        },
        "/node" => {
            let report = crate::node::report(agent, healthy_within, &agent.runtime.version());
            let body = serde_json::to_vec(&report).unwrap_or_default();
            respond(&mut s, 200, "OK", "application/json", &body)
        }
        "/pods" | "/pods/" => {
            let body = serde_json::to_vec(&pod_list(agent, redact)).unwrap_or_default();
            respond(&mut s, 200, "OK", "application/json", &body)
        }
        "/metrics" => {
            let body = crate::metrics::render(&agent.metrics);
            respond(&mut s, 200, "OK", "text/plain; version=0.0.4", body.as_bytes())
        }
        _ => respond(&mut s, 404, "Not Found", "text/plain", b"not found\n"),
    }
}

/// Replace every env value with a placeholder (the kubelet's read-only port
/// shows them; secrets end up there).
pub fn redact_env(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
            for e in c.env.iter_mut().flatten() {
                if e.value.is_some() {
                    e.value = Some("<redacted>".into());
                }
            }
        }
    }
}

/// Every pod podwarden knows from its source, with its status, and the
/// pods still terminating after their manifest went (with a
/// `deletionTimestamp`, shown as Terminating), as a v1 PodList.
pub fn pod_list(agent: &Agent, redact: bool) -> serde_json::Value {
    let desired = agent.desired();
    let wanted: std::collections::HashSet<String> = desired.iter().map(|d| model::uid(&d.pod).to_string()).collect();
    let going = agent
        .workers
        .snapshot()
        .into_iter()
        .filter(|w| !wanted.contains(&w.uid) && w.phase < crate::podworkers::Phase::Terminated)
        .filter_map(|w| w.pod)
        .filter(|p| model::is_static(p)) // not orphaned runtime pods
        .map(|p| {
            let mut pod = (*p).clone();
            pod.metadata.deletion_timestamp.get_or_insert_with(model::now_time);
            std::sync::Arc::new(pod)
        });
    let items: Vec<serde_json::Value> = desired
        .into_iter()
        .map(|d| d.pod)
        .chain(going)
        .map(|p| {
            let mut pod = (*p).clone();
            pod.status = agent.statuses.get(model::uid(&pod));
            if redact {
                redact_env(&mut pod);
            }
            let mut v = serde_json::to_value(&pod).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("apiVersion".into(), json!("v1"));
                o.insert("kind".into(), json!("Pod"));
            }
            v
        })
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}
