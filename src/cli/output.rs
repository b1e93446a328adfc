//! The client's output as kubectl formats it: ages, aligned tables, YAML,
//! and what `get pods` shows of a pod (READY, STATUS, RESTARTS).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::view;
use crate::cli::error::{CliError, Result};
use crate::model::{Pod, Time};

/// `v` as YAML.
pub(super) fn yaml_text<T: serde::Serialize>(v: &T) -> Result<String> {
    view::to_yaml(v).map_err(CliError::Yaml)
}

/// kubectl's short ages: `45s`, `3m20s`, `15m`, `4h5m`, `30h`, `3d4h`, `20d`, `2y100d`.
pub fn age(d: Duration) -> String {
    view::short_age(d)
}

/// The age of a time the daemon sent as text (an event's), else `<unknown>`.
pub(super) fn since_text(t: &str) -> String {
    t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(Time).as_ref().map_or_else(|| "<unknown>".into(), since)
}

/// The age of `t`, else `<unknown>` (in the future).
pub(super) fn since(t: &Time) -> String {
    view::age_of(t).map_or_else(|| "<unknown>".into(), age)
}

/// Columns separated by three spaces, each as wide as its widest cell.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The STATUS column as kubectl computes it.
pub fn pod_status(p: &Pod) -> String {
    view::pod_summary(p).status
}

/// The READY, STATUS and RESTARTS columns of `get pods` for `p`.
pub fn pod_columns(p: &Pod) -> (String, String, i64) {
    let s = view::pod_summary(p);
    (format!("{}/{}", s.ready, s.total), s.status, s.restarts)
}

/// A pod's row of `get pods` (`wide`: with IP and NODE; `with_ns`: with
/// NAMESPACE first).
pub(super) fn pod_row(p: &Pod, wide: bool, with_ns: bool) -> Vec<String> {
    let sum = view::pod_summary(p);
    let st = p.status.as_ref();
    let mut row = Vec::new();
    if with_ns {
        row.push(p.metadata.namespace.clone().unwrap_or_default());
    }
    row.extend([
        p.metadata.name.clone().unwrap_or_default(),
        format!("{}/{}", sum.ready, sum.total),
        sum.status,
        sum.restarts.to_string(),
        st.and_then(|s| s.start_time.as_ref()).map_or_else(|| "<unknown>".into(), since),
    ]);
    if wide {
        row.push(st.and_then(|s| s.pod_ip.clone()).unwrap_or_else(|| "<none>".into()));
        row.push(p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_else(|| "<none>".into()));
    }
    row
}

/// `k=v` lines (`<none>` when empty), as `describe` shows labels.
pub(super) fn kv_map(m: Option<&BTreeMap<String, String>>) -> String {
    match m {
        Some(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n              ")
        }
        _ => "<none>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (540, "9m"),
            (900, "15m"),
            (4 * 3600 + 300, "4h5m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (20 * 86400, "20d"),
            (3 * 365 * 86400 + 100 * 86400, "3y100d"),
        ];
        for (s, want) in cases {
            assert_eq!(age(Duration::from_secs(s)), want, "{s}s");
        }
    }

    #[test]
    fn tables_align_columns_with_three_spaces() {
        let t = table(&[
            vec!["NAME".into(), "READY".into(), "STATUS".into()],
            vec!["web-server".into(), "1/1".into(), "Running".into()],
        ]);
        assert_eq!(t, "NAME         READY   STATUS\nweb-server   1/1     Running\n");
    }

    #[test]
    fn status_column_prefers_container_reasons_like_kubectl() {
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}));
        assert_eq!(pod_status(&p), "CrashLoopBackOff");
        let p = pod(serde_json::json!({"status": {"phase": "Failed", "reason": "NodeShutdown"}}));
        assert_eq!(pod_status(&p), "NodeShutdown");
        let p = pod(serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}}));
        assert_eq!(pod_status(&p), "Completed");
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0, "signal": 9}}}]}}));
        assert_eq!(pod_status(&p), "Signal:9");
        let p = pod(serde_json::json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 3}}}]}}));
        assert_eq!(pod_status(&p), "ExitCode:3");
        let p = pod(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}}));
        assert_eq!(pod_status(&p), "Terminating");
        assert_eq!(pod_status(&pod(serde_json::json!({}))), "Unknown");
    }
}
