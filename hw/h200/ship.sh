#!/bin/bash
# Lay out what the device calls carry, in DEST/.ship (DEST: the checkout the device tool sends;
# add /.ship/ to its .git/info/exclude):
#   .ship/code/       deploys/, templates/ and hw/ of this worktree (run from here on the GPU machine)
#   .ship/rendered/   kvceph's files for the h200 inventory: base, sync (synchronous loading),
#                     c1024 (chunk_size 1024), and each with a 31.5 GiB buffer (-pin32),
#                     rendered with one throwaway S3 key pair
#   .ship/meta/       SHA256SUMS of the parts
#   .ship/pN/         part N of prepare.sh's shipment: one per call (64 MiB per call in all)
#   hw/h200/ship.sh DEST [PARTS_DIR]     (PARTS_DIR default: /tmp/h200-parts)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
DEST=${1:?DEST: the checkout that travels}; PARTS=${2:-/tmp/h200-parts}
PY=${PY:-$REPO/.venv/bin/python}
S=$DEST/.ship; rm -rf "$S"; mkdir -p "$S/code" "$S/rendered" "$S/meta"
(cd "$REPO" && git ls-files -co --exclude-standard deploys templates hw | tar -cf - -T -) | tar -xf - -C "$S/code"
export KVCEPH_S3_ACCESS_KEY=${KVCEPH_S3_ACCESS_KEY:-H200$(openssl rand -hex 8 | tr a-f A-F)}
export KVCEPH_S3_SECRET_KEY=${KVCEPH_S3_SECRET_KEY:-$(openssl rand -base64 30 | tr -d '/+=\n')}
"$PY" "$HERE/render.py" "$S/rendered" base
"$PY" "$HERE/render.py" "$S/rendered" sync kvceph_lmcache_enable_async_loading=false
"$PY" "$HERE/render.py" "$S/rendered" c1024 kvceph_lmcache_chunk_size=1024
# With memstore OSDs (too little disk for bluestore) the bucket's 34 GB of 128k KV sit in RAM next
# to the engine's pinned buffer, which LMCache's torch fallback rounds up to a power of two
# (40 GiB -> 64 GiB): these variants pin 32 GiB instead, for a 127k-token document. (No sync
# one: kvceph refuses synchronous loading with a buffer below the derived 40 GiB.)
"$PY" "$HERE/render.py" "$S/rendered" base-pin32 kvceph_lmcache_max_local_cpu_size=31.5
"$PY" "$HERE/render.py" "$S/rendered" c1024-pin32 kvceph_lmcache_max_local_cpu_size=31.5 kvceph_lmcache_chunk_size=1024
cp "$PARTS/SHA256SUMS" "$S/meta/"
for p in "$PARTS"/part.*; do n=$((10#${p##*.})); mkdir -p "$S/p$n"; cp "$p" "$S/p$n/"; done
du -sh "$S"/* | tr '\n' ' '; echo
