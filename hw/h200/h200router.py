# Issue 54: the router benchmark's inventory (hw/h200/routerbench.py, plan054.txt): the two hosts
# of one cache group of h200pair.py (h200a port 8000, h200b 8001, one engine each on the one GPU)
# and vllm-router in front of them on h200a (group `router`). render.py writes the route's
# config as the router stage writes it (router.json); gpu.sh's `rbench` starts the router from it.
# Both engines listen on every address of that offline machine: kvceph refuses a router on one
# host in front of another host's loopback-only engine (deploys/router/routes.py), and the
# router reaches both over 127.0.0.1 all the same.
_ANY = {"ssh_hostname": "127.0.0.1", "kvceph_vllm_bind": "0.0.0.0"}
_A = ("h200a", {**_ANY, "kvceph_vllm_port": 8000})
_B = ("h200b", {**_ANY, "kvceph_vllm_port": 8001})

h200 = [_A, _B]
ceph_admin = [_A]
rgw = [_A]
gpu = [_A, _B]
router = [_A]
