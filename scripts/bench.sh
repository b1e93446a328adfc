#!/usr/bin/env bash
# Run a benchmark by name; its last line of output is one JSON object.
#   scripts/bench.sh core    pod worker lifecycles, update_pod rate, RSS per worker (fake runtime)
#   scripts/bench.sh start   pod start/stop latency vs a raw CRI client, RSS, threads (private containerd)
#   scripts/bench.sh shutdown  50 pods: PrepareForShutdown -> inhibitor released (private containerd + logind)
#   scripts/bench.sh footprint installed binary idle with 0/110 pods: RSS, threads, CPU; size; CLI latency
#   scripts/bench.sh config    110 pods each mounting a ConfigMap and a Secret: RSS; ConfigMap edit -> mounted
#                              file latency over 20 edits (installed binary, private containerd)
#   scripts/bench.sh probes    110 pods with an httpGet readiness and a tcpSocket liveness probe: CPU, RSS,
#                              threads against the same pods without; readiness flip; kill with a hung probe
#   scripts/bench.sh isolation pod start with pod cgroups and seccomp vs without (ratio), RSS with 110 such
#                              pods (private containerd; the release binary)
#   scripts/bench.sh unattended a container writing 1 GiB of log: bytes on disk after and at most; RSS and
#                              CPU with 110 pods; eviction reaction; garbage collection of 20 images
#                              (private containerd; the release binary; busybox is imported again after)
#   scripts/bench.sh reactions an init chain's steps and sidecar to main (containerd's times, 10 rounds), a
#                              deleted pod gone after its exit, CPU with 110 pods with events and without,
#                              RSS (private containerd; the release binary)
#   scripts/bench.sh api       the Kubernetes API with 110 pods over TLS: Table p50/p99, exit to watch event,
#                              exec and port-forward through podwarden vs the runtime's URL (and kubectl's),
#                              RSS with watches and a port-forward, /healthz with 100 watches (private
#                              containerd; the release binary)
#   scripts/bench.sh cluster   a node joined to the real control plane (scripts/cluster-env.sh): join to Ready;
#                              create to Running of 30 API pods vs 30 static pods; with a Deployment of 110 pods:
#                              RSS, CPU and the node's requests (audit log) over 5 idle minutes (private
#                              containerd; the release binary)
#   scripts/bench.sh offline   a node of the real control plane cut off (its packets dropped): the link found
#                              lost, the Lease back, the requests after a 2-minute partition with 110 pods;
#                              110 pods started with the API server cut off vs reachable; the record's size
#                              (private containerd; the release binary)
#   scripts/bench.sh machine   a Debian 12 VM (systemd, cgroup v2): boot; pod start with the cgroupfs and the
#                              systemd drivers (median of 10 each); a real reboot with pods: lock released
#                              after the last pod exit, power-off after the slowest pod (the release .deb)
#   scripts/bench.sh hostile   alias bombs, deep nesting, slow HTTP clients, delete during start, a 2 GiB
#                              termination-log (private containerd; the ci profile the tests build)
#   scripts/bench.sh soak      10,000 pod lifecycles (PODWARDEN_SOAK_LIFECYCLES) through manifests, edits and
#                              kubectl while containerd, the agent and logind are killed and started again and
#                              manifests are written half: leftovers by kind, pods run twice, RSS and fds
#                              (private containerd + logind; the release binary; PODWARDEN_SOAK_SEED repeats
#                              a run; the driver's warnings go to $TMPDIR/podwarden-soak-bench.err)
#   scripts/bench.sh peer      the real kubelet (tools/cluster's build, standalone) and podwarden, each alone
#                              on the private containerd, alternating rounds: RSS with 0 and 110 pods, CPU
#                              with 110, 30 pods started and removed, an init step, a first restart, binary
#                              size; ratios podwarden / kubelet (the release binary; PODWARDEN_PEER_ROUNDS)
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-}"
# the release binary the benches run: where cargo builds it
release_bin="${CARGO_TARGET_DIR:-$PWD/target}/release/podwarden"
case "$name" in
  core)
    cargo bench --bench core --quiet 2>/dev/null | tail -n 2
    ;;
  start)
    scripts/e2e-env.sh up >/dev/null
    cargo bench --bench start --quiet 2>/dev/null | tail -n 3
    ;;
  shutdown)
    scripts/e2e-env.sh up >/dev/null
    scripts/logind-env.sh up >/dev/null
    cargo bench --bench shutdown --quiet 2>/dev/null | tail -n 7
    ;;
  footprint)
    scripts/e2e-env.sh up >/dev/null
    mapfile -t pkgs < <(scripts/package.sh)
    dpkg -i "${pkgs[0]}" >/dev/null
    PODWARDEN_BIN=/usr/bin/podwarden cargo bench --bench footprint --quiet 2>/dev/null | tail -n 4
    ;;
  config)
    scripts/e2e-env.sh up >/dev/null
    mapfile -t pkgs < <(scripts/package.sh)
    dpkg -i "${pkgs[0]}" >/dev/null
    PODWARDEN_BIN=/usr/bin/podwarden cargo bench --bench config --quiet 2>/dev/null | tail -n 3
    ;;
  probes)
    scripts/e2e-env.sh up >/dev/null
    mapfile -t pkgs < <(scripts/package.sh)
    dpkg -i "${pkgs[0]}" >/dev/null
    PODWARDEN_BIN=/usr/bin/podwarden cargo bench --bench probes --quiet 2>/dev/null | tail -n 6
    ;;
  isolation)
    scripts/e2e-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench isolation --quiet 2>/dev/null | tail -n 7
    ;;
  unattended)
    scripts/e2e-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench unattended --quiet 2>/dev/null | tail -n 9
    scripts/e2e-env.sh up >/dev/null
    ;;
  reactions)
    scripts/e2e-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench reactions --quiet 2>/dev/null | tail -n 5
    ;;
  api)
    scripts/e2e-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench api --quiet 2>/dev/null | tail -n 7
    ;;
  cluster)
    scripts/e2e-env.sh up >/dev/null
    scripts/cluster-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench cluster --quiet 2>/dev/null | tail -n 30
    ;;
  offline)
    scripts/e2e-env.sh up >/dev/null
    scripts/cluster-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" cargo bench --bench offline --quiet 2>/dev/null | tail -n 160
    ;;
  machine)
    scripts/e2e-env.sh up >/dev/null
    scripts/vm-env.sh build
    mapfile -t pkgs < <(scripts/package.sh)
    # real boots (vm_boot_s), not the saved base machine resumed
    VM_NO_RESUME=1 PODWARDEN_DEB="$(realpath "${pkgs[0]}")" cargo bench --bench machine --quiet 2>/dev/null | tail -n 1
    ;;
  hostile)
    scripts/e2e-env.sh up >/dev/null
    cargo bench --profile ci --bench hostile --quiet 2>/dev/null | tail -n 1
    ;;
  soak)
    scripts/e2e-env.sh up >/dev/null
    scripts/logind-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" \
      cargo bench --profile ci --bench soak --quiet 2>"${TMPDIR:-/tmp}/podwarden-soak-bench.err"
    ;;
  peer)
    scripts/e2e-env.sh up >/dev/null
    [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
    PODWARDEN_CLUSTER_KUBELET=1 tools/cluster/build.sh >/dev/null
    [ "${PODWARDEN_PEER_CLUSTER:-1}" = 0 ] || scripts/cluster-env.sh up >/dev/null
    cargo build --release --bin podwarden --quiet
    PODWARDEN_BIN="$release_bin" \
      cargo bench --profile ci --bench peer --quiet 2>"${TMPDIR:-/tmp}/podwarden-peer-bench.err"
    ;;
  *)
    echo "usage: scripts/bench.sh core|start|shutdown|footprint|config|probes|isolation|unattended|reactions|api|cluster|offline|machine|hostile|soak|peer" >&2
    exit 2
    ;;
esac
