"""kvceph: provision vLLM + LMCache hosts that share their KV cache through Ceph RGW (S3)."""
