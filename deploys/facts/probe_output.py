"""The probe scripts that facts run on the host: their command, the code they share, reading
their answer."""

from __future__ import annotations

import json

from pyinfra.api import QuoteString, StringCommand


def last_json_line(output: list[str]) -> dict | None:
    """The probe's JSON answer: its last line that starts with "{", None when it gave none."""
    for line in reversed(output):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# Host-side code the engine probes share (readiness, status): the API key read on the host from
# the engine's own secrets file, so that it never travels through a command line or back to the
# controller. Python 3.6 compatible; the script that includes it imports ``re``.
ENGINE_HEADERS = r"""
def engine_headers(secrets, **headers):
    try:
        with open(secrets) as f:
            for line in f:
                if line.startswith("VLLM_API_KEY="):
                    value = line.strip().split("=", 1)[1]
                    if value[:1] == '"' and value[-1:] == '"':
                        value = re.sub(r'\\(.)', r'\1', value[1:-1])
                    headers["Authorization"] = "Bearer " + value
    except OSError:
        pass
    return headers
"""


def probe_command(backstop: int, python: str, script: str, args, failed: str) -> StringCommand:
    """
    ``python -c script args`` on the host under ``timeout backstop``, its stderr with its output.

    + backstop: seconds before ``timeout`` kills the probe (its own requests time out sooner)
    + python: the interpreter on the host
    + script: the probe's source
    + args: its arguments (each quoted for the shell)
    + failed: the JSON line printed when the probe fails or is killed
    """
    words = (QuoteString(str(arg)) for arg in args)
    return StringCommand(
        "timeout",
        str(backstop),
        QuoteString(python),
        "-c",
        QuoteString(script),
        *words,
        f"2>&1 || echo '{failed}'",
    )
