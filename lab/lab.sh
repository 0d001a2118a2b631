#!/bin/bash
# kvceph local lab: 4 Debian hosts (real systemd as PID 1) as systemd-nspawn containers on
# overlayfs, each in its own network namespace on a bridge inside the lab netns "kvlab"
# (10.213.7.0/24). The root namespace reaches the bridge through veth kvlab0 = 10.213.7.1/24, so
# pyinfra / pytest / boto3 run unchanged on the controller. Ceph (mon, mgr, 2 memstore OSDs,
# 2 radosgw, haproxy :80 and :443 with the lab CA's certificate) runs inside ceph1. See lab/README.md.
#
# usage: lab.sh up | down | purge | status | replace HOST | stop HOST... | start HOST...
#               | kill HOST... | ssh HOST [CMD...] | build
# All state under $KVCEPH_LAB_DIR (default /var/lib/kvceph-lab).
# KVCEPH_LAB_INSTANCE=N (default 0) runs a separate lab beside the others: subnet 10.213.(7+N),
# netns/link/cgroup names and state dir suffixed with N (instance 0 keeps the plain names).
set -euo pipefail
INST=${KVCEPH_LAB_INSTANCE:-0}
case $INST in [0-9] | [1-9][0-9]) ;; *) echo "[lab] ERROR: KVCEPH_LAB_INSTANCE=$INST: want 0..99" >&2; exit 2 ;; esac
SFX=${INST#0}       # "" for instance 0: today's names, unchanged
LAB=${KVCEPH_LAB_DIR:-/var/lib/kvceph-lab$SFX}
export KVCEPH_LAB_DIR=$LAB  # image/build.sh builds into the same dir
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMG=$LAB/image
NET=10.213.$((7 + INST))
NS=kvlab$SFX           # lab netns holding the bridge
BR=kvbr$INST           # bridge inside $NS
RIF=kvlab$INST         # root-namespace end of the uplink veth ($NET.1/24)
RIF_PEER=kvlab$INST-br # its peer, enslaved to $BR inside $NS
HOSTS="ceph1 gpu1 gpu2 gaudi1"
# KVCEPH_LAB_HOSTS=N (1..16): a benchmark lab of ceph1 + N light inference hosts gpu1..gpuN
# (bench/README.md); inventories/lab.py reads the same variable.
if [ -n "${KVCEPH_LAB_HOSTS:-}" ]; then
  case $KVCEPH_LAB_HOSTS in [1-9] | 1[0-6]) ;; *) echo "[lab] ERROR: KVCEPH_LAB_HOSTS=$KVCEPH_LAB_HOSTS: want 1..16" >&2; exit 2 ;; esac
  HOSTS="ceph1 $(seq -f 'gpu%g' -s ' ' 1 "$KVCEPH_LAB_HOSTS")"
fi
CG=/sys/fs/cgroup
S3_WAIT=${KVCEPH_LAB_S3_WAIT:-240}
# Which Ceph ceph1 runs: "cephadm" (Ceph 20.2.4 managed by cephadm, in containers inside ceph1)
# or "pacific" (Debian's 16.2 daemons started by kvlab-ceph.service, no orchestrator). `up`
# records it in $LAB/ceph-mode (removed by `down`): later commands, group_data/lab.py and the
# tests follow the running lab when KVCEPH_LAB_CEPH is not set. `make lab` asks for cephadm.
CEPH_MODE=${KVCEPH_LAB_CEPH:-$(cat "$LAB/ceph-mode" 2>/dev/null || echo pacific)}
case $CEPH_MODE in pacific | cephadm) ;; *) echo "[lab] ERROR: KVCEPH_LAB_CEPH=$CEPH_MODE: want pacific or cephadm" >&2; exit 2 ;; esac
# The cephadm lab's second rgw host (.12): cephadm places RGW and the ingress (haproxy +
# keepalived, one VIP per host) there too, so a VIP's holder can be stopped and its VIP move
# (issue 39 item 4; tests/integration/test_15_rgw_ha.py). No OSD, mon or mgr on it.
[ "$CEPH_MODE" = cephadm ] && [ -z "${KVCEPH_LAB_HOSTS:-}" ] && HOSTS="ceph1 rgw2 gpu1 gpu2 gaudi1"
OSD_SIZE=${KVCEPH_LAB_OSD_SIZE:-20G}
SSH_WAIT=${KVCEPH_LAB_SSH_WAIT:-60}

