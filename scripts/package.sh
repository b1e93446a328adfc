#!/usr/bin/env bash
# Build podwarden's packages: target/debian/podwarden_<v>_<arch>.deb
# (cargo-deb) and target/generate-rpm/podwarden-<v>.<arch>.rpm
# (cargo-generate-rpm), both from the metadata in Cargo.toml.
#   scripts/package.sh [--profile PROFILE]    (default: release)
# Installs the two cargo tools if missing. Prints the two paths.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = "--profile" ]; then profile="$2"; fi
log() { printf 'package: %s\n' "$*" >&2; }

for tool in cargo-deb cargo-generate-rpm; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/$tool" ]; then
    log "installing $tool"
    cargo install --locked --quiet "$tool"
  fi
done
export PATH="$HOME/.cargo/bin:$PATH"

cargo build --profile "$profile" --bin podwarden --quiet
# cargo-deb reads target/release/... in the assets as "this profile's output"
deb_out=$(cargo deb --no-build --profile "$profile" 2>/dev/null | tail -n 1)
cargo generate-rpm --profile "$profile" >/dev/null
rpm_out=$(ls -t "${CARGO_TARGET_DIR:-target}"/generate-rpm/podwarden-*.rpm | head -n 1)
log "built $deb_out and $rpm_out from the $profile profile"
echo "$deb_out"
echo "$rpm_out"
