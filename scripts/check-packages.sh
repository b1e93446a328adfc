#!/usr/bin/env bash
# Check the packages scripts/package.sh builds, as root on a Debian machine:
# metadata and file lists (dpkg-deb, rpm), lintian without errors, install
# with dpkg, the unit with systemd-analyze verify, enabled but not started,
# the edited config kept on reinstall, removal. Exits non-zero on the first
# failed check, naming it.
#   scripts/check-packages.sh DEB RPM
set -euo pipefail
deb="$1"; rpm="$2"
fail() { printf 'check-packages: FAILED: %s\n' "$*" >&2; exit 1; }
ok() { printf 'check-packages: ok: %s\n' "$*"; }
has() { grep -qE -- "$2" <<<"$1" || fail "$3"; }

missing=()
for p in rpm lintian systemd; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

info=$(dpkg-deb --info "$deb")
has "$info" '^ Package: podwarden$' "deb: package name"
has "$info" '^ Section: admin$' "deb: section"
has "$info" 'Recommends: containerd' "deb: recommends containerd"
has "$info" ' postinst ' "deb: has a postinst"
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/podwarden ./lib/systemd/system/podwarden.service ./etc/podwarden/config.yaml \
         ./usr/share/man/man8/podwarden.8.gz ./usr/share/doc/podwarden/copyright; do
  has "$contents" " $f\$" "deb: $f in the contents"
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dpkg-deb --control "$deb" "$tmp/control"
grep -qx /etc/podwarden/config.yaml "$tmp/control/conffiles" || fail "deb: config.yaml is a conffile"
grep -q 'deb-systemd-helper enable podwarden.service' "$tmp/control/postinst" || fail "deb: postinst enables the unit"
grep -q 'try-restart podwarden.service' "$tmp/control/postinst" || fail "deb: postinst restarts on upgrade"
ok "dpkg-deb --info/--contents/--control"

rinfo=$(rpm -qip "$rpm" 2>/dev/null)
has "$rinfo" '^Name *: podwarden' "rpm: package name"
rlist=$(rpm -qlp "$rpm" 2>/dev/null)
for f in /usr/bin/podwarden /usr/lib/systemd/system/podwarden.service /etc/podwarden/config.yaml \
         /usr/share/man/man8/podwarden.8; do
  has "$rlist" "^$f\$" "rpm: $f in the file list"
done
has "$(rpm -qp --configfiles "$rpm" 2>/dev/null)" '^/etc/podwarden/config.yaml$' "rpm: config.yaml is %config"
rpm -qp --dump "$rpm" 2>/dev/null | grep -q '^/etc/podwarden/config.yaml .* 1 0 ' \
  || rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS:fflags}\n]' "$rpm" 2>/dev/null | grep -q '^/etc/podwarden/config.yaml cn' \
  || fail "rpm: config.yaml is %config(noreplace)"
has "$(rpm -qp --scripts "$rpm" 2>/dev/null)" 'systemctl enable podwarden.service' "rpm: %post enables the unit"
ok "rpm -qip/-qlp/--configfiles/--scripts"

lint=$(lintian --fail-on error "$deb" 2>&1) || { printf '%s\n' "$lint" >&2; fail "lintian reported errors"; }
ok "lintian without errors ($(grep -c '^W:' <<<"$lint" || true) warnings)"

dpkg -i "$deb" >/dev/null || fail "dpkg -i"
[ -x /usr/bin/podwarden ] || fail "installed binary"
[ -d /etc/podwarden/manifests ] || fail "the empty staticPodPath directory"
[ -L /etc/systemd/system/multi-user.target.wants/podwarden.service ] || fail "the unit is enabled"
if pgrep -f '^/usr/bin/podwarden run' >/dev/null; then fail "installing must not start the agent"; fi
verify=$(systemd-analyze verify /lib/systemd/system/podwarden.service 2>&1) \
  || { printf '%s\n' "$verify" >&2; fail "systemd-analyze verify"; }
if grep -v -e 'containerd.service' <<<"$verify" | grep -q .; then printf '%s\n' "$verify" >&2; fail "systemd-analyze verify warnings"; fi
/usr/bin/podwarden --help | grep -q 'podwarden get pods' || fail "installed --help"
ok "installed with dpkg; unit verified; enabled, not started"

echo '# edited by the administrator' >> /etc/podwarden/config.yaml
dpkg -i "$deb" >/dev/null || fail "reinstall"
grep -q '# edited by the administrator' /etc/podwarden/config.yaml || fail "the edited config kept on reinstall"
ok "edited config kept on reinstall"

dpkg --purge podwarden >/dev/null || fail "purge"
[ ! -e /usr/bin/podwarden ] || fail "binary removed"
ok "purged"
