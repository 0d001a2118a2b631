#!/usr/bin/env python3
"""The project's verification runner against the real engine on the H200.

    prove.py RENDERED STATE OUT TOKENS...

For each document length, one ``deploys.verification.runner.Runner`` cycle, exactly as verify.py
runs it (preflight, S3 check, cold, warm after a restart, fallback after deleting the run's
objects and a restart, cleanup), with the target and options kvceph derived from the inventory
(``RENDERED/runner.json``, written by render.py) and only the engine control replaced by
:class:`local.LocalControl`. Writes the verifier's table, ``verify-<run>.json`` and
``verify-<run>.png`` per length into OUT, and one line per length to OUT/proof.jsonl.

RENDERED with a ``group.json`` (render.py with ``H200_INVENTORY=h200pair.py``): one target and
one engine per host (each under ``$H200_HOSTS_ROOT/<host>``, its state in ``STATE/<host>``), the
cache groups as verify.py forms them, so the cycle's cross-node step asks the second host's
engine for the first one's document. Around that step the bucket is listed twice: the line in
proof.jsonl says how many of the writer's objects the reader wrote again (``cross_rewritten``:
0 when the objects are written once) and how many new ones it added.
"""

from __future__ import annotations

import configparser
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from local import LocalControl, LocalEngine  # noqa: E402

from deploys.settings.secrets import S3Credentials, Secret  # noqa: E402
from deploys.verification import report as reporting  # noqa: E402
from deploys.verification.runner import Runner  # noqa: E402
from deploys.verification.targets import Options, Target  # noqa: E402
from deploys.verification.transport import Boto3Bucket  # noqa: E402

HOSTS_ROOT = os.environ.get("H200_HOSTS_ROOT", "/tmp/h200-hosts")


def log(msg: str) -> None:
    print(f"[prove {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def credentials(aws_dir: str) -> S3Credentials:
    """The keys the engine uses: the rendered ~/.aws/credentials, as installed."""
    ini = configparser.ConfigParser()
    ini.read(Path(aws_dir) / "credentials")
    section = ini[ini.sections()[0]]
    return S3Credentials(
        Secret(section["aws_access_key_id"]), Secret(section["aws_secret_access_key"]), "rendered"
    )


def setup(rendered: str, state: str):
    cfg = json.loads((Path(rendered) / "runner.json").read_text())
    b = cfg["bucket"]
    bucket = Boto3Bucket(
        endpoint=b["endpoint"],
        bucket=b["bucket"],
        region=b["region"],
        credentials=credentials(cfg["paths"]["aws_dir"]),
        timeout=b["timeout"],
        max_objects=b["max_objects"],
    )
    return cfg, Target(**cfg["target"]), Options(**cfg["options"]), bucket, engine_for(cfg, state)


def engine_for(cfg: dict, state: str) -> LocalEngine:
    """The engine of the rendered host: a pair's host runs under its own root and state."""
    host = cfg.get("pair_host")
    if not host:
        return LocalEngine(cfg["paths"]["unit"], state)
    return LocalEngine(cfg["paths"]["unit"], f"{state}/{host}", f"{HOSTS_ROOT}/{host}")


def hosts_of(rendered: str, state: str):
    """(config, target, options, bucket) of the first host, every target's engine by host
    name, and the cache groups as lists of targets."""
    group = Path(rendered) / "group.json"
    if not group.exists():
        cfg, target, options, bucket, engine = setup(rendered, state)
        return cfg, options, bucket, {target.name: engine}, [[target]]
    g = json.loads(group.read_text())
    cfgs = {h: setup(str(Path(rendered) / h), state) for h in g["hosts"]}
    cfg, _, options, bucket, _ = cfgs[g["hosts"][0]]
    engines = {h: c[4] for h, c in cfgs.items()}
    return cfg, options, bucket, engines, [[cfgs[h][1] for h in grp] for grp in g["groups"]]


class PairRunner(Runner):
    """The verifier's runner, with the bucket listed before and after each cross-node ask."""

    rewrites: dict = {}

    def cross(self, a, peers, cold, no_peer):
        if not peers:
            return super().cross(a, peers, cold, no_peer)
        before = self.bucket.list(a.prefix)
        super().cross(a, peers, cold, no_peer)
        time.sleep(5)  # the reader's asynchronous stores, if it made any
        after = self.bucket.list(a.prefix)
        again = [
            k
            for k in (o.key for o in cold.created.values())
            if k in after
            and after[k].last_modified != getattr(before.get(k), "last_modified", None)
        ]
        self.rewrites = {
            "writer_objects": len(cold.created),
            "cross_rewritten": len(again),
            "cross_new_objects": len(set(after) - set(before)),
        }
        log(f"cross-node: {self.rewrites}")


def main(rendered: str, state: str, out: str, lengths: list[int]) -> int:
    cfg, options, bucket, engines, groups = hosts_of(rendered, state)
    control = LocalControl(engines if len(engines) > 1 else next(iter(engines.values())), log)
    failed = 0
    for n in lengths:
        runner = PairRunner(replace(options, document_tokens=n), bucket, control, log=log)
        log(f"verifier cycle, document {n} tokens, run {runner.nonce}")
        result = runner.run(groups)
        table = reporting.table(result)
        print(table, flush=True)
        path = reporting.write_json(result, out)
        png, notice = reporting.write_png(result, out)
        (Path(out) / f"verify-{result.run_id}.txt").write_text(table + "\n")
        line = {
            "document_tokens": n,
            "run_id": result.run_id,
            "variant": cfg["variant"],
            "hosts": sorted(engines),
            **runner.rewrites,
            "passed": not result.failures,
            "json": path.name,
            "png": png.name if png else notice,
            "steps": reporting.to_dict(result)["steps"],
        }
        with open(Path(out) / "proof.jsonl", "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        failed += bool(result.failures)
        for fl in result.failure_lines():
            log(f"FAILED: {fl}")
    return 1 if failed else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], [int(x) for x in a[3:]]))
