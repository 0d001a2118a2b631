#!/bin/bash
# probe.py's measurement on the GPU machine: the same remote script (deploys/remote/s3probe.py)
# with the arguments kvceph derives for the h200 inventory (rendered/<variant>/probe.json), against
# the same Ceph + haproxy setup as gpu.sh, through 1 and then 4 radosgw. No engine is started.
#   probe.sh stage    keep this call's part ($SHIP/probe/pN) in /tmp/stage
#   probe.sh run      unpack (minimal Ceph, awscrt + boto3) -> Ceph -> s3probe per variant and
#                     radosgw count -> $OUT/probe.jsonl (one JSON line each, labelled)
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd); CODE=$(cd "$HERE/../.." && pwd)
SHIP=${SHIP:-$(cd "$CODE/.." && pwd)}
STAGE=${STAGE:-/tmp/stage}; SITE=${SITE:-/tmp/site}; CEPH=${CEPH_PREFIX:-/opt/ceph}
OUTD=${OUT:-/tmp/h200-out}; mkdir -p "$OUTD"; LOG=$OUTD/probe.log
PY=${PY:-python3}; export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
S3=${S3_ADDR:-127.0.0.1:7480}; DNS=${DNS_NAME:-s3.lab}; RGW_TOTAL=4
VARIANTS=${VARIANTS:-st st1024}
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

if [ "${1:-run}" = stage ]; then
  mkdir -p "$STAGE"; cp "$SHIP"/probe/p*/* "$STAGE"/; ls -la "$STAGE"; exit 0
fi

log "unpack: $(ls "$STAGE" | tr '\n' ' ')"
mkdir -p "$CEPH" "$SITE"
$PY -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$STAGE/cephmin.tar.xz" | tar -xf - -C "$CEPH" || exit 1
$PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STAGE"/*.whl 2>&1 | grep -v -i warning | tail -3
d=$SHIP/rendered/st
install -d -m700 /var/lib/vllm/.aws && install -m600 "$d/credentials" "$d/config" /var/lib/vllm/.aws/ || exit 1
grep -q '# kvceph$' /etc/hosts || cat "$d/hosts" >> /etc/hosts
{ uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  $PY -c 'import importlib.metadata as m; print("awscrt", m.version("awscrt"))'; } >> "$LOG" 2>&1

dir=$(df -P -B1G /var/tmp /tmp /root / 2>/dev/null | awk 'NR>1 && $1!="tmpfs" {print $4, $6}' | sort -rn | head -1)
free=${dir%% *}; osd_dir=${dir#* }; osd_dir=${osd_dir%/}/h200-osd; per=$(( (free - 8) / 2 )); [ "$per" -gt 40 ] && per=40
log "ceph-up: 2 bluestore OSDs of ${per} GiB ($osd_dir: $free GiB free), $RGW_TOTAL radosgw behind haproxy"
CEPH_PREFIX=$CEPH CEPH_DATA=/tmp/ceph OSD_DIR=$osd_dir OSD_STORE=bluestore NUM_OSDS=2 OSD_GB=$per \
  RGW_COUNT=$RGW_TOTAL S3_PORT=${S3##*:} DNS_NAME=$DNS PY=$PY CREDS=/var/lib/vllm/.aws/credentials \
  timeout 240 bash "$HERE/ceph-up.sh" > "$OUTD/ceph.log" 2>&1 || { tail -20 "$OUTD/ceph.log"; exit 1; }
curl -sf -m 3 "http://$S3/" >/dev/null || { log "S3 not up"; exit 1; }

for rgw in 1 4; do
  $PY "$HERE/rgwscale.py" /tmp/ceph/run/haproxy.sock "$rgw" "$RGW_TOTAL" | tee -a "$LOG"
  for v in $VARIANTS; do
    nonce="h200-$v-rgw$rgw-$(date +%s)"
    mapfile -t args < <($PY -c 'import json,sys; [print(a.replace("NONCE", sys.argv[2])) for a in json.load(open(sys.argv[1]))["args"]]' "$SHIP/rendered/$v/probe.json" "$nonce")
    log "s3probe $v rgw=$rgw: ${args[*]}"
    t0=$(date +%s)
    HOME=/var/lib/vllm AWS_PROFILE=lmcache timeout 300 $PY "$CODE/deploys/remote/s3probe.py" "${args[@]}" > "$OUTD/raw.json" 2>> "$LOG"
    rc=$?; raw=$(tail -1 "$OUTD/raw.json")
    log "s3probe $v rgw=$rgw rc=$rc in $(( $(date +%s) - t0 ))s"
    [ "$rc" = 0 ] && echo "{\"label\": \"$v-rgw$rgw\", \"variant\": \"$v\", \"rgw\": $rgw, \"raw\": $raw}" >> "$OUTD/probe.jsonl"
  done
done
log "ALL DONE"
