#!/usr/bin/env bash
# The end-to-end environment: a private containerd (own root, state and
# socket) with runc and CNI, busybox/pause images built locally from
# busybox-static, and a private registry (Debian's docker-registry on
# 127.0.0.1:5443, TLS from a test CA that the containerd trusts through its
# hosts.toml, htpasswd authentication) holding the busybox image, pushed
# with skopeo, for the registry credential tests.
#
#   scripts/e2e-env.sh up      install packages, start containerd and the registry, import and push images (idempotent)
#   scripts/e2e-env.sh down    stop containerd and remove its state
#   scripts/e2e-env.sh env     print the variables tests read
#
# PODWARDEN_E2E_DIR, _RUN, _BRIDGE, _SUBNET and _REGISTRY_PORT place a second
# environment beside the default one (then export its PODWARDEN_E2E_SOCKET).
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
REGISTRY="127.0.0.1:${PODWARDEN_E2E_REGISTRY_PORT:-5443}"
# a second environment beside the first (own dirs, bridge, subnet and
# registry port) lets two test runs each have a containerd of their own
BRIDGE="${PODWARDEN_E2E_BRIDGE:-pwe2e0}"
SUBNET="${PODWARDEN_E2E_SUBNET:-10.89.0.0/16}"
REG_DIR="$E2E_DIR/registry"
REG_USER="podwarden-e2e"
IMAGE_PRIVATE="$REGISTRY/e2e/busybox:private"
PKGS=(containerd runc containernetworking-plugins busybox-static iproute2 docker-registry skopeo apache2-utils openssl curl)

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
  cat > "$E2E_DIR/containerd.toml.new" <<TOML
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
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$E2E_DIR/certs.d"
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
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RUN_DIR/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
JSON
  # a containerd started with another config (an older checkout's) is
  # restarted with this one; its containers live on in their shims
  if ! cmp -s "$E2E_DIR/containerd.toml.new" "$E2E_DIR/containerd.toml"; then
    mv "$E2E_DIR/containerd.toml.new" "$E2E_DIR/containerd.toml"
    if running; then
      log "containerd config changed: restarting containerd"
      kill "$(cat "$RUN_DIR/containerd.pid")"
      for _ in $(seq 1 100); do running || break; sleep 0.1; done
    fi
  else
    rm -f "$E2E_DIR/containerd.toml.new"
  fi
}

# The PID of the containerd running with this config, if any.
our_containerd() {
  pgrep -o -x -f "containerd --config $E2E_DIR/containerd.toml"
}

# Whether it runs, with its socket; the pid file (which the tests read to
# kill it) is made to name it: a second supervisor that raced the first
# once left the PID of its own containerd, which had lost the socket and
# exited, and the tests then killed whatever process had that PID later.
running() {
  local pid
  [ -S "$SOCK" ] && pid=$(our_containerd) || return 1
  [ "$(cat "$RUN_DIR/containerd.pid" 2>/dev/null)" = "$pid" ] || echo "$pid" > "$RUN_DIR/containerd.pid"
}

