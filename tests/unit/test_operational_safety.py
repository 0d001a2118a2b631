"""Operational safety: RGW down, mons down, cache-key changes, template errors, no deletes,
bad inventories. Offline: local HTTP servers on 127.0.0.1 and pyinfra's @fake connector."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest

from deploys import paths
from deploys.facts.rgw import HTTP_PROBE, RgwReachable
from deploys.operations import s3

HAPROXY_503 = (
    b"<html><body><h1>503 Service Unavailable</h1>\n"
    b"No server is available to handle this request.\n</body></html>\n"
)
RGW_LIST = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult>'
    b"<Owner><ID>anonymous</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>"
)
RGW_ERROR = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code></Error>'


def _server(status: int, body: bytes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _probe(url: str, tries: int = 2) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", HTTP_PROBE, url, "2", str(tries), "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return RgwReachable().process(proc.stdout.splitlines())


@pytest.mark.parametrize(
    ("status", "body", "reachable"),
    [(200, RGW_LIST, True), (403, b"", True), (503, RGW_ERROR, True), (503, HAPROXY_503, False)],
)
def test_probe_counts_any_rgw_answer_but_not_a_proxy_page(status, body, reachable):
    srv = _server(status, body)
    try:
        probe = _probe(f"http://127.0.0.1:{srv.server_port}/")
    finally:
        srv.shutdown()
    assert probe["reachable"] is reachable
    if reachable:
        assert probe == {"reachable": True, "status": status, "attempts": []}
    else:
        assert probe["attempts"] == [
            f"try {i}/2: HTTP 503 from a proxy, not RGW: 503 Service Unavailable No server is "
            "available to handle this request."
            for i in (1, 2)
        ]


def test_probe_reports_connection_refused_each_try():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    probe = _probe(f"http://127.0.0.1:{port}/", tries=3)
    assert probe["reachable"] is False
    assert len(probe["attempts"]) == 3
    assert all("Connection refused" in a for a in probe["attempts"])


def test_probe_command_is_bounded_and_never_fails():
    cmd = str(RgwReachable().command("http://127.0.0.1:80", timeout=5, tries=3, delay=2))
    assert cmd.startswith("timeout 26 python3 -c ")
    assert cmd.endswith("http://127.0.0.1:80 5 3 2 2>&1 || echo kvceph-probe-failed=$?")


def test_probe_killed_by_its_timeout_reads_as_unreachable():
    probe = RgwReachable().process(["try 1/3: timed out", "kvceph-probe-failed=124"])
    assert probe == {
        "reachable": False,
        "status": None,
        "attempts": ["try 1/3: timed out", "probe timed out"],
    }
    assert RgwReachable().process(["/bin/sh: python3: not found", "kvceph-probe-failed=127"])[
        "attempts"
    ] == ["probe failed (exit 127): /bin/sh: python3: not found"]


def test_unreachable_message_is_one_line_naming_endpoint_and_host():
    probe = {"reachable": False, "status": None, "attempts": ["try 3/3: [Errno 111] refused"]}
    message = s3.unreachable_message("http://127.0.0.1:80", "ceph1", probe)
    assert message == (
        "S3 tier: cannot reach RGW at http://127.0.0.1:80 from ceph1: [Errno 111] refused; "
        "fix: start RGW / check the endpoint"
    )
    assert s3.unreachable_message("http://x", "h", {"reachable": True, "status": 200}) is None


# --- the whole deploy against pyinfra's @fake connector ----------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
PYINFRA = __import__("pathlib").Path(sys.executable).parent / "pyinfra"
sys.path.insert(0, str(REPO / "tests" / "inventories"))

import fake_facts  # noqa: E402
from test_dry_run_fake import _commands  # noqa: E402


def _run(inventory: str, *flags: str, env: dict | None = None) -> tuple[int, str]:
    environ = {
        **__import__("os").environ,
        "KVCEPH_S3_ACCESS_KEY": fake_facts.FAKE_ACCESS_KEY,
        "KVCEPH_S3_SECRET_KEY": fake_facts.FAKE_SECRET_KEY,
        "PYINFRA_FAKE_DELAY": "0",
        "PYINFRA_FAKE_DELAY_JITTER": "0",
        **(env or {}),
    }
    proc = subprocess.run(
        [str(PYINFRA), *flags, inventory, "deploy.py"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


RGW_DOWN_LINE = (
    "S3 tier: cannot reach RGW at http://127.0.0.1:80 from @fake/ceph1: HTTP 503 from a proxy, "
    "not RGW: 503 Service Unavailable No server is available to handle this request.; "
    "fix: start RGW / check the endpoint"
)


def test_rgw_down_dry_run_stops_with_one_line():
    rc, out = _run("tests/inventories/fake_rgw_down.py", "--dry")
    assert rc != 0
    errors = [line for line in out.splitlines() if line.startswith("--> ") and "error" in line]
    assert len(errors) == 1 and errors[0].endswith(RGW_DOWN_LINE), errors
    assert out.count("S3 tier: RGW at http://127.0.0.1:80 from @fake/ceph1: try ") == 3


def test_rgw_down_while_the_run_deploys_rgw_plans_and_checks_at_execution():
    # Fresh cluster: the RGW spec is applied by this run, so planning cannot expect an answer.
    rc, out = _run("tests/inventories/fake_rgw_down.py", "--dry", env={"KVCEPH_FAKE_FRESH": "1"})
    assert rc == 0, out[-2000:]
    assert "RGW service | Apply the rgw.standard spec" in out


def test_rgw_down_executed_stops_before_any_s3_write():
    # -y on a fresh cluster: ops run at execution time; the probe must fail before the first
    # S3 tier write (rgw_dns_name, s3admin.py, files) and before any engine is touched.
    rc, out = _run(
        "tests/inventories/fake_rgw_down.py",
        "-y",
        "-vvv",
        "--debug",
        env={"KVCEPH_FAKE_FRESH": "1"},
    )
    assert rc != 0
    assert RGW_DOWN_LINE in out
    commands = [cmd for _, cmd in _commands(out)]
    assert any("osd pool create" in c for c in commands)  # the earlier stage did run
    # Reading the running engine is allowed (the upgrade check reads it while the vLLM stage is
    # prepared: ServiceDrift, `systemctl show` + hashes); changing anything is not.
    commands = [c for c in commands if not c.startswith("timeout 20 systemctl show")]
    for write in ("config set client.rgw", "s3admin", "/usr/local/lib/kvceph", "systemctl"):
        assert [c for c in commands if write in c] == [], write
    probe = next(i for i, c in enumerate(commands) if "urllib.request" in c)
    # The run applied the RGW spec first: the probe gives cephadm time to start RGW.
    assert "http://127.0.0.1:80 5 20 2 2>&1" in commands[probe]
    assert probe == len(commands) - 1 or all("radosgw-admin" in c for c in commands[probe + 1 :])


# --- mons down ---------------------------------------------------------------------------------

MON_TIMEOUT = "[errno 110] RADOS timed out (error connecting to the cluster)"


def test_ceph_reachable_reads_health_and_failures():
    from deploys.facts.ceph import CephReachable

    fact = CephReachable()
    cmd = str(fact.command(connect_timeout=5, command_timeout=60))
    assert cmd == ("timeout 60 ceph --connect-timeout 5 health 2>&1 || echo kvceph-ceph-failed=$?")
    assert fact.process(["HEALTH_WARN 1 pool(s) have no replicas configured"])["reachable"]
    monclient = "2026-11-30T01:00:00.000+0000 7f monclient(hunting): authenticate timed out after 5"
    assert fact.process([monclient, MON_TIMEOUT, "kvceph-ceph-failed=1"]) == {
        "reachable": False,
        "rc": 1,
        "error": MON_TIMEOUT,
    }
    assert fact.process(["kvceph-ceph-failed=124"]) == {
        "reachable": False,
        "rc": 124,
        "error": "no answer, killed by timeout (exit 124)",
    }


def test_ceph_unreachable_message_is_one_line():
    from deploys.stages.ceph_pools import unreachable_message

    probe = {"reachable": False, "rc": 1, "error": MON_TIMEOUT}
    assert unreachable_message("ceph1", 5, probe) == (
        "Ceph pools: the cluster is unreachable from ceph1 within 5s (ceph --connect-timeout): "
        f"{MON_TIMEOUT}; fix: check the mons"
    )
    assert unreachable_message("ceph1", 5, {"reachable": True}) is None


@pytest.mark.parametrize("flags", [("--dry",), ("-y",)])
def test_mon_down_stops_with_one_line_before_anything(flags):
    rc, out = _run("tests/inventories/fake_mon_down.py", *flags, "-vvv", "--debug")
    assert rc != 0
    assert "Traceback" not in out and "continue?" not in out
    line = (
        "Ceph pools: the cluster is unreachable from @fake/ceph1 within 5s "
        f"(ceph --connect-timeout): {MON_TIMEOUT}; fix: check the mons"
    )
    errors = [x for x in out.splitlines() if x.startswith("--> ") and "error" in x]
    assert len(errors) == 1 and errors[0].endswith(line), errors
    ceph_commands = [c for h, c in _commands(out) if h == "@fake/ceph1" and "ceph " in c]
    assert len(ceph_commands) == 1 and " health " in ceph_commands[0]
    assert "Starting operation" not in out


# --- cache-key changes -------------------------------------------------------------------------


def _settings(host: str = "@fake/gpu1", **data):
    from deploys import settings

    layout = fake_facts.Layout("fake_converged", converged=True)
    merged = {**layout.merged_data(host), **data}
    return settings.load(merged, host, layout.host_groups(host))


def _in_use(me) -> dict:
    """CacheKeyInUse as the host's files read back after a run with settings ``me``."""
    from deploys import render
    from deploys.facts.engine import CacheKeyInUse

    pattern = __import__("re").compile(
        r"^(chunk_size|pre_caching_hash_algorithm):|^PYTHONHASHSEED=|^ExecStart="
    )
    texts = (render.lmcache_yaml(me), render.env_file(me, "d" * 64), render.unit(me))
    lines = [line for text in texts for line in text.splitlines() if pattern.match(line)]
    return CacheKeyInUse().process(lines)


