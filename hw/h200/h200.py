# One offline H200 GPU machine (hw/h200/README.md): Ceph mon + OSDs + radosgw behind haproxy, and
# vLLM 0.26 + LMCache 0.5.6, on the same box. Nothing reaches it over SSH: hw/h200/render.py renders
# its files on the controller from this inventory and group_data/h200.py (applied after the
# repository's group_data), and hw/h200/gpu.sh installs and starts them there.
_H200 = ("h200", {"ssh_hostname": "127.0.0.1"})

ceph_admin = [_H200]
rgw = [_H200]
gpu = [_H200]
