#!/bin/bash
# Build (once, cached) the container images a cephadm-managed Ceph 20.2.4 needs, from Debian sid
# packages at pinned versions (no registry): tarballs + the cephadm zipapp under
# $KVCEPH_LAB_DIR/cephadm-images. ceph1 imports them into its own podman storage on first boot.
#   ceph-<v>.tar       mon/mgr/osd/radosgw/ceph-volume + cephadm mgr module
#   haproxy-<v>.tar    for cephadm's ingress service (haproxy)
#   keepalived-<v>.tar for cephadm's ingress service (virtual IP)
#   cephadm            the zipapp from sid's cephadm .deb (runs under bookworm's python 3.11)
# A pinned version the archive no longer carries stops the build with one line naming it.
set -euo pipefail
_inst=${KVCEPH_LAB_INSTANCE:-0}
LAB=${KVCEPH_LAB_DIR:-/var/lib/kvceph-lab${_inst#0}}
OUT=$LAB/cephadm-images
MIRROR=${KVCEPH_LAB_MIRROR:-http://deb.debian.org/debian}
KR=/usr/share/keyrings/debian-archive-keyring.gpg
CEPH_V=20.2.4+ds-2
HAPROXY_V=3.2.26-1
KEEPALIVED_V=1:2.3.4-1+b2
STAMP="1 $CEPH_V $HAPROXY_V $KEEPALIVED_V"
SID=$OUT/apt-sid  # private apt state for sid: the machine's apt configuration is never touched
APT=(-o Dir::Etc::sourcelist=$SID/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$SID/lists
     -o Dir::Cache=$SID/cache -o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root)
SLIM=(--aptopt='Acquire::Check-Valid-Until "false"' --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright')
log() { echo "[cephadm-images] $*" >&2; }
die() { echo "[cephadm-images] ERROR: $*" >&2; exit 1; }

[ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$STAMP" ] && exit 0
log "container images for Ceph $CEPH_V, haproxy, keepalived: reading Debian sid's package lists ..."
rm -rf "$OUT"; mkdir -p "$SID/lists/partial" "$SID/cache/archives/partial"
echo "deb [signed-by=$KR] $MIRROR sid main" >"$SID/sources.list"
apt-get -q "${APT[@]}" update >/dev/null
check() {  # check PKG VERSION: the archive still carries exactly this version
  apt-cache "${APT[@]}" madison "$1" | awk -v v="$2" '$3 == v {f=1} END {exit !f}' ||
    die "Debian sid no longer carries $1=$2 (pinned in $0); pick the version it has: apt-cache madison $1"
}
check ceph-mon "$CEPH_V"; check cephadm "$CEPH_V"; check haproxy "$HAPROXY_V"; check keepalived "$KEEPALIVED_V"

t0=$(date +%s)
pin() { local p out=""; for p in $1; do out+="$p=$2,"; done; echo "${out%,}"; }
image() {  # image NAME MMDEBSTRAP-ARGS...: one image tarball, a line when it starts and ends
  local name=$1 t=$(date +%s); shift
  log "$name image: building (mmdebstrap sid) ..."
  mmdebstrap --quiet --variant=apt --keyring=$KR "${SLIM[@]}" "$@" \
    sid "$OUT/$name.tar" "deb [signed-by=$KR] $MIRROR sid main" 2>"$OUT/$name.log" ||
    { tail -20 "$OUT/$name.log" >&2; die "$name image failed (log: $OUT/$name.log)"; }
  rm -f "$OUT/$name.log"
  log "$name image ready in $(($(date +%s) - t)) s ($(du -sh "$OUT/$name.tar" | cut -f1))"
}
CEPH_PKGS="$(pin "ceph-mon ceph-mgr ceph-osd ceph-volume radosgw ceph-mgr-cephadm ceph-mgr-modules-core ceph-base ceph-common" "$CEPH_V")"
# The three images are independent: built at once (each mostly waits on downloads and dpkg).
# Python 3.14 defaults multiprocessing to 'forkserver'; inside ceph-mgr's embedded python the
# cephadm module then fails in ThreadPool() with BrokenPipeError: the .pth forces 'fork'.
image ceph --include="$CEPH_PKGS,mount,lvm2,procps,iproute2,util-linux,e2fsprogs,ca-certificates,python3,kmod,udev" \
  --customize-hook='echo "import multiprocessing as _mp; _mp.set_start_method(\"fork\", force=True)" > "$1/usr/lib/python3/dist-packages/zz-kvlab-mp-fork.pth"' &
jobs_=$!
image haproxy --include="haproxy=$HAPROXY_V,procps" &
jobs_+=" $!"
image keepalived --include="keepalived=$KEEPALIVED_V,procps,iproute2" &
jobs_+=" $!"
trap 'kill $jobs_ 2>/dev/null || true' EXIT
(cd "$OUT" && apt-get -q "${APT[@]}" download "cephadm=$CEPH_V" >/dev/null &&
  dpkg-deb --fsys-tarfile cephadm_*.deb | tar -xO ./usr/sbin/cephadm >cephadm && chmod 755 cephadm && rm -f cephadm_*.deb)
log "cephadm zipapp ready ($CEPH_V)"
failed=0
for j in $jobs_; do wait "$j" || failed=1; done
trap - EXIT
[ $failed = 0 ] || die "an image build failed (lines above)"
rm -rf "$SID"
echo "$STAMP" >"$OUT/stamp"
log "images ready in $(($(date +%s) - t0)) s: $(du -sh "$OUT" | cut -f1) in $OUT"
