"""A replaced node arrives blank: the same deploy rebuilds it, and it reuses the fleet's cache."""

from __future__ import annotations

from conftest import HOSTS, lab_sh, pyinfra, secrets, ssh
from lab_client import completion, external_hits, long_prompt, wait_health


def test_replaced_node_rebuilds_alone_and_hits_the_shared_cache(converged):
    prompt = long_prompt(1024)  # 4 full chunks, written by gpu1 before gpu2 is replaced
    completion(HOSTS["gpu1"], prompt)

    lab_sh("replace", "gpu2")  # blank disk, new SSH host key (known_hosts rewritten)
    assert ssh("gpu2", "test -e /opt/kvceph/venv", check=False).returncode != 0

    # The most verbose run an operator can make; the secret must not appear in any of it.
    run = pyinfra("-vvv", "--debug", "--diff")
    assert run.rc == 0, run.output[-6000:]
    assert {h for _, h in run.changed()} == {"gpu2"}, run.changed()
    keys = secrets()
    assert keys["KVCEPH_S3_SECRET_KEY"] not in run.output
    # The credentials were really written in this run (so the check above means something).
    assert keys["KVCEPH_S3_SECRET_KEY"] in ssh("gpu2", "cat /var/lib/vllm/.aws/credentials").stdout
    assert "private file, content not diffed" in run.output

    wait_health(HOSTS["gpu2"])
    hits = external_hits(HOSTS["gpu2"])
    completion(HOSTS["gpu2"], prompt)
    assert external_hits(HOSTS["gpu2"]) - hits >= 1023, "gpu2 did not reuse gpu1's chunks"

    assert pyinfra().changed() == []
