#!/bin/bash
# Lay out what the device calls carry, in DEST/.ship (DEST: the checkout the device tool sends;
# add /.ship/ to its .git/info/exclude):
#   .ship/code/       deploys/, templates/, hw/ (not its results/) and lab/ceph/conf.sh (ceph-up.sh
#                     sources it) of this worktree (run from here on the GPU machine)
#   .ship/rendered/   kvceph's files for the h200 inventory, one directory per variant of
#                     plan.txt, rendered with one throwaway S3 key pair (see VARIANTS below)
#   .ship/meta/       SHA256SUMS of the parts, kvceph's connector wheel (whl/), LMCache's csrc
#                     (lmcache-csrc.tgz, for buildops.py), done-before.txt (DONE_BEFORE: the
#                     steps an earlier loan finished, its results' done.txt)
#   .ship/pN/         part N of prepare.sh's shipment: one per call (64 MiB per call in all)
#   hw/h200/ship.sh DEST [PARTS_DIR]     (PARTS_DIR default: /tmp/h200-parts)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
DEST=${1:?DEST: the checkout that travels}; PARTS=${2:-/tmp/h200-parts}
PY=${PY:-$REPO/.venv/bin/python}
S=$DEST/.ship; rm -rf "$S"; mkdir -p "$S/code" "$S/rendered" "$S/meta/whl"
# (not hw/h200/results: earlier loans' figures, ~2 MB of a call's 64 MiB, are not needed there)
(cd "$REPO" && git ls-files -co --exclude-standard deploys templates hw lab/ceph/conf.sh | grep -v '^hw/h200/results/' | tar -cf - -T -) | tar -xf - -C "$S/code"
# measure.py names a run's objects with deploys/verification/object_names.py, which hashes with
# the lab engine's hashing module (stdlib only): without it every cell failed (loan 10's call 8)
mkdir -p "$S/code/kvceph_lab_engine"
cp "$REPO"/lab/engine/src/kvceph_lab_engine/{__init__,hashing}.py "$S/code/kvceph_lab_engine/"
export KVCEPH_S3_ACCESS_KEY=${KVCEPH_S3_ACCESS_KEY:-H200$(openssl rand -hex 8 | tr a-f A-F)}
export KVCEPH_S3_SECRET_KEY=${KVCEPH_S3_SECRET_KEY:-$(openssl rand -base64 30 | tr -d '/+=\n')}
# Every variant pins 31.5 GiB (LMCache's torch fallback rounds its buffer up to a power of two:
# 32 GiB) for a 127k-token document, so the memstore OSDs' 33 GB of that document fit beside it.
# kvceph's connector skips hits below 12,288 tokens (4k and 8k recompute; 16k loads).
PIN=kvceph_lmcache_max_local_cpu_size=31.5
ST="kvceph_lmcache_connector=lmcache $PIN"
KV="kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=12288 $PIN"
# H200_RENDER_EXTRA: more key=value overrides for every variant (the CPU dry run moves the ports)
# shellcheck disable=SC2086
r() { "$PY" "$HERE/render.py" "$S/rendered" "$@" ${H200_RENDER_EXTRA:-}; }
r st $ST
r st1024 $ST kvceph_lmcache_chunk_size=1024
r kv $KV
r kv-r06 $KV kvceph_verify_warm_ratio=0.6      # the verifier at 16k: warm <= 0.6 x cold
r kv-r05 $KV kvceph_verify_warm_ratio=0.5      # at 32k: warm <= 0.5 x cold
r kv1024 $KV kvceph_lmcache_chunk_size=1024
r kvfp8 $KV kvceph_kv_dtype=fp8
r kvfp8-r06 $KV kvceph_kv_dtype=fp8 kvceph_verify_warm_ratio=0.6   # loan 4: the verifier in fp8
r kvfp8-r05 $KV kvceph_kv_dtype=fp8 kvceph_verify_warm_ratio=0.5
r kvshm $KV kvceph_connector_receive_dir=/dev/shm   # GET bodies via files on tmpfs
# loan 3: kvceph's connector with 64 requests in flight (the stock one's CRT client has no cap)
C64=kvceph_connector_connections=64
r kvc64 $KV $C64
r kvc64-1024 $KV $C64 kvceph_lmcache_chunk_size=1024
r kvc64-r06 $KV $C64 kvceph_verify_warm_ratio=0.6
r kvc64-r05 $KV $C64 kvceph_verify_warm_ratio=0.5
# issue 38: the NVIDIA default profile, vLLM 0.33.0 + LMCache 0.5.6 (prepare.sh with
# wheels033.txt; plan033.txt), at the default's 40960 tokens (group_data/gpu.py: Qwen3-32B's
# native context), the buffer and timeouts derived; the same dummy Qwen3-32B shape and flags as
# the 0.26 runs. `dram`: the node's DRAM tier on (kvceph_lmcache_local_cpu, issue 37)
P33='kvceph_engine_profile={"name": "vllm", "packages": ["vllm==0.33.0", "lmcache==0.5.6"], "executable": "vllm", "vllm_version": "0.33.0", "lmcache_version": "0.5.6", "extra_args": ["--load-format", "dummy", "--enforce-eager"]}'
L33=kvceph_max_model_len=40960
r st33 "$P33" $L33 kvceph_lmcache_connector=lmcache
r kv33 "$P33" $L33 kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=12288
r st33dram "$P33" $L33 kvceph_lmcache_connector=lmcache kvceph_lmcache_local_cpu=true
r kv33dram "$P33" $L33 kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=12288 kvceph_lmcache_local_cpu=true
# issue 38 item 2: two hosts of one cache group (h200pair.py: h200a port 8000, h200b 8001), each
# engine 0.4 of the one GPU, the Qwen3-8B shape (16 GB of weights), the default's 40960 tokens
# and its DRAM tier (on by default); rendered into <variant>/<host>/ + group.json (plan038.txt)
PAIR="kvceph_model=/opt/models/Qwen3-8B-shape kvceph_gpu_memory_utilization=0.4"
rp() { H200_INVENTORY=h200pair.py r "$@"; }
rp stpair33 "$P33" $L33 $PAIR kvceph_lmcache_connector=lmcache
rp kvpair33 "$P33" $L33 $PAIR kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=12288
# issue 38 item 3: real weights (realmodel.py; REAL_PARTS below), the stock connector, no DRAM
# tier (the warm request after /reset_prefix_cache can only load from the bucket), greedy
PR='kvceph_engine_profile={"name": "vllm", "packages": ["vllm==0.33.0", "lmcache==0.5.6"], "executable": "vllm", "vllm_version": "0.33.0", "lmcache_version": "0.5.6", "extra_args": ["--enforce-eager"]}'
r real33 "$PR" kvceph_model=/opt/models/SmolLM2-135M-Instruct kvceph_max_model_len=8192 \
  kvceph_gpu_memory_utilization=0.3 kvceph_lmcache_connector=lmcache kvceph_lmcache_local_cpu=false
