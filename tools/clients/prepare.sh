#!/usr/bin/env bash
# Installs the official client libraries tests/clients_e2e.rs runs
# (tools/clients/SCENARIO.md), each at the version its file pins:
#   Python's `kubernetes` from PyPI in a virtual environment
#     (python/requirements.txt), in $PODWARDEN_CLIENTS_DIR/venv;
#   JavaScript's `@kubernetes/client-node` from npm (js/package-lock.json,
#     `npm ci`), in js/node_modules;
#   Go's `k8s.io/client-go` from the Go module proxy (go/go.mod, go.sum),
#     the scenario built to $PODWARDEN_CLIENTS_DIR/go-scenario.
# Idempotent: a second run with the same pinned files only checks them.
# `prepare.sh` makes all three (what the tests run, then `ready`);
# `prepare.sh python|js|go` only that part, leaving `ready` as it is.
# $PODWARDEN_CLIENTS_DIR is target/clients by default; `ready` there says
# all three are in place.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${PODWARDEN_CLIENTS_DIR:-$root/target/clients}"
mkdir -p "$out"
log() { printf 'clients: %s\n' "$*" >&2; }

# what each part was made from: remade when its pinned files change
stamp() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [ -f "$out/$1.stamp" ] && [ "$(cat "$out/$1.stamp")" = "$2" ]; }

only="${1:-all}"
case "$only" in all | python | js | go) ;; *) log "usage: $0 [python|js|go]"; exit 2 ;; esac
want() { [ "$only" = "$1" ] || [ "$only" = all ]; }
[ "$only" != all ] || rm -f "$out/ready"

# Python
if want python; then
s=$(stamp "$here/python/requirements.txt")
if ! fresh python "$s" || [ ! -x "$out/venv/bin/python" ]; then
  log "Python: a virtual environment with $(tr '\n' ' ' < "$here/python/requirements.txt")"
  rm -rf "$out/venv"
  python3 -m venv "$out/venv" || {
    log "python3 -m venv failed: install python3-venv (Debian) and run again"
    exit 1
  }
  "$out/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/python/requirements.txt"
  echo "$s" > "$out/python.stamp"
fi
fi

# JavaScript
if want js; then
s=$(stamp "$here/js/package.json" "$here/js/package-lock.json")
if ! fresh js "$s" || [ ! -d "$here/js/node_modules" ]; then
  command -v npm >/dev/null || { log "npm not found: install Node.js 20 or newer with npm"; exit 1; }
  log "JavaScript: npm ci ($(node --version))"
  (cd "$here/js" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$s" > "$out/js.stamp"
fi
fi

# Go
if want go; then
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { log "go not found: install Go 1.24 or newer"; exit 1; }
s=$(stamp "$here/go/go.mod" "$here/go/go.sum" "$here"/go/*.go)
if ! fresh go "$s" || [ ! -x "$out/go-scenario" ]; then
  log "Go: client-go scenario ($(go version | cut -d' ' -f3))"
  (cd "$here/go" && go build -trimpath -o "$out/go-scenario" .)
  echo "$s" > "$out/go.stamp"
fi
fi

[ "$only" = all ] || exit 0
touch "$out/ready"
log "ready in $out"