ip_of() {
  case $1 in
  ceph1) echo $NET.11 ;; rgw2) echo $NET.12 ;; gaudi1) echo $NET.31 ;;
  gpu[1-9] | gpu1[0-6]) echo $NET.$((20 + ${1#gpu})) ;;  # gpu11 would be gaudi1's .31: never both
  *) echo "unknown lab host: $1 (hosts: $HOSTS)" >&2; return 1 ;;
  esac
}
mac_of() {  # fixed MAC per lab IP: ARP caches stay valid when a host is restarted or replaced
  printf '02:00:0a:d5:%02x:%02x' $((7 + INST)) "${1##*.}"
}
log() { echo "[lab] $*" >&2; }
die() { echo "[lab] ERROR: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

cg_dirs() {  # cgroup dirs a host's launcher is put in (pure v2 host, or hybrid v1+v2 host)
  if [ -f $CG/cgroup.controllers ]; then echo $CG/kvlab$SFX/$1
  else echo $CG/unified/kvlab$SFX/$1 $CG/systemd/kvlab$SFX/$1; fi
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

ensure_host_packages() {
  local missing=""
  command -v systemd-nspawn >/dev/null || missing+=" systemd-container"
  command -v mmdebstrap >/dev/null || missing+=" mmdebstrap"
  command -v ip >/dev/null || missing+=" iproute2"
  command -v ssh-keygen >/dev/null || missing+=" openssh-client"
  command -v curl >/dev/null || missing+=" curl"
  [ -z "$missing" ] && return 0
  log "apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $missing >/dev/null 2>&1 ||
    { apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null &&
      apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $missing >/dev/null; }
}

# ---------------------------------------------------------------- keys
ensure_client_key() {
  mkdir -p "$LAB"; chmod 700 "$LAB"
  [ -f "$LAB/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C kvceph-lab -f "$LAB/id_ed25519"
}
known_names() {  # HOSTS plus every host that has a key or a disk (gpuN of a bench lab too)
  { echo $HOSTS | tr ' ' '\n'; ls "$LAB/hostkeys" "$LAB/hosts" 2>/dev/null | grep -v -e : -e '^$' || true; } |
    awk '!seen[$0]++' | while read -r h; do if ip_of "$h" >/dev/null 2>&1; then echo "$h"; fi; done
}
new_host_key() {  # new_host_key HOST: (re)generate HOST's ssh host key on the controller
  local d=$LAB/hostkeys/$1
  rm -rf "$d"; mkdir -p "$d"
  ssh-keygen -q -t ed25519 -N '' -C "root@$1" -f "$d/ssh_host_ed25519_key"
}
ensure_host_key() { [ -f "$LAB/hostkeys/$1/ssh_host_ed25519_key" ] || new_host_key "$1"; }
write_known_hosts() {  # one line for the IP and one for the name of every host with a key
  local h tmp=$LAB/known_hosts.tmp key
  : >"$tmp"
  for h in $(known_names); do
    [ -f "$LAB/hostkeys/$h/ssh_host_ed25519_key.pub" ] || continue
    key=$(cut -d' ' -f1,2 "$LAB/hostkeys/$h/ssh_host_ed25519_key.pub")
    printf '%s %s\n%s %s\n' "$(ip_of "$h")" "$key" "$h" "$key" >>"$tmp"
  done
  mv "$tmp" "$LAB/known_hosts"
}

# ---------------------------------------------------------------- TLS
# The lab CA and RGW's certificate (lab/tls/make-cert.sh; kept, remade when the names change):
# the wildcard for virtual-hosted buckets, ceph1's address (verify.py, path-style) and 127.0.0.1
# (the S3 admin writes on ceph1), and the cephadm lab's ingress virtual IPs .100 and .101.
# group_data/lab.py points kvceph_s3_ca_bundle at ca.pem.
ensure_tls() {
  "$HERE/tls/make-cert.sh" "$LAB/tls" s3 DNS:s3.kvlab 'DNS:*.s3.kvlab' "IP:$NET.11" IP:127.0.0.1 \
    "IP:$NET.100" "IP:$NET.101"
}

# ---------------------------------------------------------------- network
ensure_net() {
  [ -e /run/netns/$NS ] || ip netns add $NS
  ip -n $NS link set lo up
  ip -n $NS link show $BR >/dev/null 2>&1 || ip -n $NS link add $BR type bridge
  ip -n $NS link set $BR up
  if ! ip link show $RIF >/dev/null 2>&1; then
    ip -n $NS link del $RIF_PEER 2>/dev/null || true
    ip link add $RIF address "$(mac_of $NET.1)" type veth peer name $RIF_PEER netns $NS
  fi
  ip -n $NS link set $RIF_PEER master $BR up
  case " $(ip -br -4 addr show dev $RIF) " in *" $NET.1/24 "*) ;; *) ip addr add $NET.1/24 dev $RIF ;; esac
  ip link set $RIF up
}
teardown_net() {
  ip link del $RIF 2>/dev/null || true
  ip netns del $NS 2>/dev/null || true
}

# ---------------------------------------------------------------- hosts
pid_of() {  # pid of HOST's nspawn launcher if it is running
  local f=$LAB/hosts/$1/pid p
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = systemd-nspawn ] || return 1
  echo "$p"
}
running() { pid_of "$1" >/dev/null; }

# kvceph's login on every host (inventories/lab.py), as on a fleet that forbids root SSH: a
# user with the lab's key and passwordless sudo. Root keeps the key for the tests' own looks.
LOGIN_USER=kvdeploy
login_user() {  # login_user MERGED: the user, its key and its sudoers line (idempotent)
  local M=$1 uid gid
  grep -q "^$LOGIN_USER:" "$M/etc/passwd" || useradd --root "$M" -m -U -s /bin/bash "$LOGIN_USER"
  uid=$(awk -F: -v u=$LOGIN_USER '$1 == u {print $3}' "$M/etc/passwd")
  gid=$(awk -F: -v u=$LOGIN_USER '$1 == u {print $4}' "$M/etc/passwd")
  install -d -m700 -o "$uid" -g "$gid" "$M/home/$LOGIN_USER/.ssh"
  install -m600 -o "$uid" -g "$gid" "$LAB/id_ed25519.pub" "$M/home/$LOGIN_USER/.ssh/authorized_keys"
  printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\n' "$LOGIN_USER" >"$M/etc/sudoers.d/kvlab-login"
  chmod 440 "$M/etc/sudoers.d/kvlab-login"
}

inject() {  # inject HOST MERGED: per-host files written into the overlay before boot
  local h=$1 M=$2 o
  echo "$h" >"$M/etc/hostname"
  {
    printf '127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n' "$h"
    for o in $HOSTS; do printf '%s %s\n' "$(ip_of "$o")" "$o"; done
  } >"$M/etc/hosts.kvlab"
  # keep lines other code (the deploy) added to /etc/hosts on a restarted host
  [ -f "$M/etc/hosts" ] && grep -v -e '^127\.' -e '^::1[[:space:]]' -e "^$NET\.[0-9]* [a-z0-9]*$" "$M/etc/hosts" \
    >>"$M/etc/hosts.kvlab" || true
  mv "$M/etc/hosts.kvlab" "$M/etc/hosts"
  install -m600 "$LAB/hostkeys/$h/ssh_host_ed25519_key" "$M/etc/ssh/ssh_host_ed25519_key"
  install -m644 "$LAB/hostkeys/$h/ssh_host_ed25519_key.pub" "$M/etc/ssh/ssh_host_ed25519_key.pub"
  install -d -m700 "$M/root/.ssh"
  # the lab's key, plus keys others added (cephadm's own key on ceph1) on a restarted host
  { cat "$LAB/id_ed25519.pub"; grep -v ' kvceph-lab$' "$M/root/.ssh/authorized_keys" 2>/dev/null || true; } \
    >"$M/root/.ssh/authorized_keys.kvlab"
  chmod 600 "$M/root/.ssh/authorized_keys.kvlab"; mv "$M/root/.ssh/authorized_keys.kvlab" "$M/root/.ssh/authorized_keys"
  login_user "$M"
  for o in e2scrub_reap.service smartmontools.service rbdmap.service lvm2-monitor.service \
           lvm2-lvmpolld.socket dm-event.socket blk-availability.service radosgw.service \
           nvmf-autoconnect.service ceph.service; do
    ln -sfn /dev/null "$M/etc/systemd/system/$o"   # memory/CPU only, nothing to do in a lab host
  done
  # haproxy's certificate + key, root-only (haproxy reads it before dropping privileges)
  [ "$h" = ceph1 ] && install -D -m600 "$LAB/tls/s3.pem" "$M/etc/haproxy/kvlab-s3.pem"
  # the cephadm lab's CLI wrappers (lab/cephadm/cli), over the image's older copies: outside the
  # image's stamp, so changing them rebuilds no shared image
  [ "$h" = ceph1 ] && [ "$CEPH_MODE" = cephadm ] &&
    install -m755 "$HERE/cephadm/cli/ceph" "$HERE/cephadm/cli/radosgw-admin" "$M/usr/local/bin/"
  # Ceph files only on a blank disk: after stop/start, keep what the deploy may have changed
  if [ "$h" = ceph1 ] && [ "$CEPH_MODE" = pacific ] && [ ! -f "$M/etc/kvlab-ceph.injected" ]; then
    touch "$M/etc/kvlab-ceph.injected"
    install -m755 "$HERE/ceph/kvlab-ceph-start" "$HERE/ceph/kvlab-ceph-stop" "$M/usr/local/sbin/"
    install -m644 "$HERE/ceph/kvlab-ceph.service" "$HERE/ceph/kvlab-rgw@.service" "$M/etc/systemd/system/"
    install -m644 "$HERE/ceph/haproxy.cfg" "$M/etc/haproxy/haproxy.cfg"
    mkdir -p "$M/etc/systemd/system/multi-user.target.wants"
    ln -sfn ../kvlab-ceph.service "$M/etc/systemd/system/multi-user.target.wants/kvlab-ceph.service"
    for o in gw1 gw2; do
      ln -sfn ../kvlab-rgw@.service "$M/etc/systemd/system/multi-user.target.wants/kvlab-rgw@$o.service"
    done
    ln -sfn /lib/systemd/system/haproxy.service "$M/etc/systemd/system/multi-user.target.wants/haproxy.service"
  fi
}

start_host() {  # start_host HOST: boot HOST (no-op when it runs); keeps its overlay upper dir
  local h=$1 R=$LAB/hosts/$1 M=$LAB/hosts/$1/merged lower=$IMG/base join="" d ip
  ip=$(ip_of "$h")
  if running "$h"; then log "$h already running (pid $(pid_of "$h"))"; return 0; fi
  cleanup_host "$h"   # leftovers of a crashed launcher
  local extra=""
  if cephadm_host "$h"; then
    lower=$IMG/cephadm:$IMG/base
  elif [ "$h" = ceph1 ]; then
    lower=$IMG/ceph:$IMG/base
  fi
  mkdir -p "$R/upper" "$R/work" "$M"
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$R/upper,workdir=$R/work" "$M"
  ensure_host_key "$h"
  inject "$h" "$M"
  if cephadm_host "$h"; then extra=$(cephadm_host_args "$h" "$R"); fi
  ip netns add "$NS-$h"
  ip -n "$NS-$h" link set lo up
  # what cephadm's ingress asks for (it cannot write /proc/sys inside ceph1): this namespace only
  [ -z "$extra" ] || ip netns exec "$NS-$h" sysctl -q -w net.ipv4.ip_forward=1 net.ipv4.ip_nonlocal_bind=1
  ip -n $NS link add "kv-$h" type veth peer name eth0 address "$(mac_of "$ip")" netns "$NS-$h"
  ip -n $NS link set "kv-$h" master $BR up
  ip -n "$NS-$h" addr add "$ip/24" dev eth0
  ip -n "$NS-$h" link set eth0 up
  for d in $(cg_dirs "$h"); do mkdir -p "$d"; join+="echo \$\$ > $d/cgroup.procs; "; done
  # fd 9 (our lock) must not leak into the long-running launcher
  setsid bash -c "$join exec systemd-nspawn -q -b -D $M -M $h --register=no --keep-unit \
    --network-namespace-path=/run/netns/$NS-$h --resolv-conf=off --timezone=off --link-journal=no $extra" \
    >"$R/console.log" 2>&1 </dev/null 9>&- &
  local p=$! t
  echo $p >"$R/pid"
  for t in $(seq 1 50); do   # until setsid/bash have exec'd the launcher
    [ "$(cat /proc/$p/comm 2>/dev/null)" = systemd-nspawn ] && break
    kill -0 $p 2>/dev/null || break
    sleep 0.05
  done
  log "$h booting (pid $p, $ip)"
}

cephadm_host() { [ "$CEPH_MODE" = cephadm ] && case $1 in ceph1 | rgw2) true ;; *) false ;; esac; }
# ceph1 and rgw2 of the cephadm lab: podman storage on a plain directory (overlay on overlay does
# not work), the images built on the controller; ceph1 also one OSD disk: a sparse file on a
# loop device.
cephadm_host_args() {  # cephadm_host_args HOST HOSTDIR: extra systemd-nspawn arguments
  local h=$1 R=$2 loop
  mkdir -p "$R/containers"
  if [ "$h" != ceph1 ]; then
    echo "--bind=$R/containers:/var/lib/containers --bind-ro=$LAB/cephadm-images:/var/lib/kvlab-images --capability=all"
    return
  fi
  [ -f "$R/osd0.img" ] || truncate -s "$OSD_SIZE" "$R/osd0.img"
  loop=$(losetup -j "$R/osd0.img" | cut -d: -f1 | head -1)
  [ -n "$loop" ] || loop=$(losetup -f --show "$R/osd0.img")
  echo "$loop" >"$R/loopdev"
  echo "$loop" >"$R/merged/etc/kvlab/osd-device"
  echo "--bind=$R/containers:/var/lib/containers --bind-ro=$LAB/cephadm-images:/var/lib/kvlab-images" \
    "--bind=$loop --capability=all"
}
release_loop() {  # detach ceph1's OSD loop device (its file stays with the host's disk)
  local f=$LAB/hosts/$1/loopdev l
  [ -f "$f" ] || return 0
  l=$(cat "$f")
  losetup "$l" 2>/dev/null | grep -q "$LAB/hosts/$1/osd0.img" && losetup -d "$l"
  rm -f "$f"
}

