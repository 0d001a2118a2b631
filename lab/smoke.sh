#!/bin/bash
# Smoke test of a running lab (lab/lab.sh up): strict SSH, Ceph, S3 through haproxy with
# virtual-host addressing from an inference host, host-to-host networking, python venv/ensurepip.
# Leaves nothing behind (temporary S3 user, bucket and /etc/hosts line are removed).
set -euo pipefail
INST=${KVCEPH_LAB_INSTANCE:-0}  # see lab.sh
LAB=${KVCEPH_LAB_DIR:-/var/lib/kvceph-lab${INST#0}}
NET=10.213.$((7 + INST))
HERE=$(cd "$(dirname "$0")" && pwd)
lab_ssh() {
  local ip=$1; shift
  ssh -i "$LAB/id_ed25519" -o UserKnownHostsFile="$LAB/known_hosts" -o StrictHostKeyChecking=yes \
    -o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR "root@$ip" "$@"
}
ok() { echo "ok   $*"; }
CEPH1=$NET.11 GPU1=$NET.21
B=kvlab-smoke-$$ AK=KVLABSMOKE$$ SK=smoke-secret-$$

"$HERE/lab.sh" status >/dev/null || { "$HERE/lab.sh" status; exit 1; }
for ip in $NET.11 $NET.21 $NET.22 $NET.31; do
  [ "$(lab_ssh $ip hostname)" != "" ]
done; ok "strict-host-key SSH to all 4 hosts"
lab_ssh $CEPH1 'ceph --connect-timeout 5 health' | grep -q HEALTH_OK && ok "ceph health HEALTH_OK"
lab_ssh $CEPH1 'ceph config get client.rgw.gw1 rgw_dns_name' | grep -qx s3.kvlab && ok "rgw_dns_name = s3.kvlab"
lab_ssh $CEPH1 'curl -sf http://127.0.0.1:7480/ >/dev/null && curl -sf http://127.0.0.1:7481/ >/dev/null' &&
  ok "both radosgw answer (7480, 7481)"
lab_ssh $GPU1 "ping -c1 -W2 $NET.31 >/dev/null && ping -c1 -W2 $NET.1 >/dev/null && ping -c1 -W2 ceph1 >/dev/null" &&
  ok "gpu1 reaches gaudi1, ceph1 and $NET.1"
lab_ssh $GPU1 'python3 -m venv /tmp/kvlab-smoke-venv && /tmp/kvlab-smoke-venv/bin/python -m pip --version >/dev/null &&
  /tmp/kvlab-smoke-venv/bin/python -c "import sys; assert sys.version_info[:2] == (3, 11)"; rm -rf /tmp/kvlab-smoke-venv' &&
  ok "python3.11 venv + pip on gpu1"

cleanup() {
  lab_ssh $CEPH1 "radosgw-admin user rm --uid=$AK --purge-data >/dev/null 2>&1" || true
  lab_ssh $GPU1 "sed -i '/ $B.s3.kvlab # kvlab-smoke/d' /etc/hosts" || true
}
trap cleanup EXIT
lab_ssh $CEPH1 "radosgw-admin user create --uid=$AK --display-name=smoke --access-key=$AK --secret-key=$SK >/dev/null"
lab_ssh $GPU1 "echo '$CEPH1 $B.s3.kvlab # kvlab-smoke' >>/etc/hosts"
# curl's SigV4 (7.88) needs the payload hash header RGW checks
out=$(lab_ssh $GPU1 "S='--aws-sigv4 aws:amz:default:s3 --user $AK:$SK -sf -H x-amz-content-sha256:UNSIGNED-PAYLOAD'
  curl \$S -X PUT http://$B.s3.kvlab/ && curl \$S -X PUT --data-binary hello-from-gpu1 http://$B.s3.kvlab/obj &&
  curl \$S http://$B.s3.kvlab/obj && curl \$S -X DELETE http://$B.s3.kvlab/obj && curl \$S -X DELETE http://$B.s3.kvlab/")
[ "$out" = hello-from-gpu1 ] && ok "virtual-host S3 (Host: $B.s3.kvlab) via haproxy from gpu1: create/put/get/delete"
cleanup; trap - EXIT
lab_ssh $CEPH1 "! radosgw-admin user info --uid=$AK >/dev/null 2>&1" && ok "temporary S3 user removed"
echo "smoke: all ok"
