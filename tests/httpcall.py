"""HTTP calls the tests make to engines and gates: one request, or one streamed completion.

On every test's import path (pyproject's pytest ``pythonpath``): unit, lab and vLLM-app tests.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request


def _request(url: str, body, key: str | None, headers: dict | None) -> urllib.request.Request:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    req = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    return req


def call(url: str, body=None, key: str | None = None, timeout: float = 30):
    """(status, headers, body) of one request; an HTTP error status is an answer, not a raise.

    + body: None (GET), a JSON-able object or bytes (POST). + key: a Bearer token.
    """
    try:
        with urllib.request.urlopen(_request(url, body, key, None), timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def stream(
    url: str,
    body,
    out: dict,
    key: str | None = None,
    headers: dict | None = None,
    timeout: float = 60,
) -> dict:
    """A streamed completion into out: status, Retry-After, tokens received, [DONE] seen, error.

    + body: the request (JSON-able or bytes). + headers: more request headers.
    """
    out.update(status=None, retry_after=None, tokens=0, done=False, error=None)
    try:
        with urllib.request.urlopen(_request(url, body, key, headers), timeout=timeout) as r:
            out["status"] = r.status
            for line in r:
                if line.startswith(b"data: [DONE]"):
                    out["done"] = True
                elif line.startswith(b"data: "):
                    out["tokens"] += 1
    except urllib.error.HTTPError as exc:
        out["status"], out["retry_after"] = exc.code, exc.headers.get("Retry-After")
        exc.read()
    except (OSError, http.client.HTTPException) as exc:
        # refused (the server is down), or cut: a server gone mid-stream ends the chunked body
        # early (IncompleteRead, an HTTPException), which must be a record, not a dead client
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out
