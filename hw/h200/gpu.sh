#!/bin/bash
# The H200 run, on the GPU machine. Idempotent and resumable: every step leaves a mark in $S, so
# the same command is repeated (one device call each, back to back) until it prints "ALL DONE".
#   gpu.sh stage      copy the shipment part(s) this call carried ($SHIP/pN) to /tmp/stage
#   gpu.sh run        unpack -> kvceph's rendered files -> Ceph + haproxy -> engine -> the
#                     verifier at 16k and 32k -> cold/warm per length -> the S3 setup cells
# Results (JSON lines, the verifier's tables/JSON/PNG, versions, filtered logs) are packed into
# $OUT/h200-results.tgz at every exit.
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd); CODE=$(cd "$HERE/../.." && pwd)
SHIP=${SHIP:-$(cd "$CODE/.." && pwd)}        # .ship/ (ship.sh): code/, rendered/, meta/, pN/
S=${STATE:-/tmp/h200}; R=$S/results; mkdir -p "$S" "$R"
STAGE=${STAGE:-/tmp/stage}; SITE=${SITE:-/tmp/site}; CEPH=${CEPH_PREFIX:-/opt/ceph}
OUTD=${OUT:-/tmp/h200-out}; mkdir -p "$OUTD"
START=$(date +%s); BUDGET=${BUDGET:-560}
PY=${PY:-python3}; export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
S3=${S3_ADDR:-127.0.0.1:7480}; DNS=${DNS_NAME:-s3.lab}; RGW_TOTAL=${RGW_COUNT:-4}
UNIT=/etc/systemd/system/vllm.service; API=http://127.0.0.1:8000
# document lengths: what the model's 131072 leaves for the chat template, question and output
L16=16384 L32=32768 L64=65536 L128=130560

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*" | tee -a "$S/progress.log"; }
done_() { [ -f "$S/done.$1" ]; }
mark() { touch "$S/done.$1"; }
need() { [ "$(left)" -ge "$1" ] || { log "CONTINUE: $2 needs ${1}s, $(left)s left in this call"; finish 3; }; }
rendered() { echo "$SHIP/rendered/$1"; }
py() { "$PY" "$@"; }

