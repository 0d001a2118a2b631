"""Preflight: bad inventories and broken templates stop the run before any host is touched."""

from __future__ import annotations

import pytest
from fake_deploy import _commands, fake_facts
from fake_deploy import run as _run

from deploys import paths


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
            "kvceph: controller: S3 credentials missing: neither KVCEPH_S3_ADMIN_ACCESS_KEY and "
            "KVCEPH_S3_ACCESS_KEY_<GROUP> are set nor /nonexistent/secrets.env holds them; fix: "
            "export them or write /nonexistent/secrets.env (KEY=VALUE, mode 0600; "
            "docs/security.md)",
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
            "Qwen/Qwen3-32B, 40960 tokens (deploys/tier/kv_sizing.py KNOWN_MODELS), and no rope "
            "scaling is configured: vLLM would refuse to start; fix: use at most 40960, or "
            "configure rope scaling (config.json rope_scaling, or --hf-overrides in "
            "kvceph_engine_profile.extra_args), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in "
            "kvceph_extra_env",
        ),
        (
            "env_newline",
            "kvceph: @fake/gpu1: kvceph_extra_env = 'NCCL_DEBUG': its value holds a newline, "
            "which the engine's env file (env) cannot carry in a value; fix: write the value on "
            "one line, without it",
        ),
        (
            "env_devices",
            "kvceph: @fake/gpu1: kvceph_extra_env = 'CUDA_VISIBLE_DEVICES': is set by kvceph "
            "from each engine's devices (kvceph_engines); fix: remove it; list each engine's "
            "devices in kvceph_engines",
        ),
        (
            "dtype_arg",
            "kvceph: @fake/gpu1: kvceph_engine_profile.extra_args = '--kv-cache-dtype=fp8': sets "
            "--kv-cache-dtype, which kvceph renders itself (the last one wins, so the engine "
            "would run other than kvceph sizes, keys and checks it); fix: remove it; set "
            "--kv-cache-dtype through its kvceph setting (docs/settings.md)",
        ),
        (
            "pools_in_gpu",
            "kvceph: @fake/gpu1: kvceph_ceph_pools is set where it has no effect (it acts on "
            "@fake/ceph1 (ceph_admin/rgw) only): it would be ignored and never checked; fix: set "
            "it in the group_data of the hosts it acts on (or all.py)",
        ),
        (
            "region_ini",
            "kvceph: @fake/gpu1: kvceph_s3_region = 'default\\nendpoint_url = "
            "http://203.0.113.9': holds a newline, which ~/.aws/config and the admin host's S3 "
            "INI (INI) cannot carry in a value; fix: write the value on one line, without it",
        ),
        # Issue 49: one check per kind of value, before any host is touched.
        (
            "service_root",
            "kvceph: @fake/gpu1: kvceph_service_user = 'root': the engines would run as root, and "
            "the stage sets root's home and a nologin shell; fix: use an account of the engine's "
            "own, e.g. vllm",
        ),
        (
            "home_etc",
            "kvceph: @fake/gpu1: kvceph_service_home = '/etc': is a system directory, and kvceph "
            "chowns it to the engine's user and makes it writable in the unit; fix: use a "
            "directory of kvceph's own below it, e.g. /var/lib/vllm",
        ),
        (
            "uid_collapse",
            "kvceph: @fake/gpu1: kvceph_s3_user + kvceph_cache_group = 'lmcache-gpu': is also the "
            "admin (bucket owner) on @fake/gpu1 (kvceph_s3_admin_user), here cache group gpu's "
            "user: one RGW user in two roles holds both keys and undoes the least-privilege "
            "split; fix: give each RGW identity its own uid",
        ),
        (
            "pip_option",
            "kvceph: @fake/gpu1: kvceph_engine_profile.packages = "
            "'--extra-index-url=http://203.0.113.9/simple': is a pip option, not a package (pip "
            "would take it as an argument); fix: list name==version pins only; an index goes in "
            "kvceph_engine_index_url, local wheels in kvceph_engine_wheelhouse",
        ),
        (
            "quota_nan",
            "kvceph: @fake/ceph1: kvceph_s3_quota_max_size_gb = nan: is not a finite number: a "
            "size in GiB > 0 is; fix: use e.g. 2048",
        ),
        (
            "vip_no_prefix",
            "kvceph: @fake/ceph1: kvceph_rgw_ingress_virtual_ip = '10.67.67.100': has no prefix "
            "(cephadm picks the interface from the VIP's subnet); fix: use e.g. 10.67.67.100/24",
        ),
        (
            "router_port",
            "kvceph: @fake/gpu1: kvceph_router_port = 8000: is also kvceph_engines vllm's port on "
            "this host: the second listener would fail to start; fix: give each listener of the "
            "host its own port",
        ),
        (
            "mon_port",
            "kvceph: @fake/ceph1: kvceph_ceph_mgr_exporters = 'ceph1:99999': has no port "
            "1..65535; fix: use e.g. 'ceph1:9283'",
        ),
        (
            "retire_secret",
            "kvceph: @fake/gpu1: kvceph_retire_access_key = '***': has the shape of a secret key "
            "(40 characters, mixed case), not of an access key id (upper case and digits); fix: "
            "pass --data kvceph_retire_access_key=<old access key> (never its secret)",
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
    assert "EXAMPLEKEY" not in out


# --- extra_args that set a flag kvceph renders itself ---------------------------------------------


def _with_args(*args: str) -> dict:
    from deploys import settings

    data = {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_engine_profile": {"extra_args": [*args]}}
    return {"gpu1": settings.load(data, "gpu1", ["gpu"])}


@pytest.mark.parametrize(
    ("args", "shown", "flag"),
    [
        (("--kv-cache-dtype", "fp8"), "--kv-cache-dtype", "--kv-cache-dtype"),
        (("--port=9000",), "--port=9000", "--port"),
        (("--max_model_len", "8192"), "--max_model_len", "--max-model-len"),
        (("-tp", "4"), "-tp", "--tensor-parallel-size"),
        (("--kv-transfer-config.kv_role", "kv_producer"), "--kv-transfer-config.kv_role",
         "--kv-transfer-config"),
        (("--kv-cache-dt", "fp8"), "--kv-cache-dt", "--kv-cache-dtype"),
        (("--host", "0.0.0.0"), "--host", "--host"),
    ],
)  # fmt: skip
def test_extra_args_that_set_a_rendered_flag_are_refused(args, shown, flag):
    from deploys import preflight
    from deploys.settings.reader import SettingsError

    with pytest.raises(SettingsError) as caught:
        preflight.check_engine_args(_with_args(*args))
    assert str(caught.value) == (
        f"gpu1: kvceph_engine_profile.extra_args = {shown!r}: sets {flag}, which kvceph renders "
        "itself (the last one wins, so the engine would run other than kvceph sizes, keys and "
        f"checks it); fix: remove it; set {flag} through its kvceph setting (docs/settings.md)"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--kv-cache-memory-bytes", "8G"),  # a look-alike of --kv-cache-dtype
        ("--max-num-seqs", "64"),
        ("--middleware", "my.Middleware"),  # vLLM appends middlewares
        ("--served-model-name=port-8000",),  # a flag's value naming one
        ("--enable-prefix-caching",),
    ],
)
def test_extra_args_kvceph_does_not_render_are_accepted(args):
    from deploys import preflight

    preflight.check_engine_args(_with_args(*args))


def _seed_files(version: str, seed: int) -> dict:
    from deploys.engine import upgrade

    return {
        "/etc/kvceph/vllm.env": {
            "versions": upgrade.versions_value(version, "0.5.6"),
            "seed_sha256": upgrade.seed_sha256(seed),
        }
    }


def test_each_cache_group_gets_its_key_schemes_seed_from_every_hosts_env_files():
    from deploys import preflight
    from deploys.engine import upgrade
    from deploys.settings.inventory import check_inventory

    hosts, _ = _hosts_and_creds()
    groups = check_inventory(list(hosts.values()))
    facts = {
        "@fake/gpu1": _seed_files("0.26.0", 67),  # the profile says 0.33: another scheme
        "@fake/gpu2": {},  # a replaced host: no files yet, it follows its group
        "@fake/gaudi1": _seed_files("0.26.0", 67),  # its profile's own scheme: kept
    }
    asked = []

    def read(name, connect):
        asked.append((name, connect))
        return facts[name]

    out, lines = preflight.apply_scheme_seeds(hosts, groups, read)
    own = upgrade.scheme_seed(67, "vllm-0.33/lmcache-0.5.6")
    assert [out[h].engine.python_hash_seed for h in ("@fake/gpu1", "@fake/gpu2")] == [own, own]
    assert out["@fake/gaudi1"].engine.python_hash_seed == 67
    assert out["@fake/gpu2"].engine.hash_seed_source == (
        "kvceph_engine_profile (key scheme vllm-0.33/lmcache-0.5.6's own hash seed)"
    )
    assert not any(connect for _, connect in asked)  # every host in the run: nothing connected
    assert [x for x in lines if "TP=2" in x] == [
        "kvceph: cache group Qwen/Qwen3-32B TP=2: key scheme vllm-0.33/lmcache-0.5.6: hash seed: "
        "its own seed (derived from the fleet's), not vllm-0.26/lmcache-0.5.6's: old and new "
        "object names cannot collide"
    ]


def test_a_host_run_alone_reads_its_groups_other_hosts_first():
    from deploys import preflight
    from deploys.engine import upgrade
    from deploys.settings.inventory import check_inventory

    hosts, _ = _hosts_and_creds()
    groups = [g for g in check_inventory(list(hosts.values())) if "@fake/gpu1" in g.hosts]
    own = upgrade.scheme_seed(67, "vllm-0.33/lmcache-0.5.6")
    # --limit @fake/gpu2 on a replaced host: gpu1 is outside the run and runs the own seed.
    outside = {"@fake/gpu1": _seed_files("0.33.0", own)}

    def read(name, connect):
        if name == "@fake/gpu2":
            return {}
        return outside[name] if connect else preflight.OUTSIDE_RUN

    out, lines = preflight.apply_scheme_seeds(hosts, groups, read)
    assert out["@fake/gpu2"].engine.python_hash_seed == own
    assert lines[0].endswith("hash seed: its own seed, as its engines run it")
    # gpu1 unreachable too: the fleet's seed, and the line says what was not read.
    out, lines = preflight.apply_scheme_seeds(
        hosts, groups, lambda n, c: {} if n == "@fake/gpu2" else preflight.OUTSIDE_RUN
    )
    assert out["@fake/gpu2"].engine.python_hash_seed == 67
    assert lines[0].endswith("hash seed: the fleet's seed (not read: @fake/gpu1, unreachable)")
