//! AppArmor and huge pages enforced on the machine users run: the Debian 12
//! VM of `scripts/vm-env.sh` (AppArmor on at boot, cgroup v2, Debian's
//! containerd 1.6.20 and runc, 16 huge pages of 2 MiB reserved). What a
//! container gets is read back from the kernel: its AppArmor label
//! (`/proc/<pid>/attr/current`), what the profile refuses inside it, its
//! cgroup's `hugetlb.2MB.max` and `hugetlb.2MB.events`, and the huge pages
//! it could and could not take in its hugetlbfs emptyDir.
//!
//! Two things are set up in the guest first, as an administrator would:
//! a test profile loaded with `apparmor_parser`, and containerd's
//! `disable_hugetlb_controller = false` (Debian's containerd 1.6 defaults
//! to true: it then drops every hugepage limit a kubelet sends; the end of
//! the test puts the default back and sees podwarden's warning). A third
//! is a workaround: see the drop-in below.
//!
//! Needs what `tests/vm.rs` needs: the VM image, the e2e images and
//! `PODWARDEN_DEB`. One VM boot for every case.

mod guest;

use guest::*;
use std::time::Duration;

const PROFILE: &str = "podwarden-test-deny-write";

/// Everything allowed but writing under /tmp (audited: a plain `deny` is
/// quiet, the kernel would not log it).
const PROFILE_TEXT: &str = "#include <tunables/global>
profile podwarden-test-deny-write flags=(attach_disconnected,mediate_deleted) {
  #include <abstractions/base>
  file,
  network,
  capability,
  signal,
  ptrace,
  mount,
  umount,
  pivot_root,
  unix,
  audit deny /tmp/** w,
}
";

/// Tries a write under /tmp and one elsewhere, prints the outcomes, then
/// waits for TERM.
const TRY_WRITES: &str = "if echo x > /tmp/probe 2>/dev/null; then echo TMP-WRITE-OK; else echo TMP-WRITE-DENIED; fi; \
                          if echo x > /probe 2>/dev/null; then echo ROOT-WRITE-OK; else echo ROOT-WRITE-DENIED; fi; \
                          trap 'exit 0' TERM; while true; do sleep 0.2; done";

const SLEEP: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// Two pages (4 MiB) then a third (2 MiB more) in the hugetlbfs emptyDir;
/// fallocate faults the pages in, charging the container's hugetlb cgroup.
const HUGE: &str = "if fallocate -l 4194304 /huge/two; then echo TWO-PAGES-OK; else echo TWO-PAGES-FAILED; fi; \
                    if fallocate -l 2097152 /huge/third 2>/tmp/err; then echo THIRD-PAGE-OK; \
                    else echo \"THIRD-PAGE-REFUSED: $(cat /tmp/err)\"; fi; \
                    trap 'exit 0' TERM; while true; do sleep 0.2; done";

fn pod(name: &str, annotations: &str, pod_sc: &str, container: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{annotations}spec:\n  terminationGracePeriodSeconds: 2\n\
         {pod_sc}  containers:\n  - name: c\n    image: localhost/busybox:e2e\n    command: [\"sh\", \"-c\", {command:?}]\n\
         {container}"
    )
}

/// The container ID of pod `name`'s only container.
fn container_id(vm: &Vm, name: &str) -> String {
    let list = pods(vm);
    let pod = list["items"].as_array().into_iter().flatten().find(|p| p["metadata"]["name"] == name);
    pod.and_then(|p| p["status"]["containerStatuses"][0]["containerID"].as_str())
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("no container ID for {name}: {list}"))
        .to_string()
}

/// The PID of pod `name`'s container.
fn pid_of(vm: &Vm, name: &str) -> String {
    let id = container_id(vm, name);
    let pid = vm.sh(&format!("ctr -n k8s.io tasks ls | awk '$1 == \"{id}\" {{print $2}}'")).trim().to_string();
    assert!(!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()), "PID of {name} ({id}): {pid:?}");
    pid
}

fn read(vm: &Vm, path: &str) -> String {
    vm.sh(&format!("cat {path}")).trim().to_string()
}

/// The container's cgroup directory (v2: one line `0::<path>`).
fn cgroup_of(vm: &Vm, pid: &str) -> String {
    let line = read(vm, &format!("/proc/{pid}/cgroup"));
    let path = line.strip_prefix("0::").unwrap_or_else(|| panic!("not a cgroup v2 line: {line}"));
    format!("/sys/fs/cgroup{path}")
}

fn running(vm: &Vm, name: &str) {
    vm.wait(
        &format!("{name} Running"),
        Duration::from_secs(300),
        &format!("podwarden get pods -A | grep -E '^default +{name} +1/1 +Running'"),
    );
}

fn log_has(vm: &Vm, name: &str, text: &str) -> String {
    vm.wait(
        &format!("{name}'s log shows {text}"),
        Duration::from_secs(180),
        &format!("podwarden logs {name} | grep -F {}", shell_quote(text)),
    )
}

#[test]
fn apparmor_profiles_and_huge_pages_enforced_by_the_kernel() {
    let _one = ONE_AT_A_TIME.lock();
    let vm = Vm::up("pw-aa-security");

    // the administrator's part: a profile loaded, containerd passing
    // hugepage limits on to runc
    vm.sh(&format!(
        "cat > /root/{PROFILE} <<'EOF'\n{PROFILE_TEXT}EOF\napparmor_parser -r /root/{PROFILE}\n\
         grep -qx '{PROFILE} (enforce)' /sys/kernel/security/apparmor/profiles"
    ));
    vm.sh(
        "sed -i 's/^\\(  sandbox_image = .*\\)$/\\1\\n  disable_hugetlb_controller = false/' /etc/containerd/config.toml \
         && grep -q 'disable_hugetlb_controller = false' /etc/containerd/config.toml \
         && systemctl restart containerd \
         && containerd config dump | grep -q 'disable_hugetlb_controller = false'",
    );
    assert_eq!(read(&vm, "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"), "16");
    assert_eq!(read(&vm, "/sys/module/apparmor/parameters/enabled"), "Y");

    let localhost = format!("{{type: Localhost, localhostProfile: {PROFILE}}}");
    let annotation =
        |value: &str| format!("  annotations:\n    container.apparmor.security.beta.kubernetes.io/c: {value}\n");
    let manifests = [
        (
            "aa-default",
            pod("aa-default", "", "", "    securityContext:\n      appArmorProfile: {type: RuntimeDefault}\n", SLEEP),
        ),
        // the pod's field, for a container without its own
        (
            "aa-localhost",
            pod("aa-localhost", "", &format!("  securityContext:\n    appArmorProfile: {localhost}\n"), "", TRY_WRITES),
        ),
        ("aa-annotated", pod("aa-annotated", &annotation(&format!("localhost/{PROFILE}")), "", "", TRY_WRITES)),
        (
            "aa-unconfined",
            pod(
                "aa-unconfined",
                "",
                "",
                "    securityContext:\n      appArmorProfile: {type: Unconfined}\n",
                TRY_WRITES,
            ),
        ),
        ("aa-missing", pod("aa-missing", &annotation("localhost/podwarden-test-not-loaded"), "", "", SLEEP)),
        (
            "huge",
            pod(
                "huge",
                "",
                "",
                "    resources:\n      limits: {hugepages-2Mi: 4Mi, memory: 64Mi}\n      \
                 requests: {hugepages-2Mi: 4Mi, memory: 64Mi}\n    volumeMounts:\n    - {name: huge, mountPath: /huge}\n  \
                 volumes:\n  - name: huge\n    emptyDir: {medium: HugePages}\n",
                HUGE,
            ),
        ),
        // more than the node has (16 pages, 32 MiB): refused at admission
        (
            "huge-too-much",
            pod("huge-too-much", "", "", "    resources:\n      limits: {hugepages-2Mi: 64Mi, memory: 64Mi}\n", SLEEP),
        ),
    ];
    let refs: Vec<(&str, &str)> = manifests.iter().map(|(n, m)| (*n, m.as_str())).collect();
    install_and_start(&vm, &["cgroupDriver: cgroupfs"], &refs);
    assert_eq!(
        vm.sh("readlink /proc/$(systemctl show -p MainPID --value podwarden)/ns/mnt").trim(),
        vm.sh("readlink /proc/1/ns/mnt").trim(),
        "podwarden runs in the host's mount namespace"
    );
    for name in ["aa-default", "aa-localhost", "aa-annotated", "aa-unconfined", "huge"] {
        running(&vm, name);
    }

    // AppArmor: the label the kernel put on each container's process
    let label = |name: &str| read(&vm, &format!("/proc/{}/attr/current", pid_of(&vm, name)));
    assert_eq!(label("aa-default"), "cri-containerd.apparmor.d (enforce)", "RuntimeDefault");
    assert_eq!(label("aa-localhost"), format!("{PROFILE} (enforce)"), "Localhost from the pod's field");
    assert_eq!(label("aa-annotated"), format!("{PROFILE} (enforce)"), "localhost/ annotation");
    assert_eq!(label("aa-unconfined"), "unconfined", "Unconfined");
    // and what the profile does inside: /tmp refused, the rest allowed
    for name in ["aa-localhost", "aa-annotated"] {
        log_has(&vm, name, "TMP-WRITE-DENIED");
        log_has(&vm, name, "ROOT-WRITE-OK");
    }
    log_has(&vm, "aa-unconfined", "TMP-WRITE-OK");
    // the kernel's own record of the refusal
    vm.wait(
        "the kernel's AppArmor denial",
        Duration::from_secs(30),
        &format!(
            "dmesg | grep 'apparmor=\"DENIED\"' | grep -F 'profile=\"{PROFILE}\"' | grep -F 'name=\"/tmp/probe\"'"
        ),
    );

    // a Localhost profile the node has not loaded: the container is not
    // made, and the pod says which profile is missing
    let want = "Cannot enforce AppArmor: profile \"podwarden-test-not-loaded\" is not loaded on the node";
    let t = std::time::Instant::now();
    let waiting = loop {
        let list = pods(&vm);
        let pod = list["items"].as_array().into_iter().flatten().find(|p| p["metadata"]["name"] == "aa-missing");
        let waiting = pod.map(|p| p["status"]["containerStatuses"][0]["state"]["waiting"].clone());
        if waiting.as_ref().is_some_and(|w| w["reason"] == "CreateContainerConfigError") {
            break waiting.unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(120), "aa-missing never waited on its profile: {list}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(waiting["message"], want, "{waiting}");
    vm.wait(
        "the event naming the profile",
        Duration::from_secs(30),
        "podwarden events | grep aa-missing | grep -F 'profile \"podwarden-test-not-loaded\" is not loaded'",
    );

    // huge pages: the container's hugetlb limit from its hugepages-2Mi
    // limit, 0 for a container that asks for none (the kubelet's rule)
    let huge_pid = pid_of(&vm, "huge");
    let cg = cgroup_of(&vm, &huge_pid);
    assert_eq!(read(&vm, &format!("{cg}/hugetlb.2MB.max")), "4194304", "{cg}");
    let other = cgroup_of(&vm, &pid_of(&vm, "aa-default"));
    assert_eq!(read(&vm, &format!("{other}/hugetlb.2MB.max")), "0", "{other}");
    // the emptyDir is a hugetlbfs of 2 MiB pages
    let mount = vm.sh(&format!("grep ' /huge ' /proc/{huge_pid}/mounts"));
    assert!(mount.contains(" hugetlbfs ") && mount.contains("pagesize=2M"), "{mount}");
    // two pages taken, the third refused by the kernel's hugetlb limit
    log_has(&vm, "huge", "TWO-PAGES-OK");
    let refused = log_has(&vm, "huge", "THIRD-PAGE-REFUSED");
    assert!(refused.contains("No space left on device"), "{refused}");
    assert_eq!(read(&vm, &format!("{cg}/hugetlb.2MB.current")), "4194304");
    let events = read(&vm, &format!("{cg}/hugetlb.2MB.events"));
    assert!(events.lines().any(|l| l.starts_with("max ") && l != "max 0"), "{events}");
    eprintln!("huge: {} / hugetlb.2MB.events: {events}", refused.trim());

    // admission counts the node's huge pages
    let list = pods(&vm);
    let too_much = list["items"].as_array().into_iter().flatten().find(|p| p["metadata"]["name"] == "huge-too-much");
    let too_much = too_much.unwrap_or_else(|| panic!("no huge-too-much in {list}"));
    assert_eq!(too_much["status"]["phase"], "Failed", "{too_much}");
    assert_eq!(too_much["status"]["reason"], "OutOfhugepages-2Mi", "{too_much}");

    // the pod removed: its hugetlbfs unmounted, its pages back to the node
    let uid = uid_of(&vm, "huge");
    vm.sh("rm /etc/podwarden/manifests/huge.yaml");
    vm.wait(
        "the huge pod's mounts gone",
        Duration::from_secs(300),
        &format!("! grep -q {uid} /proc/mounts && ! podwarden get pods | grep -q '^huge '"),
    );
    vm.wait(
        "the pages free again",
        Duration::from_secs(30),
        "test $(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages) = 16",
    );

    // Debian's default back: containerd drops every hugetlb limit. The
    // container still runs (as under the kubelet) and its pod says so.
    vm.sh(
        "sed -i '/disable_hugetlb_controller = false/d' /etc/containerd/config.toml && systemctl restart containerd \
         && containerd config dump | grep -q 'disable_hugetlb_controller = true'",
    );
    let dropped =
        pod("huge-dropped", "", "", "    resources:\n      limits: {hugepages-2Mi: 4Mi, memory: 64Mi}\n", SLEEP);
    vm.sh(&format!("cat > /etc/podwarden/manifests/huge-dropped.yaml <<'EOF'\n{dropped}EOF"));
    running(&vm, "huge-dropped");
    vm.wait(
        "the HugePagesNotEnforced warning",
        Duration::from_secs(180),
        "podwarden events | grep huge-dropped | grep HugePagesNotEnforced \
         | grep -F 'disable_hugetlb_controller = true'",
    );
    let cg = cgroup_of(&vm, &pid_of(&vm, "huge-dropped"));
    assert_eq!(read(&vm, &format!("{cg}/hugetlb.2MB.max")), "max", "containerd dropped the limit: {cg}");
}
