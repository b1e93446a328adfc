#!/usr/bin/env bash
# The whole test suite: format, lints, unit, scenario, source, stress,
# end-to-end tests (a private containerd from scripts/e2e-env.sh, a private
# logind from scripts/logind-env.sh, a private Kubernetes control plane from
# scripts/cluster-env.sh) and the .deb/.rpm packages (built,
# checked, installed). Idempotent; as root on Debian it installs the
# packages it needs. The VM tests (tests/vm.rs) boot a Debian 12 VM from
# scripts/vm-env.sh's cached image. Everything builds with the `ci` profile (Cargo.toml),
# so grpcio's C core is compiled once.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=(gcc g++ libc6-dev make cmake protobuf-compiler pkg-config libdbus-1-dev prometheus rpm lintian util-linux iptables socat)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Python's venv and Node.js with npm (the client-library tests,
# tools/clients): Debian's, where the machine has none of its own
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v npm >/dev/null || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "missing packages: ${missing[*]} (install them as root)" >&2
    exit 1
  fi
fi
# Go (for the control plane cluster mode is tested against): the machine's
# toolchain, in /usr/local/go where it is installed so
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
  echo "go not found: install Go 1.24 or newer (the control plane of the cluster tests is built from the Kubernetes Go modules)" >&2
  exit 1
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust 1.95 or newer with rustup (https://rustup.rs)" >&2
  exit 1
fi

echo "== end-to-end environment (private containerd)"
scripts/e2e-env.sh up
rm -f "${PODWARDEN_E2E_DIR:-/var/lib/podwarden-e2e}/containerd-crashes.log"
echo "== logind test environment (private system bus, systemd-logind)"
scripts/logind-env.sh up

# The control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
# etcd, from the Kubernetes Go modules; tools/cluster) is built and started
# beside the Rust build: its cold build is about 10 minutes of both cores,
# the Rust one longer. Cached, so a later run only checks it.
mkdir -p target
echo "== the test control plane (scripts/cluster-env.sh up: Go build, then start), in the background [$(date -u +%T), +${SECONDS}s]"
scripts/cluster-env.sh up > target/cluster-env.log 2>&1 &
cluster_pid=$!

# The official client libraries (Python, JavaScript, Go) the client tests
# run, installed beside the build; cached.
echo "== the client libraries (tools/clients/prepare.sh), in the background [$(date -u +%T), +${SECONDS}s]"
tools/clients/prepare.sh > target/clients-prepare.log 2>&1 &
clients_pid=$!

# The VM image (debootstrap) and its saved base machine (one boot under
# emulation) are made beside the build, which is longer; cached, so a
# later run only checks them.
mkdir -p target
echo "== Debian 12 VM image and base machine (systemd, cgroup v2, AppArmor; cached), in the background [$(date -u +%T), +${SECONDS}s]"
{ scripts/vm-env.sh build && scripts/vm-env.sh base; } > target/vm-image.log 2>&1 &
vm_image_pid=$!
trap 'kill "$vm_image_pid" "$cluster_pid" "$clients_pid" 2>/dev/null || true' EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== packages (the VM tests install the .deb) [$(date -u +%T), +${SECONDS}s]"
mapfile -t pkgs < <(scripts/package.sh --profile ci)
export PODWARDEN_DEB="$(realpath "${pkgs[0]}")"
# The VM tests (tests/vm*.rs: a Debian 12 guest under emulation each) are
# the longest part: they run in the background while the other tests
# build and run, in two lanes. The first starts as soon as its binaries
# are built; the second once the first or the other tests are done, so
# that no more than two of the three share the machine. Their output follows
# the others'. The tests that measure bursts against the clock
# (tests/reactions.rs) run alone before the guests start: an emulated CPU
# beside them is a load they do not model.
vm_lane1=(--test vm --test vm_reboot)
vm_lane2=()
other_tests=()
alone_tests=(--test reactions)
for f in tests/*.rs; do
  t=$(basename "$f" .rs)
  case "$t" in
    vm | vm_reboot | reactions) ;;
    vm*) vm_lane2+=(--test "$t") ;;
    *) other_tests+=(--test "$t") ;;
  esac
done
echo "== building the VM tests and ${alone_tests[*]} [$(date -u +%T), +${SECONDS}s]"
cargo test --profile ci --no-run --quiet "${vm_lane1[@]}" "${vm_lane2[@]}" "${alone_tests[@]}"
# (and not beside the base machine's boot)
echo "== waiting for the VM image [$(date -u +%T), +${SECONDS}s]"
if ! wait "$vm_image_pid"; then
  cat target/vm-image.log >&2
  echo "the VM image or its base machine could not be made (log above: target/vm-image.log)" >&2
  exit 1
fi
echo "== cargo test ${alone_tests[*]}, alone [$(date -u +%T), +${SECONDS}s]"
status=0
cargo test --profile ci --no-fail-fast "${alone_tests[@]}" || status=$?
vm_pids=()
# a VM left behind by an interrupted run is no one's
trap 'kill "${vm_pids[@]}" "$cluster_pid" "$clients_pid" 2>/dev/null || true' EXIT
vm_lane() {
  local log="$1" done="$2"
  shift 2
  local rc=0
  { cargo test --profile ci --no-fail-fast "$@" || rc=$?; echo "(this lane ended at $(date -u +%T), +${SECONDS}s)"; } > "$log" 2>&1
  touch "$done"
  return "$rc"
}
rm -f target/.vm-lane1.done target/.other-tests.done target/.vm-lane2.done target/.cluster.up
echo "== the VM tests, lane 1 (${vm_lane1[*]}), in the background [$(date -u +%T), +${SECONDS}s]"
vm_lane target/vm-tests-1.log target/.vm-lane1.done "${vm_lane1[@]}" &
vm_pids+=($!)
# lane 2 starts once lane 1 or the other tests are done, and the control
# plane is up (tests/vm_cluster.rs joins it)
{
  while { [ ! -e target/.vm-lane1.done ] && [ ! -e target/.other-tests.done ]; } || [ ! -e target/.cluster.up ]; do sleep 1; done
  vm_lane target/vm-tests-2.log target/.vm-lane2.done "${vm_lane2[@]}"
} &
vm_pids+=($!)
echo "== cargo clippy [$(date -u +%T), +${SECONDS}s]"
cargo clippy --profile ci --all-targets --quiet -- -D warnings
echo "== waiting for the test control plane [$(date -u +%T), +${SECONDS}s]"
if ! wait "$cluster_pid"; then
  cat target/cluster-env.log >&2
  echo "the test control plane could not be built or started (log above: target/cluster-env.log)" >&2
  exit 1
fi
tail -n 3 target/cluster-env.log
touch target/.cluster.up
echo "== waiting for the client libraries [$(date -u +%T), +${SECONDS}s]"
if ! wait "$clients_pid"; then
  cat target/clients-prepare.log >&2
  echo "the client libraries could not be installed (log above: target/clients-prepare.log)" >&2
  exit 1
fi
echo "== cargo test [$(date -u +%T), +${SECONDS}s]"
cargo test --profile ci --no-fail-fast --lib --bins "${other_tests[@]}" || status=$?
touch target/.other-tests.done
echo "== waiting for the VM tests (lane 2: ${vm_lane2[*]}) [$(date -u +%T), +${SECONDS}s]"
vm_status=0
for pid in "${vm_pids[@]}"; do
  wait "$pid" || vm_status=$?
done
trap - EXIT
echo "== the VM tests (their output) [$(date -u +%T), +${SECONDS}s]"
cat target/vm-tests-1.log target/vm-tests-2.log
crashes="${PODWARDEN_E2E_DIR:-/var/lib/podwarden-e2e}/containerd-crashes.log"
if [ -s "$crashes" ]; then
  echo "== WARNING: the e2e containerd crashed by itself during this run (restarted; its log: containerd.log):" >&2
  cat "$crashes" >&2
fi
if [ "$status" -ne 0 ] || [ "$vm_status" -ne 0 ]; then
  echo "tests failed: cargo test exited $status, the VM tests $vm_status" >&2
  exit 1
fi
echo "== packages checked and installed here [$(date -u +%T), +${SECONDS}s]"
scripts/check-packages.sh "${pkgs[0]}" "${pkgs[1]}"
