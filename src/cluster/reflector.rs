//! List and watch one collection of the API, as client-go's reflector
//! does: a list (`resourceVersion=0`, served from the API server's cache),
//! then watches resumed from the last version seen (bookmarks asked for,
//! each watch asked to end after 5 to 10 minutes so that nodes spread
//! their renewals), a 410 (the version is too old) one new list; a failure
//! is retried with the back-off of [`super::node::backoff`]. What was
//! listed and watched goes to a [`Store`]; the loop is the same for the
//! node's pods, the services and each watched ConfigMap or Secret.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ClusterError, Shared};

/// A watch is asked to end after 5 to 10 minutes (the reflector's range),
/// then resumed from its last version.
const WATCH_MIN: u64 = 300;
/// The longest a watch may stay silent beyond its own timeout.
const WATCH_SLACK: Duration = Duration::from_secs(30);

/// Where a reflector puts what it reads.
pub trait Store {
    /// A full list: `items` replace whatever was there.
    fn replace(&mut self, items: Vec<Value>);
    /// An object added or modified.
    fn upsert(&mut self, object: Value);
    /// An object deleted (its last state).
    fn delete(&mut self, object: Value);
    /// A list or a burst of events was taken in and no event waits: the
    /// moment to tell others (called at most once per burst).
    fn settled(&mut self) {}
    /// A list answered, or a watch stream opened: the store follows the
    /// API again.
    fn connected(&mut self) {}
}

/// One collection to reflect: `what` names it in errors ("the node's
/// pods"), `collection` is its path with any selector
/// (`/api/v1/pods?fieldSelector=...`).
pub struct Reflector<'a> {
    pub what: &'a str,
    pub collection: &'a str,
}

impl Reflector<'_> {
    /// List and watch into `store` until `go_on` says no (or `shared`
    /// stops); waits for an identity while there is none.
    pub fn run(&self, shared: &Shared, store: &mut dyn Store, go_on: &dyn Fn() -> bool) {
        let mut failures = 0u32;
        let logged = crate::base::logging::RateLimit::new(Duration::from_secs(60));
        let mut resume: Option<String> = None;
        let go_on = || go_on() && !shared.stopped();
        while go_on() {
            // after the Lease (the node thread), never before
            if !shared.wait_link(&go_on) {
                return;
            }
            let Some(client) = shared.client() else {
                shared.pause(Duration::from_millis(500));
                continue;
            };
            let step = match &resume {
                None => self.list(&client, store).map(Some),
                Some(rv) => self.watch(&client, rv, store, &go_on),
            };
            match step {
                Ok(next) => {
                    failures = 0;
                    resume = next;
                }
                Err(e) => {
                    failures += 1;
                    if matches!(e, ClusterError::Unreachable(_) | ClusterError::Tls(_)) {
                        shared.link_lost(&e);
                    }
                    // the node authorizer learns of a pod's Secrets from
                    // its own watch: a read just after the pod was bound
                    // is refused until it catches up, so retry soon
                    let lag = graph_lag(&e) && failures <= 5;
                    if lag {
                        log::info!(
                            "cluster: {}: not yet allowed (the node authorizer has not seen the pod using it; attempt {failures})",
                            self.what
                        );
                    } else if logged.allow().is_some() || failures == 1 {
                        log::error!("cluster: {}: {e} (attempt {failures}; retrying with back-off)", self.what);
                    }
                    let wait = if lag { Duration::from_millis(200) * failures } else { super::node::backoff(failures) };
                    let until = Instant::now() + wait;
                    while go_on() && Instant::now() < until {
                        shared.pause(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(500)));
                    }
                }
            }
        }
    }

    fn url(&self, query: &str) -> String {
        let sep = if self.collection.contains('?') { '&' } else { '?' };
        format!("{}{sep}{query}", self.collection)
    }

    /// One list into the store: the version to watch from.
    fn list(&self, client: &super::http::Client, store: &mut dyn Store) -> Result<String, ClusterError> {
        let r = client.get(&self.url("resourceVersion=0"))?;
        if r.status != 200 {
            return Err(super::api_error(&format!("listing {}", self.what), &r));
        }
        let mut list: Value = serde_json::from_slice(&r.body)
            .map_err(|e| ClusterError::Protocol(format!("the list of {}: {e}", self.what)))?;
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let items = match list["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        store.connected();
        store.replace(items);
        store.settled();
        log::debug!("cluster: listed {} (resourceVersion {rv})", self.what);
        Ok(rv)
    }

    /// One watch from `rv` until it ends: `Some(version)` to resume from,
    /// `None` for a new list (410).
    fn watch(
        &self,
        client: &super::http::Client,
        rv: &str,
        store: &mut dyn Store,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Option<String>, ClusterError> {
        let timeout = WATCH_MIN + super::jitter(WATCH_MIN);
        let path =
            self.url(&format!("watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={timeout}"));
        let mut lines = match client.stream(&path)? {
            Ok(lines) => lines,
            Err(r) if r.status == 410 => return Ok(None),
            Err(r) => return Err(super::api_error(&format!("watching {}", self.what), &r)),
        };
        store.connected();
        let mut rv = rv.to_string();
        let mut dirty = false;
        let idle = Duration::from_secs(timeout) + WATCH_SLACK;
        while let Some(line) = lines.next(Duration::from_secs(1), idle, go_on)? {
            let mut event: Value = serde_json::from_slice(&line)
                .map_err(|e| ClusterError::Protocol(format!("a watch event of {}: {e}", self.what)))?;
            let object = event["object"].take();
            if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
            match event["type"].as_str().unwrap_or_default() {
                "ADDED" | "MODIFIED" => {
                    store.upsert(object);
                    dirty = true;
                }
                "DELETED" => {
                    store.delete(object);
                    dirty = true;
                }
                "BOOKMARK" => {}
                "ERROR" if object["code"].as_u64() == Some(410) => return Ok(None),
                "ERROR" => {
                    let message = object["message"].as_str().unwrap_or_default();
                    return Err(ClusterError::Protocol(format!("watching {}: {message}", self.what)));
                }
                other => {
                    return Err(ClusterError::Protocol(format!("a watch event of {} of type {other:?}", self.what)));
                }
            }
            // a burst of events is one change for the store's readers
            if dirty && !lines.has_line() {
                store.settled();
                dirty = false;
            }
        }
        if dirty {
            store.settled();
        }
        Ok(Some(rv))
    }
}

/// Whether `e` is the node authorizer refusing an object only because its
/// graph has not yet seen the pod that uses it.
fn graph_lag(e: &ClusterError) -> bool {
    matches!(e, ClusterError::Api { status: 403, message, .. } if message.contains("no relationship found between node"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_authorizers_missing_relationship_is_lag() {
        let api = |status, message: &str| ClusterError::Api { what: "x".into(), status, message: message.into() };
        let lag = "secrets \"creds\" is forbidden: User \"system:node:n\" cannot list resource \"secrets\" in API group \"\" in the namespace \"ns\": no relationship found between node 'n' and this object";
        assert!(graph_lag(&api(403, lag)));
        assert!(!graph_lag(&api(403, "secrets is forbidden: User \"system:node:n\" cannot list resource \"secrets\"")));
        assert!(!graph_lag(&api(404, lag)));
        assert!(!graph_lag(&ClusterError::Unreachable("x".into())));
    }
}
