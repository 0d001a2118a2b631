"""Wait until an HTTP endpoint answers 200: the vLLM unit's ExecStartPre in MP mode.

``python -m kvceph_connector.healthcheck http://127.0.0.1:8090/healthcheck 300`` returns 0 once
LMCache's server answers ``/healthcheck`` with 200, 1 when it has not within the seconds given
(vLLM would otherwise wait ``lmcache.mp.mq_timeout`` and then fail to start). Standard library
only: it runs from the engine's venv before vLLM.
"""

from __future__ import annotations

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


def wait(url: str, seconds: float, every_s: float = 1.0) -> bool:
    """Poll ``url`` until it is healthy or ``seconds`` have passed; True when it was.

    + url: the health endpoint. + seconds: the whole wait. + every_s: the pause between tries.
    """
    deadline = time.monotonic() + seconds
    while True:
        if healthy(url):
            return True
        if time.monotonic() + every_s > deadline:
            return False
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> int:
    """``URL SECONDS``: 0 once healthy, 1 after SECONDS (one line on stderr), 2 on bad usage."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m kvceph_connector.healthcheck URL SECONDS", file=sys.stderr)
        return 2
    url, seconds = args[0], float(args[1])
    if wait(url, seconds):
        return 0
    print(f"kvceph: {url} did not answer 200 within {seconds:g} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