def test_cache_key_in_use_reads_the_rendered_files():
    me = _settings()
    assert _in_use(me) == {
        "chunk_size": str(me.lmcache.chunk_size),
        "pre_caching_hash_algorithm": me.lmcache.hash_algorithm,
        "PYTHONHASHSEED": str(me.engine.python_hash_seed),
        "model": me.engine.model,
        "tensor_parallel_size": str(me.engine.tensor_parallel_size),
        "kv_dtype": me.engine.kv_dtype,
    }


def test_no_cache_key_warning_on_a_blank_host_or_unchanged_settings():
    from deploys.stages.inference_config import cache_key_changes

    me = _settings()
    assert cache_key_changes({}, me) == []
    assert cache_key_changes(None, me) == []
    assert cache_key_changes(_in_use(me), me) == []


@pytest.mark.parametrize(
    ("key", "value", "old", "new"),
    [
        ("kvceph_lmcache_chunk_size", 512, "256", "512"),
        ("kvceph_python_hash_seed", 68, "67", "68"),
        ("kvceph_tensor_parallel_size", 4, "2", "4"),
        ("kvceph_model", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-8B"),
    ],
)
def test_cache_key_change_warns_with_host_setting_old_and_new(key, value, old, new):
    from deploys.stages.inference_config import cache_key_changes

    current = _in_use(_settings())
    assert current  # the host runs an engine
    changes = cache_key_changes(current, _settings(**{key: value}))
    assert changes == [
        f"kvceph: @fake/gpu1: cache key setting {key} changes {old} -> {new}: the KV cache "
        "already in bucket lmcache becomes unreachable for cache group Qwen/Qwen3-32B TP=2 "
        "(its objects age out via the lifecycle rule, 7 days)"
    ]


def test_cache_key_hash_algorithm_and_kv_dtype_when_passed():
    from deploys.facts.engine import cache_key_from_argv
    from deploys.stages.inference_config import cache_key_changes

    me = _settings()
    current = {**_in_use(me), "pre_caching_hash_algorithm": "builtin", "kv_dtype": "fp8"}
    changes = cache_key_changes(current, me)
    assert [c.split(" changes ")[0].rsplit(" ", 1)[1] for c in changes] == [
        "kvceph_lmcache_hash_algorithm",
        "kvceph_kv_dtype",
    ]  # --kv-cache-dtype is on kvceph's command line, so a dtype change is seen
    assert cache_key_from_argv(["x", "serve", "m", "--kv-cache-dtype=fp8"]) == {
        "model": "m",
        "kv_dtype": "fp8",
    }


def test_drift_scenario_logs_cache_key_warnings_only_where_changed():
    rc, out = _run("tests/inventories/fake_drift.py", "--dry")
    assert rc == 0
    warned = sorted(
        __import__("re").findall(r"kvceph: (@fake/\w+): cache key setting (\S+) changes", out)
    )
    assert warned == [
        ("@fake/gaudi1", "kvceph_lmcache_chunk_size"),
        ("@fake/gpu2", "kvceph_python_hash_seed"),
    ]
    rc, out = _run("tests/inventories/fake_converged.py", "--dry")
    assert rc == 0 and "cache key setting" not in out


# --- template errors stop the run before any host is touched ------------------------------------


def _hosts_and_creds():
    layout = fake_facts.Layout("fake_fresh", converged=False)
    return {h: layout.host_settings(h) for h in layout.hosts}, fake_facts.credentials()


def _broken_templates(tmp_path, name: str, text: str):
    import shutil

    shutil.copytree(paths.TEMPLATES, tmp_path, dirs_exist_ok=True)
    (tmp_path / name).write_text(text)
    return tmp_path


def test_every_template_renders_for_every_host():
    from deploys import preflight

    preflight.check_templates(*_hosts_and_creds())


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        (
            "lmcache.yaml.j2",
            "{% for key in top %}\n{{ key }\n",
            "TemplateSyntaxError: unexpected '}'",
        ),
        ("vllm.service.j2", "ExecStart={{ exec_start }} {{ no_such_value }}\n", "UndefinedError"),
    ],
)
def test_broken_inference_template_is_one_preflight_line(monkeypatch, tmp_path, name, text, error):
    import jinja2

    from deploys import preflight, render

    folder = _broken_templates(tmp_path, name, text)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    monkeypatch.setattr(render, "_env", env)
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.check_templates(*_hosts_and_creds())
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"kvceph: @fake/gaudi1: template {name}: {error}"), message
    assert message.endswith(f"; fix: correct templates/{name} or the setting it renders")
    assert fake_facts.FAKE_SECRET_KEY not in message


