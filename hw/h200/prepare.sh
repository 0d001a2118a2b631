#!/bin/bash
# Build the shipment for the offline H200 machine, on a Debian bookworm machine that reaches the
# package registries: the wheels the GPU image lacks (wheels.txt, cp312 manylinux), a minimal Ceph
# 16.2.15 + haproxy (binaries, plugins and every shared library they load, from Debian packages),
# one tar split into parts of at most PART_MIB (default 45) MiB, because one transfer to that
# machine carries at most 64 MiB including the repository (5.7 MB with loans 1-4's results: 57
# MiB parts no longer fitted, loan 5; ~13 MB with loan 9's: 52 MiB parts no longer fitted, loan 10) and .ship/code, rendered and meta (~2 MB); and LMCache 0.5.6's csrc/ from its
# sdist (lmcache-csrc.tgz, for buildops.py).
#   hw/h200/prepare.sh [OUT]     (default: <repo>/.ship/parts; work files in $BUILD, default /tmp/h200-build)
#   WHEELS=hw/h200/wheels033.txt BUILD=/tmp/h200-build-033 hw/h200/prepare.sh /tmp/h200-parts-033
#                                (vLLM 0.33 + torch 2.14: 27 parts, issue 38; see wheels033.txt)
#   WHEELS=hw/h200/wheels025.txt BUILD=/tmp/h200-build-025 hw/h200/prepare.sh /tmp/h200-parts-025
#                                (vLLM 0.25.1 on the image's torch 2.11: loan 8, see wheels025.txt)
#   ALT_WHEELS=hw/h200/wheels026alt.txt ...   wheels a plan swaps in later (gpu.sh `swap`), kept
#                                apart in whl-alt/ (two vLLMs cannot install into one site)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-$REPO/.ship/parts}; B=${BUILD:-/tmp/h200-build}; PART_MIB=${PART_MIB:-45}
PY=${PY:-python3}; WHEELS=${WHEELS:-$HERE/wheels.txt}; ALT=${ALT_WHEELS:-}
mkdir -p "$B/whl" "$B/deb" "$B/root" "$OUT"
say() { echo "[prepare] $*"; }

