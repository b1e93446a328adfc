#!/usr/bin/env bash
# A real Debian 12 machine for the tests: systemd as PID 1, cgroup v2,
# AppArmor, Debian's containerd and runc, booted under QEMU with software
# emulation (TCG) from an image made of Debian's packages only.
#
#   scripts/vm-env.sh build              build the base image, or reuse the cached one
#   scripts/vm-env.sh base               boot the base machine once and save it, running (or
#                                        reuse the saved one)
#   scripts/vm-env.sh up NAME [SECONDS]  start NAME, a copy-on-write overlay (kept across `up`s,
#                                        so a reboot keeps its disk): a new one resumes the
#                                        saved base machine (booted instead with VM_CMDLINE or
#                                        VM_NO_RESUME=1), an existing one boots; waits for ssh;
#                                        the VM is killed after SECONDS (default 1800)
#   scripts/vm-env.sh ssh NAME CMD...    run CMD in NAME as root (bounded: $VM_SSH_TIMEOUT, 600 s)
#   scripts/vm-env.sh put NAME SRC DST   copy a file from here to NAME
#   scripts/vm-env.sh wait-down NAME S   wait up to S seconds for NAME's QEMU to exit (poweroff, reboot)
#   scripts/vm-env.sh down NAME          kill NAME's QEMU (by its PID) and remove its overlay
#   scripts/vm-env.sh console NAME       print NAME's serial console so far
#
# The way in is sshd over QEMU's user-mode network: one forwarded port on
# 127.0.0.1, a key made with the image; the guest's network is `restrict=on`
# (it reaches neither the host nor anything beyond, only the forwarded port
# reaches it). One way out may be opened: with VM_API_FORWARD=HOST:PORT
# at `up`, the guest's connections to 10.0.2.100:6443 are carried (socat,
# one per connection, started by QEMU) to HOST:PORT on this machine, and
# nowhere else: a control plane on the host's loopback for a guest that
# joins it. The choice is kept with the VM, so its reboots keep it. The image is cached under $VM_CACHE (default
# /var/cache/podwarden-vm) by a hash of this script and the package list,
# so a fresh machine builds it once (about 2 minutes) and later runs reuse
# it. KVM is used only when VM_KVM=1 (guests here hang under KVM after the
# kernel's decompressor): TCG is the default.
set -euo pipefail
# The QEMU started here must not inherit the caller's descriptors (a test
# run's lock would live as long as the VM).
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${VM_CACHE:-/var/cache/podwarden-vm}"
RUN="${VM_RUN:-/run/podwarden-vm}"
MIRROR="${VM_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
GUEST_PKGS=systemd,systemd-sysv,dbus,udev,kmod,linux-image-amd64,containerd,runc,apparmor,iproute2,procps,util-linux,e2fsprogs,containernetworking-plugins,busybox-static,iptables,openssh-server,libpam-systemd,systemd-timesyncd,less
HOST_PKGS=(debootstrap qemu-system-x86 qemu-utils openssh-client e2fsprogs socat)

