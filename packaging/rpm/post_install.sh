# podwarden: enable on install (not started); restart on upgrade if running.
mkdir -p /etc/podwarden/manifests /etc/systemd/logind.conf.d /var/lib/podwarden /var/log/pods
if [ "$1" -eq 1 ]; then
    systemctl enable podwarden.service >/dev/null 2>&1 || :
else
    systemctl daemon-reload >/dev/null 2>&1 || :
    systemctl try-restart podwarden.service >/dev/null 2>&1 || :
fi
