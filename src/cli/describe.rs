//! `describe pod` as kubectl shows it: the pod, each container (state,
//! probes, hooks, last probe failure), conditions and events.

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus};

use crate::api::view;
use crate::cli::args::Args;
use crate::cli::error::Result;
use crate::cli::output::{kv_map, pod_status, since_text, table};
use crate::model::Time;

/// A container state as `kubectl describe` shows it; `<none>` when unset.
/// A probe as `kubectl describe` shows it: the handler, then the timing.
fn probe_text(p: &k8s_openapi::api::core::v1::Probe) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let port = |p: &IntOrString| match p {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let handler = if let Some(e) = &p.exec {
        format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(h) = &p.http_get {
        format!(
            "http-get {}://{}:{}{}",
            h.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            h.host.as_deref().unwrap_or(""),
            port(&h.port),
            h.path.as_deref().unwrap_or("")
        )
    } else if let Some(t) = &p.tcp_socket {
        format!("tcp-socket {}:{}", t.host.as_deref().unwrap_or(""), port(&t.port))
    } else {
        "unknown".to_string()
    };
    let t = crate::pod::prober::Timing::of(p);
    format!(
        "{handler} delay={}s timeout={}s period={}s #success={} #failure={}",
        t.initial_delay.as_secs(),
        t.timeout.as_secs(),
        t.period.as_secs(),
        t.success_threshold,
        t.failure_threshold
    )
}

fn state_text(s: Option<&ContainerState>, indent: &str) -> String {
    let Some(s) = s else { return "<none>".into() };
    let time = |t: &Option<Time>| t.as_ref().map(view::time_text);
    // (name, reason, message, exit code, started, finished)
    let (name, reason, message, exit_code, started, finished) = if let Some(r) = &s.running {
        ("Running", None, None, None, time(&r.started_at), None)
    } else if let Some(t) = &s.terminated {
        (
            "Terminated",
            t.reason.clone(),
            t.message.clone(),
            Some(t.exit_code),
            time(&t.started_at),
            time(&t.finished_at),
        )
    } else if let Some(w) = &s.waiting {
        ("Waiting", w.reason.clone(), w.message.clone(), None, None, None)
    } else {
        return "<none>".into();
    };
    let mut out = name.to_string();
    for (label, v) in [
        ("Reason", reason),
        ("Message", message),
        ("Exit Code", exit_code.map(|c| c.to_string())),
        ("Started", started),
        ("Finished", finished),
    ] {
        if let Some(v) = v {
            out.push_str(&format!("\n{indent}  {:<14}{v}", format!("{label}:")));
        }
    }
    out
}

/// A state with something in it (`lastState` is `{}` until a restart).
fn state_is_set(s: Option<&ContainerState>) -> bool {
    s.is_some_and(|s| s.running.is_some() || s.terminated.is_some() || s.waiting.is_some())
}

/// A lifecycle hook as `describe` shows it.
fn hook_text(h: &k8s_openapi::api::core::v1::LifecycleHandler) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if let Some(e) = &h.exec {
        format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(g) = &h.http_get {
        let port = match &g.port {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        format!(
            "http-get {}://{}:{port}{}",
            g.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            g.host.as_deref().unwrap_or(""),
            g.path.as_deref().unwrap_or("")
        )
    } else if let Some(s) = &h.sleep {
        format!("sleep {}s", s.seconds)
    } else {
        "unknown".to_string()
    }
}

/// One container's part of `describe pod`: its status, probes, hooks and
/// its last failed probe (from the events, which name the container).
fn describe_container(
    out: &mut String,
    ctr: &Container,
    statuses: &[ContainerStatus],
    events: &[crate::api::pb::api::Event],
) {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let cs = statuses.iter().find(|c| c.name == ctr.name).cloned().unwrap_or_default();
    out.push_str(&format!("  {}:\n", ctr.name));
    let mut cl = |k: &str, v: String| out.push_str(&format!("    {:<15} {v}\n", format!("{k}:")));
    cl("Container ID", s(&cs.container_id));
    cl("Image", s(&ctr.image));
    cl("Image ID", cs.image_id.clone());
    if let Some(cmd) = &ctr.command {
        cl("Command", cmd.join(" "));
    }
    if let Some(p) = &ctr.restart_policy {
        cl("Restart Policy", p.clone());
    }
    cl("State", state_text(cs.state.as_ref(), "    "));
    if state_is_set(cs.last_state.as_ref()) {
        cl("Last State", state_text(cs.last_state.as_ref(), "    "));
    }
    cl("Ready", if cs.ready { "True".into() } else { "False".into() });
    cl("Restart Count", cs.restart_count.to_string());
    for (label, probe) in
        [("Liveness", &ctr.liveness_probe), ("Readiness", &ctr.readiness_probe), ("Startup", &ctr.startup_probe)]
    {
        if let Some(p) = probe {
            cl(label, probe_text(p));
        }
    }
    if let Some(l) = &ctr.lifecycle {
        if let Some(h) = &l.post_start {
            cl("Post Start Hook", hook_text(h));
        }
        if let Some(h) = &l.pre_stop {
            cl("Pre Stop Hook", hook_text(h));
        }
    }
    let suffix = format!("{{{}}}", ctr.name);
    if let Some(e) = events.iter().rev().find(|e| e.reason == "Unhealthy" && e.field_path.ends_with(&suffix)) {
        cl("Last Probe Failure", format!("{} ({} ago)", e.message, since_text(&e.time)));
    }
}

/// `describe pod NAME`.
pub(super) fn describe(a: &Args) -> Result<String> {
    let name = a.kind_and_name("describe", true)?.unwrap_or_default();
    let c = a.client()?;
    let (p, manifest) = c.get_pod(&a.ns(), &name)?;
    let events = c.events(Some((&a.ns(), &name)))?;
    let m = &p.metadata;
    let spec = p.spec.clone().unwrap_or_default();
    let st = p.status.clone().unwrap_or_default();
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{:<14}{v}\n", format!("{k}:")));
    line("Name", s(&m.name));
    line("Namespace", s(&m.namespace));
    line("UID", s(&m.uid));
    line("Priority", spec.priority.unwrap_or(0).to_string());
    if let Some(pc) = &spec.priority_class_name {
        line("Priority Class", pc.clone());
    }
    line("Manifest", manifest);
    line("Start Time", st.start_time.as_ref().map_or_else(|| "<unset>".into(), view::time_text));
    line("Labels", kv_map(m.labels.as_ref()));
    line("Status", pod_status(&p));
    if let Some(r) = &st.reason {
        line("Reason", r.clone());
    }
    if let Some(msg) = &st.message {
        line("Message", msg.clone());
    }
    line("IP", s(&st.pod_ip));
    line("Grace Period", format!("{}s", spec.termination_grace_period_seconds.unwrap_or(30)));
    let inits = spec.init_containers.clone().unwrap_or_default();
    if !inits.is_empty() {
        out.push_str("Init Containers:\n");
        let statuses = st.init_container_statuses.clone().unwrap_or_default();
        for ctr in &inits {
            describe_container(&mut out, ctr, &statuses, &events);
        }
    }
    out.push_str("Containers:\n");
    let statuses = st.container_statuses.clone().unwrap_or_default();
    for ctr in &spec.containers {
        describe_container(&mut out, ctr, &statuses, &events);
    }
    out.push_str("Conditions:\n");
    let mut rows = vec![vec!["  Type".to_string(), "Status".to_string()]];
    for cond in st.conditions.iter().flatten() {
        rows.push(vec![format!("  {}", cond.type_), cond.status.clone()]);
    }
    out.push_str(&table(&rows));
    out.push_str(&format!("{:<14}{}\n", "QoS Class:", s(&st.qos_class)));
    if events.is_empty() {
        out.push_str("Events:       <none>\n");
    } else {
        out.push_str("Events:\n");
        let mut rows = vec![["  Type", "Reason", "Age", "Message"].iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        for e in &events {
            rows.push(vec![format!("  {}", e.type_), e.reason.clone(), since_text(&e.time), e.message.clone()]);
        }
        out.push_str(&table(&rows));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_states_read_like_kubectl_describe() {
        let state = |v: serde_json::Value| -> ContainerState { serde_json::from_value(v).unwrap() };
        assert_eq!(state_text(None, "  "), "<none>");
        assert_eq!(state_text(Some(&state(serde_json::json!({}))), "  "), "<none>");
        assert!(!state_is_set(Some(&state(serde_json::json!({})))));
        let s = state(serde_json::json!({"terminated": {"reason": "Error", "exitCode": 2,
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:05Z"}}));
        assert_eq!(
            state_text(Some(&s), "  "),
            "Terminated\n    Reason:       Error\n    Exit Code:    2\n    Started:      2026-01-01T00:00:00Z\n    \
             Finished:     2026-01-01T00:00:05Z"
        );
        let s = state(serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}));
        assert_eq!(state_text(Some(&s), ""), "Waiting\n  Reason:       CrashLoopBackOff\n  Message:      back-off");
    }
}