cleanup_host() {  # unmount, delete netns and cgroup dirs of a host whose launcher is gone
  local h=$1 M=$LAB/hosts/$1/merged d
  if mountpoint -q "$M" 2>/dev/null; then umount "$M" 2>/dev/null || umount -l "$M"; fi
  ip netns del "$NS-$h" 2>/dev/null || true
  ip -n $NS link del "kv-$h" 2>/dev/null || true
  for d in $(cg_dirs "$h"); do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
  rm -f "$LAB/hosts/$h/pid"
  release_loop "$h"
}

cg_pids() {  # every process of HOST (launcher + container), from its cgroup tree
  local d; d=$(cg_dirs "$1" | cut -d' ' -f1)
  [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}
kill_cgroup() {  # kill_cgroup HOST: SIGKILL every process of HOST (power cut), wait until gone
  local p t
  for t in $(seq 1 50); do
    p=$(cg_pids "$1")
    [ -z "$p" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $p 2>/dev/null || true
    sleep 0.1
  done
  log "$1: processes left in its cgroup: $(cg_pids "$1" | tr '\n' ' ')"
}

stop_hosts() {  # stop_hosts HOST...: SIGTERM the nspawn launchers (= clean halt), wait, clean up
  # STOP_SIGNAL=KILL: power cut. SIGKILL to the launcher alone would orphan the container (its
  # init survives, reparented to PID 1), so every process in the host's cgroup gets SIGKILL.
  local h p t sig=${STOP_SIGNAL:-TERM}
  declare -A pids=()
  for h in "$@"; do
    p=$(pid_of "$h") || continue
    pids[$h]=$p
    if [ "$sig" = KILL ]; then kill_cgroup "$h"; else kill -TERM "$p" 2>/dev/null || true; fi
  done
  for h in "$@"; do
    p=${pids[$h]:-}
    if [ -n "$p" ]; then
      for t in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && log "$h: no clean halt in 30 s, SIGKILL"
      log "$h stopped ($sig)"
    fi
    kill_cgroup "$h"   # normally nothing is left; never leave a container behind
    cleanup_host "$h"
  done
}

ssh_answers() { [ "$(timeout 1 bash -c "exec 3<>/dev/tcp/$1/22; head -c4 <&3" 2>/dev/null)" = SSH- ]; }
wait_ssh() {  # wait_ssh HOST...
  local h end=$(($(date +%s) + SSH_WAIT))
  for h in "$@"; do
    until ssh_answers "$(ip_of "$h")"; do
      running "$h" || die "$h: launcher exited; see $LAB/hosts/$h/console.log"
      [ "$(date +%s)" -lt $end ] || die "$h: sshd not answering after ${SSH_WAIT}s; see $LAB/hosts/$h/console.log"
      sleep 0.1
    done
  done
}
S3_URL=http://$NET.11:80
# The cephadm lab: the ingress VIP, once deploy.py applied RGW + ingress, in the lab's scheme.
if [ "$CEPH_MODE" = cephadm ]; then
  S3_URL=https://$NET.100:443
  [ "${KVCEPH_LAB_S3_SCHEME:-https}" = http ] && S3_URL=http://$NET.100:80
fi
s3_answers() { case $(curl -s -m 3 --cacert "$LAB/tls/ca.pem" "$S3_URL/" 2>/dev/null) in *ListAllMyBucketsResult*) ;; *) return 1 ;; esac; }
wait_s3() {
  local end=$(($(date +%s) + S3_WAIT)) n=0
  until s3_answers; do
    running ceph1 || die "ceph1 is not running"
    n=$((n + 1))
    if [ $((n % 10)) = 0 ] && lab_ssh ceph1 systemctl is-failed -q kvlab-ceph 2>/dev/null; then end=0; fi
    [ "$(date +%s)" -lt $end ] || {
      lab_ssh ceph1 'systemctl --no-pager status kvlab-ceph kvlab-rgw@gw1 haproxy | tail -40' >&2 || true
      die "S3 on http://$NET.11:80/ not answering (kvlab-ceph failed or ${S3_WAIT}s passed; ceph logs: /var/lib/kvlab-ceph/log in ceph1)"
    }
    sleep 0.3
  done
}

