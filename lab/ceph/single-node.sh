#!/usr/bin/env bash
# lab/ceph/single-node.sh DATA_DIR -- a throwaway single-node Ceph Pacific cluster on the
# CONTROLLER (this machine), for the @local integration tests (tests/integration/
# test_ceph_local.py, test_s3_local.py; started by conftest.py's local_ceph fixture).
# It is not the lab's ceph1 (lab/lab.sh runs that inside an nspawn host); the two never share
# ports, data or processes. Needs the Debian ceph packages (`make deps`).
# 1 mon + 1 mgr + N osd + 1 radosgw, all on 127.0.0.1, no systemd, no containers.
# Env: NUM_OSDS=2  OSD_STORE=memstore|bluestore  OSD_SIZE_GB=4  MON_PORT=3300
#      RGW_PORT=7480  S3_ACCESS_KEY=testaccess  S3_SECRET_KEY=testsecret  HEALTH_TIMEOUT=90
set -euo pipefail
DATA=$(realpath -m "${1:?usage: $0 DATA_DIR}")
NUM_OSDS=${NUM_OSDS:-2}; OSD_STORE=${OSD_STORE:-memstore}; OSD_SIZE_GB=${OSD_SIZE_GB:-4}
MON_PORT=${MON_PORT:-3300}; RGW_PORT=${RGW_PORT:-7480}
AK=${S3_ACCESS_KEY:-testaccess}; SK=${S3_SECRET_KEY:-testsecret}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lab/ceph/conf.sh
. "$HERE/conf.sh"
export CEPH_CONF=$DATA/ceph.conf
T0=$(date +%s.%N)
say() { awk -v t0="$T0" -v t="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[%6.1fs] %s\n", t-t0, m}'; }
alive() { [ -f "$DATA/run/$1.pid" ] && kill -0 "$(cat "$DATA/run/$1.pid")" 2>/dev/null; }
run() { # run NAME CMD... : foreground daemon, detached (own session), pid file
  local n=$1; shift
  setsid "$@" -f </dev/null >>"$DATA/log/$n.stdout" 2>&1 &
  echo $! >"$DATA/run/$n.pid"
}
waitfor() { # waitfor SECONDS DESCRIPTION CMD...
  local end=$(( $(date +%s) + $1 )) d=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || { echo "timeout waiting for $d; logs in $DATA/log" >&2; return 1; }
    sleep 0.5
  done
}
info() {
  cat <<EOF
== ceph is up ($(ceph health 2>&1 | head -1))
export CEPH_CONF=$CEPH_CONF        # then: ceph -s, radosgw-admin ..., rados lspools
S3 endpoint:  http://127.0.0.1:$RGW_PORT
access key:   $AK
secret key:   $SK
stop:         $HERE/single-node-stop.sh $DATA     (add --purge to delete the data dir)
EOF
}

if alive mon.a; then echo "already running"; info; exit 0; fi
if [ -e "$DATA" ] && [ -n "$(ls -A "$DATA")" ]; then
  [ -f "$DATA/.ceph-lab" ] || { echo "$DATA is not empty and not ours; refusing" >&2; exit 1; }
  "$HERE/single-node-stop.sh" "$DATA" >/dev/null; rm -rf "$DATA"     # fresh cluster every time
fi
for p in "$MON_PORT" "$RGW_PORT"; do   # fail fast if another cluster holds our ports
  ! ss -Hltn "sport = :$p" | grep -q . || { echo "port $p already in use" >&2; exit 1; }
done
mkdir -p "$DATA"/{keys,log,run,mon/a,mgr/x,rgw}; touch "$DATA/.ceph-lab"
FSID=$(uuidgen)
{ ceph_conf_global "$FSID" "$MON_PORT" "$DATA" "$DATA"; cat <<EOF
mgr_data = $DATA/mgr/\$id
osd_objectstore = $OSD_STORE
memstore_device_bytes = $((OSD_SIZE_GB << 30))
bluestore_block_size = $((OSD_SIZE_GB << 30))
bluestore_block_create = true
osd_memory_target = 1073741824
osd_crush_chooseleaf_type = 0
mgr_initial_modules = iostat
paxos_propose_interval = 0.1
# The CLI gets no admin socket, as in Ceph's defaults: with one fixed socket path for
# client.admin, concurrent ceph clients fight over it ("bind_and_listen ... File exists").
[client.admin]
admin_socket =
[client.rgw.gw]
rgw_data = $DATA/rgw
rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT
EOF
} >"$CEPH_CONF"

# --- mon
ceph-authtool --create-keyring "$DATA/keys/client.admin.keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
ceph-authtool --create-keyring "$DATA/keys/mon.a.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$DATA/keys/mon.a.keyring" --import-keyring "$DATA/keys/client.admin.keyring" >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$DATA/monmap" >/dev/null
ceph-mon --mkfs -i a --monmap "$DATA/monmap" --keyring "$DATA/keys/mon.a.keyring"
run mon.a ceph-mon -i a
waitfor 30 "mon quorum" ceph --connect-timeout 3 mon stat
say "mon up"
# test-friendly defaults in the mon config db (tests may override with `ceph config set`)
ceph config assimilate-conf -i - >/dev/null <<EOF
[global]
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_max_pg_per_osd = 5000
mon_osd_max_initial_pgs = 4096
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
auth_allow_insecure_global_id_reclaim = false
EOF

# --- mgr
ceph auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
  -o "$DATA/keys/mgr.x.keyring"
run mgr.x ceph-mgr -i x

# --- osds
for i in $(seq 0 $((NUM_OSDS - 1))); do
  uuid=$(uuidgen); key=$(ceph-authtool --gen-print-key)
  id=$(echo "{\"cephx_secret\": \"$key\"}" | ceph osd new "$uuid" -i -)
  mkdir -p "$DATA/osd/$id"
  printf '[osd.%s]\n\tkey = %s\n' "$id" "$key" >"$DATA/keys/osd.$id.keyring"
  ceph-osd -i "$id" --mkfs --osd-uuid "$uuid" >>"$DATA/log/osd.$id.stdout" 2>&1
  run "osd.$id" ceph-osd -i "$id"
done
waitfor 60 "$NUM_OSDS osd(s) up" bash -c \
  "ceph osd stat -f json | grep -q '\"num_up_osds\":$NUM_OSDS,'"
say "$NUM_OSDS osd(s) up ($OSD_STORE)"

# --- radosgw + S3 user
ceph auth get-or-create client.rgw.gw mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
  -o "$DATA/keys/client.rgw.gw.keyring"
run rgw.gw radosgw -n client.rgw.gw
waitfor 60 "radosgw on :$RGW_PORT" curl -sf "http://127.0.0.1:$RGW_PORT/"
radosgw-admin user create --uid=test --display-name=test \
  --access-key="$AK" --secret-key="$SK" >/dev/null
say "radosgw up"
if waitfor "${HEALTH_TIMEOUT:-90}" HEALTH_OK bash -c 'ceph health | grep -q HEALTH_OK'; then
  say "HEALTH_OK"
else ceph health detail; fi
info
