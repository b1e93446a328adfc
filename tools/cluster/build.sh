#!/usr/bin/env bash
# Builds the Kubernetes control plane that cluster mode is tested against,
# from the Go modules pinned in tools/cluster/go.mod (its `tool` lines):
# kube-apiserver, kube-controller-manager, kube-scheduler and etcd, and with
# PODWARDEN_CLUSTER_KUBELET=1 the kubelet too.
#
#   tools/cluster/build.sh [OUT_DIR]    default: target/cluster-bin in the repo
#
# One `go build` for all of them, so the packages they share compile once.
# Go's build and module caches are the usual ones (GOCACHE, GOMODCACHE: the
# environment may move them); they persist, so a second run only checks
# that everything is up to date and relinks nothing. On this project's
# 2-core machine, busy with other builds: 9.5 min cold, 2-4 s warm.
#
# The version variables are set as the Kubernetes release build sets them
# (hack/lib/version.sh names them): the apiserver reports gitVersion and
# the kubelet's version is compared with it. gitCommit is not known from a
# module (the proxy does not give it) and is left empty.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${1:-$ROOT/target/cluster-bin}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

log() { printf 'cluster-build: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }
cd "$HERE"

t0=$(now)
# the release's version and date, from the module go.mod pins
read -r KVER KDATE < <(go list -mod=readonly -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
major="${KVER#v}"; major="${major%%.*}"
minor="${KVER#v*.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KVER -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$KDATE -X $pkg.gitCommit="
done

# the kubelet (the side-by-side peer of issue 41, which no test runs yet)
# only when asked for: it is about a fifth of a cold build, and the cold
# build is the critical path of a cold CI run
mapfile -t PKGS < <(go list -mod=readonly tool | { if [ "${PODWARDEN_CLUSTER_KUBELET:-0}" = 1 ]; then cat; else grep -v '/cmd/kubelet$'; fi; })
log "building ${#PKGS[@]} tools of Kubernetes $KVER into $OUT (GOCACHE $(go env GOCACHE))"
t1=$(now)
nice -n 10 go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$OUT/" "${PKGS[@]}"
build_s=$(since "$t1")

# etcd's main is the root package of go.etcd.io/etcd/server/v3, which go
# names "server"; the link keeps that name (so the next build finds it up
# to date) and etcd points at it
[ "$(readlink "$OUT/etcd" 2>/dev/null)" = server ] || ln -sfn server "$OUT/etcd"

log "go build: ${build_s}s, total $(since "$t0")s"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet server; do
  [ "$b" = kubelet ] && [ "${PODWARDEN_CLUSTER_KUBELET:-0}" != 1 ] && continue
  [ -x "$OUT/$b" ] || { log "missing $OUT/$b"; exit 1; }
  log "$(printf '%-24s %4d MiB' "$b" "$(( $(stat -c %s "$OUT/$b") / 1048576 ))")"
done