pack() {
  local lg
  for lg in "$S"/engine.*.log; do [ -f "$lg" ] || continue
    { echo "== $lg: $(wc -l <"$lg") lines; Failed to allocate: $(grep -c 'Failed to allocate' "$lg"); still waiting: $(grep -c 'still waiting' "$lg")"
      sed 's/\x1b\[[0-9;]*m//g' "$lg" | grep -E 'LMCache (INFO|WARNING|ERROR).*(hit tokens|Retrieved|Stored [0-9]|still waiting|Failed|rror|disabled|config)|Error|error:|Traceback|KV cache|max_model_len|Available KV|backend' \
        | grep -v -E 'Discovered API|Auto-selected backend' | cut -c1-400 | tail -150; } > "$R/$(basename "$lg" .log).filtered.txt"
  done
  [ -d /tmp/ceph/log ] && for f in /tmp/ceph/log/*.log; do tail -30 "$f"; done > "$R/ceph-logs-tail.txt" 2>&1
  cp "$S/progress.log" "$R/" 2>/dev/null
  tar -C "$S" -czf "$OUTD/h200-results.tgz" results 2>/dev/null
  cp "$S/progress.log" "$OUTD/" 2>/dev/null
}
finish() {
  pack
  [ -f "$R/cells.jsonl" ] && py "$HERE/table.py" "$R" 2>/dev/null | tail -30
  echo "== $(left)s left in this call; exit $1"; exit "$1"
}
trap 'log "interrupted"; finish 4' TERM INT

if [ "${1:-run}" = stage ]; then
  mkdir -p "$STAGE"; cp "$SHIP"/p*/part.* "$SHIP"/meta/SHA256SUMS "$STAGE"/ 2>/dev/null
  ls -la "$STAGE"; df -h / /tmp | tail -2; exit 0
fi

# ---- 1 unpack: wheels into $SITE, the minimal Ceph + haproxy into $CEPH
if ! done_ unpack; then
  log "unpack: $(ls "$STAGE" | tr '\n' ' ')"
  (cd "$STAGE" && sha256sum -c --quiet SHA256SUMS) || { log "shipment incomplete or corrupt"; finish 1; }
  rm -rf "$STAGE/x"; mkdir -p "$STAGE/x" "$CEPH"
  cat "$STAGE"/part.* | tar -xf - -C "$STAGE/x" || { log "tar failed"; finish 1; }
  py -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$STAGE/x/cephmin.tar.xz" | tar -xf - -C "$CEPH" || finish 1
  py -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STAGE"/x/whl/*.whl 2>&1 | grep -v -i warning | tail -3
  rm -rf "$STAGE/x" "$STAGE"/part.*
  { date -u +"date %Y-%m-%dT%H:%M:%SZ"; uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    py -c 'import importlib.metadata as m, sys; print("python", sys.version.split()[0]); [print(p, m.version(p)) for p in ("vllm","lmcache","torch","awscrt","boto3","transformers","tokenizers")]'
    LD_LIBRARY_PATH=$CEPH/usr/lib/x86_64-linux-gnu:$CEPH/usr/lib/x86_64-linux-gnu/ceph:$CEPH/lib $CEPH/usr/bin/radosgw --version
    LD_LIBRARY_PATH=$CEPH/lib $CEPH/usr/bin/haproxy -v | head -1; nproc; free -g | head -2; df -h / /tmp | tail -2; } > "$R/env.txt" 2>&1
  cat "$R/env.txt"; mark unpack; log "unpacked"
fi

# ---- 2 kvceph's rendered files, installed where the deploy puts them (variant in $S/variant)
install_files() { local d; d=$(rendered "$1")
  install -D -m644 "$d/lmcache.yaml" /etc/kvceph/lmcache.yaml && install -D -m644 "$d/vllm.env" /etc/kvceph/vllm.env &&
  install -D -m644 "$d/vllm.service" "$UNIT" && install -d -m700 /var/lib/vllm/.aws &&
  install -m600 "$d/credentials" "$d/config" /var/lib/vllm/.aws/ || return 1
  grep -q '# kvceph$' /etc/hosts || cat "$d/hosts" >> /etc/hosts
  echo "$1" > "$S/variant"; mkdir -p "$R/rendered-$1"; cp "$d"/{lmcache.yaml,vllm.env,vllm.service,config,hosts} "$R/rendered-$1/"
  log "installed kvceph's files, variant $1: $(grep -E '^(chunk_size|max_local_cpu_size|enable_async_loading|blocking_timeout_secs|lookup_timeout_ms)' /etc/kvceph/lmcache.yaml | tr '\n' ' ')"
}
if ! done_ files; then
  install_files base || finish 1
  # the unit's ExecStart names the kvceph venv's vllm: here the wheels live in $SITE
  mkdir -p /opt/kvceph/venv/bin
  if [ -n "${VLLM_WRAPPER:-}" ]; then install -m755 "$VLLM_WRAPPER" /opt/kvceph/venv/bin/vllm; else
  printf '#!/bin/bash\nexport PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}\nexec %s -m vllm.entrypoints.cli.main "$@"\n' "$SITE" "$(command -v "$PY")" > /opt/kvceph/venv/bin/vllm
  chmod +x /opt/kvceph/venv/bin/vllm; fi
  model=$(sed -n 's/^ExecStart=[^ ]* serve \([^ ]*\) .*/\1/p' "$UNIT")
  py "$HERE/model.py" "$model" || finish 1
  mark files; log "model dir $model; hosts: $(getent hosts lmcache.s3.lab | tr -s ' ')"
fi

# ---- 3 Ceph: bluestore OSDs on the largest disk (memstore would hold 34 GB of KV in RAM next to
# the engine's pinned buffer: the recipe's 128k run was killed by the OOM killer), 4 radosgw, haproxy
if ! curl -sf -m 3 "http://$S3/" >/dev/null; then
  need 60 "ceph"
  dir=$(df -P -B1G /var/tmp /tmp /root / 2>/dev/null | awk 'NR>1 && $1!="tmpfs" {print $4, $6}' | sort -rn | head -1)
  free=${dir%% *}; osd_dir=${dir#* }; osd_dir=${osd_dir%/}/h200-osd; per=$(( (free - 8) / 2 )); [ "$per" -gt 40 ] && per=40
  store=${OSD_STORE:-bluestore}
  # 128k tokens of KV are 34.4 GB: below ~44 GiB of disk for the OSDs, keep the objects in RAM
  [ "$per" -lt 22 ] && store=memstore && per=28
  echo "$store" > "$S/osd_store"
  log "ceph-up: 2 $store OSDs of ${per} GiB ($osd_dir: $free GiB free)"
  CEPH_PREFIX=$CEPH CEPH_DATA=/tmp/ceph OSD_DIR=$osd_dir OSD_STORE=$store NUM_OSDS=2 OSD_GB=$per \
    RGW_COUNT=$RGW_TOTAL S3_PORT=${S3##*:} DNS_NAME=$DNS PY=$PY CREDS=/var/lib/vllm/.aws/credentials \
    timeout 240 bash "$HERE/ceph-up.sh" > "$S/ceph.log" 2>&1; rc=$?
  tail -8 "$S/ceph.log"; cp "$S/ceph.log" "$R/"
  curl -sf -m 3 "http://$S3/" >/dev/null || { log "S3 not up (rc $rc)"; finish 1; }
  py "$HERE/rgwscale.py" /tmp/ceph/run/haproxy.sock 1 "$RGW_TOTAL" | tee -a "$S/progress.log"
fi
# measurement variants: with memstore, the -pin32 ones and a 127k document (see ship.sh)
PIN=""; [ "$(cat "$S/osd_store" 2>/dev/null)" = memstore ] && PIN=-pin32 && L128=126976
rgw() { py "$HERE/rgwscale.py" /tmp/ceph/run/haproxy.sock "$1" "$RGW_TOTAL" | tee -a "$S/progress.log"; echo "$1" > "$S/rgw"; }
gc() { LD_LIBRARY_PATH=$CEPH/usr/lib/x86_64-linux-gnu:$CEPH/usr/lib/x86_64-linux-gnu/ceph:$CEPH/lib CEPH_CONF=/tmp/ceph/ceph.conf \
  timeout 120 "$CEPH/usr/bin/radosgw-admin" -n client.rgw.gw1 gc process --include-all >/dev/null 2>&1; }

# ---- 4 the engine, started from the installed unit
engine() { py "$HERE/local.py" "$UNIT" "$S" "$@"; }
ensure_engine() { local rc
  engine alive || { need 240 "engine start"; engine start > /dev/null; log "engine started: $(cat /etc/kvceph/vllm.env | grep -c =) env vars, ExecStart from $UNIT"; }
  engine wait $(( $(left) - 30 )) "$API"; rc=$?
  [ $rc = 0 ] && { log "engine up"; return 0; }
  [ $rc = 2 ] && { log "ENGINE DIED"; tail -40 "$(ls -t "$S"/engine.*.log | head -1)"; finish 2; }
  log "CONTINUE: engine not up yet"; finish 3
}
ensure_engine

# ---- 5 the project's verifier, cold -> warm after restart -> fallback, at 16k and 32k
for n in $L16 $L32; do
  done_ "prove$n" && continue
  need $(( 200 + n / 800 )) "verifier at $n"
  log "verifier at $n tokens"
  py "$HERE/prove.py" "$(rendered base)" "$S" "$R" "$n" 2>&1 | tee -a "$S/prove.log" | grep -v '^\[prove' ; mark "prove$n"
  ensure_engine
done

# ---- 6 cold/warm per length, one radosgw; then the raw GET rate of that setup
M() { py "$HERE/measure.py" "$(rendered "$(cat "$S/variant")")" "$S" "$R" "$@" 2>&1 | tail -1 | cut -c1-300; }
bench() { local lab=$1; shift
  HOME=/var/lib/vllm AWS_PROFILE=lmcache timeout 200 "$PY" "$HERE/getbench.py" "$DNS:${S3##*:}" lmcache "$@" 2>&1 | tail -1 |
    sed "s/^{/{\"label\": \"$lab\", \"rgw\": $(cat "$S/rgw" 2>/dev/null || echo 1), /" | tee -a "$R/rawget.jsonl"; }
[ -f "$S/rgw" ] || echo 1 > "$S/rgw"
if [ -n "$PIN" ] && ! done_ pinfiles; then need 300 "pinned-32 variant"; install_files "base$PIN" || finish 1; engine stop; mark pinfiles; fi
ensure_engine
for n in $L16 $L32 $L64 $L128; do
  done_ "len$n" && continue
  need $(( 40 + n / 500 )) "length $n"
  [ "$(cat "$S/rgw")" = 1 ] || rgw 1
  gc; M cold "c256-rgw1-$n" "$n"; M warm "c256-rgw1-$n-warm" "c256-rgw1-$n"
  mark "len$n"
done
if ! done_ bench1; then need 100 "raw GET, 1 radosgw"; bench c256-rgw1 17; bench c256-rgw1-target100 17 100; mark bench1; fi

# ---- 7 the same 128k objects through 4 radosgw: warm again, raw GET
if ! done_ rgw4; then need 120 "4 radosgw"
  rgw 4; M warm "c256-rgw4-$L128-warm" "c256-rgw1-$L128"; bench c256-rgw4 17; bench c256-rgw4-target100 17 100; mark rgw4; fi

# ---- 8 synchronous loading (rendered with kvceph_lmcache_enable_async_loading=false): restart,
# the same 128k objects through 4 radosgw
if [ -n "$PIN" ] && ! done_ syncwarm; then log "synchronous loading not run: kvceph refuses it with the 31.5 GiB buffer of the memstore layout"; mark syncwarm; fi
if ! done_ syncwarm; then
  if ! done_ syncfiles; then need 240 "synchronous loading"; install_files sync || finish 1; engine stop; mark syncfiles; fi
  ensure_engine
  need 90 "synchronous warm"; M warm "c256sync-rgw4-$L128-warm" "c256-rgw1-$L128"; mark syncwarm
fi

# ---- 9 chunk_size 1024 (kvceph re-rendered with --data kvceph_lmcache_chunk_size=1024): restart
if ! done_ c1024files; then need 300 "chunk 1024"
  install_files "c1024$PIN" || finish 1; engine stop; mark c1024files; fi
ensure_engine
if ! done_ c1024cold; then need 200 "chunk 1024 cold"; gc; M cold "c1024-rgw4-$L128" "$L128"; mark c1024cold; fi
if ! done_ c1024warm; then need 100 "chunk 1024 warm"; M warm "c1024-rgw4-$L128-warm" "c1024-rgw4-$L128"; bench c1024-rgw4 17; mark c1024warm; fi
if ! done_ c1024rgw1; then need 100 "chunk 1024, 1 radosgw"
  rgw 1; M warm "c1024-rgw1-$L128-warm" "c1024-rgw4-$L128"; bench c1024-rgw1 17; mark c1024rgw1; fi
engine stop
log "ALL DONE"
finish 0