def test_broken_rgw_spec_template_is_one_preflight_line(monkeypatch, tmp_path):
    from deploys import preflight

    folder = _broken_templates(tmp_path, "rgw_spec.yaml.j2", "service_id: {{ service_idd }}\n")
    monkeypatch.setattr(paths, "TEMPLATES", folder)
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.check_templates(*_hosts_and_creds())
    assert str(caught.value) == (
        "kvceph: @fake/ceph1: template rgw_spec.yaml.j2: UndefinedError: 'service_idd' is "
        "undefined; fix: correct templates/rgw_spec.yaml.j2 or the setting it renders"
    )


# --- never destroy data --------------------------------------------------------------------------

# Verbs that delete pools, buckets, users, keys, objects, services or lifecycle rules.
DESTRUCTIVE = [
    r"\bpool\s+(delete|rm|rename)\b",
    r"mon_allow_pool_delete",
    r"really-really-mean-it",
    r"\bbucket\s+(rm|unlink|purge)\b",
    r"\buser\s+(rm|suspend)\b",
    r"\bkey\s+rm\b",
    r"--purge-(objects|data|keys)",
    r"\b(realm|zonegroup|zone)\s+(rm|delete)\b",
    r"\borch\s+(rm|daemon\s+rm)\b",
    r"\brados\b[^\n]*\s(rm|purge|cleanup)\b",
    r"\bdelete_(bucket|object|objects|bucket_lifecycle|bucket_policy)\b",
    r"\brm\s+-[a-z]*r",
]
_DESTRUCTIVE = __import__("re").compile("|".join(DESTRUCTIVE))


