# Two inference hosts of one cache group on the one H200 (issue 38 item 2): h200a (also the Ceph
# admin and RGW host) and h200b, each its own engine, port, lmcache.yaml and pinned buffer. The
# machine has one GPU, so both engines share it (kvceph_gpu_memory_utilization 0.4 each, set by
# ship.sh with the Qwen3-8B shape); everything else they read comes from their own directory
# (hw/h200/gpu.sh installs each host's rendered files under its own root). Rendered with
# H200_INVENTORY=h200pair.py hw/h200/render.py. The group `h200` applies group_data/h200.py to
# both, as to h200.py's one host.
_A = ("h200a", {"ssh_hostname": "127.0.0.1", "kvceph_vllm_port": 8000})
_B = ("h200b", {"ssh_hostname": "127.0.0.1", "kvceph_vllm_port": 8001})

h200 = [_A, _B]
ceph_admin = [_A]
rgw = [_A]
gpu = [_A, _B]
