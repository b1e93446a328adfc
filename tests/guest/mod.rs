//! The harness of the VM tests: one Debian 12 VM made by
//! `scripts/vm-env.sh` (QEMU, TCG), reached over ssh, killed and removed
//! when dropped, and the steps the tests share (install the package, read
//! the pods). The VMs run one at a time in a test binary (a lock), each
//! with a hard time limit.
#![allow(dead_code)]

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn deb() -> PathBuf {
    let Some(p) = std::env::var_os("PODWARDEN_DEB") else {
        panic!(
            "PODWARDEN_DEB is not set: build the package with `scripts/package.sh --profile ci` and set \
             PODWARDEN_DEB to the .deb it prints (scripts/test.sh does both)"
        )
    };
    let p = PathBuf::from(p);
    assert!(p.is_file(), "PODWARDEN_DEB={} is not a file (scripts/package.sh --profile ci builds it)", p.display());
    p
}

/// One VM, killed and removed when dropped.
#[derive(Debug)]
pub struct Vm {
    pub name: String,
    /// When it was asked to boot: each step's log line says how long after.
    pub since: Instant,
}

impl Vm {
    /// A new machine named `name`, resumed from the saved base machine.
    pub fn up(name: &str) -> Vm {
        Vm::up_with(name, &[])
    }

    /// [`Vm::up`] with `env` for scripts/vm-env.sh (`VM_API_FORWARD`).
    pub fn up_with(name: &str, env: &[(&str, &str)]) -> Vm {
        // whatever an earlier run left under this name goes first: its disk
        // overlay may sit on a base machine saved since, and booting it
        // would mount garbage (a run that failed before its `Vm` existed
        // never dropped it)
        let _ = Command::new(root().join("scripts/vm-env.sh")).args(["down", name]).output();
        Vm::boot(name, env)
    }

    /// The machine `name` started again on its own disk, as after a reboot.
    pub fn again(name: &str) -> Vm {
        Vm::boot(name, &[])
    }