def _destructive(text: str) -> list[str]:
    return [m.group(0) for m in _DESTRUCTIVE.finditer(text)]


def test_destructive_patterns_catch_what_they_should():
    for bad in (
        "timeout 60 ceph --connect-timeout 5 osd pool delete p p --yes-i-really-really-mean-it",
        "timeout 60 radosgw-admin bucket rm --bucket=lmcache --purge-objects",
        "timeout 60 radosgw-admin user rm --uid=lmcache",
        "client.delete_bucket_lifecycle(Bucket=name)",
        "client.delete_objects(Bucket=b, Delete=d)",
    ):
        assert _destructive(bad), bad


@pytest.mark.parametrize("scenario", ["fresh", "converged", "drift"])
def test_no_destructive_command_in_any_plan(scenario):
    # Executed on the fake connector (-y): every fact read and every operation command.
    rc, out = _run(f"tests/inventories/fake_{scenario}.py", "-y", "-vvv", "--debug")
    commands = [cmd for _, cmd in _commands(out)]
    assert len(commands) > 20, out[-2000:]
    assert {c: _destructive(c) for c in commands if _destructive(c)} == {}


def test_no_destructive_call_in_the_deploy_code():
    # The deploy and its remote helper; deploys/verification/ is verify.py's, which deletes
    # only the objects its own run created (bookkeeping.py); the key rotation modules are
    # rotate.py's, which removes only the old key the operator names (checked below).
    sources = [
        p
        for p in (REPO / "deploys").rglob("*.py")
        if "verification" not in p.parts
        and p.name != "verify.py"
        and str(p.relative_to(REPO)) not in ROTATION_ONLY
    ] + [REPO / "deploy.py"]
    found = {str(p.relative_to(REPO)): _destructive(p.read_text()) for p in sources}
    assert {k: v for k, v in found.items() if v} == {}
    assert (REPO / "deploys" / "remote" / "s3admin.py") in sources


