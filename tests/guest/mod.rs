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
pub struct Vm {
    pub name: String,
}

impl Vm {
    pub fn up(name: &str) -> Vm {
        let out = Command::new(root().join("scripts/vm-env.sh"))
            .args(["up", name, "1500"])
            .output()
            .expect("run scripts/vm-env.sh");
        assert!(
            out.status.success(),
            "scripts/vm-env.sh up {name} failed (prepare the VM image with `scripts/vm-env.sh build`, the e2e images \
             with `scripts/e2e-env.sh up`, or run scripts/test.sh):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Vm { name: name.to_string() }
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
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                t.elapsed() < timeout,
                "{what}: not within {timeout:?}; last try of `{script}`:\n{}{}\njournal:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&self.run("journalctl -u podwarden --no-pager | tail -n 40").stdout)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
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
    vm.sh("systemctl start podwarden");
}

pub fn pod_yaml(name: &str, resources: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  \
         - name: c\n    image: localhost/busybox:e2e\n    command: [\"sh\", \"-c\", {command:?}]\n{resources}"
    )
}