log() { printf 'vm-env: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

install_host_packages() {
  local missing=()
  for p in "${HOST_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "missing packages: ${missing[*]} (install them as root)"
  log "installing ${missing[*]}"
  apt-get update -qq
  local args=()
  for p in "${missing[@]}"; do
    if [ "$p" = qemu-utils ] || [ "$p" = qemu-system-x86 ]; then
      # qemu-system-x86 needs the qemu-utils of its own release; a newer
      # qemu-utils (as some images ship) is replaced by Debian 12's.
      args+=("$p=$(apt-cache madison qemu-system-x86 | awk 'NR==1 {print $3}')")
    else
      args+=("$p")
    fi
  done
  if dpkg -s qemu-utils >/dev/null 2>&1 && ! dpkg -s qemu-system-x86 >/dev/null 2>&1; then
    args+=("qemu-utils=$(apt-cache madison qemu-system-x86 | awk 'NR==1 {print $3}')")
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "${args[@]}" >/dev/null
}

image_dir() {
  local h
  h=$( { sed -n '/^# --- image recipe ---$/,/^# --- end of image recipe ---$/p' "$0"; echo "$GUEST_PKGS $SUITE"; } | sha256sum | cut -c1-16)
  echo "$CACHE/$h"
}

# --- image recipe ---
configure_guest() {
  local root="$1" key="$2"
  echo podwarden-vm > "$root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 podwarden-vm\n::1 localhost\n' > "$root/etc/hosts"
  echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' > "$root/etc/fstab"
  mkdir -p "$root/root/.ssh" "$root/etc/systemd/network" "$root/etc/containerd" "$root/etc/cni/net.d"
  chmod 700 "$root/root/.ssh"
  cp "$key.pub" "$root/root/.ssh/authorized_keys"
  chmod 600 "$root/root/.ssh/authorized_keys"
  printf 'UseDNS no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n' > "$root/etc/ssh/sshd_config.d/podwarden-vm.conf"
  printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n' > "$root/etc/systemd/network/10-wired.network"
  chroot "$root" systemctl enable systemd-networkd.service ssh.service >/dev/null 2>&1
  # the serial console carries the kernel's and systemd's messages only
  chroot "$root" systemctl mask serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
    e2scrub_all.timer fstrim.timer man-db.timer >/dev/null 2>&1 || true
  # containerd as Debian ships it, with the CNI plugins where Debian puts
  # them and the sandbox image the tests import; the cgroup driver is what
  # each test sets (cgroupfs unless it asks for systemd)
  cat > "$root/etc/containerd/config.toml" <<'TOML'
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:e2e"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
TOML
  cat > "$root/etc/cni/net.d/10-podwarden.conflist" <<'JSON'
{
  "cniVersion": "0.4.0",
  "name": "podwarden",
  "plugins": [
    {"type": "bridge", "bridge": "pw0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  # a few huge pages for the hugetlb tests
  echo 'vm.nr_hugepages = 16' > "$root/etc/sysctl.d/90-podwarden-vm.conf"
  rm -f "$root"/var/cache/apt/archives/*.deb
  # no package lists: the guest installs only the local .deb (its
  # dependencies are in the image), and apt would first spend about 35 s
  # of emulated CPU caching the 50 MB list of all of Debian
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
}

build() {
  install_host_packages
  local dir
  dir=$(image_dir)
  if [ -f "$dir/disk.img" ] && [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd" ]; then
    echo "$dir"
    return
  fi
  log "building the image in $dir (debootstrap from $MIRROR)"
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  local root="$dir.tmp/root"
  ssh-keygen -q -t ed25519 -N '' -C podwarden-vm -f "$dir.tmp/key"
  debootstrap --variant=minbase --include="$GUEST_PKGS" "$SUITE" "$root" "$MIRROR" > "$dir.tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$dir.tmp/debootstrap.log" >&2; die "debootstrap failed (log: $dir.tmp/debootstrap.log)"; }
  configure_guest "$root" "$dir.tmp/key"
  cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n 1)" "$dir.tmp/vmlinuz"
  cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -n 1)" "$dir.tmp/initrd"
  truncate -s 4G "$dir.tmp/disk.img"
  mkfs.ext4 -q -L root -d "$root" "$dir.tmp/disk.img"
  rm -rf "$root"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  log "image ready: $dir"
  echo "$dir"
}
# --- end of image recipe ---

vm_dir() { echo "$RUN/$1"; }

alive() {
  local d
  d=$(vm_dir "$1")
  local pid
  pid=$(cat "$d/qemu.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}

ssh_to() {
  local name="$1"
  shift
  local d
  d=$(vm_dir "$name")
  [ -f "$d/port" ] || die "$name is not up (scripts/vm-env.sh up $name)"
  timeout --kill-after=5 "${VM_SSH_TIMEOUT:-600}" ssh -q -i "$d/key" -p "$(cat "$d/port")" \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR \
    -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=6 \
    -o ControlMaster=auto -o ControlPath="$d/ssh-mux" -o ControlPersist=60 root@127.0.0.1 "$@"
}

# a port for NAME's ssh: free now and not taken by another VM starting
# (VMs may start at once; the choice is made under a lock)
free_port() {
  local name="$1" p taken
  mkdir -p "$RUN"
  exec 7>"$RUN/port.lock"
  flock 7
  taken=$(cat "$RUN"/*/port 2>/dev/null || true)
  for p in $(seq 22200 22299); do
    if ! grep -qx "$p" <<< "$taken" && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p" > "$(vm_dir "$name")/port"
      exec 7>&-
      return
    fi
  done
  exec 7>&-
  die "no free port in 22200-22299"
}

# busybox and pause as the e2e suite builds them, into the VM's containerd
import_images() {
  local name="$1" sock="${PODWARDEN_E2E_RUN:-/run/podwarden-e2e}/containerd.sock" d tar
  d=$(vm_dir "$name")
  if ssh_to "$name" ctr -n k8s.io images ls -q 2>/dev/null | grep -qx 'localhost/busybox:e2e'; then
    return
  fi
  [ -S "$sock" ] || "$here/e2e-env.sh" up >/dev/null
  tar="$d/images.tar"
  ctr -a "$sock" -n k8s.io images export "$tar" localhost/busybox:e2e localhost/pause:e2e
  ssh_to "$name" 'cat > /root/images.tar' < "$tar"
  ssh_to "$name" 'ctr -n k8s.io images import /root/images.tar >/dev/null && rm /root/images.tar'
  rm -f "$tar"
}

# The machine every VM starts from: booted once, the e2e images imported,
# then saved running (QEMU's migration to a file). A new VM resumes it in
# a few seconds instead of a boot of about a minute under emulation. The
# saved machine is kept while the image and the e2e images are the same.
BASE=_base

base_key() {
  local sock="${PODWARDEN_E2E_RUN:-/run/podwarden-e2e}/containerd.sock"
  [ -S "$sock" ] || "$here/e2e-env.sh" up >/dev/null
  # names and digests only: the labels containerd's CRI plugin adds or
  # drops as tests use the images are not the images
  { image_dir; ctr -a "$sock" -n k8s.io images ls 2>/dev/null | awk '$1 ~ /^localhost\/(busybox|pause):e2e$/ {print $1, $3}'; } |
    sha256sum | cut -c1-16
}

# start QEMU for NAME (its overlay made), in the background; extra args follow
start_qemu() {
  local name="$1" limit="$2" img="$3" d accel=tcg cpu=qemu64 port
  shift 3
  d=$(vm_dir "$name")
  rm -f "$d/port"
  free_port "$name"
  port=$(cat "$d/port")
  cp "$img/key" "$d/key"
  chmod 600 "$d/key"
  if [ "${VM_KVM:-0}" = 1 ] && [ -w /dev/kvm ]; then accel=kvm; cpu=host; fi
  local net="user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22"
  if [ -s "$d/api_forward" ]; then
    # forwarding rules pass `restrict=on`; only this address and port do
    net="$net,guestfwd=tcp:10.0.2.100:6443-cmd:socat - TCP:$(cat "$d/api_forward"),,connect-timeout=10"
  fi
  rm -f "$d/qemu.pid"
  : > "$d/console.log"
  # the hard time limit: QEMU is killed after $limit seconds whatever happens
  setsid timeout --signal=KILL "$limit" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -m 2048 -smp 2 \
    -nographic -no-reboot -display none -serial "file:$d/console.log" \
    -kernel "$img/vmlinuz" -initrd "$img/initrd" \
    -append "root=/dev/vda rw console=ttyS0 apparmor=1 security=apparmor systemd.unified_cgroup_hierarchy=1 ${VM_CMDLINE:-}" \
    -drive "file=$d/overlay.qcow2,format=qcow2,if=virtio" \
    -netdev "$net" -device virtio-net-pci,netdev=n0 \
    -pidfile "$d/qemu.pid" "$@" > "$d/qemu.log" 2>&1 < /dev/null &
}

# until NAME answers ssh; a failure says why (the console's tail on
# stderr) and returns 1
wait_ssh() {
  local name="$1" d t0=$SECONDS why=
  d=$(vm_dir "$name")
  until VM_SSH_TIMEOUT=10 ssh_to "$name" true 2>/dev/null; do
    if [ $((SECONDS - t0)) -gt 180 ]; then
      why="no ssh after 180 s"
    elif grep -q "Kernel panic" "$d/console.log" 2>/dev/null; then
      why="the guest's kernel panicked while booting"
    elif [ -f "$d/qemu.pid" ] && ! alive "$name"; then
      why="QEMU exited while booting ($d/qemu.log)"
    fi
    if [ -n "$why" ]; then
      tail -n 30 "$d/console.log" >&2 || true
      log "$name: $why (console above, $d/console.log)"
      return 1
    fi
    sleep 0.5
  done
  echo $((SECONDS - t0)) > "$d/boot_seconds"
}

# the saved base machine, made if missing or stale (one maker at a time)
base() {
  local img="$1" b key
  b=$(vm_dir "$BASE")
  mkdir -p "$RUN"
  exec 8>"$RUN/base.lock"
  flock 8
  key=$(base_key)
  if [ -f "$b/state" ] && [ "$(cat "$b/key" 2>/dev/null)" = "$key" ]; then
    exec 8>&-
    return
  fi
  down "$BASE"
  mkdir -p "$b"
  qemu-img create -q -f qcow2 -F raw -b "$img/disk.img" "$b/overlay.qcow2"
  mkfifo "$b/mon.in" "$b/mon.out"
  log "booting the base machine (saved once, resumed by each VM)"
  start_qemu "$BASE" 900 "$img" -monitor "pipe:$b/mon"
  wait_ssh "$BASE" || die "the base machine did not boot"
  import_images "$BASE"
  ssh_to "$BASE" sync
  # saved while it runs (live), so that each VM resumed from it runs at
  # once (a live save under emulation beside a cold build once came out
  # torn: its guests panic, which `wait_ssh` reports at once)
  # drained while QEMU answers, so that it never waits on the pipe
  cat "$b/mon.out" > "$b/monitor.log" &
  local reader=$!
  printf 'migrate "exec:cat > %s"\nquit\n' "$b/state.tmp" > "$b/mon.in"
  wait_down "$BASE" 300 || die "the base machine was not saved within 300 s ($b/monitor.log)"
  kill "$reader" 2>/dev/null || true
  [ "$(stat -c %s "$b/state.tmp" 2>/dev/null || echo 0)" -gt 1000000 ] || die "no saved base machine ($b/monitor.log)"
  mv "$b/state.tmp" "$b/state"
  echo "$key" > "$b/key"
  log "base machine saved ($(du -h "$b/state" | cut -f1))"
  exec 8>&-
}

up() {
  local name="$1" limit="${2:-1800}" img d b
  [[ "$name" =~ ^[a-z0-9-]+$ ]] || die "a VM name is lower-case letters, digits and dashes: $name"
  img=$(build)
  d=$(vm_dir "$name")
  if alive "$name"; then
    log "$name is already up"
    return
  fi
  mkdir -p "$d"
  if [ -n "${VM_API_FORWARD:-}" ]; then
    [[ "$VM_API_FORWARD" =~ ^[0-9.]+:[0-9]+$ ]] || die "VM_API_FORWARD is HOST:PORT (an IPv4 address): $VM_API_FORWARD"
    echo "$VM_API_FORWARD" > "$d/api_forward"
  fi
  local resume=() try
  for try in 1 2; do
    if [ ! -f "$d/overlay.qcow2" ]; then
      if [ -z "${VM_CMDLINE:-}" ] && [ "${VM_NO_RESUME:-0}" != 1 ]; then
        # a new VM: the base machine, resumed (its disk under an overlay)
        base "$img"
        b=$(vm_dir "$BASE")
        qemu-img create -q -f qcow2 -F qcow2 -b "$b/overlay.qcow2" "$d/overlay.qcow2"
        resume=(-incoming "exec:cat $b/state")
      else
        qemu-img create -q -f qcow2 -F raw -b "$img/disk.img" "$d/overlay.qcow2"
      fi
    fi
    # (an existing overlay: the same machine booted again, as after a reboot)
    start_qemu "$name" "$limit" "$img" -monitor none "${resume[@]}"
    wait_ssh "$name" && break
    # a saved base machine whose guests do not come up (a save torn under
    # load) would fail every VM made from it while its key stands: it is
    # saved again, and the VM made from the new one, once
    [ "$try" = 1 ] && [ "${#resume[@]}" -gt 0 ] || die "$name did not come up"
    log "$name: discarding the saved base machine and making the VM again from a new one"
    cp "$d/console.log" "$RUN/$name.failed-console.log" 2>/dev/null || true
    down "$name"
    mkdir -p "$d"
    [ -z "${VM_API_FORWARD:-}" ] || echo "$VM_API_FORWARD" > "$d/api_forward"
    rm -f "$(vm_dir "$BASE")/key"
    resume=()
  done
  import_images "$name"
  log "$name up in $(cat "$d/boot_seconds") s (ssh on 127.0.0.1:$(cat "$d/port"))${resume:+, resumed}"
}

wait_down() {
  local name="$1" limit="$2" t0=$SECONDS
  while alive "$name"; do
    [ $((SECONDS - t0)) -lt "$limit" ] || return 1
    sleep 0.2
  done
}

down() {
  local name="$1" d
  d=$(vm_dir "$name")
  if alive "$name"; then
    kill -KILL "$(cat "$d/qemu.pid" 2>/dev/null)" 2>/dev/null || true
    wait_down "$name" 10 || die "$name: QEMU did not die"
  fi
  rm -rf "$d"
}

cmd="${1:-}"
case "$cmd" in
  build) build >/dev/null ;;
  image) image_dir ;;
  up) [ -n "${2:-}" ] || die "usage: vm-env.sh up NAME [SECONDS]"; up "$2" "${3:-1800}" ;;
  ssh) [ -n "${2:-}" ] || die "usage: vm-env.sh ssh NAME CMD..."; name="$2"; shift 2; ssh_to "$name" "$@" ;;
  put) [ -n "${4:-}" ] || die "usage: vm-env.sh put NAME SRC DST"; ssh_to "$2" "cat > '$4'" < "$3" ;;
  wait-down) wait_down "$2" "${3:-60}" ;;
  down) [ -n "${2:-}" ] || die "usage: vm-env.sh down NAME"; down "$2" ;;
  base) base "$(build)" ;;
  console) cat "$(vm_dir "$2")/console.log" ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