    fn boot(name: &str, env: &[(&str, &str)]) -> Vm {
        let since = Instant::now();
        let out = Command::new(root().join("scripts/vm-env.sh"))
            .args(["up", name, "1500"])
            .envs(env.iter().copied())
            .output()
            .expect("run scripts/vm-env.sh");
        assert!(
            out.status.success(),
            "scripts/vm-env.sh up {name} failed (prepare the VM image with `scripts/vm-env.sh build`, the e2e images \
             with `scripts/e2e-env.sh up`, or run scripts/test.sh):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vm = Vm { name: name.to_string(), since };
        vm.note("up (ssh answers)");
        vm
    }

    /// A line on the test's output (shown on failure, or with
    /// `--nocapture`): where the time of a VM test goes.
    pub fn note(&self, what: &str) {
        eprintln!("[vm {} +{:.1}s] {what}", self.name, self.since.elapsed().as_secs_f64());
    }

    /// Runs `script` in the VM with bash; its output, whatever its status.
    pub fn run(&self, script: &str) -> Output {
        Command::new(root().join("scripts/vm-env.sh"))
            .args(["ssh", &self.name, "bash", "-c", &shell_quote(script)])
            .output()
            .expect("run scripts/vm-env.sh ssh")
    }

    /// Runs `script` and returns its standard output; fails the test on a
    /// non-zero status, with both outputs.
    pub fn sh(&self, script: &str) -> String {
        let out = self.run(script);
        assert!(
            out.status.success(),
            "in the VM: {script}\nstatus {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn put(&self, src: &Path, dst: &str) {
        let out = Command::new(root().join("scripts/vm-env.sh"))
            .args(["put", &self.name, &src.to_string_lossy(), dst])
            .output()
            .expect("run scripts/vm-env.sh put");
        assert!(out.status.success(), "copy {} to {dst}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    }

    /// Polls `script` until it succeeds; its last output on failure.
    pub fn wait(&self, what: &str, timeout: Duration, script: &str) -> String {
        let t = Instant::now();
        loop {
            let out = self.run(script);
            if out.status.success() {
                self.note(&format!("{what} (after {:.1}s)", t.elapsed().as_secs_f64()));
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                t.elapsed() < timeout,
                "{what}: not within {timeout:?}; last try of `{script}`:\n{}{}\njournal:\n{}\nthe guest's console, last lines:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&self.run("journalctl -u podwarden --no-pager | tail -n 40").stdout),
                self.console_tail(40)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Vm {
    /// The last `n` lines of the guest's serial console (a guest that no
    /// longer answers ssh says why there, if anywhere).
    pub fn console_tail(&self, n: usize) -> String {
        let out = Command::new(root().join("scripts/vm-env.sh")).args(["console", &self.name]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/vm-env.sh")).args(["down", &self.name]).output();
    }
}

/// `s` as one word for the remote shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The pods as podwarden reports them (`get pods -A -o json`).
pub fn pods(vm: &Vm) -> serde_json::Value {
    serde_json::from_str(&vm.sh("podwarden get pods -A -o json")).expect("get pods -o json is JSON")
}

pub fn uid_of(vm: &Vm, name: &str) -> String {
    let list = pods(vm);
    let pod = list["items"].as_array().into_iter().flatten().find(|p| p["metadata"]["name"] == name);
    pod.and_then(|p| p["metadata"]["uid"].as_str()).unwrap_or_else(|| panic!("no pod {name} in {list}")).to_string()
}

/// Installs the package, sets `config` lines (each `key: value`, replacing
/// the commented default), writes `manifests` and starts the agent.
pub fn install_and_start(vm: &Vm, config: &[&str], manifests: &[(&str, &str)]) {
    vm.put(&deb(), "/root/podwarden.deb");
    vm.sh("apt-get install -y -q /root/podwarden.deb >/root/apt.log 2>&1 || { cat /root/apt.log; exit 1; }");
    for line in config {
        let key = line.split(':').next().unwrap();
        vm.sh(&format!(
            "sed -i '/^#\\? *{key}:/d' /etc/podwarden/config.yaml && echo {} >> /etc/podwarden/config.yaml",
            shell_quote(line)
        ));
    }
    for (name, text) in manifests {
        vm.sh(&format!("cat > /etc/podwarden/manifests/{name}.yaml <<'EOF'\n{text}EOF"));
    }
    vm.note("package installed, configured");
    vm.sh("systemctl start podwarden");
    vm.note("podwarden started");
}

pub fn pod_yaml(name: &str, resources: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  \
         - name: c\n    image: localhost/busybox:e2e\n    command: [\"sh\", \"-c\", {command:?}]\n{resources}"
    )
}

/// A container that sleeps until SIGTERM, then exits at once.
pub const SLEEP: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// The sleeping pods of the cgroup tests, one per QoS class: Burstable
/// (requests 100m/32Mi, limits 500m/64Mi), Guaranteed (200m/48Mi),
/// BestEffort.
pub fn qos_pods() -> (String, String, String) {
    (
        pod_yaml(
            "burstable",
            "    resources:\n      requests: {cpu: 100m, memory: 32Mi}\n      limits: {cpu: 500m, memory: 64Mi}\n",
            SLEEP,
        ),
        pod_yaml("guaranteed", "    resources:\n      limits: {cpu: 200m, memory: 48Mi}\n", SLEEP),
        pod_yaml("besteffort", "", SLEEP),
    )
}

/// A pod that records its moments (TERM received, exit, preStop) in
/// `/var/pw/<name>`: `term_delay` seconds between TERM and exit.
pub fn recording_pod(name: &str, critical: bool, term_delay: u32) -> String {
    let now = "$(cut -d\" \" -f1 /proc/uptime)";
    let stall = if term_delay > 0 { format!("sleep {term_delay}; ") } else { String::new() };
    let priority = if critical { "  priorityClassName: system-node-critical\n" } else { "" };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{priority}  terminationGracePeriodSeconds: 30\n  \
         volumes:\n  - name: pw\n    hostPath: {{path: /var/pw, type: DirectoryOrCreate}}\n  containers:\n  - name: c\n    \
         image: localhost/busybox:e2e\n    volumeMounts: [{{name: pw, mountPath: /var/pw}}]\n    \
         command: [\"sh\", \"-c\", {cmd:?}]\n    lifecycle:\n      preStop:\n        exec:\n          \
         command: [\"sh\", \"-c\", {hook:?}]\n",
        cmd = format!(
            "trap 'echo term {now} >> /var/pw/{name}; {stall}echo exit {now} >> /var/pw/{name}; exit 0' TERM; \
             while true; do sleep 1 & wait $!; done"
        ),
        hook = format!("echo prestop {now} >> /var/pw/{name}"),
    )
}

/// The moments `what` recorded in `/var/pw/<name>` (seconds since boot).
pub fn moments(records: &str, what: &str) -> Vec<f64> {
    records.lines().filter_map(|l| l.strip_prefix(what)?.strip_prefix(' ')?.trim().parse().ok()).collect()
}

pub fn one(vm: &Vm, name: &str, what: &str) -> f64 {
    let records = vm.sh(&format!("cat /var/pw/{name}"));
    let m = moments(&records, what);
    assert_eq!(m.len(), 1, "one {what} for {name}: {records}");
    m[0]
}

/// The kernel's stamp (seconds since boot) of its console line containing `what`.
pub fn console_stamp(console: &str, what: &str) -> Option<f64> {
    console
        .lines()
        .filter(|l| l.contains(what))
        .find_map(|l| l.split_once('[')?.1.split_once(']')?.0.trim().parse().ok())
}

/// The monotonic time (seconds since boot) of podwarden's journal line
/// containing `what` in the previous boot.
pub fn journal_stamp(vm: &Vm, what: &str) -> Option<f64> {
    let out = vm.sh("journalctl -b -1 -u podwarden -o json --no-pager");
    out.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        v["MESSAGE"].as_str()?.contains(what).then_some(())?;
        Some(v["__MONOTONIC_TIMESTAMP"].as_str()?.parse::<f64>().ok()? / 1e6)
    })
}

/// The moments of a reboot with the three recording pods, in seconds on
/// the guest's clock (since its boot).
#[derive(Debug, Clone, Copy)]
pub struct RebootMoments {
    pub asked: f64,
    pub quick_prestop: f64,
    pub quick_term: f64,
    pub quick_exit: f64,
    pub slow_exit: f64,
    pub critical_term: f64,
    pub critical_exit: f64,
    /// podwarden released logind's delay lock.
    pub released: f64,
    /// The kernel restarts the machine.
    pub restart: f64,
}

impl RebootMoments {
    pub fn last_exit(&self) -> f64 {
        self.quick_exit.max(self.slow_exit).max(self.critical_exit)
    }
}

#[derive(Debug)]
pub struct Reboot {
    /// The machine, booted again.
    pub vm: Vm,
    pub moments: RebootMoments,
    /// podwarden's journal lines about the shutdown (the previous boot).
    pub journal: String,
}

/// On `vm` (just booted): the package with `shutdownGracePeriod: 30s`
/// (10 s for critical pods: an emulated guest beside a compiler needs
/// seconds for a preStop exec) and three static pods that record their
/// moments (`quick` exits at SIGTERM, `slow` 2 s after it, `critical` is
/// system-node-critical), `systemctl reboot`, the machine booted again
/// with the pods Running; the moments read from the guest's clocks.
pub fn reboot_with_recording_pods(vm: Vm) -> Reboot {
    // a persistent journal, to read the boot that is shut down
    vm.sh("mkdir -p /var/log/journal && systemctl restart systemd-journald");
    install_and_start(
        &vm,
        &["shutdownGracePeriod: 30s", "shutdownGracePeriodCriticalPods: 10s"],
        &[
            ("quick", &recording_pod("quick", false, 0)),
            ("slow", &recording_pod("slow", false, 2)),
            ("critical", &recording_pod("critical", true, 0)),
        ],
    );
    let running = |vm: &Vm, what: &str| {
        for name in ["quick", "slow", "critical"] {
            vm.wait(
                &format!("{name} Running{what}"),
                Duration::from_secs(300),
                &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
            );
        }
    };
    running(&vm, "");
    let locks = vm.sh("systemd-inhibit --list --no-pager --no-legend");
    assert!(locks.lines().any(|l| l.starts_with("podwarden") && l.ends_with("delay")), "{locks}");

    // the reboot, as an administrator asks for it
    let asked: f64 = vm
        .sh("cut -d' ' -f1 /proc/uptime; systemctl --no-block reboot")
        .trim()
        .parse()
        .expect("the guest's uptime before the reboot");
    let down = Command::new(root().join("scripts/vm-env.sh")).args(["wait-down", &vm.name, "180"]).status().unwrap();
    assert!(down.success(), "the VM did not reboot within 180 s");
    let console = String::from_utf8_lossy(
        &Command::new(root().join("scripts/vm-env.sh")).args(["console", &vm.name]).output().unwrap().stdout,
    )
    .into_owned();
    let restart = console_stamp(&console, "reboot: Restarting system")
        .unwrap_or_else(|| panic!("no 'reboot: Restarting system' on the console:\n{console}"));

    // the machine comes back (the same disk) and the static pods run again
    let name = vm.name.clone();
    std::mem::forget(vm); // the same machine: its overlay stays
    let vm = Vm::again(&name);
    running(&vm, " again after the boot");
    let journal = vm.sh(
        "journalctl -b -1 -u podwarden -o short-monotonic --no-pager | grep -iE 'shutdown|logind|kill' | tail -n 30",
    );
    let released = journal_stamp(&vm, "inhibitor lock released")
        .unwrap_or_else(|| panic!("no lock release in the previous boot's journal:\n{journal}"));
    let moments = RebootMoments {
        asked,
        quick_prestop: one(&vm, "quick", "prestop"),
        quick_term: one(&vm, "quick", "term"),
        quick_exit: one(&vm, "quick", "exit"),
        slow_exit: one(&vm, "slow", "exit"),
        critical_term: one(&vm, "critical", "term"),
        critical_exit: one(&vm, "critical", "exit"),
        released,
        restart,
    };
    Reboot { vm, moments, journal }
}
