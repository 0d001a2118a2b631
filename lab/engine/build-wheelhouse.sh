#!/usr/bin/env bash
# build-wheelhouse.sh OUTDIR -- every wheel a lab inference host needs, for an offline
#   pip install --no-index --find-links OUTDIR kvceph-lab-engine
#   pip install --no-index --find-links OUTDIR --no-deps lmcache==0.5.6
# on Debian 12's Python 3.11 (x86_64). Needs network access to a package index (or mirror)
# here, none on the hosts. Env: PIP (default: python3 -m pip), PYTHON (default: python3).
set -euo pipefail
OUT=${1:?usage: $0 OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
read -r -a PIP <<<"${PIP:-$PYTHON -m pip}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# keep in step with pyproject.toml [project].dependencies and lmcache_config.py
DEPS=(pyyaml awscrt requests urllib3 idna certifi charset-normalizer)
LMCACHE=lmcache==0.5.6
# The cache-aware router (inventory group router, docs/router.md): its compiled module needs no
# Python dependency, so it is installed --no-deps too; in its own folder (router/), which the
# engines' upload (*.whl at the top) leaves out.
ROUTER=vllm-router==0.1.17
TARGET=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3
        --abi none --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)

echo "== engine wheel"
"${PIP[@]}" wheel --no-deps --wheel-dir "$OUT" "$HERE"
echo "== dependencies (cp311, manylinux x86_64)"
"${PIP[@]}" download "${TARGET[@]}" --dest "$OUT" "${DEPS[@]}"
echo "== $LMCACHE (installed with --no-deps on the hosts)"
"${PIP[@]}" download "${TARGET[@]}" --no-deps --dest "$OUT" "$LMCACHE"
echo "== $ROUTER (installed with --no-deps on the router hosts)"
"${PIP[@]}" download "${TARGET[@]}" --no-deps --dest "$OUT/router" "$ROUTER"
cat >"$OUT/INSTALL" <<EOT
python3 -m venv /opt/kvceph/venv
/opt/kvceph/venv/bin/pip install --no-index --find-links $OUT kvceph-lab-engine
/opt/kvceph/venv/bin/pip install --no-index --find-links $OUT --no-deps $LMCACHE
/opt/kvceph/venv/bin/kvceph-lab-engine --version
EOT
ls -1 "$OUT"
