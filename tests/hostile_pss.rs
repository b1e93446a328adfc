//! The Pod Security Standards boundary end to end: the real binary on the
//! private containerd (`scripts/e2e-env.sh up`), the CLI run as root and as
//! a non-root member of `apiGroup`.
//!
//! - a member's hostile manifests are refused by `apply` with the API
//!   server's exact message, nothing lands in `staticPodPath`, and the agent
//!   stays healthy with bounded RSS; root applies the same manifests (the
//!   static pods' level, `privileged` by default);
//! - `staticPodSecurityLevel` is enforced at admission: a violating
//!   manifest is Failed with reason PodSecurity and never starts;
//! - with `allowPrivileged: true` a privileged container really runs
//!   privileged on containerd (the sandbox is marked privileged).
//!
//! Run under the e2e lock: `flock /tmp/podwarden-e2e.lock cargo test
//! --profile ci --test hostile_pss`.

mod agent;
mod common;

use agent::*;

/// The member: `nobody`/`nogroup`, let in by `apiGroup: nogroup`.
const MEMBER: (u32, u32) = (65534, 65534);

/// Run the CLI against the agent's socket, as root or as `ids`:
/// (exit code, stdout, stderr).
fn cli_as(a: &Agent, ids: Option<(u32, u32)>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = match ids {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), BIN.into()]);
            c
        }
        None => Command::new(BIN),
    };
    let out = cmd.args(args).arg("--socket").arg(a.api_socket()).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The agent process's resident set, KiB.