fetch() {  # fetch LIST DIR: the cp312 manylinux wheels of LIST into DIR
  local list=$1 dir=$2; mkdir -p "$dir"
grep -v -E '^\s*(#|$)' "$list" | while read -r req; do
  name=${req%%==*}; ver=${req##*==}; norm=$(echo "$name" | tr '-' '_')
  ls "$dir/" 2>/dev/null | grep -i "^${norm}-${ver}-" >/dev/null && continue  # not -q: pipefail + SIGPIPE
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 --platform any -d "$dir" "$req"
done
}
say "wheels -> $B/whl"; fetch "$WHEELS" "$B/whl"
rm -rf "$B/whl-alt"; [ -n "$ALT" ] && { say "swap-in wheels -> $B/whl-alt"; fetch "$ALT" "$B/whl-alt"; }
# vLLM 0.34's, 0.33's and 0.25's FA2 module (124 of 321 / ~80 of 239 MiB): vLLM picks FA3 on sm90, and
# its flash_attn_interface imports FA2 inside try/except (FA2_AVAILABLE False). Deleted without
# recompressing (zip -d).
for w in "$B"/whl/vllm-0.3[34].*.whl "$B"/whl/vllm-0.25.*.whl "$B"/whl-alt/vllm-0.26.*.whl; do [ -f "$w" ] || continue
  unzip -l "$w" vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so >/dev/null 2>&1 || continue
  say "dropping vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so from $(basename "$w")"
  zip -q -d "$w" vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
done
n=$(ls "$B/whl"/*.whl | wc -l); say "$n wheels, $(du -sm "$B/whl" | cut -f1) MiB"

# the minimal Ceph: reused when an intact one from an earlier run is there (rm it to rebuild)
if [ -f "$B/cephmin.tar.xz" ] && xz -t "$B/cephmin.tar.xz" 2>/dev/null; then
  say "minimal Ceph + haproxy: reusing $B/cephmin.tar.xz"
else
  say "Debian packages -> $B/deb"
  pkgs=$(grep -v -E '^\s*(#|$)' "$HERE/debs.txt")
  (cd "$B/deb" && apt-get download -q $pkgs >/dev/null)
  # and the libraries they load, so that a machine without them installed can ship them too
  # (libc, libgcc and libstdc++ excepted: the GPU image has its own)
  deps=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $pkgs | grep -E '^lib' | grep -v -E '^lib(c6|gcc-s1|stdc\+\+6)$' | sort -u)
  mkdir -p "$B/deb/deps"
  # shellcheck disable=SC2086
  (cd "$B/deb/deps" && apt-get download -q $deps >/dev/null)
  for d in "$B"/deb/deps/*.deb "$B"/deb/*.deb; do dpkg-deb -x "$d" "$B/root"; done

  say "minimal Ceph + haproxy"
  M=$B/min; rm -rf "$M"; mkdir -p "$M/usr/bin" "$M/usr/lib/x86_64-linux-gnu" "$M/lib"
  R=$B/root; L=usr/lib/x86_64-linux-gnu
  BINS="ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool"
  for b in $BINS; do cp -a "$R/usr/bin/$b" "$M/usr/bin/"; done
  cp -a "$R/usr/sbin/haproxy" "$M/usr/bin/"
  cp -a "$R/$L"/lib{rados,radosstriper,rbd,rgw,cephfs}.so* "$M/$L/"
  cp -a "$R/$L/ceph" "$R/$L/rados-classes" "$M/$L/"
  # Every shared library the binaries and plugins load, except the C library itself: the GPU image
  # is another distribution, so ship bookworm's copies next to the binaries (LD_LIBRARY_PATH).
  export LD_LIBRARY_PATH="$R/$L:$R/$L/ceph:$R/lib/x86_64-linux-gnu"
  find "$M" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do ldd "$f" 2>/dev/null || true; done |
    awk '/=> \//{print $3}' | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*|libutil.so*) continue ;;
      esac
      [ -e "$M/$L/$(basename "$lib")" ] || cp -L "$lib" "$M/lib/"
    done
  missing=$(find "$M/usr/bin" -type f | while read -r f; do LD_LIBRARY_PATH="$M/$L:$M/$L/ceph:$M/lib" ldd "$f" | grep 'not found' || true; done)
  [ -z "$missing" ] || { echo "missing libraries: $missing"; exit 1; }
  tar -C "$M" -cf - . | xz -T2 -6 > "$B/cephmin.tar.xz"
fi
say "cephmin.tar.xz $(du -m "$B/cephmin.tar.xz" | cut -f1) MiB"

# LMCache 0.5.6's C++/CUDA sources, for buildops.py on the GPU machine: pip fetches the sdist and
# then installs its build requirements (torch 2.13, minutes) to read its metadata; the file is
# taken from pip's work directory as soon as it is there, and checked against its published hash.
SDIST_SHA=d6951e60ce8818a76aa42d0866a4ba85f1c95cd919355fff30ff24dcc3243f1e
SD=$B/lmcache-0.5.6.tar.gz
if [ ! -f "$SD" ] && [ -n "${LMCACHE_SDIST:-}" ]; then cp "$LMCACHE_SDIST" "$SD"; fi
if [ ! -f "$SD" ]; then
  say "LMCache 0.5.6 sdist"
  rm -rf "$B/piptmp"; mkdir -p "$B/piptmp"
  TMPDIR=$B/piptmp timeout 900 $PY -m pip download -q --no-deps --no-binary :all: -d "$B/piptmp/dl" lmcache==0.5.6 >/dev/null 2>&1 &
  pip_pid=$!
  for _ in $(seq 1 300); do f=$(find "$B/piptmp" -name lmcache-0.5.6.tar.gz -size +9M 2>/dev/null | head -1)
    [ -n "$f" ] && echo "$SDIST_SHA  $f" | sha256sum -c --quiet 2>/dev/null && cp "$f" "$SD" && break; sleep 1; done
  kill "$pip_pid" 2>/dev/null; wait "$pip_pid" 2>/dev/null || true
fi
echo "$SDIST_SHA  $SD" | sha256sum -c --quiet || { echo "no LMCache 0.5.6 sdist (set LMCACHE_SDIST=<file>)"; exit 1; }
rm -rf "$B/csrc"; mkdir -p "$B/csrc"; tar -xzf "$SD" -C "$B/csrc" lmcache-0.5.6/csrc
tar -C "$B/csrc/lmcache-0.5.6" -czf "$OUT/lmcache-csrc.tgz" csrc
say "lmcache-csrc.tgz $(du -k "$OUT/lmcache-csrc.tgz" | cut -f1) KiB"

say "payload -> $OUT/part.NN (<= $PART_MIB MiB each)"
rm -f "$OUT"/part.*
tar -C "$B" -cf - whl $( [ -d "$B/whl-alt" ] && echo whl-alt ) cephmin.tar.xz | split -b "${PART_MIB}M" -d - "$OUT/part."
(cd "$OUT" && sha256sum part.* > SHA256SUMS)
ls "$B/whl" > "$OUT/wheels.lst"
ls -la "$OUT"
