#!/bin/bash
# Build (once, cached) the lab's root filesystems under $KVCEPH_LAB_DIR/image:
#   base/        Debian bookworm minbase + sshd, systemd, python3.11 (+venv, pip) ...
#   ceph/        overlay layer on top of base: Ceph Pacific (Debian's 16.2.x) + haproxy (ceph1 only)
# usage: build.sh [base|ceph|all]     (all = default; each step is skipped when its stamp matches)
# A layer is rebuilt when its stamp (version + package list) changes; `lab.sh purge` removes all.
set -euo pipefail
_inst=${KVCEPH_LAB_INSTANCE:-0}  # same default dir as lab.sh: instance N>0 -> /var/lib/kvceph-labN
LAB=${KVCEPH_LAB_DIR:-/var/lib/kvceph-lab${_inst#0}}
IMG=$LAB/image
MIRROR=${KVCEPH_LAB_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${KVCEPH_LAB_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
IMAGE_VERSION=3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

BASE_PKGS="openssh-server,python3,python3-venv,python3-pip,systemd,systemd-sysv,dbus,sudo,iproute2,\
procps,curl,ca-certificates,iputils-ping,netbase,less"
CEPH_PKGS="ceph-mon ceph-mgr ceph-osd radosgw ceph-common ceph-mgr-modules-core python3-ceph-common \
python3-boto3 haproxy uuid-runtime"

log() { echo "[image] $*" >&2; }

# units that only cost memory/CPU in a lab host
MASK_UNITS="apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer \
dpkg-db-backup.timer systemd-timesyncd.service console-getty.service getty@tty1.service \
systemd-networkd-wait-online.service"

build_base() {
  local stamp="$IMAGE_VERSION $BASE_PKGS"
  if [ -f "$IMG/base.stamp" ] && [ "$(cat "$IMG/base.stamp")" = "$stamp" ]; then return 0; fi
  local t0; t0=$(date +%s)
  log "building base rootfs (mmdebstrap minbase bookworm) ..."
  rm -rf "$IMG/base.tmp" "$IMG/base" "$IMG/base.stamp" "$IMG/ceph" "$IMG/ceph.stamp" "$IMG/ceph.work"
  mkdir -p "$IMG"
  mmdebstrap --quiet --variant=minbase --include="$BASE_PKGS" \
    --components=main \
    bookworm "$IMG/base.tmp" \
    "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb $SECURITY_MIRROR bookworm-security main"
  local B=$IMG/base.tmp
  rm -rf "$B"/var/cache/apt/archives/*.deb "$B"/var/lib/apt/lists/*_Packages "$B"/var/lib/apt/lists/*_InRelease
  # sshd: key login for root only; host keys are generated on the controller and injected per host
  rm -f "$B"/etc/ssh/ssh_host_*
  cat >"$B/etc/ssh/sshd_config.d/kvlab.conf" <<'EOF'
# kvceph lab: host key injected by lab.sh (generated on the controller, pinned in known_hosts)
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 100:30:200
MaxSessions 50
EOF
  : >"$B/etc/machine-id"                      # per-boot machine-id
  : >"$B/etc/resolv.conf"                     # no DNS inside the lab: /etc/hosts only, fail fast
  for u in $MASK_UNITS; do ln -sf /dev/null "$B/etc/systemd/system/$u"; done
  # journald: keep it small (RAM)
  mkdir -p "$B/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n' >"$B/etc/systemd/journald.conf.d/kvlab.conf"
  install -d -m700 "$B/root/.ssh"
  # sanity: Debian's python 3.11 with working venv/ensurepip
  chroot "$B" python3 -c 'import sys, ensurepip, venv; assert sys.version_info[:2] == (3, 11), sys.version'
  mv "$B" "$IMG/base"
  echo "$stamp" >"$IMG/base.stamp"
  log "base rootfs ready in $(($(date +%s) - t0)) s ($(du -sh "$IMG/base" | cut -f1))"
}

chroot_mounts() {  # chroot_mounts DIR: API filesystems for a chroot apt run (no host /dev bind)
  local M=$1
  mount -t proc proc "$M/proc"
  mount -t tmpfs -o mode=755,size=1m tmpfs "$M/dev"
  for n in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
    set -- $n; mknod -m666 "$M/dev/$1" "$2" "$3" "$4"
  done
  mkdir -p "$M/dev/pts" "$M/dev/shm"
  mount -t tmpfs -o mode=755 tmpfs "$M/run"
  cp /etc/resolv.conf "$M/run/kvlab-resolv.conf"
  mount --bind "$M/run/kvlab-resolv.conf" "$M/etc/resolv.conf"
}

# build_layer NAME STAMP "WHAT (DETAIL)" PKGS FINISH: the overlay layer $IMG/NAME on top of base,
# PKGS apt-installed in a chroot (no service starts), then FINISH run with the mounted tree as $1
# (what the layer adds besides its packages); skipped while $IMG/NAME.stamp says STAMP.
build_layer() {
  local name=$1 stamp=$2 what=$3 pkgs=$4 finish=$5
  if [ -f "$IMG/$name.stamp" ] && [ "$(cat "$IMG/$name.stamp")" = "$stamp" ]; then return 0; fi
  local t0; t0=$(date +%s)
  log "building $what ..."
  local L=$IMG/ceph.tmp W=$IMG/ceph.work M=$IMG/ceph.mnt
  cleanup_ceph_build
  rm -rf "${IMG:?}/$name" "$IMG/$name.stamp" "$L" "$W"
  mkdir -p "$L" "$W" "$M"
  mount -t overlay overlay -o "lowerdir=$IMG/base,upperdir=$L,workdir=$W" "$M"
  trap cleanup_ceph_build EXIT
  chroot_mounts "$M"
  printf '#!/bin/sh\nexit 101\n' >"$M/usr/sbin/policy-rc.d"; chmod 755 "$M/usr/sbin/policy-rc.d"
  chroot "$M" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
  # shellcheck disable=SC2086
  chroot "$M" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=600 \
    -o Dpkg::Use-Pty=0 install --no-install-recommends $pkgs >"$IMG/$name-build.log" 2>&1 ||
    { tail -30 "$IMG/$name-build.log" >&2; exit 1; }
  rm -f "$M/usr/sbin/policy-rc.d"
  chroot "$M" apt-get clean
  rm -rf "$M"/var/lib/apt/lists/*_Packages "$M"/var/lib/apt/lists/*_InRelease
  "$finish" "$M"
  cleanup_ceph_build
  trap - EXIT
  rm -rf "$W"
  mv "$L" "$IMG/$name"
  echo "$stamp" >"$IMG/$name.stamp"
  log "${what%% (*} ready in $(($(date +%s) - t0)) s ($(du -sh "$IMG/$name" | cut -f1))"
}

finish_ceph() {
  # Ceph's own units are not used in the lab (kvlab-ceph.service runs the daemons)
  for u in ceph-crash.service ceph.target ceph-mon.target ceph-mgr.target ceph-osd.target \
           ceph-radosgw.target ceph-mds.target; do
    ln -sf /dev/null "$1/etc/systemd/system/$u"
  done
  chroot "$1" ceph --version >&2
}

build_ceph() {
  build_layer ceph "$IMAGE_VERSION $CEPH_PKGS $(cat "$IMG/base.stamp")" \
    "ceph layer (Ceph Pacific + haproxy, chroot apt-get)" "$CEPH_PKGS" finish_ceph
}

# ceph1 of the cephadm lab: a plain Debian host a cephadm cluster can be bootstrapped on (podman,
# lvm2, a time-sync unit, the cephadm zipapp); the Ceph daemons come as container images.
CEPHADM_HOST_PKGS="podman crun conmon catatonit lvm2 chrony python3-yaml python3-boto3 uuid-runtime"

finish_cephadm_host() {
  ln -sfn /var/lib/kvlab-images/cephadm "$1/usr/sbin/cephadm"  # the zipapp, bound in read-only
  cp -a "$HERE/../cephadm/host/." "$1/"
}

build_cephadm_host() {
  local files; files=$(cd "$HERE/../cephadm/host" && find . -type f -exec md5sum {} + | sort | md5sum)
  build_layer cephadm "$IMAGE_VERSION $CEPHADM_HOST_PKGS $(cat "$IMG/base.stamp") $files" \
    "cephadm host layer (podman, lvm2, chrony, cephadm)" "$CEPHADM_HOST_PKGS" finish_cephadm_host
}

cleanup_ceph_build() {
  local M=$IMG/ceph.mnt
  for m in etc/resolv.conf run dev proc ""; do
    mountpoint -q "$M/$m" 2>/dev/null && umount "$M/$m" 2>/dev/null || umount -l "$M/$m" 2>/dev/null || true
  done
  rmdir "$M" 2>/dev/null || true
}

case ${1:-all} in
base) build_base ;;
ceph) build_base; build_ceph ;;
cephadm)  # the container images (Debian sid) need nothing from base: both builds at once
  "$HERE/../cephadm/build-images.sh" &
  images=$!
  (build_base; build_cephadm_host) &
  wait $! || { kill $images 2>/dev/null; wait $images; exit 1; }
  wait $images ;;
all) build_base; build_ceph ;;
*) echo "usage: $0 [base|ceph|cephadm|all]" >&2; exit 2 ;;
esac
