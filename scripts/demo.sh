#!/usr/bin/env bash
# podwarden's main job with the example pods. Until the CRI client lands the
# runtime is simulated in memory (containerRuntimeEndpoint: fake://): the
# whole agent runs (manifest watching, admission, pod workers, housekeeping)
# but no container really starts. Ctrl-C stops the agent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust 1.95 or newer with rustup (https://rustup.rs)" >&2
  exit 1
fi
cargo build --release --quiet
demo=/tmp/podwarden-demo
mkdir -p "$demo/manifests" "$demo/root" "$demo/logs"
cp -n examples/manifests/*.yaml "$demo/manifests/" 2>/dev/null || true
echo "podwarden: watching $demo/manifests (add, edit or remove manifests there; Ctrl-C stops)"
exec target/release/podwarden run --config examples/config-sim.yaml
