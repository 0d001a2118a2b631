#!/usr/bin/env bash
# lab/ceph/single-node-stop.sh DATA_DIR [--purge] -- stop the daemons single-node.sh started
# (by pid file, only if still ours: CEPH_CONF=DATA_DIR/ceph.conf), optionally delete DATA_DIR.
set -u
DATA=$(realpath -m "${1:?usage: $0 DATA_DIR [--purge]}")
ours() { # only signal the pid if it still is one of our ceph daemons using this data dir
  grep -qaE 'ceph-|radosgw' "/proc/$1/cmdline" 2>/dev/null &&
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qx "CEPH_CONF=$DATA/ceph.conf"
}
stop() { # stop PIDFILE... : TERM them all at once (each takes ~2 s to exit), KILL after 10 s
  local f pid pids=() names=()
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if ours "$pid"; then kill -TERM "$pid"; pids+=("$pid"); names+=("$(basename "$f" .pid)"); fi
    rm -f "$f"
  done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for i in "${!pids[@]}"; do
    kill -0 "${pids[$i]}" 2>/dev/null && { echo "SIGKILL ${names[$i]}"; kill -KILL "${pids[$i]}"; }
    echo "stopped ${names[$i]} (pid ${pids[$i]})"
  done
}
# radosgw first (it hangs on exit once the OSDs are gone), the mon last (OSDs tell it they exit).
stop "$DATA"/run/rgw.*.pid
stop "$DATA"/run/osd.*.pid "$DATA"/run/mgr.*.pid
stop "$DATA"/run/mon.*.pid
[ "${2:-}" = --purge ] && [ -f "$DATA/.ceph-lab" ] && rm -rf "$DATA" && echo "purged $DATA"
exit 0