fn rss_kib(a: &Agent) -> u64 {
    let pid = a.child.as_ref().expect("agent running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A pod `name` in namespace e2e: `spec` lines go into the spec (indent 2),
/// `container` lines into its one container `main` (indent 4).
fn manifest(name: &str, spec: &str, container: &str) -> String {
    pod_yaml(name, spec, TRAPPING) + container
}

/// One hostile manifest and the upstream detail it must be refused with.
struct Case {
    name: &'static str,
    spec: &'static str,
    container: &'static str,
    detail: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "hostpath-root",
        spec: "  volumes:\n  - name: v\n    hostPath:\n      path: /\n",
        container: "    volumeMounts:\n    - name: v\n      mountPath: /host\n",
        detail: r#"hostPath volumes (volume "v")"#,
    },
    Case { name: "host-pid", spec: "  hostPID: true\n", container: "", detail: "host namespaces (hostPID=true)" },
    Case {
        name: "unsafe-sysctl",
        spec: "  securityContext:\n    sysctls:\n    - name: kernel.msgmax\n      value: \"65536\"\n",
        container: "",
        detail: "forbidden sysctls (kernel.msgmax)",
    },
    Case {
        name: "apparmor-unconfined",
        spec: "",
        container: "    securityContext:\n      appArmorProfile:\n        type: Unconfined\n",
        detail: r#"forbidden AppArmor profile (container "main" must not set AppArmor profile type to "Unconfined")"#,
    },
    Case {
        name: "seccomp-unconfined",
        spec: "  securityContext:\n    seccompProfile:\n      type: Unconfined\n",
        container: "",
        detail: r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#,
    },
    Case {
        name: "host-network",
        spec: "  hostNetwork: true\n",
        container: "",
        detail: "host namespaces (hostNetwork=true)",
    },
    Case { name: "host-ipc", spec: "  hostIPC: true\n", container: "", detail: "host namespaces (hostIPC=true)" },
    Case {
        name: "caps-all",
        spec: "",
        container: "    securityContext:\n      capabilities:\n        add: [ALL]\n",
        detail: r#"non-default capabilities (container "main" must not include "ALL" in securityContext.capabilities.add)"#,
    },
    Case {
        name: "caps-sys-admin",
        spec: "",
        container: "    securityContext:\n      capabilities:\n        add: [NET_RAW, SYS_ADMIN, CHOWN]\n",
        detail: r#"non-default capabilities (container "main" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add)"#,
    },
    Case {
        name: "privileged",
        spec: "",
        container: "    securityContext:\n      privileged: true\n",
        detail: r#"privileged (container "main" must not set securityContext.privileged=true)"#,
    },
    Case {
        name: "host-port",
        spec: "",
        container: "    ports:\n    - containerPort: 80\n      hostPort: 18080\n",
        detail: r#"hostPort (container "main" uses hostPort 18080)"#,
    },
    Case {
        name: "everything-at-once",
        spec: "  hostNetwork: true\n  hostPID: true\n  volumes:\n  - name: root\n    hostPath:\n      path: /\n",
        container: "    securityContext:\n      privileged: true\n      capabilities:\n        add: [ALL]\n",
        detail: concat!(
            r#"non-default capabilities (container "main" must not include "ALL" in securityContext.capabilities.add), "#,
            r#"host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "root"), "#,
            r#"privileged (container "main" must not set securityContext.privileged=true)"#
        ),
    },
];

/// Pod Security checks on fields podwarden does not implement: the field
/// table refuses them first, for every caller (as the API server validates
/// a pod before its admission plugins see it), so nothing is written. The
/// checks' own messages are unit-tested in `pss`. (sysctls, AppArmor and
/// seccomp profiles are implemented: their checks are among `CASES`.)
const UNSUPPORTED: &[(&str, &str, &str, &str)] = &[
    (
        "proc-unmasked",
        "",
        "    securityContext:\n      procMount: Unmasked\n",
        "spec.containers[0].securityContext.procMount: \"Unmasked\" is not supported by podwarden (only \"Default\"): an unmasked /proc needs a user namespace (hostUsers: false), which containerd 1.6 cannot make",
    ),
    (
        "selinux-spc",
        "",
        "    securityContext:\n      seLinuxOptions:\n        type: spc_t\n",
        "spec.containers[0].securityContext.seLinuxOptions: not supported by podwarden",
    ),
];

#[test]
fn an_api_group_member_is_held_to_baseline_and_root_is_not() {
    let _serial = SERIAL.lock();
    // allowPrivileged stays false: root's privileged pod is written but its
    // container is refused, whatever the level
    let mut a = Agent::start_with("pss-api", "apiGroup: nogroup\n", &[]);
    let cases = a.dir.0.join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    let file = |name: &str, ext: &str| cases.join(format!("{name}.{ext}"));
    for c in CASES {
        std::fs::write(file(c.name, "yaml"), manifest(c.name, c.spec, c.container)).unwrap();
    }
    // the same refusal for JSON
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"json-host-pid","namespace":"e2e"},"spec":{"hostPID":true,"containers":[{"name":"main","image":"localhost/busybox:e2e"}]}}"#;
    std::fs::write(file("json-host-pid", "json"), json).unwrap();

    let before = listing(&a.manifests());
    // warm up the member's path once, then measure
    let (code, _, err) = cli_as(&a, Some(MEMBER), &["get", "pods", "-A"]);
    assert_eq!(code, 0, "the member is let in: {err}");
    let rss_before = rss_kib(&a);
    let mut refused = 0;
    for c in CASES {
        let (code, out, err) = cli_as(&a, Some(MEMBER), &["apply", "-f", file(c.name, "yaml").to_str().unwrap()]);
        assert_eq!(code, 77, "{}: the member's apply must be refused (EX_NOPERM): {out}", c.name);
        assert_eq!(
            err,
            format!(
                "podwarden: pods \"{}\" is forbidden: violates PodSecurity \"baseline:latest\": {}\n",
                c.name, c.detail
            ),
            "case {}",
            c.name
        );
        refused += 1;
    }
    let (code, _, err) = cli_as(&a, Some(MEMBER), &["apply", "-f", file("json-host-pid", "json").to_str().unwrap()]);
    assert_eq!(code, 77, "EX_NOPERM");
    assert_eq!(
        err,
        "podwarden: pods \"json-host-pid\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostPID=true)\n"
    );
    refused += 1;
    assert!(refused >= 10);
    assert_eq!(listing(&a.manifests()), before, "nothing was written into staticPodPath");
    assert!(a.get("/healthz").is_some_and(|b| b.trim() == "ok"), "healthy after the refusals");
    let grown = rss_kib(&a).saturating_sub(rss_before);
    eprintln!("agent RSS grew by {grown} KiB over {refused} refused applies");
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB over the refusals");
    assert!(a.log().contains("refused pod e2e/host-pid from an apiGroup member"), "{}", a.log());
    assert!(a.pods().is_empty(), "no refused pod reached the agent: {:?}", a.pods());

    // fields podwarden does not implement: refused by name, member and root alike
    for (name, spec, container, field) in UNSUPPORTED {
        let f = file(name, "yaml");
        std::fs::write(&f, manifest(name, spec, container)).unwrap();
        for who in [Some(MEMBER), None] {
            let (code, out, err) = cli_as(&a, who, &["apply", "-f", f.to_str().unwrap()]);
            assert_eq!(code, 1, "{name}: {out}");
            assert_eq!(err, format!("podwarden: {}: field {field}\n", f.display()), "{name} ({who:?})");
        }
    }
    assert_eq!(listing(&a.manifests()), before, "nothing was written into staticPodPath");

    // a baseline pod from the member goes through
    std::fs::write(file("fine", "yaml"), manifest("fine", "", "")).unwrap();
    let (code, out, err) = cli_as(&a, Some(MEMBER), &["apply", "-f", file("fine", "yaml").to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (0, "pod/fine created\n"), "{err}");

    // root: the static pods' level (privileged) lets every one through
    for c in CASES {
        let (code, out, err) = cli_as(&a, None, &["apply", "-f", file(c.name, "yaml").to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (0, format!("pod/{} created\n", c.name).as_str()), "{}: {err}", c.name);
    }
    let uids: Vec<String> = CASES.iter().map(|c| a.uid(c.name)).chain([a.uid("fine")]).collect();
    for c in CASES {
        let p = a.pod(c.name).unwrap();
        assert_ne!(p["status"]["reason"], "PodSecurity", "{}: root's pod is admitted: {p}", c.name);
    }
    // allowPrivileged keeps its meaning at the privileged level
    wait_for("the privileged container refused", Duration::from_secs(30), || {
        a.pod("privileged").is_some_and(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
    });
    let p = a.pod("privileged").unwrap();
    let msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("allowPrivileged: false"), "{p}");
    assert!(a.get("/healthz").is_some_and(|b| b.trim() == "ok"));
    let refs: Vec<&str> = uids.iter().map(String::as_str).collect();
    a.clean_up(&refs);
}

#[test]
fn the_static_pods_level_is_enforced_at_admission() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("pss-static", "staticPodSecurityLevel: baseline\n", &[]);
    a.write("nosy.yaml", &manifest("nosy", "  hostPID: true\n  hostIPC: true\n", ""));
    a.write("plain.yaml", &manifest("plain", "", ""));
    let nosy = a.uid("nosy");
    let plain = a.uid("plain");
    wait_for("plain running", Duration::from_secs(30), || a.running(&plain) == 1);
    let p = a.pod("nosy").unwrap();
    assert_eq!(p["status"]["phase"], "Failed", "{p}");
    assert_eq!(p["status"]["reason"], "PodSecurity", "{p}");
    assert_eq!(
        p["status"]["message"],
        r#"Pod was rejected: violates PodSecurity "baseline:latest": host namespaces (hostPID=true, hostIPC=true)"#
    );
    let rp = a.runtime_pod(&nosy);
    assert!(rp.sandboxes.is_empty() && rp.containers.is_empty(), "a rejected pod never starts: {rp:?}");
    // root's API calls count like root's files: the same level
    let f = a.dir.0.join("nosy2.yaml");
    std::fs::write(&f, manifest("nosy2", "  hostNetwork: true\n", "")).unwrap();
    let (code, _, err) = cli_as(&a, None, &["apply", "-f", f.to_str().unwrap()]);
    assert_eq!(code, 77, "EX_NOPERM");
    assert_eq!(
        err,
        "podwarden: pods \"nosy2\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)\n"
    );
    assert!(!a.manifests().join("e2e_nosy2.yaml").exists());
    assert!(a.get("/healthz").is_some_and(|b| b.trim() == "ok"));
    a.clean_up(&[&nosy, &plain]);
}