ROTATION_ONLY = ("deploys/stages/rotation.py", "deploys/operations/s3_rotation.py")


def test_key_removal_is_reachable_only_from_rotate_py():
    # Nothing deploy.py can import names the rotation modules; their only destructive verb
    # is the key removal.
    names = __import__("re").compile(r"import (.*\b)?rotation\b|s3_rotation|deploys\.rotation")
    importers = {
        str(p.relative_to(REPO))
        for p in [*(REPO / "deploys").rglob("*.py"), REPO / "deploy.py", REPO / "verify.py"]
        if names.search(p.read_text())
    }
    assert importers <= set(ROTATION_ONLY), importers
    for path in ROTATION_ONLY:
        assert set(_destructive((REPO / path).read_text())) <= {"key rm"}, path


def test_lifecycle_rules_of_others_and_stale_ones_are_kept_without_opt_in():
    desired = s3.lifecycle_rules("kvceph-expire", 7, 1)
    foreign = {"ID": "backup-keep", "Status": "Enabled", "Filter": {"Prefix": "b/"}}
    stale = {**desired[0], "ID": "kvceph-old"}
    merge = s3.merge_lifecycle([foreign, stale], desired)
    assert merge.removed == [] and merge.kept_stale == ["kvceph-old"]
    assert foreign in merge.rules and stale in merge.rules
    assert s3.merge_lifecycle([foreign, stale], desired, allow_removal=True).removed == [
        "kvceph-old"
    ]


@pytest.mark.parametrize("existing", ["erasure", "4"])
def test_pool_of_another_type_is_refused_even_with_every_opt_in(existing):
    from deploys.operations import ceph

    have = {
        "type": existing,
        "size": 3,
        "min_size": 2,
        "pg_num": 8,
        "pg_num_target": 8,
        "autoscale_mode": "off",
        "applications": ["rgw"],
    }
    with pytest.raises(ceph.Refused, match=f"is {existing}, kvceph wants replicated"):
        ceph.plan_pool(
            have,
            "default.rgw.buckets.data",
            8,
            size=3,
            min_size=2,
            application="rgw",
            allow_data_movement=True,
            allow_pg_decrease=True,
        )


# --- bad inventories: refused before any host is touched -----------------------------------------