lab_ssh() {  # lab_ssh HOST [CMD...]
  local h=$1; shift
  ssh -i "$LAB/id_ed25519" -o UserKnownHostsFile="$LAB/known_hosts" -o StrictHostKeyChecking=yes \
    -o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR "root@$(ip_of "$h")" "$@"
}

lock() { mkdir -p "$LAB"; exec 9>"$LAB/.lock"; flock 9; }

# A lab instance belongs to one run at a time (lab/claim.py): a command that changes the lab
# runs inside the claim of the run that started it (KVCEPH_LAB_CLAIM, e.g. `make test`'s),
# else it claims the instance for itself; a busy instance stops it at once in one line.
claimed() { [ -n "${KVCEPH_LAB_CLAIM:-}" ] && grep -qxF "token=$KVCEPH_LAB_CLAIM" "$LAB/claim" 2>/dev/null; }

build() {
  ensure_host_packages
  if [ "$CEPH_MODE" = cephadm ]; then "$HERE/image/build.sh" cephadm; else "$HERE/image/build.sh" all; fi
}

# The cephadm lab: the cluster exists before kvceph runs (bootstrap + one OSD, ~1-2 min); RGW
# does not: kvceph's RGW stage applies its spec.
wait_ceph() {
  if [ "$CEPH_MODE" = pacific ]; then wait_s3; return; fi
  local t0; t0=$(now)
  lab_ssh ceph1 /usr/local/sbin/kvlab-cephadm-bootstrap || die "cephadm bootstrap on ceph1 failed (log: /var/log/kvlab-bootstrap.log in ceph1)"
  # Ceph's default autoscaler (on), as an operator's cluster has it: the image's initial
  # config turns it off (its files are in the image's stamp, so it is undone here instead);
  # kvceph's pools carry their own mode (kvceph_ceph_autoscale_mode)
  lab_ssh ceph1 'ceph config rm global osd_pool_default_pg_autoscale_mode' ||
    die "ceph1: cannot restore the default pg autoscale mode"
  join_rgw2
  clear_strays
  log "cephadm cluster ready ($(elapsed "$t0") s)"
}

