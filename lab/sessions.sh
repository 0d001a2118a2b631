#!/bin/bash
# sessions.sh NAME LOG COMMAND [NAME LOG COMMAND]...: `make test`'s pytest sessions side by side.
# Each COMMAND (a shell command line) runs in the background with all its output in LOG only, so
# two sessions never interleave. While they run, one line every KVCEPH_TEST_HEARTBEAT seconds
# (default 300) says how far each has got (its log's last line: pytest's percentage). When one
# ends, its whole log is printed between two lines naming it, its verdict and its time. Exit 0
# only when every session passed; otherwise one line per failed session at the end, exit 1.
# TERM, INT or HUP end the sessions (their claims are released, .ci/run's trap brings the labs
# down) and then this script.
set -uo pipefail
[ $# -ge 3 ] && [ $(($# % 3)) = 0 ] || { echo "usage: $0 NAME LOG COMMAND [NAME LOG COMMAND]..." >&2; exit 2; }
beat=${KVCEPH_TEST_HEARTBEAT:-300}
declare -A log cmd pid t0 rc
names=()
while [ $# -gt 0 ]; do names+=("$1"); log[$1]=$2; cmd[$1]=$3; shift 3; done

say() { echo "[test] $*"; }
mins() { printf '%d min %d s' $(($1 / 60)) $(($1 % 60)); }
last_line() { tail -c 2000 "$1" 2>/dev/null | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-100; }

stop_all() {
  local n
  for n in "${names[@]}"; do [ -n "${pid[$n]:-}" ] && kill -TERM "${pid[$n]}" 2>/dev/null; done
  for n in "${names[@]}"; do [ -n "${pid[$n]:-}" ] && wait "${pid[$n]}" 2>/dev/null; done
  say "stopped: ${names[*]} (logs: $(for n in "${names[@]}"; do printf '%s ' "${log[$n]}"; done))"
  exit 143
}
trap stop_all TERM INT HUP

for n in "${names[@]}"; do
  mkdir -p "$(dirname "${log[$n]}")"
  bash -c "${cmd[$n]}" >"${log[$n]}" 2>&1 </dev/null &
  pid[$n]=$! t0[$n]=$(date +%s)
  say "$n session started (pid ${pid[$n]}, output in ${log[$n]}, printed when it ends): ${cmd[$n]}"
done

running=${#names[@]} next_beat=$(($(date +%s) + beat))
while [ "$running" -gt 0 ]; do
  sleep 2 & wait $!  # a trapped signal interrupts wait at once, not sleep
  for n in "${names[@]}"; do
    [ -n "${pid[$n]}" ] && ! kill -0 "${pid[$n]}" 2>/dev/null || continue
    wait "${pid[$n]}"; rc[$n]=$?; pid[$n]=""; running=$((running - 1))
    took=$(mins $(($(date +%s) - t0[$n])))
    if [ "${rc[$n]}" = 0 ]; then verdict=passed; else verdict="FAILED (exit ${rc[$n]})"; fi
    say "===== $n session $verdict in $took; its output (${log[$n]}): ====="
    cat "${log[$n]}"
    say "===== end of $n session ($verdict in $took) ====="
  done
  if [ "$running" -gt 0 ] && [ "$(date +%s)" -ge "$next_beat" ]; then
    next_beat=$(($(date +%s) + beat))
    for n in "${names[@]}"; do
      [ -n "${pid[$n]}" ] || continue
      say "$n session running for $(mins $(($(date +%s) - t0[$n]))): $(last_line "${log[$n]}")"
    done
  fi
done

failed=0
for n in "${names[@]}"; do
  [ "${rc[$n]}" = 0 ] && continue
  say "FAILED: $n session (exit ${rc[$n]}); its output is printed above (${log[$n]})"
  failed=1
done
exit $failed