# loan 8 (issue 38 item 3): vLLM 0.25.1 + LMCache 0.5.6 (prepare.sh with wheels025.txt), the last
# vLLM before the packed K|V layout LMCache 0.5.6 copies wrongly: real weights with the stock
# connector and kvceph's (DRAM tier off: the warm KV comes from the bucket), then with the DRAM
# tier on (the default: the warm KV comes from the node's DRAM through the same GPU connector);
# then the verifier for the Qwen3-32B shape (dummy weights) with both connectors, as loan 6 ran 0.33
P25='kvceph_engine_profile={"name": "vllm", "packages": ["vllm==0.25.1", "lmcache==0.5.6"], "executable": "vllm", "vllm_version": "0.25.1", "lmcache_version": "0.5.6", "extra_args": ["--enforce-eager"]}'
R25="kvceph_model=/opt/models/SmolLM2-135M-Instruct kvceph_max_model_len=8192 kvceph_gpu_memory_utilization=0.3"
r real25 "$P25" $R25 kvceph_lmcache_connector=lmcache kvceph_lmcache_local_cpu=false
r kvreal25 "$P25" $R25 kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=256 kvceph_lmcache_local_cpu=false
r real25dram "$P25" $R25 kvceph_lmcache_connector=lmcache kvceph_lmcache_local_cpu=true
D25='kvceph_engine_profile={"name": "vllm", "packages": ["vllm==0.25.1", "lmcache==0.5.6"], "executable": "vllm", "vllm_version": "0.25.1", "lmcache_version": "0.5.6", "extra_args": ["--load-format", "dummy", "--enforce-eager"]}'
r st25 "$D25" $L33 kvceph_lmcache_connector=lmcache
r kv25 "$D25" $L33 kvceph_lmcache_connector=kvceph kvceph_min_hit_tokens=12288
# issue 37 item 2 (2026-12-04, plan037.txt): the stock connector vs kvceph's on vLLM 0.25.1 +
# LMCache 0.5.6 at 16k/32k/127k, so at the inventory's 131072 tokens (not the default's 40960)
# with the 31.5 GiB buffer of loans 4-5 (a 127k document's KV is 31 GiB): the DRAM tier off (the
# warm after /reset_prefix_cache can only come from the bucket) and on (the same-node repeat)
r st25l "$D25" $ST kvceph_lmcache_local_cpu=false
r kv25l "$D25" $KV kvceph_lmcache_local_cpu=false
r st25ld "$D25" $ST kvceph_lmcache_local_cpu=true
r kv25ld "$D25" $KV kvceph_lmcache_local_cpu=true
# issue 37 item 2, loan 10 (plan037b.txt): kvceph's connector with 64 requests in flight (loan 3's
# figure; the stock connector's CRT client has no request cap) against the stock one, same run
r kv25l64 "$D25" $KV $C64 kvceph_lmcache_local_cpu=false
# issue 50 (plan050.txt): the verifier's answer check on the default profile (vLLM 0.25.1, kvceph's
# connector, crc32c check on, DRAM tier on: nothing set but the dummy weights and the default's
# 40960 tokens) and on vLLM 0.26.0 (the packed layout #4463 corrupts; kvceph refuses the pair
# unless told); the crc32c check's cost: kv25l against the same with the check off
# On an 80 GB GPU (loan 13 got an H100) the Qwen3-32B shape leaves no room for KV: the same runs
# with Qwen3-8B's shape (its native 40960 for the verifier, YaRN x4 to 131072 for the 127k cell)
M8=kvceph_model=/opt/models/Qwen3-8B-shape; M8Y=kvceph_model=/opt/models/Qwen3-8B-yarn-shape
r kv25d "$D25" $L33
r kv25d8 "$D25" $L33 $M8
r kv25l8 "$D25" $KV $M8Y kvceph_lmcache_local_cpu=false
r kv25l8nc "$D25" $KV $M8Y kvceph_lmcache_local_cpu=false kvceph_connector_verify_crc32c=false
D26='kvceph_engine_profile={"name": "vllm", "packages": ["vllm==0.26.0", "lmcache==0.5.6"], "executable": "vllm", "vllm_version": "0.26.0", "lmcache_version": "0.5.6", "extra_args": ["--load-format", "dummy", "--enforce-eager"]}'
r kv26d "$D26" $L33 kvceph_accept_kv_load_defect=true
r kv26d8 "$D26" $L33 $M8 kvceph_accept_kv_load_defect=true
r kv25lnc "$D25" $KV kvceph_lmcache_local_cpu=false kvceph_connector_verify_crc32c=false
# issue 54 (plan054.txt, routerbench.py): the router benchmark, h200router.py's pair (h200a
# port 8000, h200b 8001, one cache group) with vllm-router on h200a (router.json); the default
# profile's vLLM 0.25.1 + LMCache 0.5.6 (the wheels025.txt shipment) with dummy weights, the
# default connector and DRAM tier, the Qwen3-8B shape at 0.4 of the GPU each (as loan 7's pair)
rr() { H200_INVENTORY=h200router.py r "$@"; }
rr kvrouter25 "$D25" $L33 $PAIR
# a kvceph variant that rendered the stock connector (a setting not known) would measure the
# stock one twice: refuse to ship that
for y in "$S"/rendered/*/lmcache.yaml "$S"/rendered/*/*/lmcache.yaml; do [ -f "$y" ] || continue
  v=${y#"$S"/rendered/}; v=${v%/lmcache.yaml}
  case "$v" in kv*) grep -q '^remote_storage_plugins' "$y" ;; *) grep -q '^remote_url' "$y" ;; esac ||
    { echo "ship.sh: variant $v did not render its connector (lmcache.yaml: $(grep -E '^remote' "$y" | tr '\n' ' '))"; exit 1; }
