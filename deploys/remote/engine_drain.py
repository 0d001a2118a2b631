"""Drain one engine before kvceph restarts it (run on the inference host as root, stdlib only).

    python engine_drain.py PORT TIMEOUT LEASE DRAIN_DIR [URL]

Writes ``DRAIN_DIR/drain-PORT`` holding ``now + LEASE`` (the gate, deploys/remote/
engine_guard.py, then refuses new requests with 503 and reports draining on /health), and
polls URL (default ``http://127.0.0.1:PORT``: where this host reaches the engine, from
kvceph_vllm_bind) every 0.5 s until the gate's count of open requests (``/health``'s body)
and vLLM's ``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` (``/metrics``) are
both 0, or TIMEOUT seconds passed. Both routes are open to loopback without the API key
(render.environment puts 127.0.0.0/8, ::1 and a non-loopback bind address in
KVCEPH_OPEN_NETWORKS), so no key is read.
Prints one JSON line: ``{"state": "drained"|"timeout"|"down"|"no-gate"|"unhealthy", "seconds": s,
"gate": n, "vllm": n}``; always exits 0 (the restart goes ahead either way). The drain file
stays until the restart removes it: the new process ignores it anyway (older than itself).
"""

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

_GAUGE = re.compile(r"^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})?\s+(\S+)", re.M)
# A gate that answers /health 200 this long after the drain file exists predates drains.
NO_GATE_AFTER = 3.0


def write_lease(path: str, lease: float) -> None:
    """The drain file, written atomically (the gate may read it at any moment)."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{time.time() + lease:.3f}\n")
    os.replace(tmp, path)


def get(url: str) -> tuple[int | None, str]:
    """(status, body); (None, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except OSError as exc:
        return None, str(exc)


def vllm_open(metrics: str) -> int:
    """Requests running + waiting in vLLM's scheduler, summed over its engines."""
    return int(sum(float(v) for v in _GAUGE.findall(metrics)))


def gate_open(status: int | None, body: str) -> int | None:
    """The gate's open requests from a draining /health answer; None when not draining."""
    if status != 503:
        return None
    try:
        return int(json.loads(body)["open_requests"])
    except (ValueError, KeyError, TypeError):
        return None


def main(argv: list[str]) -> dict:
    port, timeout, lease, directory = int(argv[0]), float(argv[1]), float(argv[2]), argv[3]
    base = argv[4] if len(argv) > 4 else f"http://127.0.0.1:{port}"
    start = time.monotonic()
    status, _ = get(f"{base}/health")
    if status is None:
        return {"state": "down", "seconds": 0.0, "gate": 0, "vllm": 0}
    write_lease(os.path.join(directory, f"drain-{port}"), lease)
    gate = running = 0
    while True:
        waited = time.monotonic() - start
        status, body = get(f"{base}/health")
        gate = gate_open(status, body)
        code, metrics = get(f"{base}/metrics")
        running = vllm_open(metrics) if code == 200 else 0
        if status is None:
            return {"state": "down", "seconds": round(waited, 1), "gate": 0, "vllm": 0}
        if gate is None and waited >= NO_GATE_AFTER:
            # 200: a gate that ignores the file (older than kvceph's drain); else an engine
            # that is not serving (vLLM's own 503 once its core died).
            state = "no-gate" if status == 200 else "unhealthy"
            return {"state": state, "seconds": round(waited, 1), "gate": 0, "vllm": running}
        if gate == 0 and running == 0:
            return {"state": "drained", "seconds": round(waited, 1), "gate": 0, "vllm": 0}
        if waited >= timeout:
            return {"state": "timeout", "seconds": round(waited, 1), "gate": gate or 0,
                    "vllm": running}  # fmt: skip
        time.sleep(0.5)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
