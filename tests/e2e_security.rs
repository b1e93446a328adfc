//! AppArmor and huge pages on this machine's private containerd
//! (`scripts/e2e-env.sh up`): what can be shown without AppArmor and
//! without reserved huge pages. A container's CRI request now carries a
//! hugetlb limit for every page size the kernel has (0 when it asks for
//! none) and containerd still runs it; a hugepages request the node cannot
//! give is refused at admission; a `HugePages` emptyDir without a
//! hugepages request is the kubelet's `FailedMount`; AppArmor annotations
//! are validated as the API server does. Enforcement is shown in the VM
//! (`tests/vm_security.rs`).

mod agent;
mod common;

use agent::*;

#[test]
fn huge_pages_and_apparmor_refusals_on_a_host_without_either() {
    let _serial = SERIAL.lock();
    let mut a = Agent::start("security");
    // an ordinary container: its request carries hugepage limits of 0 for
    // the host's page sizes, which containerd takes
    a.write("plain.yaml", &(pod_yaml("plain", "", TRAPPING) + "    resources:\n      limits: {memory: 32Mi}\n"));
    // the host has no huge pages reserved: refused at admission
    a.write(
        "wants.yaml",
        &(pod_yaml("wants-pages", "", TRAPPING) + "    resources:\n      limits: {hugepages-2Mi: 4Mi, memory: 32Mi}\n"),
    );
    // a HugePages emptyDir needs a container asking for huge pages
    a.write(
        "medium.yaml",
        &(pod_yaml("no-request", "  volumes:\n  - name: huge\n    emptyDir: {medium: HugePages}\n", TRAPPING)
            + "    volumeMounts:\n    - {name: huge, mountPath: /huge}\n"),
    );
    // an AppArmor annotation that is not a profile
    a.write(
        "annotated.yaml",
        &pod_yaml("annotated", "", TRAPPING).replace(
            "  namespace: e2e\n",
            "  namespace: e2e\n  annotations:\n    container.apparmor.security.beta.kubernetes.io/main: strict\n",
        ),
    );
    let plain = a.uid("plain");
    wait_for("plain running", Duration::from_secs(60), || a.running(&plain) == 1);

    wait_for("wants-pages refused", Duration::from_secs(30), || {
        a.pod("wants-pages").is_some_and(|p| p["status"]["phase"] == "Failed")
    });
    let st = a.pod("wants-pages").unwrap()["status"].clone();
    assert_eq!(st["reason"], "OutOfhugepages-2Mi", "{st}");
    assert_eq!(
        st["message"],
        "Pod was rejected: Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0",
        "{st}"
    );

    let no_request = a.uid("no-request");
    let want = "volume \"huge\": medium HugePages: hugePages storage requested, but there is no resource request \
                for huge pages";
    wait_for("FailedMount for the HugePages medium", Duration::from_secs(30), || a.log().contains(want));
    assert_eq!(a.running(&no_request), 0);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(&no_request), "nothing mounted for it: {mounts}");

    wait_for("the annotation refused", Duration::from_secs(30), || {
        a.log().contains("invalid AppArmor profile name: \\\"strict\\\"")
            || a.log().contains("invalid AppArmor profile name: \"strict\"")
    });
    assert!(a.pod("annotated").is_none(), "an invalid manifest makes no pod");

    a.clean_up(&[&plain, &no_request]);
}
