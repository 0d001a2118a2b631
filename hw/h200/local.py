"""The verifier's engine control on the H200 machine, which has no systemd and no SSH.

:class:`LocalControl` is the ``Control`` of ``deploys/verification/runner.py`` (``SshControl``
in verify.py): ``restart`` stops the engine and starts the installed unit's ``ExecStart`` with
its ``EnvironmentFile`` and ``WorkingDirectory``, as systemd would (but as root: the machine has
no ``vllm`` user, and no ``LimitNOFILE``/``LimitMEMLOCK``); ``journal_has`` greps the engine's
log instead of the journal. The engine runs in its own session, so it outlives one command on
that machine; its pid and log live in the state directory.

Several hosts' engines on the one machine (``h200pair.py``): each host's files are installed
under a root of its own (``LocalEngine(root=...)``), and the engine reads them there: the paths
kvceph renders per host (``HOST_PATHS``: its config directory and the service's home, where the
AWS profile lives) are moved under that root in the unit's fields and in the environment, the
rendered files themselves unchanged. ``LocalControl`` takes one engine per host.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

# deploys/render.py SECRETS_PATH: the engine's secrets (API key, HF token), when any is set.
SECRETS_PATH = "/etc/kvceph/secrets.env"
# The paths whose contents differ per host (deploys/paths.py CONFIG_DIR; the service home,
# render.aws_dir's parent): the rest (the venv, the engine gate's module) is the same for both.
HOST_PATHS = ("/etc/kvceph", "/var/lib/vllm")


def rooted(text: str, root: str) -> str:
    """``text`` with every per-host path (``HOST_PATHS``) moved under ``root``."""
    if not root:
        return text
    for p in HOST_PATHS:
        text = re.sub(rf"(?<![\w/]){re.escape(p)}(?=/|$|[\s\"':])", root.rstrip("/") + p, text)
    return text


def unit_fields(text: str) -> dict:
    """``Key=value`` lines of a unit file (the last one wins, as systemd reads them), except
    ``EnvironmentFile``: a list of every one, in order (systemd reads them all)."""
    out: dict = {"EnvironmentFile": []}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", ";", "[")):
            if key.strip() == "EnvironmentFile":
                out["EnvironmentFile"].append(value.strip())
            else:
                out[key.strip()] = value.strip()
    return out


def systemd_split(line: str) -> list[str]:
    """Split an ExecStart line like systemd: quotes, backslash escapes, ``%%`` and ``$$``."""
    words, cur, quote, i, started = [], [], None, 0, False
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            cur.append(line[i + 1])
            i += 2
            started = True
            continue
        if quote:
            if c == quote:
                quote = None
            else:
                cur.append(c)
        elif c in "'\"":
            quote, started = c, True
        elif c.isspace():
            if started:
                words.append("".join(cur))
            cur, started = [], False
        else:
            cur.append(c)
            started = True
        i += 1
    if started:
        words.append("".join(cur))
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def env_file(text: str) -> dict[str, str]:
    """An EnvironmentFile= as systemd reads kvceph's (``KEY="value"``, backslash escapes)."""
    env = {}
    for line in text.splitlines():
        m = re.fullmatch(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', line.strip())
        if m:
            env[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
    return env


class LocalEngine:
    """The engine process started from the installed unit, tracked in ``state/engine.json``."""

    def __init__(self, unit_path: str, state: str, root: str = ""):
        self.root = root
        # the unit too is the host's own (installed under its root)
        self.unit_path = Path(root.rstrip("/") + unit_path if root else unit_path)
        self.state = Path(state)
        self.state.mkdir(parents=True, exist_ok=True)
        self.info_path = self.state / "engine.json"

    def info(self) -> dict:
        try:
            return json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return {}

    def alive(self) -> bool:
        pid = self.info().get("pid")
        if not pid:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        # a zombie is not alive: our child that exited but was not reaped
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    def command(self) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of the unit's ExecStart, as systemd builds
        them (under this host's root, when it has one)."""
        fields = unit_fields(self.unit_path.read_text())
        argv = [rooted(a, self.root) for a in systemd_split(fields["ExecStart"])]
        env = dict(os.environ)
        for path in fields["EnvironmentFile"]:
            # The secrets file exists only where secrets are set (not in every shipment).
            path = rooted(path, self.root)
            if Path(path).is_file() or path != rooted(SECRETS_PATH, self.root):
                read = env_file(Path(path).read_text())
                env.update({k: rooted(v, self.root) for k, v in read.items()})
        return argv, env, rooted(fields.get("WorkingDirectory") or "/", self.root)

    def start(self) -> dict:
        argv, env, cwd = self.command()
        n = self.info().get("n", 0) + 1
        log = self.state / f"engine.{n}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        info = {"pid": proc.pid, "n": n, "log": str(log), "started": time.time(), "argv": argv}
        self.info_path.write_text(json.dumps(info))
        return info

    def stop(self, timeout: float = 90) -> None:
        pid = self.info().get("pid")
        if not pid or not self.alive():
            return
        group = _group(pid)
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass
        end = time.time() + timeout
        while self.alive() and time.time() < end:
            _reap(pid)
            time.sleep(0.5)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _reap(pid)
        if self.root:
            # another host's engine may hold the GPU: wait for this one's processes only
            _wait_gone(group, 60)
        else:
            _wait_gpu_free(60)

    def logs_since(self, since: float) -> list[Path]:
        """Logs of the engine that ran at ``since`` and of every later one."""
        n = self.info().get("n", 0)
        return [self.state / f"engine.{i}.log" for i in range(1, n + 1)][
            max(0, self._index_at(since, n) - 1) :
        ]

    def _index_at(self, since: float, n: int) -> int:
        for i in range(n, 0, -1):
            log = self.state / f"engine.{i}.log"
            if log.exists() and log.stat().st_ctime <= since:
                return i
        return 1


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _group(pgid: int) -> set[int]:
    """The processes of process group ``pgid`` (the engine's session: API server, engine core)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    out.add(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _wait_gone(pids: set[int], timeout: float) -> None:
    """Until none of ``pids`` runs and none holds GPU memory (the driver frees it at exit)."""
    end = time.time() + timeout
    while time.time() < end:
        left = {p for p in pids if Path(f"/proc/{p}").exists()}
        try:
            apps = subprocess.run(
                ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            apps = []
        if not left and not pids & {int(a) for a in apps if a.isdigit()}:
            return
        time.sleep(0.5)


def _wait_gpu_free(timeout: float) -> None:
    """Until the GPU's memory is released (a new engine profiles what is free)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            used = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            return
        if not used or int(used[0]) < 2000:
            return
        time.sleep(1)


_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]")


class LocalControl:
    """``Control`` for ``deploys.verification.runner.Runner`` on the local engines: one, or one
    per host (a dict of host name to engine)."""

    def __init__(self, engine: LocalEngine | dict[str, LocalEngine], log=print):
        self.engines, self.log = engine, log

    def _engine(self, host: str) -> LocalEngine:
        return self.engines[host] if isinstance(self.engines, dict) else self.engines

    def restart(self, host: str, timeout: int) -> str | None:
        t = time.time()
        engine = self._engine(host)
        engine.stop()
        info = engine.start()
        self.log(f"{host}: engine {info['n']} started (stop took {time.time() - t:.1f}s)")
        time.sleep(2)
        if not engine.alive():
            return f"the engine exited at once; see {info['log']}"
        return None

    def journal_has(self, host: str, since: float, text: str) -> bool | None:
        for log in self._engine(host).logs_since(since):
            for line in log.read_text(errors="replace").splitlines():
                if text not in line:
                    continue
                m = _STAMP.search(line)  # LMCache's own lines carry the date and time
                if m and datetime.fromisoformat(m.group(1)).timestamp() < since - 1:
                    continue
                return True
        return False


def wait_health(base_url: str, engine: LocalEngine, seconds: float) -> str:
    """'up', 'dead' or 'waiting' after at most ``seconds``."""
    import urllib.request

    end = time.time() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as r:  # noqa: S310
                if r.status == 200:
                    return "up"
        except OSError:
            pass
        if not engine.alive():
            return "dead"
        if time.time() >= end:
            return "waiting"
        time.sleep(1)


if __name__ == "__main__":
    # local.py UNIT STATE [--root=DIR] start|stop|alive|wait SECONDS [BASE_URL]
    import sys

    a = sys.argv[1:]
    root = ""
    if len(a) > 2 and a[2].startswith("--root="):
        root = a.pop(2).split("=", 1)[1]
    eng = LocalEngine(a[0], a[1], root)
    if a[2] == "start":
        print(json.dumps(eng.start()))
    elif a[2] == "stop":
        eng.stop()
    elif a[2] == "alive":
        sys.exit(0 if eng.alive() else 1)
    else:
        state = wait_health(a[4] if len(a) > 4 else "http://127.0.0.1:8000", eng, float(a[3]))
        print(state)
        sys.exit({"up": 0, "dead": 2}.get(state, 1))
