"""The "will the cache pay?" probe (probe.py): S3 bandwidth from every inference host."""
