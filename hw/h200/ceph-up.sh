#!/bin/bash
# Single-node Ceph 16.2.15 for the H200 proof, from the minimal tarball (prepare.sh) under
# $CEPH_PREFIX: 1 mon, NUM_OSDS OSDs (bluestore on files under $OSD_DIR, or memstore), RGW_COUNT
# radosgw (beast, 127.0.0.1:7481..) and haproxy on 127.0.0.1:$S3_PORT in front of them (HTTP mode,
# Host header untouched, like the lab's concentrator). No mgr and no Python `ceph` CLI: mon commands
# go through librados' C API (cephcmd.py). Then the RGW user with the rendered keys, and the bucket.
# Env: CEPH_PREFIX CEPH_DATA OSD_DIR OSD_STORE=bluestore|memstore NUM_OSDS OSD_GB (each) RGW_COUNT
#      MON_PORT S3_PORT RGW_BASE_PORT DNS_NAME PY CREDS (rendered credentials file) BUCKET
set -u
P=${CEPH_PREFIX:-/opt/ceph}; D=${CEPH_DATA:-/tmp/ceph}; OSD_DIR=${OSD_DIR:-$D}
OSD_STORE=${OSD_STORE:-bluestore}; NUM_OSDS=${NUM_OSDS:-2}; OSD_GB=${OSD_GB:-24}
RGW_COUNT=${RGW_COUNT:-4}; MON_PORT=${MON_PORT:-3300}; S3_PORT=${S3_PORT:-7480}
RGW_BASE_PORT=${RGW_BASE_PORT:-7481}; DNS_NAME=${DNS_NAME:-s3.lab}; BUCKET=${BUCKET:-lmcache}
PY=${PY:-python3}; CREDS=${CREDS:?CREDS=rendered credentials file}
HERE=$(cd "$(dirname "$0")" && pwd)
# the ceph.conf lines shared with the lab's single-node cluster (ship.sh packs the file)
# shellcheck source=lab/ceph/conf.sh
. "$HERE/../../lab/ceph/conf.sh"
L=$P/usr/lib/x86_64-linux-gnu; B=$P/usr/bin
export CEPH_CONF=$D/ceph.conf
CL="$L:$L/ceph:$P/lib"
T0=$(date +%s.%N)
say() { awk -v t0="$T0" -v t="$(date +%s.%N)" -v m="$*" 'BEGIN{printf "[ceph %6.1fs] %s\n", t-t0, m}'; }
cx() { env LD_LIBRARY_PATH=$CL "$@"; }
cc() { timeout 40 env LD_LIBRARY_PATH=$CL $PY "$HERE/cephcmd.py" "$CEPH_CONF" "$@"; }
run() { local n=$1; shift; setsid env LD_LIBRARY_PATH=$CL "$@" </dev/null >>"$D/log/$n.stdout" 2>&1 & echo $! >"$D/run/$n.pid"; }
fail() { echo "CEPH FAIL: $*"; for f in "$D"/log/*; do echo "--- $f"; tail -n 15 "$f"; done; exit 1; }
waitfor() { local end=$(( $(date +%s) + $1 )) d=$2; shift 2
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt "$end" ] || { echo "timeout waiting for $d"; return 1; }; sleep 0.5; done; }
AK=$(awk -F' *= *' '$1=="aws_access_key_id"{print $2}' "$CREDS"); SK=$(awk -F' *= *' '$1=="aws_secret_access_key"{print $2}' "$CREDS")
[ -n "$AK" ] && [ -n "$SK" ] || fail "no keys in $CREDS"

for f in "$D"/run/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; sleep 0.5
rm -rf "$D" "$OSD_DIR"/osd; mkdir -p "$D"/{keys,log,run,mon/a,crash} "$OSD_DIR/osd"
FSID=$(cat /proc/sys/kernel/random/uuid)
{
ceph_conf_global "$FSID" "$MON_PORT" "$D" "$OSD_DIR"
cat <<EOC
plugin_dir = $L/ceph
erasure_code_dir = $L/ceph/erasure-code
osd_class_dir = $L/rados-classes
osd_objectstore = $OSD_STORE
memstore_device_bytes = $((OSD_GB << 30))
bluestore_block_create = true
bluestore_block_size = $((OSD_GB << 30))
# the engine pins tens of GB on the same box: keep each OSD's cache small
osd_memory_target = 1610612736
osd_crush_chooseleaf_type = 0
paxos_propose_interval = 0.1
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 32
osd_pool_default_pgp_num = 32
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_max_pg_per_osd = 5000
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
EOC
for i in $(seq 1 "$RGW_COUNT"); do
cat <<EOC
[client.rgw.gw$i]
rgw_data = $D/rgw$i
rgw_frontends = beast endpoint=127.0.0.1:$((RGW_BASE_PORT + i - 1))
rgw_dns_name = $DNS_NAME
rgw_thread_pool_size = 128
# deleted objects' data is freed by RGW's garbage collector: at once here, so emptying the bucket
# between measurements frees the OSDs' space
rgw_gc_obj_min_wait = 1
rgw_gc_processor_period = 5
EOC
done
} >"$CEPH_CONF"
cx $B/ceph-authtool --create-keyring "$D/keys/client.admin.keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null || fail authtool
cx $B/ceph-authtool --create-keyring "$D/keys/mon.a.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
cx $B/ceph-authtool "$D/keys/mon.a.keyring" --import-keyring "$D/keys/client.admin.keyring" >/dev/null
cx $B/monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$D/monmap" >/dev/null || fail monmaptool
cx $B/ceph-mon --mkfs -i a --monmap "$D/monmap" --keyring "$D/keys/mon.a.keyring" >>"$D/log/mon.mkfs" 2>&1 || fail "mon mkfs"
run mon.a $B/ceph-mon -i a -f
waitfor 40 "mon" cc '{"prefix":"mon stat"}' || fail "mon not answering"
say "mon up"
mkosd() { local uuid key id
  uuid=$(cat /proc/sys/kernel/random/uuid); key=$(cx $B/ceph-authtool --gen-print-key)
  id=$(echo "{\"cephx_secret\": \"$key\"}" | cc "{\"prefix\":\"osd new\",\"uuid\":\"$uuid\",\"format\":\"json\"}" - | grep -o '[0-9]\+' | head -1)
  [ -n "$id" ] || return 1
  mkdir -p "$OSD_DIR/osd/$id"; printf '[osd.%s]\n\tkey = %s\n' "$id" "$key" >"$D/keys/osd.$id.keyring"
  cx $B/ceph-osd -i "$id" --mkfs --osd-uuid "$uuid" >>"$D/log/osd.$id.mkfs" 2>&1 || { tail -5 "$D/log/osd.$id.mkfs"; return 1; }
  run "osd.$id" $B/ceph-osd -i "$id" -f
}
pids=""; for i in $(seq 1 "$NUM_OSDS"); do mkosd & pids="$pids $!"; done
for p in $pids; do wait "$p" || fail "osd mkfs ($OSD_STORE)"; done
osdsup() { cc '{"prefix":"osd stat","format":"json"}' 2>/dev/null | grep -q "\"num_up_osds\":$NUM_OSDS,"; }
waitfor 90 "$NUM_OSDS osds up" osdsup || fail "osds ($OSD_STORE)"
say "$NUM_OSDS $OSD_STORE osds up"
for i in $(seq 1 "$RGW_COUNT"); do
  mkdir -p "$D/rgw$i"
  cc "{\"prefix\":\"auth get-or-create\",\"entity\":\"client.rgw.gw$i\",\"caps\":[\"mon\",\"allow rw\",\"osd\",\"allow rwx\",\"mgr\",\"allow rw\"]}" >"$D/keys/client.rgw.gw$i.keyring" || fail "rgw key"
  run "rgw.gw$i" $B/radosgw -n "client.rgw.gw$i" -f
  [ "$i" = 1 ] && { waitfor 90 "radosgw 1" curl -sf "http://127.0.0.1:$RGW_BASE_PORT/" || fail "radosgw"; }
done
for i in $(seq 2 "$RGW_COUNT"); do waitfor 60 "radosgw $i" curl -sf "http://127.0.0.1:$((RGW_BASE_PORT + i - 1))/" || fail "radosgw $i"; done
say "$RGW_COUNT radosgw up"
{
cat <<EOC
global
    maxconn 8192
    nbthread 8
    stats socket $D/run/haproxy.sock mode 600 level admin
defaults
    mode http
    option redispatch
    retries 2
    timeout connect 3s
    timeout client 5m
    timeout server 5m
    timeout http-request 30s
frontend s3
    bind 127.0.0.1:$S3_PORT
    default_backend rgw
backend rgw
    balance roundrobin
EOC
for i in $(seq 1 "$RGW_COUNT"); do echo "    server gw$i 127.0.0.1:$((RGW_BASE_PORT + i - 1))"; done
} >"$D/haproxy.cfg"
run haproxy $B/haproxy -W -db -f "$D/haproxy.cfg"
waitfor 20 "haproxy :$S3_PORT" curl -sf "http://127.0.0.1:$S3_PORT/" || fail "haproxy"
say "haproxy :$S3_PORT -> $RGW_COUNT radosgw"
cx $B/radosgw-admin -n client.rgw.gw1 user create --uid=lmcache --display-name=lmcache --access-key="$AK" --secret-key="$SK" >"$D/log/user.json" 2>&1 || fail "user create: $(tail -5 $D/log/user.json)"
# the bucket as the S3 tier stage makes it: deploys/remote/s3admin.py, keys from a private INI file
(umask 077; printf '[s3]\nendpoint = http://127.0.0.1:%s\nregion = default\naccess_key = %s\nsecret_key = %s\n' \
  "$S3_PORT" "$AK" "$SK" >"$D/keys/s3admin.ini")
$PY "$HERE/../../deploys/remote/s3admin.py" --config "$D/keys/s3admin.ini" create-bucket "$BUCKET" >"$D/log/bucket.log" 2>&1 ||
  fail "bucket: $(tail -1 "$D/log/bucket.log")"
say "user and bucket $BUCKET ok"