@pytest.mark.parametrize(
    ("bad", "line"),
    [
        (
            "both",
            "kvceph: @fake/gpu1: groups = ['gpu', 'gaudi', 'fake_bad', '@fake']: host is in both "
            "gpu and gaudi; fix: put it in one group",
        ),
        (
            "no_inference",
            "kvceph: inventory: gpu + gaudi = []: no inference hosts; fix: add hosts to gpu or "
            "gaudi",
        ),
        (
            "two_admins",
            "kvceph: inventory: ceph_admin = ['@fake/ceph1', '@fake/ceph2']: exactly one Ceph "
            "admin host is needed; fix: put one host in the ceph_admin group",
        ),
        (
            "no_secrets",
            "kvceph: controller: S3 credentials missing: neither KVCEPH_S3_ACCESS_KEY/"
            "KVCEPH_S3_SECRET_KEY are set nor /nonexistent/secrets.env exists; fix: export them "
            "or write /nonexistent/secrets.env (KEY=VALUE, mode 0600)",
        ),
        (
            "hf_token",
            "kvceph: @fake/gpu1: kvceph_hf_token = '***': secrets must not live in group_data or "
            "the inventory (they are committed); fix: export KVCEPH_VLLM_API_KEY / "
            "KVCEPH_HF_TOKEN / KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY or put them in "
            "secrets.env (0600; docs/security.md)",
        ),
        (
            "secret_env",
            "kvceph: @fake/gpu1: kvceph_extra_env = 'HF_TOKEN': looks like a secret "
            "(KEY/TOKEN/SECRET/PASSWORD/CREDENTIALS in its name) and would be written in clear "
            "from a committed file; fix: remove it; export KVCEPH_VLLM_API_KEY / KVCEPH_HF_TOKEN "
            "/ KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY or put them in secrets.env (0600; "
            "docs/security.md)",
        ),
        (
            "secret_arg",
            "kvceph: @fake/gpu1: kvceph_engine_profile.extra_args = '--api-key': passes a secret "
            "on the command line (readable in /proc/<pid>/cmdline, shown by systemctl show, the "
            "plan and the journal); fix: remove it; export KVCEPH_VLLM_API_KEY / KVCEPH_HF_TOKEN "
            "/ KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY or put them in secrets.env (0600; "
            "docs/security.md)",
        ),
        (
            "typo",
            "kvceph: @fake/gpu1: kvceph_tensor_paralel_size = 4: is not a kvceph setting (it "
            "would be ignored and the default deployed); fix: did you mean "
            "kvceph_tensor_parallel_size?",
        ),
        (
            "secret_key",
            "kvceph: @fake/gpu1: HF_TOKEN = '***': looks like a secret (KEY/TOKEN/SECRET/"
            "PASSWORD/CREDENTIALS in its name), and group_data and the inventory are committed; "
            "fix: remove it; export KVCEPH_VLLM_API_KEY / KVCEPH_HF_TOKEN / KVCEPH_S3_ACCESS_KEY "
            "/ KVCEPH_S3_SECRET_KEY or put them in secrets.env (0600; docs/security.md)",
        ),
        (
            "at_model",
            "kvceph: @fake/gpu1: kvceph_model = 'Qwen/Qwen3-32B@v2': contains '@', which LMCache "
            "splits its object keys on; fix: drop the '@...' part (pin a version with "
            "kvceph_model_revision)",
        ),
        (
            "long_context",
            "kvceph: @fake/gpu1: kvceph_max_model_len = 131072: over the native context of "
            "Qwen/Qwen3-32B, 40960 tokens (deploys/kv_sizing.py KNOWN_MODELS), and no rope "
            "scaling is configured: vLLM would refuse to start; fix: use at most 40960, or "
            "configure rope scaling (config.json rope_scaling, or --hf-overrides in "
            "kvceph_engine_profile.extra_args), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in "
            "kvceph_extra_env",
        ),
        (
            "env_newline",
            "kvceph: @fake/gpu1: kvceph_extra_env = 'NCCL_DEBUG': its value holds a newline or "
            "NUL, which the engine's env file cannot carry; fix: put the value on one line",
        ),
        (
            "env_devices",
            "kvceph: @fake/gpu1: kvceph_extra_env = 'CUDA_VISIBLE_DEVICES': is set by kvceph "
            "from each engine's devices (kvceph_engines); fix: remove it; list each engine's "
            "devices in kvceph_engines",
        ),
    ],
)
def test_bad_inventory_is_refused_before_any_host_is_touched(bad, line, monkeypatch):
    env = {"KVCEPH_FAKE_BAD": bad, "KVCEPH_SECRETS_FILE": "/nonexistent/secrets.env"}
    if bad == "no_secrets":
        monkeypatch.delenv("KVCEPH_S3_ACCESS_KEY", raising=False)
        monkeypatch.delenv("KVCEPH_S3_SECRET_KEY", raising=False)
        env.update(KVCEPH_S3_ACCESS_KEY="", KVCEPH_S3_SECRET_KEY="")
    rc, out = _run("tests/inventories/fake_bad.py", "--dry", "-vvv", "--debug", env=env)
    assert rc != 0
    errors = [x for x in out.splitlines() if x.startswith("--> ") and "error" in x]
    assert len(errors) == 1 and errors[0].endswith(line), errors
    assert "Traceback" not in out
    assert _commands(out) == []  # the fake connector answered no command: no fact, no op
    assert "Starting operation" not in out and "Loaded fact" not in out
    assert "hf_fake" not in out  # the refused value itself is never shown