/// `CapEff` as printed by `grep CapEff /proc/self/status`.
fn cap_eff(log: &str) -> Option<u64> {
    log.lines().find_map(|l| l.split("CapEff:").nth(1)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

#[test]
fn a_privileged_container_runs_privileged_on_containerd() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start_with("pss-privileged", "allowPrivileged: true\n", &[]);
    // one privileged container and one plain one in the same pod
    let show =
        "grep CapEff /proc/self/status; echo devices $(ls /dev | wc -l); trap 'exit 0' TERM; while :; do sleep 1; done";
    let container = |name: &str| {
        format!(
            "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {show:?}]\n"
        )
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: priv\n  namespace: e2e\nspec:\n  containers:\n{}    securityContext:\n      privileged: true\n{}",
        container("p"),
        container("q"),
    );
    a.write("priv.yaml", &yaml);
    let uid = a.uid("priv");
    wait_for("both containers running", Duration::from_secs(40), || a.running(&uid) == 2);
    let logs = a.dir.0.join("logs").join(format!("e2e_priv_{uid}"));
    let read = |c: &str| std::fs::read_to_string(logs.join(c).join("0.log")).unwrap_or_default();
    let devices = |c: &str| -> Option<usize> {
        read(c).lines().find_map(|l| l.split("devices ").nth(1)).and_then(|n| n.trim().parse().ok())
    };
    wait_for("both containers logged", Duration::from_secs(10), || {
        ["p", "q"].iter().all(|c| cap_eff(&read(c)).is_some() && devices(c).is_some())
    });
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    let (p, q) = (cap_eff(&read("p")).unwrap(), cap_eff(&read("q")).unwrap());
    assert_ne!(p & CAP_SYS_ADMIN, 0, "the privileged container has CAP_SYS_ADMIN: CapEff {p:x}");
    assert_eq!(q & CAP_SYS_ADMIN, 0, "the plain container keeps the default set: CapEff {q:x}");
    assert!(p.count_ones() > q.count_ones(), "privileged {p:x} vs plain {q:x}");
    assert!(
        devices("p") > devices("q"),
        "the privileged container sees the host's devices: {:?} vs {:?}",
        devices("p"),
        devices("q")
    );
    wait_for("priv Running in /pods", Duration::from_secs(10), || {
        a.pod("priv").is_some_and(|p| p["status"]["phase"] == "Running")
    });
    a.clean_up(&[&uid]);
}
