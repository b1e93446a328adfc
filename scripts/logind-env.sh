#!/usr/bin/env bash
# A private system bus with systemd's own systemd-logind on it, for the
# graceful-shutdown tests (systemd is not PID 1 here):
#   - dbus-daemon with a copy of the system bus config on its own socket;
#   - a stand-in for org.freedesktop.systemd1 (scripts/logind/fake-systemd.py)
#     that refuses StartUnit (nothing is ever powered off) and relays
#     KillUnit(SIGHUP) to logind;
#   - systemd-logind in its own mount namespace with a tmpfs on /run/systemd
#     and a bind-mounted logind.conf (InhibitDelayMaxSec=${LOGIND_DELAY:-5});
#     its /etc/systemd/logind.conf.d is $DIR/logind.conf.d, so tests can
#     write drop-ins without touching the host's /etc.
#
#   scripts/logind-env.sh up | down | env
set -euo pipefail
# The daemons started here must not inherit the caller's descriptors: a lock
# the caller holds (flock around a test run) would live as long as they do.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done
cd "$(dirname "$0")/.."
DIR="${PODWARDEN_LOGIND_DIR:-/run/podwarden-logind}"
SOCK="$DIR/system_bus_socket"
ADDR="unix:path=$SOCK"
log() { printf 'logind-env: %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for p in dbus systemd python3-dbus python3-gi; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  install_packages
  mkdir -p "$DIR"
  if ! alive "$DIR/dbus.pid"; then
    rm -f "$SOCK"
    sed -e "s|<listen>.*</listen>|<listen>$ADDR</listen>|" -e '/<user>/d' -e '/<fork\/>/d' \
        -e '/<syslog\/>/d' -e '/servicehelper/d' -e '/<pidfile>/d' \
        -e 's|<includedir>system.d</includedir>|<includedir>/usr/share/dbus-1/system.d</includedir>|' \
        /usr/share/dbus-1/system.conf > "$DIR/system.conf"
    dbus-daemon --config-file="$DIR/system.conf" --nofork --print-pid 3 3>"$DIR/dbus.pid" >/dev/null 2>"$DIR/dbus.log" &
    for _ in $(seq 1 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
  fi
  # drop-ins are test state (an agent run with a long shutdownGracePeriod
  # writes 99-podwarden.conf here and leaves it, as on a real node): a new
  # run starts from InhibitDelayMaxSec=${LOGIND_DELAY:-5} alone, and a
  # running logind rereads its configuration (SIGHUP) when one was left
  mkdir -p "$DIR/logind.conf.d"
  local reloaded=
  if [ -n "$(ls -A "$DIR/logind.conf.d")" ]; then
    log "removing the drop-ins a previous run left: $(ls "$DIR/logind.conf.d" | tr '\n' ' ')"
    rm -rf "${DIR:?}/logind.conf.d/"*
    if alive "$DIR/logind.pid"; then kill -HUP "$(cat "$DIR/logind.pid")"; reloaded=1; fi
  fi
  if ! alive "$DIR/logind.pid"; then
    printf '[Login]\nInhibitDelayMaxSec=%s\n' "${LOGIND_DELAY:-5}" > "$DIR/logind.conf"
    cat > "$DIR/run-logind.sh" <<SH
#!/bin/sh
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/seats /run/systemd/users /run/systemd/sessions /run/systemd/machines
mkdir -p /etc/systemd/logind.conf.d
mount --bind "$DIR/logind.conf" /etc/systemd/logind.conf
mount --bind "$DIR/logind.conf.d" /etc/systemd/logind.conf.d
echo \$\$ > "$DIR/logind.pid"
export DBUS_SYSTEM_BUS_ADDRESS=$ADDR
exec /lib/systemd/systemd-logind
SH
    chmod +x "$DIR/run-logind.sh"
    unshare --mount --propagation private "$DIR/run-logind.sh" >"$DIR/logind.log" 2>&1 &
    for _ in $(seq 1 50); do alive "$DIR/logind.pid" && break; sleep 0.1; done
  fi
  if ! alive "$DIR/systemd.pid"; then
    DBUS_SYSTEM_BUS_ADDRESS="$ADDR" /usr/bin/python3 scripts/logind/fake-systemd.py "$DIR/logind.pid" \
      >"$DIR/fake-systemd.log" 2>&1 &
    echo $! > "$DIR/systemd.pid"
  fi
  # ready once logind and the systemd stand-in both answer: logind asks
  # systemd1 for poweroff.target's load state on PowerOff, and fails it
  # with EIO while the stand-in (a Python start, seconds on a loaded
  # machine) has not yet taken its name
  for dest in org.freedesktop.login1 org.freedesktop.systemd1; do
    for _ in $(seq 1 300); do
      DBUS_SYSTEM_BUS_ADDRESS="$ADDR" dbus-send --system --print-reply --dest="$dest" \
        / org.freedesktop.DBus.Peer.Ping >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  if [ -n "$reloaded" ]; then
    local want=$(( ${LOGIND_DELAY:-5} * 1000000 ))
    for _ in $(seq 1 100); do
      DBUS_SYSTEM_BUS_ADDRESS="$ADDR" dbus-send --system --print-reply --dest=org.freedesktop.login1 \
        /org/freedesktop/login1 org.freedesktop.DBus.Properties.Get string:org.freedesktop.login1.Manager \
        string:InhibitDelayMaxUSec 2>/dev/null | grep -q "uint64 $want\$" && { reloaded=; break; }
      sleep 0.1
    done
    [ -z "$reloaded" ] || { log "logind did not reread InhibitDelayMaxSec=${LOGIND_DELAY:-5} within 10 s"; exit 1; }
  fi
  env_vars
}

down() {
  for p in systemd logind dbus; do
    alive "$DIR/$p.pid" && kill "$(cat "$DIR/$p.pid")" 2>/dev/null || true
  done
  rm -rf "$DIR"
}

env_vars() { echo "DBUS_SYSTEM_BUS_ADDRESS=$ADDR"; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) env_vars ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
