"""Facts about model weights: a staged copy on an inference host, a manifest in the mirror."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys.settings.model_source import MANIFEST

# argv = timeout, bucket, key: prints "present", "absent", or exits non-zero with radosgw-admin's
# last error line (Pacific answers a missing object and a missing bucket with ENOENT). Its
# stdout is not read: the stat of a present object holds binary attributes (not UTF-8).
OBJECT_STAT = r"""
import subprocess, sys
t, bucket, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cmd = ["radosgw-admin", "object", "stat", "--bucket=" + bucket, "--object=" + key]
out = subprocess.DEVNULL
p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, universal_newlines=True)
try:
    out, err = p.communicate(timeout=t)
except subprocess.TimeoutExpired:
    p.kill()
    sys.exit("radosgw-admin object stat timed out after %ds" % t)
if p.returncode == 0:
    print("present")
elif "No such file or directory" in err or "could not init bucket" in err:
    print("absent")
else:
    lines = [l for l in err.splitlines() if l.strip()] or ["exit status %d" % p.returncode]
    sys.exit("radosgw-admin object stat: %s" % lines[-1])
""".strip()


class ModelStaged(FactBase):
    """
    Whether a model directory on the host is completely staged (its manifest, written last, is
    there).

    + path: the model directory
    """

    def command(self, path: str):
        manifest = f"{path.rstrip('/')}/{MANIFEST}"
        return StringCommand(
            "test", "-f", QuoteString(manifest), "&&", "echo", "staged", "||", "true"
        )

    @staticmethod
    def default():
        return False

    def process(self, output):
        return "staged" in output


class MirroredModel(FactBase):
    """
    Whether the mirror bucket holds a model's manifest (``radosgw-admin``, no S3 key needed).

    + bucket: the mirror bucket
    + prefix: the model's key prefix, e.g. ``models/Qwen/Qwen3-32B@<revision>/``
    + timeout: seconds for ``radosgw-admin``
    """

    requires_command = "radosgw-admin"

    def command(self, bucket: str, prefix: str, timeout: int = 60):
        return StringCommand(
            "timeout",
            str(timeout + 10),
            "python3",
            "-c",
            QuoteString(OBJECT_STAT),
            str(timeout),
            QuoteString(bucket),
            QuoteString(prefix + MANIFEST),
        )

    @staticmethod
    def default():
        return False

    def process(self, output):
        return "present" in output
