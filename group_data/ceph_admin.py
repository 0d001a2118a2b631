# The Ceph admin host runs `ceph` / `radosgw-admin` and the S3 admin writes.
kvceph_ceph_pools = [
    {"name": "default.rgw.buckets.data", "pg_num": 2048, "size": 2, "min_size": 1},
    {"name": "default.rgw.buckets.index", "pg_num": 64},
]
kvceph_rgw_managed_by = "cephadm"
kvceph_rgw_service_id = "standard"
kvceph_rgw_count_per_host = 4
kvceph_rgw_label = "kvceph-rgw"
kvceph_rgw_networks = ["10.67.67.0/24"]
kvceph_rgw_frontend_port = 8080
kvceph_rgw_concentrator = "haproxy"
kvceph_rgw_concentrator_port = 80
