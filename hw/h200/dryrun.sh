#!/bin/bash
# The CPU dry run of a shipment (README "How to repeat"): everything but the GPU, on this
# machine, as root, off the real paths and ports. The lab engine (lab/engine, `make venv
# lmcache-venv`) stands in for vLLM; the shipment's wheels go into $SITE with Python 3.12 (they
# are cp312); Ceph + haproxy are the shipment's own. It stages every part like the device calls,
# then repeats `gpu.sh run` until ALL DONE (or a failure).
#   hw/h200/dryrun.sh PARTS_DIR [PLAN] [WORK]   (PLAN default plan033.txt; WORK default /tmp/h200-dry)
#   ROUTER_WHEEL=<wheelhouse>/router/vllm_router-0.1.17-*.whl RB_SCALE=0.125 \
#     hw/h200/dryrun.sh /tmp/h200-parts-025 plan054.txt     (the router benchmark, small sizes)
# The checkout that travels is faked by WORK/checkout (.ship/ only). Ports: S3 17480 (haproxy),
# radosgw 17481.., mon 13300. Leaves nothing running: Ceph, haproxy and the engine are stopped.
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
PARTS=${1:?PARTS_DIR}; PLAN=${2:-plan033.txt}; W=${3:-/tmp/h200-dry}
PY312=${PY312:-/tmp/h200-py312/bin/python}
[ -x "$PY312" ] || { echo "dryrun.sh: no Python 3.12 (set PY312)"; exit 1; }
rm -rf "$W"; mkdir -p "$W/checkout" "$W/out"
H200_RENDER_EXTRA="kvceph_s3_endpoint=http://s3.lab:17480 kvceph_s3_admin_endpoint=http://127.0.0.1:17480 kvceph_verify_s3_endpoint=http://127.0.0.1:17480" \
  "$HERE/ship.sh" "$W/checkout" "$PARTS" >/dev/null || exit 1
SH=$W/checkout/.ship
cat > "$W/vllm-wrapper" <<WRAP
#!/bin/bash
# the lab engine in vLLM's place: its own venv's packages first (3.11), then the shipment's site
# (awscrt is abi3, kvceph's connector pure Python)
export PYTHONPATH=$REPO/lab/engine/src:\$(ls -d $REPO/.venv/lmcache/lib/python3*/site-packages):$W/site\${PYTHONPATH:+:\$PYTHONPATH}
exec $REPO/.venv/lmcache/bin/python -c 'import sys; from kvceph_lab_engine.cli import main; sys.exit(main())' "\$@" --no-enable-prefix-caching
WRAP
chmod +x "$W/vllm-wrapper"
export H200_DRY_RUN=1 VLLM_WRAPPER=$W/vllm-wrapper S3_ADDR=127.0.0.1:17480 MON_PORT=13300 RGW_BASE_PORT=17481 \
  CEPH_PREFIX=$W/ceph CEPH_DATA=$W/cephdata SITE=$W/site PY=$PY312 STATE=$W/state STAGE=$W/stage \
  OPS_DIR=$W/ops OUT=$W/out CEIL_PUT="8 8" OSD_GB=2 PLAN SHIP=$SH H200_HOSTS_ROOT=$W/hosts
NEW_PATHS=(); for f in /etc/kvceph /opt/kvceph /var/lib/vllm /usr/local/lib/kvceph /etc/systemd/system/vllm.service; do
  [ -e "$f" ] || NEW_PATHS+=("$f"); done
HOSTS_NEW=true; grep -q '# kvceph$' /etc/hosts && HOSTS_NEW=false
t0=$(date +%s)
for p in "$SH"/p*; do SHIP=$SH bash "$SH/code/hw/h200/gpu.sh" stage >/dev/null || exit 1; rm -rf "$p"; done
echo "[dry] staged $(ls "$W/stage" | wc -l) files in $(( $(date +%s) - t0 ))s"
rc=3; n=0
while [ $rc = 3 ] && [ $n -lt 8 ]; do n=$((n+1))
  BUDGET=560 bash "$SH/code/hw/h200/gpu.sh" run > "$W/run.$n.log" 2>&1; rc=$?
  echo "[dry] run $n: rc $rc, $(grep -c '^\[' "$W/run.$n.log") log lines; last: $(grep '^\[' "$W/run.$n.log" | tail -1)"
done
# stop what the run started (by pid: the router from its pid file (plan054.txt), the engine via
# local.py, Ceph's daemons from their pid files)
[ -f "$W/state/router.pid" ] && "$PY312" "$SH/code/hw/h200/routerbench.py" stop "$W/state"
PY=$PY312 "$PY312" "$SH/code/hw/h200/local.py" /etc/systemd/system/vllm.service "$W/state" stop >/dev/null 2>&1
for r in "$W"/hosts/*/; do [ -d "$r" ] && "$PY312" "$SH/code/hw/h200/local.py" /etc/systemd/system/vllm.service \
  "$W/state/$(basename "$r")" "--root=$r" stop >/dev/null 2>&1; done   # the pair's engines (plan038.txt)
for f in "$W"/cephdata/run/*.pid "$W"/cephdata/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
# gpu.sh installs kvceph's files where a deploy puts them: remove what was not there before
for f in "${NEW_PATHS[@]}"; do rm -rf "$f"; done
$HOSTS_NEW && sed -i '/# kvceph$/d' /etc/hosts
echo "[dry] rc $rc after $n runs, $(( $(date +%s) - t0 ))s; results: $W/out/h200-results.tgz, logs: $W/run.*.log"
exit $rc
