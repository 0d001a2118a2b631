#!/bin/bash
# Lay out what the device calls carry, in DEST/.ship (DEST: the checkout the device tool sends;
# add /.ship/ to its .git/info/exclude):
#   .ship/code/       deploys/, templates/, hw/ (not its results/) and lab/ceph/conf.sh (ceph-up.sh
#                     sources it) of this worktree (run from here on the GPU machine)
#   .ship/rendered/   kvceph's files for the h200 inventories, one directory per variant that a
#                     plan names (planNNN.variants), rendered with one throwaway S3 key pair
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
export KVCEPH_S3_ACCESS_KEY=${KVCEPH_S3_ACCESS_KEY:-H200$(openssl rand -hex 8 | tr a-f A-F)}
export KVCEPH_S3_SECRET_KEY=${KVCEPH_S3_SECRET_KEY:-$(openssl rand -base64 30 | tr -d '/+=\n')}
# The variants: every plan's planNNN.variants beside it (their shared definitions in
# defs.variants), each rendered once by render.py into rendered/<name>/ (variants.py).
# H200_RENDER_EXTRA: more key=value overrides for every variant (the CPU dry run moves the ports)
# shellcheck disable=SC2086
"$PY" "$HERE/variants.py" render "$S/rendered" ${H200_RENDER_EXTRA:-}
# a kvceph variant that rendered the stock connector (a setting not known) would measure the
# stock one twice: refuse to ship that
for y in "$S"/rendered/*/lmcache.yaml "$S"/rendered/*/*/lmcache.yaml; do [ -f "$y" ] || continue
  v=${y#"$S"/rendered/}; v=${v%/lmcache.yaml}
  case "$v" in kv*) grep -q '^remote_storage_plugins' "$y" ;; *) grep -q '^remote_url' "$y" ;; esac ||
    { echo "ship.sh: variant $v did not render its connector (lmcache.yaml: $(grep -E '^remote' "$y" | tr '\n' ' '))"; exit 1; }
done
# kvceph's connector as the engine-software stage builds it (deploys/tier/connector_package.py)
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); from deploys.tier import connector_package as c; w = c.build(); open(sys.argv[2] + "/" + w.filename, "wb").write(w.data); print(w.filename, w.version, w.content[:12])' "$REPO" "$S/meta/whl"
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
