#!/usr/bin/env bash
# The end-to-end environment: a private containerd (own root, state and
# socket) with runc and CNI, and busybox/pause images built locally from
# busybox-static (no registry is needed).
#
#   scripts/e2e-env.sh up      install packages, start containerd, import images (idempotent)
#   scripts/e2e-env.sh down    stop containerd and remove its state
#   scripts/e2e-env.sh env     print the variables tests read
#
# Facts this relies on (Debian 12, containerd 1.6.20): root here lacks
# CAP_SYS_RESOURCE, so `restrict_oom_score_adj = true` is required or every
# RunPodSandbox fails; Debian's CNI plugins live in /usr/lib/cni.
set -euo pipefail
# The daemons started here must not inherit the caller's descriptors: a lock
# the caller holds (flock around a test run) would live as long as they do.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

E2E_DIR="${PODWARDEN_E2E_DIR:-/var/lib/podwarden-e2e}"
RUN_DIR="${PODWARDEN_E2E_RUN:-/run/podwarden-e2e}"
SOCK="$RUN_DIR/containerd.sock"
IMAGE_BUSYBOX="localhost/busybox:e2e"
IMAGE_PAUSE="localhost/pause:e2e"
PKGS=(containerd runc containernetworking-plugins busybox-static iproute2)

log() { printf 'e2e-env: %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

write_config() {
  mkdir -p "$E2E_DIR/root" "$RUN_DIR/state" "$E2E_DIR/cni" "$E2E_DIR/images"
  cat > "$E2E_DIR/containerd.toml" <<TOML
version = 2
root = "$E2E_DIR/root"
state = "$RUN_DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IMAGE_PAUSE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$E2E_DIR/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
TOML
  cat > "$E2E_DIR/cni/10-podwarden-e2e.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "podwarden-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "pwe2e0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.89.0.0/16"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RUN_DIR/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
JSON
}

running() {
  [ -S "$SOCK" ] && [ -f "$RUN_DIR/containerd.pid" ] && kill -0 "$(cat "$RUN_DIR/containerd.pid")" 2>/dev/null
}

start_containerd() {
  if running; then return; fi
  log "starting containerd on $SOCK"
  rm -f "$SOCK" "$SOCK.ttrpc"   # stale from a containerd that was killed
  nohup containerd --config "$E2E_DIR/containerd.toml" >"$E2E_DIR/containerd.log" 2>&1 &
  echo $! > "$RUN_DIR/containerd.pid"
  for _ in $(seq 1 100); do
    [ -S "$SOCK" ] && break
    sleep 0.1
  done
  [ -S "$SOCK" ] || { log "containerd did not come up; see $E2E_DIR/containerd.log"; tail -20 "$E2E_DIR/containerd.log" >&2; exit 1; }
}

# A docker-archive image from busybox-static, imported into the k8s.io
# namespace under $1 with entrypoint $2 (a JSON array).
build_image() {
  local name="$1" entrypoint="$2"
  if ctr --address "$SOCK" -n k8s.io images ls -q 2>/dev/null | grep -qx "$name"; then return; fi
  log "building $name from busybox-static"
  local work
  work="$(mktemp -d)"
  mkdir -p "$work/rootfs/bin" "$work/rootfs/etc" "$work/rootfs/tmp" "$work/rootfs/www" "$work/out"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  for app in $(/bin/busybox --list); do
    [ "$app" = busybox ] || ln -sf busybox "$work/rootfs/bin/$app"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' > "$work/rootfs/etc/passwd"
  echo 'root:x:0:' > "$work/rootfs/etc/group"
  echo 'hello from podwarden' > "$work/rootfs/www/index.html"
  tar -C "$work/rootfs" --numeric-owner --owner=0 --group=0 -cf "$work/layer.tar" .
  local layer_sha
  layer_sha="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  mkdir -p "$work/out/$layer_sha"
  mv "$work/layer.tar" "$work/out/$layer_sha/layer.tar"
  cat > "$work/config.json" <<CFG
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Entrypoint":$entrypoint,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer_sha"]}}
CFG
  local cfg_sha
  cfg_sha="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
  mv "$work/config.json" "$work/out/$cfg_sha.json"
  echo "[{\"Config\":\"$cfg_sha.json\",\"RepoTags\":[\"$name\"],\"Layers\":[\"$layer_sha/layer.tar\"]}]" > "$work/out/manifest.json"
  tar -C "$work/out" -cf "$E2E_DIR/images/$(echo "$name" | tr '/:' '__').tar" .
  ctr --address "$SOCK" -n k8s.io images import --no-unpack=false "$E2E_DIR/images/$(echo "$name" | tr '/:' '__').tar" >/dev/null
  rm -rf "$work"
}

up() {
  [ "$(id -u)" = 0 ] || { log "run as root"; exit 1; }
  install_packages
  write_config
  start_containerd
  build_image "$IMAGE_BUSYBOX" '["/bin/sh"]'
  build_image "$IMAGE_PAUSE" '["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]'
  env_vars
}

down() {
  if [ -f "$RUN_DIR/containerd.pid" ]; then
    kill "$(cat "$RUN_DIR/containerd.pid")" 2>/dev/null || true
    sleep 1
  fi
  # tasks left behind by the shim
  pkill -f "containerd-shim-runc-v2 -namespace k8s.io -address $SOCK" 2>/dev/null || true
  grep " $RUN_DIR\| $E2E_DIR" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l 2>/dev/null || true
  rm -rf "$RUN_DIR" "$E2E_DIR"
  ip link del pwe2e0 2>/dev/null || true
}

env_vars() {
  echo "PODWARDEN_E2E_SOCKET=$SOCK"
  echo "PODWARDEN_E2E_DIR=$E2E_DIR"
  echo "PODWARDEN_E2E_BUSYBOX=$IMAGE_BUSYBOX"
}

# A small image of its own (one layer: /data, $2 KiB of random bytes) under
# the name $1, for image garbage collection tests and benchmarks: distinct
# content, so removing it frees its bytes and no other image's.
extra_image() {
  local name="$1" kib="${2:-256}" work
  work="$(mktemp -d)"
  mkdir -p "$work/rootfs" "$work/out"
  head -c "$((kib * 1024))" /dev/urandom > "$work/rootfs/data"
  echo "$name" > "$work/rootfs/name"
  tar -C "$work/rootfs" --numeric-owner --owner=0 --group=0 -cf "$work/layer.tar" .
  local layer_sha cfg_sha
  layer_sha="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  mkdir -p "$work/out/$layer_sha"
  mv "$work/layer.tar" "$work/out/$layer_sha/layer.tar"
  echo "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}}" > "$work/config.json"
  cfg_sha="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
  mv "$work/config.json" "$work/out/$cfg_sha.json"
  echo "[{\"Config\":\"$cfg_sha.json\",\"RepoTags\":[\"$name\"],\"Layers\":[\"$layer_sha/layer.tar\"]}]" > "$work/out/manifest.json"
  tar -C "$work/out" -cf "$work/image.tar" .
  ctr --address "$SOCK" -n k8s.io images import "$work/image.tar" >/dev/null
  rm -rf "$work"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) env_vars ;;
  extra-image) extra_image "${2:?name}" "${3:-256}" ;;
  *) echo "usage: $0 up|down|env|extra-image NAME [KiB]" >&2; exit 2 ;;
esac
