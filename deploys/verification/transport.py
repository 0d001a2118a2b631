"""What the verifier talks to: the engines' OpenAI API (:class:`Http`) and the bucket
(:class:`Boto3Bucket`), and the ``Bucket`` / ``Control`` interfaces tests replace them with.

Every request is bounded by a timeout; a failure is :class:`CheckFailed`, one line naming
what was asked and the answer.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from deploys.verification import object_names, sse, verdicts
from deploys.verification.bookkeeping import ObjectInfo

FIND_CONCURRENCY = 8  # exact-name listings in flight (Boto3Bucket.find)


class CheckFailed(RuntimeError):
    """A request or wait failed; the message is one line for the report."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class RestartFailed(CheckFailed):
    """The engine did not come back after a restart (unit or health), not a request fault."""


class Bucket(Protocol):
    endpoint: str

    def check(self) -> str | None: ...  # None, or why the bucket cannot be used

    # The run's objects by name (object_names.py): name -> the object listed under its stem.
    def find(self, names: list[str]) -> dict[str, ObjectInfo]: ...

    def delete(self, keys: list[str]) -> int: ...


class Control(Protocol):
    def restart(self, host: str, timeout: int) -> str | None: ...  # None, or the error

    def journal_has(self, host: str, since: float, text: str) -> bool | None: ...

    # LMCache's remote-backend lines since the engine started (remote_tier.PREFILTER), or None.
    def remote_tier(self, host: str) -> list[str] | None: ...

    # MP mode (verification/mp.py): clear the host server's L1 (None, or the error); its /metrics.
    def mp_clear_l1(self, host: str) -> str | None: ...

    def mp_metrics(self, host: str) -> str: ...


# --- HTTP ----------------------------------------------------------------------------------


