#!/usr/bin/env bash
# Writes link/code-order.txt.gz: the functions a running agent executes, which
# build.rs has the linker place first and together (see build.rs). The
# kernel maps a binary's code 64 KiB around each page first touched, so a
# function used now and then among functions never used keeps all of them
# resident; packed together, the code a node runs costs only its own pages.
#
# How: a release binary whose every function starts on its own 4 KiB page
# (LLVM's -align-all-functions=12, fat LTO, so one relink) runs the
# workload below with the block device's read-ahead off and the binary out
# of the page cache: each page of code then enters memory only when it is
# executed, and the pages present in the agent (/proc/PID/pagemap, sampled
# every 2 s) name exactly the functions it ran (C code, built without the
# alignment, to the page). First an idle agent with no pod: its start-up,
# then (its code paged out) what it keeps running for 70 s. Then the
# workload: 105 pods, three init chains with a
# sidecar, deletions, and the Kubernetes API through kubectl (get, watch,
# describe, logs, exec, port-forward, top, apply, delete) when kubectl is
# installed. The list has three tiers, each in address order: the idle
# agent's steady code, its start-up, then the rest the workload ran, so an
# idle node keeps only the first two resident and the code it runs every
# few seconds shares a few pages. Code the workload does not reach is
# placed after, in the linker's own order: it costs only the pages a node
# touches.
#
# Run as root on the machine of scripts/e2e-env.sh (its containerd), with
# python3, then rebuild (`cargo build --release`). CODE_ORDER_BIN and
# CODE_ORDER_MAP name a measuring binary and its lld map made before
# (instead of building one). Names a later build no
# longer has are skipped by the linker, so the file ages gently; re-run
# after large changes or a Rust upgrade (the names carry its hashes).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "code-order.sh: run as root (read-ahead, page cache, pagemap)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "code-order.sh: needs python3" >&2; exit 1; }
eval "$(scripts/e2e-env.sh up)"
W=$(mktemp -d /tmp/podwarden-code-order.XXXXXX)
if [ -n "${CODE_ORDER_BIN:-}" ]; then
  # a measuring build made before (the binary and its map)
  cp "$CODE_ORDER_BIN" "$W/podwarden"
  cp "$CODE_ORDER_MAP" "$W/podwarden.map"
else
  echo "code-order: the measuring build (every function on its own page; one LTO relink)"
  PODWARDEN_CODE_ORDER=0 cargo rustc --release --quiet --bin podwarden -- \
    -C llvm-args=-align-all-functions=12 -C link-arg=-Wl,-Map="$W/podwarden.map"
  cp "${CARGO_TARGET_DIR:-target}/release/podwarden" "$W/podwarden"
fi
BIN="$W/podwarden"
D="$W/agent"

