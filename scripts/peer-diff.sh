#!/usr/bin/env bash
# The kubelet as the oracle: every manifest in tests/peer runs under the
# real kubelet (built from the k8s.io/kubernetes module tools/cluster pins,
# run standalone) and under podwarden, each alone on the private containerd
# of scripts/e2e-env.sh, and the pod statuses and container logs both
# report are compared field by field (benches/peer_diff.rs). Differences
# that are deliberate are listed in docs/kubelet-differences.md; any other
# fails the run.
#
#   scripts/peer-diff.sh                      all manifests
#   PODWARDEN_PEER_ONLY=files,deadline scripts/peer-diff.sh
#
# As root on Debian 12, with Go (the kubelet's build, cached like the
# control plane's) and Rust. It clears the private containerd of pods:
# never run it beside the test suite on the same environment (the
# PODWARDEN_E2E_* variables of scripts/e2e-env.sh put it on another).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
scripts/e2e-env.sh up >/dev/null
echo "peer-diff: building the kubelet (tools/cluster/build.sh)" >&2
PODWARDEN_CLUSTER_KUBELET=1 tools/cluster/build.sh >/dev/null
echo "peer-diff: building podwarden and the driver" >&2
cargo bench --profile ci --bench peer_diff --no-run --quiet
exec cargo bench --profile ci --bench peer_diff --quiet
