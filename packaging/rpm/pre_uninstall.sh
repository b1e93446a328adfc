# podwarden: on removal (not upgrade) disable and stop the agent; pods keep running.
if [ "$1" -eq 0 ]; then
    systemctl disable --now podwarden.service >/dev/null 2>&1 || :
fi
