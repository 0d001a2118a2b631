"""S3 key rotation on the lab (rotate.py): add the new key, roll the engines, retire the old.

The issue's promise: no moment where any running engine holds a key RGW rejects. A checker
thread watches that for the whole procedure: the key each running engine started with (the
credentials file when its PID is first seen), the key in each credentials file, RGW's answer
to both, and each engine's journal for S3 auth/upload failures, while it keeps the engines
writing to S3 with fresh prompts.

Runs last (test_05): at the end the lab runs the new key and the secrets file says so, so a
session that goes on (KVCEPH_KEEP_LAB) stays consistent.
"""

from __future__ import annotations

import base64
import configparser
import os
import re
import secrets as random
import threading
import time

from conftest import (
    GPU_KEY_PREFIX,
    HOSTS,
    INFERENCE,
    S3_ADMIN_URL,
    SECRETS,
    path_style_client,
    pyinfra,
    secrets,
    ssh,
)
from lab_client import completion, long_prompt
from lmcache_log import PREFILTER, trouble

BUCKET = "lmcache"
# The gpu group's own names (deploys/cluster/bucket_policy.py): the serve argument, / -> _, TP 2.
MODEL_PREFIX = GPU_KEY_PREFIX
CREDENTIALS = "/var/lib/vllm/.aws/credentials"


# Key rotation is per cache group: the gpu group (gpu1, gpu2) rotates, gaudi1's keeps its own.
ACCESS, SECRET = "KVCEPH_S3_ACCESS_KEY_GPU", "KVCEPH_S3_SECRET_KEY_GPU"
ROTATED = ("gpu1", "gpu2")


def new_keys() -> dict[str, str]:
    """A key pair shaped like the lab's own (Makefile)."""
    return {
        ACCESS: "LABGPU" + random.token_hex(10).upper(),
        SECRET: base64.b64encode(os.urandom(30)).decode().strip("=")
        .replace("/", "").replace("+", ""),
    }  # fmt: skip


def rejected(access_key: str, secret_key: str) -> str | None:
    """RGW's refusal of these keys (None: accepted), asked like an engine would: a HEAD of a
    missing object, which a known key may be refused (the policy) but not as unknown."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = path_style_client(S3_ADMIN_URL, access_key, secret_key, read_timeout=10, attempts=1)
    try:
        client.head_object(Bucket=BUCKET, Key=f"{MODEL_PREFIX}kvceph-rotation-probe")
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        # HEAD has no body: RGW's 403 for an unknown key or signature is told from the policy's
        # by the request being signed at all; a 404 (missing object) is the accepted answer.
        return None if status == 404 else f"HTTP {status}"
    except BotoCoreError as exc:
        return f"no answer: {exc}"
    return None


def write_secrets(keys: dict[str, str]) -> None:
    tmp = SECRETS.with_suffix(".rotation-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{k}={v}\n" for k, v in keys.items()))
    os.replace(tmp, SECRETS)


class Checker(threading.Thread):
    """Watches every engine's key, RGW's answer to it and the engines' journals."""

    def __init__(self, since: float):
        super().__init__(daemon=True)
        self.since = int(since)
        self.done = threading.Event()
        self.held: dict[tuple[str, str], tuple[str, str]] = {}  # (host, pid) -> keys at start
        self.problems: list[str] = []
        self.rounds = 0
        self.writes = 0

    def run(self):
        while not self.done.is_set():
            try:
                self.check_once()
            except Exception as exc:  # noqa: BLE001 - a broken checker must fail the test
                self.problems.append(f"checker failed: {type(exc).__name__}: {exc}")
                return
            self.done.wait(0.5)

    def look(self, host: str) -> tuple[str, tuple[str, str] | None, list[str]]:
        out = ssh(
            host,
            "systemctl show -p MainPID --value vllm.service; echo ---; "
            f"cat {CREDENTIALS} 2>/dev/null; echo ---; "
            f"journalctl -u vllm.service --since=@{self.since} -o cat --no-pager "
            f"| grep -E '{PREFILTER}' | head -50; true",
            timeout=30,
        ).stdout
        pid, creds, journal = (out.split("---\n") + ["", ""])[:3]
        parser = configparser.ConfigParser()
        parser.read_string(creds)
        keys = None
        for section in parser.sections():
            values = parser[section]
            if "aws_access_key_id" in values:
                keys = (values["aws_access_key_id"], values["aws_secret_access_key"])
        # The remote grep only narrows the lines; LMCache's own message fields decide.
        found = [f"{why}: {line}" for line in journal.splitlines() if (why := trouble(line))]
        return pid.strip(), keys, found[:5]

    def check_once(self):
        verdicts: dict[tuple[str, str], str | None] = {}

        def verdict(keys):
            if keys not in verdicts:
                verdicts[keys] = rejected(*keys)
            return verdicts[keys]

        for host in INFERENCE:
            pid, keys, journal_trouble = self.look(host)
            for line in journal_trouble:
                self.problems.append(f"{host}: journal: {line}")
            if keys is None:
                self.problems.append(f"{host}: {CREDENTIALS} unreadable")
                continue
            if pid and pid != "0":
                # The engine reads the file at start: the first sight of a PID is its key.
                held = self.held.setdefault((host, pid), keys)
                problem = verdict(held)
                if problem:
                    self.problems.append(f"{host}: engine pid {pid} holds {held[0]}: {problem}")
            problem = verdict(keys)
            if problem:
                self.problems.append(f"{host}: {CREDENTIALS} holds {keys[0]}: {problem}")
            try:
                # S3 traffic from the engine itself: a refused key would show in its journal.
                completion(HOSTS[host], long_prompt(300), max_tokens=1, timeout=20)
                self.writes += 1
            except OSError:
                pass  # restarting: the roll's own business
        self.rounds += 1

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=120)


