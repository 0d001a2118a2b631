"""Reading the answer of a probe script that a fact runs on the host."""

from __future__ import annotations

import json


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
