"""The engine locks kvceph ships (locks/*.txt, `make locks`): each matches its built-in profile,
which lock a host installs from (the operator's, the wheelhouse's, the shipped one, none), the
opt-out, the merge of one compile per CPython minor, and locks/compile.py against a stand-in uv.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploys import settings as s
from deploys.engine import engine_lock
from deploys.settings import engine as engine_settings
from deploys.settings.engine import DEFAULT_PROFILES
from deploys.settings.reader import SettingsError

ROOT = Path(__file__).resolve().parents[2]
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
LAB = {
    "name": "lab-engine",
    "packages": ["kvceph-lab-engine==0.1.0", "lmcache==0.5.6"],
    "executable": "kvceph-lab-engine",
    "vllm_version": "0.33.0",
}


def _compile_module():
    spec = importlib.util.spec_from_file_location("locks_compile", ROOT / "locks/compile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine(groups=("gpu",), **data):
    return s.load({**BASE, **data}, "gpu1", groups).engine


# --- The shipped lock against its profile ------------------------------------------------------


@pytest.mark.parametrize("accelerator", sorted(engine_settings.BUILTIN_LOCKS))
def test_the_shipped_lock_is_compiled_from_the_builtin_profile(accelerator):
    """Fails when DEFAULT_PROFILES changes without `make locks`."""
    packages = {**engine_settings.DEFAULT_PROFILES, **engine_settings.PRESETS}[accelerator][
        "packages"
    ]
    path = ROOT / engine_settings.BUILTIN_LOCKS[accelerator]
    text = path.read_text()
    lock = engine_lock.parse(text, str(path))
    fix = f"{path.name} is stale: run `make locks` after changing DEFAULT_PROFILES"
    assert engine_lock.header(text)["profile"] == " ".join(packages), fix
    assert engine_lock.missing_from_lock(engine_lock.pins(packages), lock) == [], fix
    # What the hosts need: every CPython minor the compile covers, x86_64 wheels.
    compile_py = _compile_module()
    assert engine_lock.pythons(text) == compile_py.PYTHONS
    assert engine_lock.header(text)["platform"] == compile_py.PLATFORM
    # The whole tree, not the top level only (vLLM 0.33 pulls ~220 distributions).
    assert {"torch", "transformers", "numpy"} <= set(lock) and len(lock) > 100


def test_gaudi_ships_no_lock():
    # vllm-gaudi is not on the public index: the operator's wheelhouse is its lock.
    assert "gaudi" not in engine_settings.BUILTIN_LOCKS
    e = engine(("gaudi",))
    assert e.lock_text is None and e.lock_source is None


# --- Which lock a host installs from ----------------------------------------------------------


def test_the_builtin_nvidia_profile_installs_from_the_shipped_lock():
    e = engine()
    assert e.lock_source == "locks/nvidia.txt"
    assert e.lock_text == (ROOT / "locks/nvidia.txt").read_text()
    # extra_args and env do not change the packages: the lock stays.
    tuned = engine(kvceph_engine_profile={"extra_args": ["--seed", "1"], "env": {"X_Y": "1"}})
    assert tuned.lock_source == "locks/nvidia.txt" and tuned.venv == e.venv
    # The venv is named by the lock: an NVIDIA host deployed before the shipped lock gets a
    # new venv and rolls once (the opt-out keeps the old name).
    assert engine(kvceph_engine_lock=False).venv != e.venv


def test_the_opt_out_installs_unlocked_like_before():
    e = engine(kvceph_engine_lock=False)
    assert e.lock_text is None and e.lock_source is None
    pins = engine_settings.engine_list_pins(e.profile)
    name = engine_lock.digest(pins, e.profile.vllm_version, e.profile.lmcache_version, "")
    assert e.venv == engine_lock.venv_path("/opt/kvceph/venv", name)


def test_a_changed_profile_gets_no_shipped_lock():
    e = engine(kvceph_engine_profile={"packages": ["vllm==0.25.1", "lmcache==0.5.6", "x==1"]})
    assert e.lock_text is None


def test_the_operators_lock_and_the_wheelhouse_come_before_the_shipped_one(tmp_path):
    v = DEFAULT_PROFILES["nvidia"]["vllm_version"]
    own = tmp_path / "mine.txt"
    own.write_text(f"vllm=={v} --hash=sha256:{A}\nlmcache==0.5.6 --hash=sha256:{B}\n")
    e = engine(kvceph_engine_lock=str(own))
    assert e.lock_source == str(own) and e.lock_text == own.read_text()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (f"vllm-{v}-py3-none-any.whl", "lmcache-0.5.6-py3-none-any.whl"):
        (wheels / name).write_bytes(name.encode())
    e = engine(kvceph_engine_wheelhouse=str(wheels))
    assert e.lock_source == f"wheelhouse {wheels}" and f"vllm=={v}" in e.lock_text
    # False turns the wheelhouse's lock off too.
    assert engine(kvceph_engine_wheelhouse=str(wheels), kvceph_engine_lock=False).lock_text is None


def test_the_lab_path_is_unchanged(tmp_path):
    """The lab's own profile from its wheelhouse (offline, --no-index): the wheelhouse's lock,
    never the shipped one; without wheels (the fake inventories) no lock, as before."""
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for name in ("kvceph_lab_engine-0.1.0-py3-none-any.whl", "lmcache-0.5.6-py3-none-any.whl"):
        (wheels / name).write_bytes(name.encode())
    e = engine(kvceph_engine_profile=LAB, kvceph_engine_wheelhouse=str(wheels))
    assert e.lock_source == f"wheelhouse {wheels}"
    assert e.lock_text == engine_lock.render(
        engine_lock.from_wheels(engine_lock.hash_wheelhouse(wheels))
    )
    assert engine(kvceph_engine_profile=LAB).lock_text is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (True, "kvceph_engine_lock = True: must be a lock file's path or False; fix: name the "
         "file, or False for none"),
        ("/nonexistent/lock.txt", "kvceph_engine_lock = '/nonexistent/lock.txt': [Errno 2]"),
    ],
)  # fmt: skip
def test_a_bad_lock_setting_is_one_line(value, why):
    with pytest.raises(SettingsError) as caught:
        engine(kvceph_engine_lock=value)
    assert str(caught.value).startswith(f"gpu1: {why}") and "\n" not in str(caught.value)


def test_a_profile_changed_without_make_locks_is_refused_in_one_line(monkeypatch):
    packages = ["vllm==0.25.1", "lmcache==0.5.6", "x==1"]
    nvidia = dict(engine_settings.DEFAULT_PROFILES["nvidia"], packages=packages)
    monkeypatch.setitem(engine_settings.DEFAULT_PROFILES, "nvidia", nvidia)
    with pytest.raises(SettingsError) as caught:
        engine()
    assert str(caught.value) == (
        "gpu1: kvceph_engine_profile = 'locks/nvidia.txt': does not lock the profile's "
        "x==1; fix: run `make locks`"
    )
    monkeypatch.setitem(engine_settings.BUILTIN_LOCKS, "nvidia", "locks/absent.txt")
    monkeypatch.setitem(engine_settings.DEFAULT_PROFILES, "nvidia", nvidia)
    with pytest.raises(SettingsError, match=r"the shipped lock locks/absent.txt: .*make locks"):
        engine()


# --- One lock for every CPython minor ---------------------------------------------------------


def _compiled(*lines: str) -> str:
    return "".join(lines)


PY311 = _compiled(
    f"async-timeout==5.0.1 \\\n    --hash=sha256:{A}\n    # via redis\n",
    f"networkx==3.6.1 \\\n    --hash=sha256:{B}\n    # via torch\n",
)
PY313 = _compiled(
    f"networkx==3.6.1 \\\n    --hash=sha256:{B} \\\n    --hash=sha256:{C}\n    # via torch\n",
    f"six==1.17.0 \\\n    --hash=sha256:{D}\n    # via -r /tmp/x/profile.in, torch\n",
)


def test_the_merge_keeps_every_minors_distributions_and_all_their_hashes():
    lock = engine_lock.merge({"3.11": PY311, "3.13": PY313})
    assert lock == {
        "async-timeout": engine_lock.Locked("5.0.1", (A,)),
        "networkx": engine_lock.Locked("3.6.1", (B, C)),
        "six": engine_lock.Locked("1.17.0", (D,)),
    }
    assert engine_lock.via(PY313) == {
        "networkx": ("torch",),
        "six": ("-r /tmp/x/profile.in", "torch"),
    }
    with pytest.raises(ValueError) as caught:
        engine_lock.merge({"3.11": PY311, "3.12": PY313.replace("3.6.1", "3.7")})
    assert str(caught.value) == (
        "networkx resolves to 3.6.1 on CPython 3.11 but 3.7 on 3.12: one lock cannot serve "
        "both; fix: pin networkx in the profile's packages to a version both can install, or "
        "drop a minor"
    )


def test_a_shipped_lock_says_what_it_covers_and_parses_back():
    lock = engine_lock.merge({"3.11": PY311, "3.13": PY313})
    fields = {"profile": "six==1.17.0", "python": "3.11 3.13", "platform": "x86_64-manylinux_2_31"}
    text = engine_lock.render_shipped(lock, fields, ["a note"], {"six": ("torch",)})
    assert text.startswith("# a note\n# kvceph-lock-profile: six==1.17.0\n")
    assert f"six==1.17.0 \\\n    --hash=sha256:{D}\n    # via torch\n" in text
    assert engine_lock.parse(text) == lock and engine_lock.header(text) == fields
    assert engine_lock.pythons(text) == ("3.11", "3.13")
    # A lock that does not say (the wheelhouse's, an operator's uv output): nothing to check.
    assert (
        engine_lock.pythons(engine_lock.render(lock)) is None and engine_lock.pythons(None) is None
    )


# --- locks/compile.py against a stand-in uv -----------------------------------------------------

# Writes the compile for the --python-version it is given into -o (recording the preferences
# it found there), and passes the dry-run install.
FAKE_UV = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
if args[:2] == ["pip", "install"]:
    sys.exit(0)
out = args[args.index("-o") + 1]
minor = args[args.index("--python-version") + 1]
seen = open(out).read() if os.path.exists(out) else ""
with open(os.environ["FAKE_UV_LOG"], "a") as log:
    log.write(f"{minor} prefer={'networkx==3.6.1' in seen}\\n")
with open(os.environ["FAKE_UV_DIR"] + "/" + minor) as src, open(out, "w") as dst:
    dst.write(src.read())
"""