def rotate(phase: str, *extra: str, env: dict, dry: bool = False):
    args = ("--dry",) if dry else ()
    return pyinfra(*args, "--data", f"kvceph_rotation={phase}", *extra, deploy="rotate.py", env=env)


def test_rotation_without_an_outage(converged):
    old = {k: v for k, v in secrets().items() if k in (ACCESS, SECRET)}
    new = new_keys()
    old_ak, new_ak = old[ACCESS], new[ACCESS]
    retire_old = ("--data", f"kvceph_retire_access_key={old_ak}")
    assert rejected(old_ak, old[SECRET]) is None
    assert rejected(new_ak, new[SECRET]) is not None
    outputs = []

    checker = Checker(time.time() - 1)
    checker.start()
    try:
        # 1. add: the user holds both keys; both work; a second add changes nothing.
        added = rotate("add", env=new)
        outputs.append(added.output)
        assert added.rc == 0, added.output[-4000:]
        add_op = (
            "S3 key rotation: add the configured key | "
            "RGW user lmcache-gpu holds the configured key"
        )
        assert (add_op, "ceph1") in added.changed()
        assert rejected(new_ak, new[SECRET]) is None
        assert rejected(old_ak, old[SECRET]) is None
        assert rotate("add", env=new).changed() == []
        plan = rotate("add", env=new, dry=True)
        assert plan.rc == 0 and plan.planned() == [], plan.planned()

        # 2. retire before any engine runs the new key: refused, naming every host.
        early = rotate("retire", *retire_old, env=new)
        outputs.append(early.output)
        assert early.rc != 0
        refusal = next(line for line in early.output.splitlines() if "not retiring" in line)
        assert all(f"{h} (" in refusal for h in ROTATED), refusal
        assert "gaudi1 (" not in refusal, refusal  # its group keeps its key
        assert rejected(old_ak, old[SECRET]) is None

        # 3. roll one host only (an interrupted roll): retire names exactly the others.
        partial = pyinfra("--limit", "gpu1", env=new)
        outputs.append(partial.output)
        assert partial.rc == 0, partial.output[-4000:]
        midway = rotate("retire", *retire_old, env=new)
        assert midway.rc != 0
        refusal = next(line for line in midway.output.splitlines() if "not retiring" in line)
        assert "gpu2 (" in refusal and "gaudi1 (" not in refusal and "gpu1 (" not in refusal

        # 4. the deploy with the new keys: accepted, the old key reported, the rest roll.
        rolled = pyinfra(env=new)
        outputs.append(rolled.output)
        assert rolled.rc == 0, rolled.output[-4000:]
        # From here on the lab runs the new S3 keys (its other secrets, the API key, stay).
        write_secrets({**secrets(), **new})
        notice = next(line for line in rolled.output.splitlines() if "also holds key(s)" in line)
        assert f"kvceph_retire_access_key={old_ak}" in notice
        restarted = {h for name, h in rolled.changed() if "Rolling restart" in name}
        assert restarted == {"gpu2"}, rolled.changed()

        # 5. retire: planned exactly, done, then nothing left to do.
        op = f"RGW user lmcache-gpu no longer holds access key {old_ak}"
        plan = rotate("retire", *retire_old, env=new, dry=True)
        assert plan.rc == 0, plan.output[-4000:]
        assert plan.planned() == [(f"S3 key rotation: retire the old key | {op}", "ceph1")]
        retired = rotate("retire", *retire_old, env=new)
        outputs.append(retired.output)
        assert retired.rc == 0, retired.output[-4000:]
        assert [name for name, _ in retired.changed()] == [
            f"S3 key rotation: retire the old key | {op}"
        ]
        assert rotate("retire", *retire_old, env=new).changed() == []
        assert rejected(old_ak, old[SECRET]) is not None
        assert rejected(new_ak, new[SECRET]) is None

        # Keep engines busy a little longer on the new key alone.
        time.sleep(3)
    finally:
        checker.stop()
    assert checker.problems == [], "\n".join(checker.problems[:20])
    # The checker really watched: engines on the old key, then the new; S3 writes throughout.
    held = {keys[0] for keys in checker.held.values()}
    assert {old_ak, new_ak} <= held, held
    assert checker.rounds >= 5 and checker.writes >= 10, (checker.rounds, checker.writes)

    # Converged on the new key (the secrets file): no change, no notice of other keys.
    after = pyinfra()
    assert after.rc == 0 and after.changed() == [], after.changed()
    assert "also holds" not in after.output
    for output in outputs:
        assert new[SECRET] not in output
        assert old[SECRET] not in output
    assert not re.search(r"secret_key\s*=", "".join(outputs))
