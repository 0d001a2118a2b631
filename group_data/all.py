# Settings for every host. Every key, its default and its check live in deploys/settings/;
# the README's "group_data reference" lists them. Secrets never go here (see secrets.env).

kvceph_rgw_dns_name = "s3.cephlab.com"
kvceph_s3_endpoint = "https://s3.cephlab.com:443"
kvceph_s3_bucket = "lmcache"
kvceph_s3_region = "default"
kvceph_s3_user = "lmcache"
kvceph_s3_profile = "lmcache"
# No wildcard DNS for *.s3.cephlab.com in this lab: inference hosts get an /etc/hosts entry.
kvceph_s3_wildcard_dns = False
kvceph_s3_endpoint_ip = "10.67.67.10"
kvceph_s3_expiration_days = 7

kvceph_model = "Qwen/Qwen3-32B"
# Required with the hub source (preflight refuses an unpinned model): the commit you serve.
# kvceph_model_revision = "<40 hex digits from huggingface.co/Qwen/Qwen3-32B/commits/main>"
kvceph_tensor_parallel_size = 2
kvceph_python_hash_seed = 67
kvceph_lmcache_chunk_size = 256
kvceph_lmcache_hash_algorithm = "sha256_cbor"
