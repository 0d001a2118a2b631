"""Wait until LMCache's MP server can take an engine: the vLLM unit's ExecStartPre in MP mode.

``python -m kvceph_connector.healthcheck http://127.0.0.1:8090/healthcheck 360 2`` returns 0
once LMCache's server answers ``/healthcheck`` with 200 and its ``/status`` lists at most 2
registered GPU workers (``registered_gpu_ids``), 1 when that has not happened within the
seconds given, 2 on bad usage. Without the third argument it waits for ``/healthcheck`` only.

Why the count: a crashed engine's KV pool stays mapped by the server until its reaper drops the
dead workers (LMCache #4014, #4631); an engine started before that fails vLLM's free-memory
check, and a few such starts in a row leave its unit failed (start limit). The unit passes
the workers the host's *other* engines may hold (TP x (engines - 1)): while this engine is
down, any registration beyond that is a dead one of its own. Standard library only: it runs
from the engine's venv before vLLM.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url`` answers 200 within ``timeout_s``.

    + url: the health endpoint. + timeout_s: one request's limit.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def registered(status_url: str, timeout_s: float = 2.0) -> int | None:
    """How many GPU workers the server holds (``/status`` ``registered_gpu_ids``); 0 when the
    status has no such list (nothing known to wait for), None when it does not answer.

    + status_url: the server's /status. + timeout_s: one request's limit.
    """
    try:
        with urllib.request.urlopen(status_url, timeout=timeout_s) as answer:
            status = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    ids = status.get("registered_gpu_ids") if isinstance(status, dict) else None
    return len(ids) if isinstance(ids, list) else 0


def status_url(health_url: str) -> str:
    """The /status beside a /healthcheck URL.

    + health_url: ``http://host:port/healthcheck``.
    """
    return health_url.rsplit("/", 1)[0] + "/status"


def wait(url: str, seconds: float, every_s: float = 1.0, at_most: int | None = None) -> bool:
    """Poll ``url`` until it is healthy (and, with ``at_most``, the server holds at most that
    many workers) or ``seconds`` have passed; True when it was.

    + url: the health endpoint. + seconds: the whole wait. + every_s: the pause between tries.
    + at_most: the registered GPU workers allowed, None for no such check.
    """
    deadline = time.monotonic() + seconds
    while True:
        if healthy(url):
            if at_most is None:
                return True
            held = registered(status_url(url))
            if held is not None and held <= at_most:
                return True
        if time.monotonic() + every_s > deadline:
            return False
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> int:
    """``URL SECONDS [AT_MOST]``: 0 once ready, 1 after SECONDS (one line on stderr), 2 on bad
    usage."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(
            "usage: python -m kvceph_connector.healthcheck URL SECONDS [MAX_REGISTERED]",
            file=sys.stderr,
        )
        return 2
    url, seconds = args[0], float(args[1])
    at_most = int(args[2]) if len(args) == 3 else None
    if wait(url, seconds, at_most=at_most):
        return 0
    if at_most is None or not healthy(url):
        print(f"kvceph: {url} did not answer 200 within {seconds:g} s", file=sys.stderr)
    else:
        print(
            f"kvceph: LMCache's server still holds {registered(status_url(url))} GPU workers "
            f"after {seconds:g} s (at most {at_most} may be the host's other engines): a dead "
            "engine's KV memory is not released; fix: systemctl restart "
            "lmcache-server.service (drops its L1), then this engine",
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