class Http:
    """Bounded HTTP to one engine API (urllib: no extra dependency, honours timeouts).

    ``api_key`` (a ``Secret``, or None) is sent as ``Authorization: Bearer`` on every request.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, api_key=None):
        self.clock = clock
        self._api_key = api_key

    def _open(self, url: str, body: dict | None, timeout: float):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
        if self._api_key:
            req.add_header("Authorization", "Bearer " + str.__str__(self._api_key))
        if body is not None:
            req.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https from settings)

    def get(self, url: str, timeout: float) -> tuple[int | None, str]:
        """(status, body); status None with the reason as body when unreachable."""
        try:
            with self._open(url, None, timeout) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, _read_error(exc)
        except (OSError, ValueError) as exc:
            return None, _reason(exc)

    def post(self, url: str, body: dict, timeout: float) -> dict:
        try:
            with self._open(url, body, timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise CheckFailed(_http_failure(exc)) from None
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"{url}: {_reason(exc)}") from None

    def stream(self, url: str, body: dict, timeout: float) -> sse.StreamResult:
        """Send a streamed request; TTFT from the arrival of the first generated text."""
        deadline_note = f"no complete answer within {timeout}s (kvceph_verify_request_timeout)"
        t0 = self.clock()
        try:
            with self._open(url, body, timeout) as resp:

                def lines():
                    for line in resp:
                        now = self.clock()
                        if now - t0 > timeout:
                            raise CheckFailed(deadline_note)
                        yield now, line

                return sse.parse(lines(), t0)
        except urllib.error.HTTPError as exc:
            raise CheckFailed(_http_failure(exc)) from None
        except sse.StreamError as exc:
            raise CheckFailed(str(exc)) from None
        except TimeoutError:
            raise CheckFailed(deadline_note) from None
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"{url}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    return f"{type(exc).__name__}: {inner or exc}"


def _read_error(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(2000).decode("utf-8", "replace")
    except OSError:
        return ""


def _http_failure(exc: urllib.error.HTTPError) -> str:
    body = _read_error(exc)
    try:
        err = json.loads(body)
        err = err.get("error", err)
        body = err.get("message", body) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    line = f"HTTP {exc.code} from {exc.url}: {' '.join(str(body).split())[:200]}"
    if exc.code == 401:
        line += f"; {verdicts.CAUSE_401}"
    return line


# --- S3 ------------------------------------------------------------------------------------


class Boto3Bucket:
    """The bucket as the controller sees it (path-style, bounded timeouts and retries)."""

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        region: str,
        credentials,
        timeout: int,
        max_objects: int,
        ca_bundle: str | None = None,
    ):
        import boto3
        from botocore.config import Config

        self.endpoint, self.bucket, self.max_objects = endpoint, bucket, max_objects
        self._client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=credentials.access_key.reveal(),
            aws_secret_access_key=credentials.secret_key.reveal(),
            # kvceph_s3_ca_bundle: RGW's private CA (None: botocore's own bundle).
            verify=ca_bundle,
            config=Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def check(self) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            hint = {
                "403": "credentials rejected (wrong key, or stray whitespace in it)",
                "404": "bucket does not exist (run deploy.py's S3 tier stage)",
            }.get(str(code), "S3 error")
            return f"S3 {self.endpoint} bucket {self.bucket}: HTTP {code}: {hint}"
        except BotoCoreError as exc:
            return f"S3 {self.endpoint} unreachable: {exc}: {verdicts.CAUSE_UNREACHABLE}"
        return None

    def list(self, prefix: str) -> dict[str, ObjectInfo]:
        """Every object under ``prefix`` (probe.py's leftovers, hw/h200's private bucket)."""
        return self._s3_call(f"list {prefix!r}", self._list, prefix)

    def find(self, names: list[str]) -> dict[str, ObjectInfo]:
        """The objects of ``names`` that exist: one listing per name, its stem the prefix.

        A listing, not HEAD: the bucket's owner (the admin key) gets 403 on a HEAD of an
        object a group's engine user wrote (issue 36), and lists them all the same.
        """
        return self._s3_call(f"find {len(names)} objects by name", self._find, names)

    def delete(self, keys: list[str]) -> int:
        return self._s3_call(f"delete {len(keys)} objects", self._delete, keys)

    def _s3_call(self, what: str, fn, *args):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args)
        except (BotoCoreError, ClientError) as exc:
            raise CheckFailed(f"S3 {self.endpoint} bucket {self.bucket}: {what}: {exc}") from None

    def _list(self, prefix: str) -> dict[str, ObjectInfo]:
        out: dict[str, ObjectInfo] = {}
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": 1000}
        )
        for page in pages:
            for o in page.get("Contents", ()):
                out[o["Key"]] = ObjectInfo(o["Key"], int(o["Size"]), o["LastModified"])
            if len(out) > self.max_objects:
                raise CheckFailed(
                    f"more than {self.max_objects} objects under {prefix!r}: listing stopped "
                    "(raise kvceph_verify_max_listed_objects)"
                )
        return out

    def _find(self, names: list[str]) -> dict[str, ObjectInfo]:
        def one(name: str) -> ObjectInfo | None:
            page = self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=object_names.stem(name), MaxKeys=1
            )
            for o in page.get("Contents", ()):
                return ObjectInfo(o["Key"], int(o["Size"]), o["LastModified"])
            return None

        # A long document names thousands of objects: a few listings in flight (boto3's
        # clients are thread-safe), each a small request.
        with ThreadPoolExecutor(max_workers=FIND_CONCURRENCY) as pool:
            found = list(pool.map(one, names))
        return {n: o for n, o in zip(names, found, strict=True) if o is not None}

    def _delete(self, keys: list[str]) -> int:
        deleted = 0
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            resp = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
            )
            errors = resp.get("Errors") or []
            if errors:
                e = errors[0]
                raise CheckFailed(f"delete {e.get('Key')}: {e.get('Code')} {e.get('Message')}")
            deleted += len(batch)
        return deleted
