#!/usr/bin/env bash
# podwarden's main job: a private containerd (scripts/e2e-env.sh) and the
# agent running the example pods from examples/manifests. Add, edit or
# remove manifests in /tmp/podwarden-demo/manifests while it runs; see the
# pods at http://127.0.0.1:10255/pods. Ctrl-C stops the agent (the pods keep
# running and are adopted by the next start).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust 1.95 or newer with rustup (https://rustup.rs)" >&2
  exit 1
fi
need_pkgs=(gcc g++ libc6-dev make cmake protobuf-compiler pkg-config libdbus-1-dev)
missing=()
for p in "${need_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
scripts/e2e-env.sh up >/dev/null
cargo build --release --quiet
demo=/tmp/podwarden-demo
mkdir -p "$demo/manifests" "$demo/root" "$demo/logs"
cp -n examples/manifests/*.yaml "$demo/manifests/" 2>/dev/null || true
echo "podwarden: watching $demo/manifests; pods at http://127.0.0.1:10255/pods (Ctrl-C stops)"
exec target/release/podwarden run --config examples/config.yaml