start_containerd() {
  if running; then return; fi
  log "starting containerd on $SOCK"
  rm -f "$SOCK" "$SOCK.ttrpc" "$RUN_DIR/containerd.pid"   # stale from a containerd that was killed
  : > "$E2E_DIR/containerd.log"
  # Debian 12's containerd 1.6.20 sometimes dies of its own data race in
  # the CRI sandbox store ("fatal error: concurrent map read and map
  # write", fixed upstream on release/1.6 by containerd PR #11319, not in
  # Debian's build). A node's systemd restarts it; so does this loop, for
  # such a crash only (a Go fatal error exits 2): a kill (a test stopping
  # it, `down`) is left alone. Each restart is written to
  # containerd-crashes.log, which scripts/test.sh prints.
  nohup bash -c '
    while :; do
      rm -f "$1" "$1.ttrpc"
      containerd --config "$2" >>"$3" 2>&1 &
      pid=$!
      echo "$pid" > "$4"
      wait "$pid"
      rc=$?
      [ "$rc" -eq 2 ] || exit "$rc"
      echo "e2e-env: containerd crashed (exit $rc) at $(date -u +%FT%TZ): restarted" | tee -a "$5" >>"$3"
      sleep 1
    done' _ "$SOCK" "$E2E_DIR/containerd.toml" "$E2E_DIR/containerd.log" "$RUN_DIR/containerd.pid" \
    "$E2E_DIR/containerd-crashes.log" >/dev/null 2>&1 &
  for _ in $(seq 1 100); do
    [ -S "$SOCK" ] && [ -s "$RUN_DIR/containerd.pid" ] && break
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

# The registry's files: a test CA and a certificate for 127.0.0.1 signed by
# it, a random password in htpasswd (bcrypt), its config, and the
# containerd hosts.toml that trusts the CA (certs.d is read at each pull:
# no containerd restart).
registry_files() {
  mkdir -p "$REG_DIR/data" "$REG_DIR/tls"
  local tls="$REG_DIR/tls"
  if [ ! -s "$tls/registry.crt" ]; then
    log "making the registry's test CA and certificate"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=podwarden e2e CA" \
      -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$tls/registry.key" -out "$tls/registry.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$tls/ext.cnf"
    openssl x509 -req -days 3650 -in "$tls/registry.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
      -CAcreateserial -extfile "$tls/ext.cnf" -out "$tls/registry.crt" 2>/dev/null
  fi
  if [ ! -s "$REG_DIR/password" ]; then
    (umask 077; head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$REG_DIR/password")
  fi
  htpasswd -Bbn "$REG_USER" "$(cat "$REG_DIR/password")" > "$REG_DIR/htpasswd" 2>/dev/null
  cat > "$REG_DIR/config.yml" <<YML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $REG_DIR/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
  secret: podwarden-e2e
  tls:
    certificate: $tls/registry.crt
    key: $tls/registry.key
auth:
  htpasswd:
    realm: podwarden-e2e
    path: $REG_DIR/htpasswd
YML
  # containerd 1.6 pulls from 127.0.0.1 over plain http unless the host's
  # server says https
  mkdir -p "$E2E_DIR/certs.d/$REGISTRY"
  cp "$tls/ca.crt" "$E2E_DIR/certs.d/$REGISTRY/ca.crt"
  cat > "$E2E_DIR/certs.d/$REGISTRY/hosts.toml" <<TOML
server = "https://$REGISTRY"
ca = "$E2E_DIR/certs.d/$REGISTRY/ca.crt"

[host."https://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$E2E_DIR/certs.d/$REGISTRY/ca.crt"
TOML
}

registry_up() {
  curl -s -o /dev/null --max-time 2 --cacert "$REG_DIR/tls/ca.crt" "https://$REGISTRY/v2/"
}

start_registry() {
  if [ -f "$RUN_DIR/registry.pid" ] && kill -0 "$(cat "$RUN_DIR/registry.pid")" 2>/dev/null && registry_up; then
    return
  fi
  log "starting docker-registry on $REGISTRY"
  nohup docker-registry serve "$REG_DIR/config.yml" >"$REG_DIR/registry.log" 2>&1 &
  echo $! > "$RUN_DIR/registry.pid"
  for _ in $(seq 1 100); do
    registry_up && return
    sleep 0.1
  done
  log "docker-registry did not come up; see $REG_DIR/registry.log"
  tail -20 "$REG_DIR/registry.log" >&2
  exit 1
}

# The busybox image in the registry, as IMAGE_PRIVATE (skopeo, with the
# credentials; the archive build_image wrote).
push_private_image() {
  local creds="$REG_USER:$(cat "$REG_DIR/password")" repo="${IMAGE_PRIVATE#"$REGISTRY"/}"
  repo="${repo%:*}"
  if curl -sf -o /dev/null --max-time 5 --cacert "$REG_DIR/tls/ca.crt" -u "$creds" \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "https://$REGISTRY/v2/$repo/manifests/${IMAGE_PRIVATE##*:}" 2>/dev/null; then
    return
  fi
  log "pushing $IMAGE_PRIVATE"
  local archive="$E2E_DIR/images/$(echo "$IMAGE_BUSYBOX" | tr '/:' '__').tar"
  if [ ! -s "$archive" ]; then
    ctr --address "$SOCK" -n k8s.io images rm "$IMAGE_BUSYBOX" >/dev/null
    build_image "$IMAGE_BUSYBOX" '["/bin/sh"]'
  fi
  mkdir -p "$REG_DIR/skopeo-certs"
  cp "$REG_DIR/tls/ca.crt" "$REG_DIR/skopeo-certs/ca.crt"
  skopeo --insecure-policy copy -q --dest-creds "$creds" --dest-cert-dir "$REG_DIR/skopeo-certs" \
    "docker-archive:$archive" "docker://$IMAGE_PRIVATE" >/dev/null
}

up() {
  [ "$(id -u)" = 0 ] || { log "run as root"; exit 1; }
  install_packages
  write_config
  registry_files
  start_containerd
  build_image "$IMAGE_BUSYBOX" '["/bin/sh"]'
  build_image "$IMAGE_PAUSE" '["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]'
  start_registry
  push_private_image
  env_vars
}

down() {
  if [ -f "$RUN_DIR/registry.pid" ]; then
    kill "$(cat "$RUN_DIR/registry.pid")" 2>/dev/null || true
  fi
  if pid=$(our_containerd); then
    kill "$pid" 2>/dev/null || true
    sleep 1
  fi
  # tasks left behind by the shim
  pkill -f "containerd-shim-runc-v2 -namespace k8s.io -address $SOCK" 2>/dev/null || true
  grep " $RUN_DIR\| $E2E_DIR" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l 2>/dev/null || true
  rm -rf "$RUN_DIR" "$E2E_DIR"
  ip link del "$BRIDGE" 2>/dev/null || true
}

env_vars() {
  echo "PODWARDEN_E2E_SOCKET=$SOCK"
  echo "PODWARDEN_E2E_DIR=$E2E_DIR"
  echo "PODWARDEN_E2E_BUSYBOX=$IMAGE_BUSYBOX"
  echo "PODWARDEN_E2E_REGISTRY=$REGISTRY"
  echo "PODWARDEN_E2E_REGISTRY_USER=$REG_USER"
  echo "PODWARDEN_E2E_REGISTRY_PASSWORD_FILE=$REG_DIR/password"
  echo "PODWARDEN_E2E_PRIVATE_IMAGE=$IMAGE_PRIVATE"
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