done
# kvceph's connector as the engine-software stage builds it (deploys/connector_package.py)
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); from deploys import connector_package as c; w = c.build(); open(sys.argv[2] + "/" + w.filename, "wb").write(w.data); print(w.filename, w.version, w.content[:12])' "$REPO" "$S/meta/whl"
cp "$PARTS/SHA256SUMS" "$S/meta/"
# which wheels travel (gpu.sh: a shipped torch moves the compiled ops build after the unpack)
cp "$PARTS/wheels.lst" "$S/meta/" 2>/dev/null || true
cp "$PARTS/lmcache-csrc.tgz" "$S/meta/" 2>/dev/null || echo "ship.sh: no lmcache-csrc.tgz in $PARTS: the run uses LMCache's torch fallback"
[ -n "${DONE_BEFORE:-}" ] && cp "$DONE_BEFORE" "$S/meta/done-before.txt"
for p in "$PARTS"/part.*; do n=$((10#${p##*.})); mkdir -p "$S/p$n"; cp "$p" "$S/p$n/"; done
# REAL_PARTS (issue 38 item 3): the real model's directory as a tar in parts (model.NN and
# model-sums.txt, see "Issue 38" in README.md), one more pN each after the shipment's
if [ -n "${REAL_PARTS:-}" ]; then cp "$REAL_PARTS/model-sums.txt" "$S/meta/"
  k=$(ls -d "$S"/p* | wc -l); for p in "$REAL_PARTS"/model.[0-9]*; do mkdir -p "$S/p$k"; cp "$p" "$S/p$k/"; k=$((k+1)); done; fi
# ROUTER_WHEEL (issue 54): vllm-router's wheel as the lab's wheelhouse holds it
# (lab/engine/build-wheelhouse.sh: <wheelhouse>/router/), one more pN after the others
if [ -n "${ROUTER_WHEEL:-}" ]; then k=$(ls -d "$S"/p* | wc -l); mkdir -p "$S/p$k/router"
  cp "$ROUTER_WHEEL" "$S/p$k/router/"; (cd "$S/p$k/router" && sha256sum -- *.whl) > "$S/meta/router-sums.txt"; fi
du -sh "$S"/* | tr '\n' ' '; echo
