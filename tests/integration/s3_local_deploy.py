"""Deploy file for test_s3_local.py: the real "S3 tier" stage against a local Ceph.

The full preflight wants inference hosts; this test has only the Ceph admin host, so it
builds the same Preflight by hand. Paths are redirected into the test's temp directory.
"""

import os

from pyinfra import host

from deploys import paths, settings
from deploys.cluster import capacity
from deploys.preflight import Preflight
from deploys.settings import secrets
from deploys.stages import s3_tier

root = os.environ["KVCEPH_S3_TEST_ROOT"]
paths.SCRIPT_DIR = f"{root}/lib"
paths.ADMIN_SCRIPT = f"{root}/lib/s3admin.py"
paths.ADMIN_DIR = f"{root}/admin"
paths.ADMIN_CONFIG = f"{root}/admin/s3-admin.ini"

me = settings.load(host.data, host.name, list(host.groups))
# The quota preflight would decide: the explicit size (this test sets one; no ceph df needed).
gib = me.s3.quota_max_size_gb
quota = capacity.Quota(int(gib * 2**30), "kvceph_s3_quota_max_size_gb") if gib else None
s3_tier.apply(me, Preflight({host.name: me}, [], secrets.load(), quota=quota))
