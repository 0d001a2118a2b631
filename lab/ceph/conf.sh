# shellcheck shell=bash
# Sourced by lab/ceph/single-node.sh and hw/h200/ceph-up.sh (hw/h200/ship.sh packs this file
# with it): the ceph.conf lines every single-node cluster of this repository shares.

# ceph_conf_global FSID MON_PORT DATA OSD_PARENT: the [global] section's start for one mon on
# 127.0.0.1:MON_PORT with cephx; every daemon's keyring, log, socket, crash and mon data under
# DATA, the OSDs' data under OSD_PARENT/osd. The caller appends its own [global] lines.
ceph_conf_global() {
  local fsid=$1 mon_port=$2 d=$3 osd=$4
  cat <<CONF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $d/keys/\$name.keyring
log_file = $d/log/\$name.log
admin_socket = $d/run/\$name.asok
run_dir = $d/run
crash_dir = $d/crash
mon_data = $d/mon/\$id
osd_data = $osd/osd/\$id
CONF
}
