"""Facts about the inference engine on a host: software, accelerators, the running service."""

from __future__ import annotations

import json
import re
import shlex

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys import paths
from deploys.facts.probe_output import ENGINE_HEADERS, last_json_line, probe_command
from deploys.settings import cache_key

# Runs in the venv's own python: what *that* interpreter imports is what the service runs.
_VERSIONS_SCRIPT = (
    "import sys, importlib.metadata as m\n"
    'print("python", ".".join(map(str, sys.version_info[:3])))\n'
    "for d in m.distributions():\n"
    '    n = d.metadata["Name"]\n'
    '    n and print("dist", n, d.version)\n'
)


def _norm(name: str) -> str:
    """PEP 503 normalised distribution name (Lmcache_x -> lmcache-x)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_script(venv: str, script: str, timeout: int, quiet: bool = False) -> StringCommand:
    """Run ``script`` with the venv's python, or print ``novenv`` when there is no venv.

    + quiet: drop the script's stderr (imports that may fail noisily)
    """
    py = f"{venv}/bin/python"
    tail = "2>/dev/null; else echo novenv; fi" if quiet else "; else echo novenv; fi"
    return StringCommand(
        "if test -x",
        QuoteString(py),
        "; then timeout",
        str(timeout),
        QuoteString(py),
        "-c",
        QuoteString(script),
        tail,
    )


class EngineVersions(FactBase):
    """
    Python version and installed distributions of the engine venv.

    Returns ``{"python": "3.11.2", "packages": {"lmcache": "0.5.6", ...}}``; ``python`` is None
    when the venv does not exist (a blank node).
    """

    default = dict

    def command(self, venv: str, timeout: int = 60):
        return venv_script(venv, _VERSIONS_SCRIPT, timeout)

    def process(self, output):
        python, packages = None, {}
        for line in output:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "python":
                python = parts[1]
            elif len(parts) == 3 and parts[0] == "dist":
                packages[_norm(parts[1])] = parts[2]
        return {"python": python, "packages": dict(sorted(packages.items()))}


class EngineVenvs(FactBase):
    """
    The profile venvs beside ``kvceph_venv``, the engines' venv links, and what the prune
    reads: kvceph's marker in each venv, its lock records, the host wheelhouse's files.

    + base: ``kvceph_venv``; venvs are ``<base>-<digest>``, links ``<parent>/engines/<unit>``

    Returns ``{"venvs": {"/opt/kvceph/venv-3f2a9c1b7d0e": 1764800000}, "links":
    {"/opt/kvceph/engines/vllm": "/opt/kvceph/venv-3f2a9c1b7d0e"}, "legacy": False,
    "marks": {"/opt/kvceph/venv-3f2a9c1b7d0e": 9437184}, "locks": {"venv-3f2a9c1b7d0e":
    {"lmcache": "0.5.6"}}, "wheels": {"lmcache-0.5.6-py3-none-any.whl": 123456}}``: each
    venv's modification time (the roll touches a venv when it switches an engine to it), each
    link's target, whether ``base`` itself is a venv (made before venvs had digests), the
    venvs holding kvceph's marker (the KiB it recorded, None when unreadable), each lock
    record's ``name==version`` lines, and the wheelhouse's files with their bytes.
    """

    def default(self):
        return {"venvs": {}, "links": {}, "legacy": False, "marks": {}, "locks": {}, "wheels": {}}

    def command(self, base: str):
        base = base.rstrip("/")
        engines = f"{base.rsplit('/', 1)[0]}/engines"
        q = shlex.quote
        # One string: the glob must touch the quoted prefix (StringCommand joins with spaces).
        return StringCommand(
            f"for d in {q(base)}-*/; do "
            '[ -x "${d}bin/python" ] && stat -c \'venv %Y %n\' "${d%/}"; done; '
            f"for l in {q(engines)}/*; do "
            '[ -L "$l" ] && printf \'link %s %s\\n\' "$l" "$(readlink "$l")"; done; '
            f"for d in {q(base)}-*/; do "
            f'[ -f "${{d}}{paths.VENV_MARKER}" ] && printf \'mark %s %s\\n\' "${{d%/}}" '
            f'"$(tr -dc 0-9 < "${{d}}{paths.VENV_MARKER}" | head -c 15)"; done; '
            f"for f in {q(paths.ENGINE_LOCK_DIR)}/*.txt; do "
            '[ -f "$f" ] && n=$(basename "$f" .txt) && '
            "sed -n 's/^\\([A-Za-z0-9][A-Za-z0-9_.-]*\\)==\\([^ \\\\]*\\).*/\\1 \\2/p' "
            '"$f" | sed "s|^|need $n |"; done; '
            f"for w in {q(paths.WHEELHOUSE)}/*.whl; do "
            '[ -f "$w" ] && stat -c \'wheel %s %n\' "$w"; done;',
            "test -x",
            QuoteString(f"{base}/bin/python"),
            "&& echo legacy yes; true",
        )

    def process(self, output):
        found = self.default()
        for line in output:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "venv" and parts[1].isdigit():
                found["venvs"][parts[2]] = int(parts[1])
            elif len(parts) == 3 and parts[0] == "link":
                found["links"][parts[1]] = parts[2]
            elif len(parts) in (2, 3) and parts[0] == "mark":
                found["marks"][parts[1]] = int(parts[2]) if parts[2:] else None
            elif len(parts) == 4 and parts[0] == "need":
                found["locks"].setdefault(parts[1], {})[_norm(parts[2])] = parts[3]
            elif len(parts) == 3 and parts[0] == "wheel" and parts[1].isdigit():
                found["wheels"][parts[2].rsplit("/", 1)[-1]] = int(parts[1])
            elif parts == ["legacy", "yes"]:
                found["legacy"] = True
        return found


# PCI vendor ids: NVIDIA and Habana Labs (Intel Gaudi).
PCI_VENDORS = {"0x10de": "nvidia", "0x1da3": "gaudi"}


class Accelerators(FactBase):
    """
    Accelerators visible on the host: PCI devices by vendor and the vendor tools.

    Returns ``{"nvidia": {"pci_devices": 8, "tool": True}, "gaudi": {...}}``. NVIDIA counts
    include NVSwitch and audio functions: presence is what is checked, not the count.
    """

    default = dict

    command = (
        'for f in /sys/bus/pci/devices/*/vendor; do test -r "$f" && echo pci $(cat "$f"); '
        "done; for t in nvidia-smi hl-smi; do command -v $t >/dev/null 2>&1 && echo tool $t; "
        "done; true"
    )

    def process(self, output):
        found = {name: {"pci_devices": 0, "tool": False} for name in ("nvidia", "gaudi")}
        tools = {"nvidia-smi": "nvidia", "hl-smi": "gaudi"}
        for line in output:
            parts = line.split()
            if len(parts) != 2:
                continue
            if parts[0] == "pci" and parts[1].lower() in PCI_VENDORS:
                found[PCI_VENDORS[parts[1].lower()]]["pci_devices"] += 1
            elif parts[0] == "tool" and parts[1] in tools:
                found[tools[parts[1]]]["tool"] = True
        return found


def accelerator_present(fact: dict, accelerator: str) -> bool:
    """The host has at least one device of this accelerator on its PCI bus."""
    return bool(fact.get(accelerator, {}).get("pci_devices"))


# Environment variables whose values must never reach pyinfra's output: ServiceDrift prints a
# sha256 of their value instead.
SECRET_ENV_NAME = re.compile(r"KEY|SECRET|TOKEN|PASS|CREDENTIAL", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256_LINE = re.compile(r"([0-9a-f]{64})  (/.*)")


def _alternation(names) -> str:
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} is not an identifier")
    return "^(" + "|".join(names) + ")="


class ServiceState(FactBase):
    """
    The engine unit as it runs: active state, main PID, whether systemd needs a daemon-reload,
    and ``KVCEPH_DIGEST`` from the *running process's* environment (``/proc/<pid>/environ``).

    The unit's configured environment (``systemctl show -p Environment``) would only say what
    the next start will use; the process environment proves what is running now.
    Returns ``{"active": "active", "enabled": True, "main_pid": 123, "need_reload": False,
    "digest": "..."}``.
    """

    _RUNNING = '[ -n "$pid" ] && [ "$pid" != 0 ] && [ -r /proc/$pid/environ ]'

    def default(self):
        return {
            "active": "unknown",
            "enabled": False,
            "main_pid": 0,
            "need_reload": False,
            "digest": None,
        }

    def command(self, unit: str = "vllm.service"):
        u = QuoteString(unit)
        return StringCommand(
            "timeout 20 systemctl show",
            "-p ActiveState -p UnitFileState -p MainPID -p NeedDaemonReload",
            u,
            "2>/dev/null; pid=$(timeout 20 systemctl show -p MainPID --value",
            u,
            f"2>/dev/null); if {self._RUNNING};"
            " then tr '\\000' '\\n' < /proc/$pid/environ | grep '^KVCEPH_DIGEST=' || true; fi",
        )

    def process(self, output):
        state = self.default()
        for line in output:
            key, _, value = line.strip().partition("=")
            if key == "ActiveState":
                state["active"] = value or "unknown"
            elif key == "UnitFileState":
                state["enabled"] = value in ("enabled", "static")
            elif key == "MainPID" and value.isdigit():
                state["main_pid"] = int(value)
            elif key == "NeedDaemonReload":
                state["need_reload"] = value == "yes"
            elif key == "KVCEPH_DIGEST":
                state["digest"] = value or None
        if state["main_pid"] == 0:
            # No process, so no running digest, whatever the environment said.
            state["digest"] = None
        return state


class ServiceDrift(ServiceState):
    """
    ``ServiceState`` plus what decides whether the running engine is the desired one: chosen
    variables of the running process's environment, and the engine's config files.

    + unit: the systemd unit
    + env: variable names read from the running process by value (``env``)
    + secret_env: variable names read as a sha256 of the value only (``env_sha256``)
    + files: config files to hash (``sha256``; absent files are left out) and to compare with
      the process start (``newer``: modified after systemd started the main process)

    The start is systemd's ``ExecMainStartTimestamp`` in microseconds (systemd >= 248 prints
    it with ``--timestamp=us+utc``; older ones give no ``newer``). Not ``/proc/<pid>``'s
    mtime: that is when the kernel last made the inode, which can be long after the start.
    Adds ``{"env": {}, "env_sha256": {}, "sha256": {path: hex}, "newer": [path]}``.
    """

    def default(self):
        return {**super().default(), "env": {}, "env_sha256": {}, "sha256": {}, "newer": []}

    def command(self, unit: str = "vllm.service", env=(), secret_env=(), files=()):
        paths = [QuoteString(f) for f in files]
        parts = [super().command(unit), f"; if {self._RUNNING}; then"]
        if env:
            parts += [
                "tr '\\000' '\\n' < /proc/$pid/environ | grep -E",
                QuoteString(_alternation(env)),
                "| sed 's/^/env /';",
            ]
        if secret_env:
            parts += [
                "tr '\\000' '\\n' < /proc/$pid/environ | grep -E",
                QuoteString(_alternation(secret_env)),
                "| while IFS= read -r l; do printf 'envsha256 %s=%s\\n' \"${l%%=*}\""
                ' "$(printf %s "${l#*=}" | sha256sum | cut -c1-64)"; done;',
            ]
        if files:
            parts += [
                "t=$(timeout 20 systemctl show -p ExecMainStartTimestamp --timestamp=us+utc"
                " --value",
                QuoteString(unit),
                '2>/dev/null); if [ -n "$t" ] && [ "$t" != n/a ]; then timeout 20 find',
                *paths,
                "-maxdepth 0 -newermt \"$t\" -printf 'newer %p\\n' 2>/dev/null; fi;",
            ]
        parts.append("true; fi")
        if files:
            parts += ["; timeout 20 sha256sum --", *paths, "2>/dev/null"]
        parts.append("; true")
        return StringCommand(*parts)

    def process(self, output):
        state = super().process(output)
        for raw in output:
            word, _, rest = raw.partition(" ")
            if word in ("env", "envsha256") and "=" in rest:
                # Values keep their spaces: they are compared byte for byte with the desired.
                key, _, value = rest.partition("=")
                state["env" if word == "env" else "env_sha256"][key] = value
                continue
            sha = _SHA256_LINE.fullmatch(raw.strip())
            if sha:
                state["sha256"][sha.group(2)] = sha.group(1)
            elif word == "newer" and rest.strip():
                state["newer"].append(rest.strip())
        if state["main_pid"] == 0:
            # No process, so nothing running: whatever the environment said is not its.
            state.update(env={}, env_sha256={}, newer=[])
        state["newer"].sort()
        return state


class EngineUnits(FactBase):
    """
    The engine units kvceph wrote on the host: ``vllm.service``, ``vllm-<name>.service`` and
    MP mode's ``lmcache-server.service`` in /etc/systemd/system whose first line is kvceph's
    marker (a unit of the operator's own is never listed). Returns
    ``["vllm-engine-a.service", "vllm.service"]``, sorted.
    """

    command = (
        "for f in /etc/systemd/system/vllm.service /etc/systemd/system/vllm-*.service "
        "/etc/systemd/system/lmcache-server.service; do "
        '[ -f "$f" ] && head -n 1 "$f" | grep -q "^# Managed by kvceph" && echo "${f##*/}"; '
        "done; true"
    )

    def default(self):
        return []

    def process(self, output):
        return sorted(line.strip() for line in output if line.strip().endswith(".service"))


class KvcephWroteFile(FactBase):
    """
    Whether ``path`` is a file whose first line is kvceph's marker (``# Managed by kvceph``):
    True / False. A file of the operator's own at that path is False, so it is never removed.

    + path: the file, e.g. /etc/kvceph/lmcache.yaml
    """

    def command(self, path: str):
        return StringCommand(
            "head -n 1",
            QuoteString(path),
            '2>/dev/null | grep -q "^# Managed by kvceph"',
            "&& echo yes || true",
        )

    def process(self, output):
        return any(line.strip() == "yes" for line in output)


class MemTotal(FactBase):
    """Host RAM in bytes from /proc/meminfo (MemTotal), or None."""

    command = "grep '^MemTotal:' /proc/meminfo"

    def process(self, output):
        for line in output:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "MemTotal:" and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
        return None


class ModelConfig(FactBase):
    """
    The ``config.json`` of a model directory on the host, parsed; None when absent or not JSON.

    + path: the model directory (``kvceph_model`` when it is an absolute path)

    The KV size of a model served from a directory comes from here (deploys/tier/kv_sizing.py).
    """

    def command(self, path: str):
        return StringCommand(
            "cat", QuoteString(f"{path.rstrip('/')}/config.json"), "2>/dev/null; true"
        )

    def process(self, output):
        try:
            config = json.loads("\n".join(output))
        except ValueError:
            return None
        return config if isinstance(config, dict) else None


_READY_SCRIPT = (
    """
import json, re, sys, urllib.request
"""
    + ENGINE_HEADERS
    + """
port, model, timeout, address = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[5]
base = "http://%s:%s" % ("[%s]" % address if ":" in address else address, port)
out = {"health": None, "choices": False, "error": None}
headers = engine_headers(sys.argv[4], **{"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(base + "/health", timeout=timeout) as r:
        out["health"] = r.status
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 8,
                       "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        answer = json.load(r)
    out["choices"] = bool(answer.get("choices"))
    if not out["choices"]:
        out["error"] = "completion has no choices: %.200s" % json.dumps(answer)
except Exception as exc:
    if getattr(exc, "code", None) and out["health"] is None:
        out["health"] = exc.code
    out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:300]
print(json.dumps(out))
"""
)


class EngineReadiness(FactBase):
    """
    Read-only readiness probe: ``GET /health`` then a completion of 8 tokens on ``address``
    (where the host reaches its engine: ``engine_address.local`` of ``kvceph_vllm_bind``), with
    the API key from ``secrets`` (the engine's secrets file, read on the host) when set.

    Returns ``{"health": 200, "choices": True, "error": None}``; ``error`` says what failed.
    """

    def default(self):
        return {"health": None, "choices": False, "error": "no answer from the probe"}

    def command(
        self,
        python: str,
        port: int,
        model: str,
        timeout: int = 60,
        secrets: str = "/dev/null",
        address: str = "127.0.0.1",
    ):
        failed = '{"health": null, "choices": false, "error": "probe failed"}'
        args = (port, model, timeout, secrets, address)
        return probe_command(2 * timeout + 10, python, _READY_SCRIPT, args, failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is not None:
            return answer
        return {"health": None, "choices": False, "error": " ".join(output)[-300:] or None}


# Lines of the engine's files that carry a setting LMCache's object keys depend on.
# (deploys/settings/cache_key.py says which settings and where each is written.)
_CACHE_KEY_LINES = (
    rf"^({'|'.join(cache_key.LMCACHE_YAML_KEYS)}):|^{cache_key.ENV_VARIABLE}=|^ExecStart="
    rf"|^  ({'|'.join(k.replace('.', '[.]') for k in cache_key.LMCACHE_EXTRA_KEYS)}):"
)
_CACHE_KEY_FLAGS = cache_key.ARGV_FLAGS


def _unquote(value: str) -> str:
    # lmcache.yaml values are JSON scalars, vllm.env values shell-like double-quoted.
    try:
        words = shlex.split(value)
    except ValueError:
        return value.strip()
    return " ".join(words)


def cache_key_from_argv(argv: list[str]) -> dict[str, str]:
    """model, tensor_parallel_size and kv_dtype (when passed) from the engine's argv."""
    found: dict[str, str] = {}
    if "serve" in argv and argv.index("serve") + 1 < len(argv):
        found[cache_key.ARGV_MODEL] = argv[argv.index("serve") + 1]
    for i, word in enumerate(argv[:-1]):
        if word in _CACHE_KEY_FLAGS:
            found[_CACHE_KEY_FLAGS[word]] = argv[i + 1]
    for word in argv:
        flag, _, value = word.partition("=")
        if value and flag in _CACHE_KEY_FLAGS:
            found[_CACHE_KEY_FLAGS[flag]] = value
    return found


class CacheKeyInUse(FactBase):
    """
    The cache-key settings of the engine installed on the host, as its files say (all str).

    Reads /etc/kvceph/lmcache.yaml, /etc/kvceph/vllm.env and the unit's ExecStart; ``{}`` on
    a blank host:

    .. code:: python

        {"chunk_size": "256", "pre_caching_hash_algorithm": "sha256_cbor",
         "PYTHONHASHSEED": "67", "model": "Qwen/Qwen3-32B", "tensor_parallel_size": "2"}
    """

    default = dict

    def command(self, lmcache: str, env: str, unit: str):
        return StringCommand(
            "for f in",
            QuoteString(lmcache),
            QuoteString(env),
            QuoteString(unit),
            '; do test -r "$f" && grep -E',
            QuoteString(_CACHE_KEY_LINES),
            '"$f"; done; true',
        )

    def process(self, output):
        found: dict[str, str] = {}
        for line in output:
            if line.startswith("ExecStart="):
                try:
                    argv = shlex.split(line[len("ExecStart=") :])
                except ValueError:
                    continue
                found.update(cache_key_from_argv(argv))
            elif line.startswith(f"{cache_key.ENV_VARIABLE}="):
                found[cache_key.ENV_VARIABLE] = _unquote(line.split("=", 1)[1])
            elif ":" in line:
                key, value = line.split(":", 1)
                found[key.strip()] = _unquote(value)
        return found


class KeySeedsInUse(FactBase):
    """
    Which key scheme and seed each engine env file on the host records: its
    ``KVCEPH_ENGINE_VERSIONS`` and a sha256 of its ``PYTHONHASHSEED`` (never the seed itself:
    the fleet's is a secret). Read by preflight for every host of a cache group, so the group's
    seed follows what its engines run (deploys/engine/upgrade.py ``group_seed``).

    + directory: where the env files are (``vllm.env``, ``vllm-<name>.env``)

    Returns ``{"/etc/kvceph/vllm.env": {"versions": "vllm=0.33.0 lmcache=0.5.6",
    "seed_sha256": "..."}}``, either value None where the file lacks the line; ``{}`` on a
    blank host.
    """

    default = dict

    def command(self, directory: str = "/etc/kvceph"):
        d = shlex.quote(directory.rstrip("/"))
        # The env file quotes each value ("67"); the seed's digits are hashed without them.
        return (
            f'for f in {d}/vllm.env {d}/vllm-*.env; do [ -r "$f" ] || continue; '
            'echo "file $f"; grep -E \'^KVCEPH_ENGINE_VERSIONS=\' "$f"; '
            "s=$(sed -n 's/^PYTHONHASHSEED=//p' \"$f\" | head -n 1 | tr -d '\"'); "
            '[ -n "$s" ] && printf \'seed_sha256 %s\\n\' "$(printf %s "$s" | sha256sum '
            '| cut -c1-64)"; done; true'
        )

    def process(self, output):
        found: dict[str, dict] = {}
        current = None
        for line in output:
            if line.startswith("file "):
                current = found.setdefault(
                    line[5:].strip(), {"versions": None, "seed_sha256": None}
                )
            elif current is None:
                continue
            elif line.startswith("KVCEPH_ENGINE_VERSIONS="):
                current["versions"] = _unquote(line.split("=", 1)[1])
            elif line.startswith("seed_sha256 "):
                current["seed_sha256"] = line.split()[1] if len(line.split()) == 2 else None
        return found


class ServiceAccount(FactBase):
    """
    One account and its own group: ``{"group": True, "user": {"group": "vllm", "home":
    "/var/lib/vllm", "shell": "/usr/sbin/nologin"}}``; ``"user"`` is None when there is no such
    user, ``"group"`` False when there is no such group.

    Two ``getent`` lookups, not pyinfra's ``Users`` and ``Groups``: ``Users`` loops over every
    account with ``lastlog`` and ``groups`` each, the costliest read of an inference host.
    """

    def command(self, user: str):
        u = shlex.quote(user)
        return (
            f"if getent group {u} >/dev/null; then echo group=yes; else echo group=no; fi; "
            f"if getent passwd {u}; then echo primary=$(id -gn {u}); fi"
        )

    def process(self, output):
        lines = [line for line in output if line.strip()]
        if not lines or not lines[0].startswith("group="):
            return None
        account = {"group": lines[0] == "group=yes", "user": None}
        entry = next((line for line in lines[1:] if line.count(":") >= 6), None)
        primary = next((line for line in lines if line.startswith("primary=")), None)
        if entry is not None:
            fields = entry.split(":")
            account["user"] = {
                "group": primary.split("=", 1)[1] if primary else None,
                "home": fields[5],
                "shell": fields[6],
            }
        return account