def test_compile_merges_one_compile_per_minor_and_writes_the_header(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    top = f"kvceph-x==1.0 \\\n    --hash=sha256:{C}\n    # via -r /tmp/kvceph-lock-1/profile.in\n"
    (tmp_path / "3.11").write_text(PY311 + top)
    (tmp_path / "3.13").write_text(PY313 + top)
    out = tmp_path / "mine.txt"
    env = dict(os.environ, FAKE_UV_DIR=str(tmp_path), FAKE_UV_LOG=str(tmp_path / "log"))
    cmd = [sys.executable, "-m", "locks.compile", "--uv", str(uv), "--packages", "kvceph-x==1.0",
           "--python", "3.11", "--python", "3.13", "--output", str(out)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert (
        f"{out}: 4 distributions, 5 hashes, CPython 3.11 3.13 x86_64-manylinux_2_31" in done.stdout
    )
    size = len(out.read_bytes())
    assert re.search(rf", {size} bytes, written \(\d+ s\)$", done.stdout.rstrip())
    text = out.read_text()
    assert engine_lock.header(text) == {
        "profile": "kvceph-x==1.0",
        "python": "3.11 3.13",
        "platform": "x86_64-manylinux_2_31",
    }
    assert "kvceph-x==1.0 \\\n" in text and "    # via the profile\n" in text
    assert text.startswith("# kvceph's engine lock for the profile in its header.\n# Generated by")
    # The second minor prefers the first's versions; a second run the lock already there.
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert re.search(r", unchanged \(\d+ s\)$", done.stdout.rstrip())
    assert (tmp_path / "log").read_text() == (
        "3.11 prefer=False\n3.13 prefer=True\n3.11 prefer=True\n3.13 prefer=True\n"
    )
