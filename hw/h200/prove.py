#!/usr/bin/env python3
"""The project's verification runner against the real engine on the H200.

    prove.py RENDERED STATE OUT TOKENS...

For each document length, one ``deploys.verification.runner.Runner`` cycle, exactly as verify.py
runs it (preflight, S3 check, cold, warm after a restart, fallback after deleting the run's
objects and a restart, cleanup), with the target and options kvceph derived from the inventory
(``RENDERED/runner.json``, written by render.py) and only the engine control replaced by
:class:`local.LocalControl`. Writes the verifier's table, ``verify-<run>.json`` and
``verify-<run>.png`` per length into OUT, and one line per length to OUT/proof.jsonl.
"""

from __future__ import annotations

import configparser
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from local import LocalControl, LocalEngine  # noqa: E402

from deploys.secrets import S3Credentials, Secret  # noqa: E402
from deploys.verification import report as reporting  # noqa: E402
from deploys.verification.runner import Runner  # noqa: E402
from deploys.verification.targets import Options, Target  # noqa: E402
from deploys.verification.transport import Boto3Bucket  # noqa: E402


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
    engine = LocalEngine(cfg["paths"]["unit"], state)
    return cfg, Target(**cfg["target"]), Options(**cfg["options"]), bucket, engine


def main(rendered: str, state: str, out: str, lengths: list[int]) -> int:
    cfg, target, options, bucket, engine = setup(rendered, state)
    control = LocalControl(engine, log)
    failed = 0
    for n in lengths:
        runner = Runner(replace(options, document_tokens=n), bucket, control, log=log)
        log(f"verifier cycle, document {n} tokens, run {runner.nonce}")
        result = runner.run([[target]])
        table = reporting.table(result)
        print(table, flush=True)
        path = reporting.write_json(result, out)
        png, notice = reporting.write_png(result, out)
        (Path(out) / f"verify-{result.run_id}.txt").write_text(table + "\n")
        line = {
            "document_tokens": n,
            "run_id": result.run_id,
            "variant": cfg["variant"],
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