dev=$(lsblk -no PKNAME "$(findmnt -no SOURCE --target "$W")" 2>/dev/null | head -n 1)
[ -n "$dev" ] || dev=$(basename "$(findmnt -no SOURCE --target "$W")")
ra="/sys/block/$dev/queue/read_ahead_kb"
[ -w "$ra" ] || { echo "code-order.sh: no read-ahead setting for the disk of $W ($ra)" >&2; exit 1; }
ra_was=$(cat "$ra")
agent=
sampler=
cleanup() {
  echo "$ra_was" > "$ra"
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
  if [ -n "$agent" ]; then
    # an agent stopped by a signal leaves its pods running: they go first
    rm -f "$D"/manifests/*
    for _ in $(seq 1 60); do
      [ "$("$BIN" get pods -A --socket "$D/api.sock" 2>/dev/null | wc -l)" -le 1 ] && break
      sleep 1
    done
    kill "$agent" 2>/dev/null || true
  fi
}
trap cleanup EXIT
echo 0 > "$ra"
# out of the page cache (written back first: the copy just made it; nothing maps it yet)
python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$BIN"
[ "$(fincore -nbo RES "$BIN")" -lt 65536 ] || { echo "code-order.sh: $BIN stays in the page cache" >&2; exit 1; }

# the offsets of the binary's executable pages present in a process: one
# function for the snapshots below and the sampler
cat > "$W/pagemap.py" <<'PY'
import re, struct
def present(pid, exe):
    pages = set()
    with open(f'/proc/{pid}/pagemap', 'rb') as pm:
        for l in open(f'/proc/{pid}/maps'):
            m = re.match(r'^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \S+\s*(.*)$', l)
            if not m or m.group(5) != exe or 'x' not in m.group(3):
                continue
            a, b, off = int(m.group(1), 16), int(m.group(2), 16), int(m.group(4), 16)
            pm.seek(a // 4096 * 8)
            data = pm.read((b - a) // 4096 * 8)
            for i in range(0, len(data), 8):
                if struct.unpack_from('<Q', data, i)[0] >> 63:
                    pages.add(off + i // 8 * 4096)
    return pages
PY
# process $1's present pages, one hex offset a line
pages() {
  python3 -c 'import os, sys; sys.path.insert(0, sys.argv[3]); import pagemap
for o in sorted(pagemap.present(sys.argv[1], os.path.realpath(sys.argv[2]))): print(f"{o:x}")' "$1" "$BIN" "$W"
}
# process $1's pages of the binary out of memory and out of the page cache
# (process_madvise MADV_PAGEOUT: nothing else maps them; pages the process
# wrote stay, as there is no swap to page them out to)
pageout() {
  python3 - "$1" "$BIN" <<'PY'
import ctypes, os, re, sys
pid, exe = int(sys.argv[1]), os.path.realpath(sys.argv[2])
class Iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
ranges = []
for l in open(f'/proc/{pid}/maps'):
    m = re.match(r'^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$', l)
    if m and m.group(4) == exe:
        ranges.append(Iovec(int(m.group(1), 16), int(m.group(2), 16) - int(m.group(1), 16)))
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, pid, 0)  # pidfd_open
iov = (Iovec * len(ranges))(*ranges)
if pidfd < 0 or libc.syscall(440, pidfd, iov, len(ranges), 21, 0) < 0:  # process_madvise, MADV_PAGEOUT
    sys.exit(f'code-order.sh: process_madvise: {os.strerror(ctypes.get_errno())}')
PY
}

mkdir -p "$D/manifests"
port=$((20000 + RANDOM % 10000))
printf 'staticPodPath: %s/manifests\ncontainerRuntimeEndpoint: unix://%s\nrootDir: %s/root\npodLogsDir: %s/logs\napiSocket: %s/api.sock\nnodeName: order\nreadOnlyPort: 0\nport: %s\n' \
  "$D" "$PODWARDEN_E2E_SOCKET" "$D" "$D" "$D" "$port" > "$D/config.yaml"
RUST_LOG=warn "$BIN" run --config "$D/config.yaml" 2> "$D/log" &
agent=$!
# An idle agent with no pod: the code of its start-up, then the code it
# keeps running (its code pages taken out of memory, and what comes back
# within 70 s: housekeeping, eviction, the relists and stats, gRPC's timers)
sleep 20
pages "$agent" > "$W/startup"
pageout "$agent"
[ "$(fincore -nbo RES "$BIN")" -lt 1048576 ] || { echo "code-order.sh: the agent's code stays in the page cache" >&2; exit 1; }
echo "code-order: 70 s of an idle agent"
sleep 70
pages "$agent" > "$W/idle"
# the sampler: the binary's executable pages present in each process running it
python3 - "$BIN" "$W/samples" "$W" <<'PY' &
import os, sys, time
sys.path.insert(0, sys.argv[3])
import pagemap
exe, out = os.path.realpath(sys.argv[1]), sys.argv[2]
os.makedirs(out, exist_ok=True)
seen = {}
while True:
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if os.readlink(f'/proc/{pid}/exe') != exe:
                continue
            s = seen.setdefault(pid, set())
            n = len(s)
            s.update(pagemap.present(pid, exe))
            if len(s) != n:
                with open(f'{out}/{pid}.tmp', 'w') as f:
                    f.writelines(f'{o:x}\n' for o in sorted(s))
                os.rename(f'{out}/{pid}.tmp', f'{out}/{pid}')
        except (OSError, ValueError):
            pass
    time.sleep(2)
PY
sampler=$!
sleep 1
loop="trap 'exit 0' TERM; while :; do sleep 1 & wait; done"
for i in $(seq 0 104); do
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: many-%s, namespace: order}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - {name: main, image: %s, command: ["sh", "-c", "%s"]}\n' \
    "$i" "$PODWARDEN_E2E_BUSYBOX" "$loop" > "$D/manifests/m$i.yaml"
done
for c in 1 2 3; do
  cat > "$D/manifests/chain$c.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: chain-$c, namespace: order}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: i1, image: $PODWARDEN_E2E_BUSYBOX, command: ["true"]}
  - {name: i2, image: $PODWARDEN_E2E_BUSYBOX, command: ["true"]}
  - {name: side, image: $PODWARDEN_E2E_BUSYBOX, restartPolicy: Always, command: ["sh", "-c", "$loop"]}
  containers:
  - {name: main, image: $PODWARDEN_E2E_BUSYBOX, command: ["sh", "-c", "echo hello; $loop"]}
EOF
done
n=0
for _ in $(seq 1 300); do
  n=$("$BIN" get pods -A --socket "$D/api.sock" 2>/dev/null | grep -c Running || true)
  [ "$n" -ge 108 ] && break
  sleep 1
done
echo "code-order: $n pods running"
[ "$n" -ge 108 ] || { tail -n 20 "$D/log" >&2; exit 1; }

kubectl=$(command -v kubectl.1.33 || ls /usr/lib/google-cloud-sdk/bin/kubectl.1.33 2>/dev/null || command -v kubectl || true)
if [ -n "$kubectl" ]; then
  "$BIN" kubeconfig --config "$D/config.yaml" > "$D/kubeconfig"
  export KUBECONFIG="$D/kubeconfig"
  k() { "$kubectl" "$@" > /dev/null 2>&1 || true; }
  k get pods -A; k get pods -A -o wide; k get pods -n order -o yaml
  for _ in 1 2 3 4 5; do timeout 60 "$kubectl" get pods -A -w > /dev/null 2>&1 & done
  k describe pod -n order chain-1; k describe node order
  k logs -n order chain-1 -c main; k logs -n order chain-1 -c main --timestamps --tail 1
  k exec -n order many-1 -- true; k exec -n order many-1 -- sh -c 'exit 3'
  echo hi | "$kubectl" exec -i -n order many-2 -- cat > /dev/null 2>&1 || true
  k top pods -n order; k top node; k get events -A; k auth whoami; k get configmaps -A; k get namespaces
  "$kubectl" port-forward -n order pod/many-3 18089:8080 > /dev/null 2>&1 &
  pf=$!
  sleep 3
  (exec 3<>/dev/tcp/127.0.0.1/18089 && echo x >&3) 2>/dev/null || true
  kill "$pf" 2>/dev/null || true
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: applied, namespace: order}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: main, image: %s, command: ["sh", "-c", "%s"]}\n' \
    "$PODWARDEN_E2E_BUSYBOX" "$loop" > "$D/applied.yaml"
  k apply -f "$D/applied.yaml"
  sleep 3
  k delete pod -n order applied
else
  echo "code-order: no kubectl: the Kubernetes API's code is not measured" >&2
fi
rm -f "$D/manifests/chain1.yaml" "$D/manifests/m5.yaml"
echo "code-order: 90 s of steady state"
sleep 90
rm -f "$D"/manifests/*
sleep 20
kill "$agent"
wait "$agent" 2>/dev/null || true
agent=
sleep 3

mkdir -p link
# pages -> the sections on them -> one symbol name each, in address order
python3 - "$W/podwarden.map" "$BIN" link/code-order.txt.gz "$W/idle" "$W/startup" "$W"/samples/* <<'PY'
import subprocess, sys
mapf, binary, out = sys.argv[1:4]
segs = []
for l in subprocess.run(['readelf', '-lW', binary], capture_output=True, text=True).stdout.splitlines():
    f = l.split()
    if f and f[0] == 'LOAD' and 'E' in ' '.join(f[6:-1]):
        segs.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
def read_pages(files):
    pages = set()
    for sample in files:
        for l in open(sample):
            off = int(l, 16)
            for so, sv, sz in segs:
                if so <= off < so + sz:
                    pages.add((off - so + sv) // 4096)
    return pages
# three tiers, each in address order: the idle agent's steady code, its
# start-up, then all else the workload ran
tiers = [read_pages(sys.argv[4:5]), read_pages(sys.argv[5:6]), read_pages(sys.argv[6:])]
# lld's map: VMA, LMA, Size, Align, then the output section, input sections
# (8 more spaces) and symbols (16 more) from column 49
secs, out_sec = [], None
for l in open(mapf):
    p = l.split()
    if len(p) < 5:
        continue
    try:
        va, size = int(p[0], 16), int(p[2], 16)
    except ValueError:
        continue
    body = l[49:].rstrip('\n')
    ind = len(body) - len(body.lstrip(' '))
    name = body.strip()
    if ind < 8:
        out_sec = name
    elif out_sec == '.text' and ind < 16 and name.endswith(')') and ':(' in name:
        secs.append([va, size, name[name.rfind(':(') + 2:-1], None])
    elif out_sec == '.text' and secs and secs[-1][3] is None:
        secs[-1][3] = name
def tier(va, size):
    on = range(va // 4096, (va + size - 1) // 4096 + 1)
    return next((t for t, pages in enumerate(tiers) if any(pg in pages for pg in on)), None)
names, seen, tier_bytes = [], set(), [0, 0, 0]
placed = [(tier(va, size), va, size, sec, sym) for va, size, sec, sym in secs if size]
for t, va, size, sec, sym in sorted(p for p in placed if p[0] is not None):
    tier_bytes[t] += size
    n = None
    if sec.startswith('.text.'):
        n = sec[len('.text.'):]
        for pre in ('unlikely.', 'hot.', 'startup.', 'exit.', 'split.'):
            if n.startswith(pre):
                n = n[len(pre):]
    elif sym:
        n = sym  # a C or assembly object's whole .text: its first symbol (not mangled)
    if n and n not in seen:
        seen.add(n)
        names.append(n)
import gzip
with open(out, 'wb') as f:
    f.write(gzip.compress(''.join(n + '\n' for n in names).encode(), 9, mtime=0))
code = sum(s[1] for s in secs)
print(f'code-order: {len(names)} functions ({sum(tier_bytes) // 1024} KiB of {code // 1024} KiB of code: idle '
      f'{tier_bytes[0] // 1024}, start-up {tier_bytes[1] // 1024}, the rest {tier_bytes[2] // 1024}) written to {out}')
PY
# what the names were made for (build.rs warns when the build differs)
cp Cargo.lock link/code-order.lock
rustc -V > link/code-order.rustc
rm -rf "$W"
echo "code-order: now rebuild: cargo build --release"
