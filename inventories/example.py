# A realistic lab: one Ceph admin host, three RGW hosts, two NVIDIA hosts, one Gaudi3 host.
# The file name is a group too ("example"), so group_data/example.py could hold lab overrides.
from deploys.settings import group_data_keys

ceph_admin = ["ceph-admin.cephlab.com"]
rgw = ["ceph-01.cephlab.com", "ceph-02.cephlab.com", "ceph-03.cephlab.com"]
gpu = [
    ("gpu-01.cephlab.com", {"kvceph_accelerator_count": 2}),
    ("gpu-02.cephlab.com", {"kvceph_accelerator_count": 2}),
]
# Gaudi runs vLLM 0.26 (the plugin's validated version), so it forms its own cache group:
# same model but TP=4 here, and keys carry the TP.
gaudi = [
    ("gaudi-01.cephlab.com", {"kvceph_accelerator_count": 8, "kvceph_tensor_parallel_size": 4})
]

# A bad key in a group_data file (a typo, a secret) stops here, at its file and line, before
# pyinfra connects to any host (deploys/settings/group_data_keys.py).
group_data_keys.check(__file__, group_data_keys.groups_of(globals(), __file__))