# cephadm checks for stray daemons once before it knows its own (bootstrap adds ceph1 to its
# inventory after the mgr started), then every stray_daemon_check_interval (1800 s): a fresh lab
# read HEALTH_WARN "2 stray daemon(s) not managed by cephadm" (its own mon and mgr) for half an
# hour. One check now: the interval at 1 s while the warning stands (the config change wakes
# cephadm's loop; cleared in ~2 s), then cephadm's default again. Outside the image's stamp.
clear_strays() {
  lab_ssh ceph1 'ceph config set mgr mgr/cephadm/stray_daemon_check_interval 1 &&
    for i in $(seq 1 60); do ceph health detail | grep -q CEPHADM_STRAY || break; sleep 1; done
    ceph config rm mgr mgr/cephadm/stray_daemon_check_interval
    if ceph health detail | grep -q CEPHADM_STRAY; then ceph health detail | grep "stray daemon" >&2; exit 1; fi' ||
    log "ceph1: cephadm still reports stray daemons after 60 s (above): not the bootstrap's"
}

# rgw2 joins ceph1's cluster as a second cephadm host (idempotent): its images imported,
# cephadm's SSH key in its root's authorized_keys (kept across a restart: inject), then `ceph
# orch host add`. mon, mgr, crash and ceph-exporter are unmanaged first: cephadm would otherwise
# place a second mon there (two mons: stopping rgw2 would cost the quorum) and a mgr.
join_rgw2() {
  running rgw2 || return 0
  lab_ssh ceph1 'ceph orch host ls' | awk '$1 == "rgw2" {f = 1} END {exit !f}' && return 0
  local t0; t0=$(now)
  lab_ssh rgw2 'systemctl is-active -q kvlab-images || systemctl start kvlab-images' ||
    die "rgw2: importing the cephadm images failed (journalctl -u kvlab-images in rgw2)"
  lab_ssh ceph1 'ceph cephadm get-pub-key' | lab_ssh rgw2 'cat >>/root/.ssh/authorized_keys' ||
    die "rgw2: cannot install cephadm's SSH key"
  lab_ssh ceph1 "for s in mon mgr crash ceph-exporter; do ceph orch set-unmanaged \$s >/dev/null 2>&1 || true; done
    ceph orch host add rgw2 $(ip_of rgw2)" >/dev/null || die "ceph1: \`ceph orch host add rgw2\` failed"
  log "rgw2 joined the cluster ($(elapsed "$t0") s)"
}

# ---------------------------------------------------------------- commands
cmd_up() {
  local t0 h
  t0=$(now)
  build
  ensure_client_key
  ensure_tls
  for h in $HOSTS; do ensure_host_key "$h"; done
  write_known_hosts
  ensure_net
  echo "$CEPH_MODE" >"$LAB/ceph-mode"
  for h in $HOSTS; do start_host "$h"; done
  wait_ssh $HOSTS
  log "sshd answers on all hosts ($(elapsed "$t0") s)"
  wait_ceph
  summary "$t0"
}

# The summary's RGW line (bounded: a stuck orchestrator must not hang `up`): `make lab` on a
# deployed lab runs `up` again, which must not say
# "no RGW yet".
rgw_state() {
  if lab_ssh ceph1 'timeout 30 ceph orch ls rgw' 2>/dev/null | grep -q '^rgw\.'; then
    echo "RGW + ingress applied by deploy.py (VIPs $NET.100, .101): \`${SFX:+KVCEPH_LAB_INSTANCE=$INST }make status\` shows them"
  else
    echo "no RGW yet: deploy.py applies the RGW spec + ingress (VIPs $NET.100, .101)"
  fi
}

summary() {
  if [ "$CEPH_MODE" = cephadm ]; then
    cat <<EOF
== kvceph lab (cephadm) is up in $(elapsed "$1") s  (state: $LAB)
   ceph1   $NET.11   Ceph 20.2.4 managed by cephadm (podman inside ceph1): mon, mgr x2, 1 OSD
                     $(rgw_state)
   rgw2    $NET.12   second cephadm host (podman): RGW + ingress only, MASTER of VIP .101
   gpu1    $NET.21
   gpu2    $NET.22
   gaudi1  $NET.31
   ssh:    ${SFX:+KVCEPH_LAB_INSTANCE=$INST }lab/lab.sh ssh ceph1 ceph orch ps
   stop:   ${SFX:+KVCEPH_LAB_INSTANCE=$INST }lab/lab.sh down
EOF
    return
  fi
  cat <<EOF
== kvceph lab is up in $(elapsed "$1") s  (state: $LAB)
   ceph1   $NET.11   Ceph Pacific: mon, mgr, 2 memstore OSDs, radosgw :7480/:7481, haproxy :80
   gpu1    $NET.21
   gpu2    $NET.22
   gaudi1  $NET.31
   S3:     https://$NET.11:443 (lab CA $LAB/tls/ca.pem) and http://$NET.11:80
           (rgw_dns_name s3.kvlab: Host: <bucket>.s3.kvlab)
   ssh:    ssh -i $LAB/id_ed25519 -o UserKnownHostsFile=$LAB/known_hosts root@$NET.11 ceph -s
           (or: ${SFX:+KVCEPH_LAB_INSTANCE=$INST }lab/lab.sh ssh ceph1 ceph -s)
   stop:   ${SFX:+KVCEPH_LAB_INSTANCE=$INST }lab/lab.sh down
EOF
}

cmd_down() {
  local h all
  all=$(known_names | tr '\n' ' ')
  # shellcheck disable=SC2086
  stop_hosts $all
  for h in $all; do cleanup_host "$h"; done
  rm -rf "$LAB/hosts" "$LAB/ceph-mode"  # next `up` boots fresh hosts (host keys are kept)
  teardown_net
  for d in $(cg_dirs x); do rmdir "$(dirname "$d")" 2>/dev/null || true; done
  local kept  # du exits 1 when one of them is missing: the total is still right
  kept=$(cd "$LAB" && { du -scLh image cephadm-images wheelhouse model tls hostkeys id_ed25519* secrets.env 2>/dev/null || true; } | tail -1 | cut -f1)
  log "lab is down; kept in $LAB ($kept): images, wheelhouse, SSH keys, TLS CA, secrets; 'make lab-purge' (lab.sh purge) removes them"
}

cmd_status() {
  local h p rc=0
  for h in $HOSTS; do
    if p=$(pid_of "$h"); then
      if ssh_answers "$(ip_of "$h")"; then echo "$h $(ip_of "$h") up (pid $p)"
      else echo "$h $(ip_of "$h") booting (pid $p, sshd not answering)"; rc=1; fi
    else echo "$h $(ip_of "$h") down"; rc=1; fi
  done
  if s3_answers; then echo "s3 $S3_URL up"; else echo "s3 $S3_URL down"; rc=1; fi
  return $rc
}

main() {
  local cmd=${1:-help}; shift || true
  case $cmd in
  up | down | purge | build | stop | kill | start | replace | blank)
    claimed || exec python3 "$HERE/claim.py" run "lab.sh $cmd${*:+ $*}" -- "$0" "$cmd" "$@" ;;
  esac
  case $cmd in
  up) need_root; lock; cmd_up ;;
  down) need_root; lock; cmd_down ;;
  purge)
    need_root; lock; cmd_down
    case $LAB in /|/var|/var/lib|/root|/tmp|"") die "refusing to delete $LAB" ;; esac
    exec 9>&-; rm -rf "$LAB"; log "purged $LAB" ;;
  status) cmd_status ;;
  build) need_root; lock; build ;;
  stop)
    [ $# -ge 1 ] || die "usage: lab.sh stop HOST..."
    need_root; lock; for h in "$@"; do ip_of "$h" >/dev/null; done; stop_hosts "$@" ;;
  kill)   # power cut: SIGKILL the launcher (kernel kills every process of the host at once)
    [ $# -ge 1 ] || die "usage: lab.sh kill HOST..."
    need_root; lock; for h in "$@"; do ip_of "$h" >/dev/null; done; STOP_SIGNAL=KILL stop_hosts "$@" ;;
  start)
    [ $# -ge 1 ] || die "usage: lab.sh start HOST..."
    need_root; lock; ensure_client_key; ensure_tls; ensure_net
    for h in "$@"; do start_host "$h"; done
    wait_ssh "$@"
    for h in "$@"; do [ "$h" = ceph1 ] && wait_ceph; done
    log "started: $*" ;;
  replace)
    [ $# -eq 1 ] || die "usage: lab.sh replace HOST"
    need_root; lock; local h=$1 t0; t0=$(now); ip_of "$h" >/dev/null
    ensure_client_key; ensure_tls; ensure_net
    stop_hosts "$h"
    rm -rf "$LAB/hosts/$h"           # blank disk
    new_host_key "$h"; write_known_hosts
    start_host "$h"; wait_ssh "$h"
    [ "$h" = ceph1 ] && wait_ceph
    log "$h replaced: blank disk, new host key (known_hosts updated) in $(elapsed "$t0") s" ;;
  blank)   # blank disks for several hosts at once (host keys kept): a fleet of new nodes
    [ $# -ge 1 ] || die "usage: lab.sh blank HOST..."
    need_root; lock; for h in "$@"; do [ "$h" != ceph1 ] || die "blank: not ceph1"; ip_of "$h" >/dev/null; done
    ensure_client_key; ensure_net
    stop_hosts "$@"
    for h in "$@"; do rm -rf "${LAB:?}/hosts/$h"; start_host "$h"; done
    wait_ssh "$@"
    log "blank: $*" ;;
  ssh) [ $# -ge 1 ] || die "usage: lab.sh ssh HOST [CMD...]"; lab_ssh "$@" ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; [ "$cmd" = help ] || exit 2 ;;
  esac
}
main "$@"
