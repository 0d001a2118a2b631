"""What a new user meets first (issue 53): a make target on a lab that is down or busy stops in
one line, a group_data typo is refused at its file and line before any host is connected,
status.py ends without pyinfra's empty results table, and the README's example verify table is
the report format `make lab` prints, from a recorded report of the cephadm lab."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra_cli.exceptions import get_frame_line_from_tb
from pyinfra_cli.prints import print_rows

from deploys import lab
from deploys.settings import group_data_keys
from deploys.status import controller
from deploys.verification import report as reporting
from deploys.verification.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"
REPORT = ROOT / "tests" / "fixtures" / "verify" / "lab-cephadm-2026-12-07.json"


def _env(tmp_path: Path, instance: str = "97") -> dict[str, str]:
    # no claim, no make flags of an outer `make unit`, a lab dir nothing ever ran in
    env = {k: v for k, v in os.environ.items() if k not in ("KVCEPH_LAB_CLAIM", "MAKEFLAGS")}
    env.pop("MAKELEVEL", None)
    return env | {"KVCEPH_LAB_INSTANCE": instance, "KVCEPH_LAB_DIR": str(tmp_path)}


def _make(tmp_path: Path, target: str) -> subprocess.CompletedProcess:
    """``make TARGET`` as an operator runs it, on the lab instance of :func:`_env`."""
    return subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_lab_without_running_hosts_is_down_in_one_line(tmp_path):
    (tmp_path / "hosts" / "gpu1").mkdir(parents=True)
    # a pid that is no nspawn launcher (this test's own): not a running lab host
    (tmp_path / "hosts" / "gpu1" / "pid").write_text(str(os.getpid()))
    assert lab.running_hosts(tmp_path) == []
    line = lab.down_message(tmp_path, 5)
    assert line is not None and "\n" not in line
    assert f"lab instance 5 ({tmp_path}) is not up" in line
    assert "`KVCEPH_LAB_INSTANCE=5 make lab`" in line
    assert "`make lab`" in lab.down_message(tmp_path, 0)


def test_only_a_pyinfra_cli_run_checks_the_lab():
    assert lab.pyinfra_cli_run(["/x/.venv/bin/pyinfra", "inventories/lab.py", "verify.py"])
    assert not lab.pyinfra_cli_run(["/x/bin/pyinfra", "inventories/lab.py", "debug-inventory"])
    assert not lab.pyinfra_cli_run(["/x/bin/pytest", "tests/unit"])


def test_pyinfra_by_hand_on_a_down_lab_says_so_without_tracebacks(tmp_path):
    run = subprocess.run(
        [str(PYINFRA), "-y", "inventories/lab.py", "verify.py"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "lab instance 97" in out and "is not up" in out, out
    for noise in ("Traceback", "SSHException", "Connecting to hosts", "No hosts remaining"):
        assert noise not in out, out


@pytest.mark.parametrize("target", ["verify", "deploy", "status", "dry", "probe", "rotate-add"])
def test_a_make_target_on_a_down_lab_prints_one_line(tmp_path, target):
    run = _make(tmp_path, target)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "lab instance 97" in lines[0] and "is not up" in lines[0], lines
    assert "Error" not in run.stderr and not run.stdout.strip()


def test_make_lab_on_a_busy_instance_is_one_line_without_make_noise(tmp_path):
    # a live claim that is not the caller's: this test's own process holds it
    sys.path.insert(0, str(ROOT / "lab"))
    import claim  # noqa: PLC0415

    token = claim.token_of(os.getpid())
    (tmp_path / "claim").write_text(f"token={token}\nwhat=make lab\nsince=now\n")
    for target in ("lab", "lab-up"):
        run = _make(tmp_path, target)
        # make's own status for a run stopped before it did anything (README: 2)
        assert run.returncode == 2, run.stderr
        lines = run.stderr.splitlines()
        assert len(lines) == 1 and "is in use by `make lab`" in lines[0], lines
        assert "Error 75" not in run.stderr
    env = _env(tmp_path)
    busy = subprocess.run(
        [sys.executable, "lab/claim.py", "busy"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert busy.returncode == claim.BUSY_RC and "is in use by" in busy.stdout


def test_deploy_and_verify_print_their_seconds():
    # lab/step.sh: a line when the step starts, one with its seconds when it ends
    makefile = (ROOT / "Makefile").read_text()
    for target in ("deploy", "verify"):
        recipe = re.search(rf"^{target}: venv\n\t(.*)$", makefile, re.M).group(1)
        assert f"$(STEP) {target} " in recipe, recipe


def _group_data(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "group_data"
    folder.mkdir()
    (folder / "gpu.py").write_text(text)
    return folder


def test_a_group_data_typo_is_refused_at_its_file_and_line(tmp_path):
    folder = _group_data(
        tmp_path, "# gpu hosts\nimport os\n\nkvceph_tensor_paralel_size = 4\n_local = os.sep\n"
    )
    hosts = {"gpu": ["gpu1", "gpu2"]}
    argv = ["pyinfra", "--group-data", str(folder)]
    with pytest.raises(group_data_keys.GroupDataKeyError) as exc:
        group_data_keys.check(str(ROOT / "inventories" / "lab.py"), hosts, argv)
    message = str(exc.value)
    assert message == (
        "kvceph: group gpu (gpu1, gpu2): kvceph_tensor_paralel_size = 4: is not a kvceph "
        "setting (it would be ignored and the default deployed); fix: did you mean "
        "kvceph_tensor_parallel_size?"
    )
    assert exc.value.line == 4
    # pyinfra prints "pyinfra error in FILE line N": the group_data file's line, not kvceph's
    where = get_frame_line_from_tb(exc.value.__traceback__)
    assert Path(where.filename).resolve() == folder / "gpu.py" and where.lineno == 4


def test_a_secret_in_group_data_is_refused_without_its_value(tmp_path):
    folder = _group_data(tmp_path, 'if True:\n    HF_TOKEN = "hf_abc"\n')
    with pytest.raises(group_data_keys.GroupDataKeyError) as exc:
        group_data_keys.check("inventories/lab.py", {}, ["pyinfra", f"--group-data={folder}"])
    assert "group gpu (no hosts): HF_TOKEN = '***': looks like a secret" in str(exc.value)
    assert "hf_abc" not in str(exc.value) and exc.value.line == 2


def test_the_shipped_group_data_passes():
    group_data_keys.check(str(ROOT / "inventories" / "lab.py"), {}, ["pytest"])


def test_a_typo_stops_pyinfra_before_it_connects(tmp_path):
    # inventories/example.py names hosts nobody reaches: a run that got to connecting would
    # print their connect errors
    folder = _group_data(tmp_path, "kvceph_lmcache_chunk_sise = 256\n")
    run = subprocess.run(
        [str(PYINFRA), "-y", "--group-data", str(folder), "inventories/example.py", "deploy.py"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert f"pyinfra error in {folder / 'gpu.py'} line 1: kvceph: group gpu" in out, out
    assert "did you mean kvceph_lmcache_chunk_size?" in out
    assert "Connecting to hosts" not in out and "Traceback" not in out


def test_status_runs_end_without_the_empty_results_table():
    stream = io.StringIO()
    log = logging.getLogger("kvceph-test-results")
    log.propagate = False
    log.addHandler(logging.StreamHandler(stream))
    log.setLevel(logging.INFO)
    controller.hide_empty_results(log)
    controller.hide_empty_results(log)  # once only
    assert sum(isinstance(f, controller.EmptyResults) for f in log.filters) == 1
    log.info("--> Results:")
    empty = [["Operation", "Hosts", "Success", "Error", "No Change"], ["Grand total", *"----"]]
    print_rows([(log.info, row) for row in empty])  # pyinfra's own rendering
    print_rows([(log.info, ["Grand total", "3", "1", "-", "2"])])
    log.info("kvceph status: report reports/status-x.json")
    lines = stream.getvalue().splitlines()
    assert [line.split() for line in lines] == [
        ["Grand", "total", "3", "1", "-", "2"],
        ["kvceph", "status:", "report", "reports/status-x.json"],
    ]


def _recorded_report() -> reporting.Report:
    data = json.loads(REPORT.read_text())
    steps = [
        reporting.StepResult(
            s["host"],
            s["step"],
            Verdict(s["verdict"], s["message"]),
            s["ttft"],
            s["hit_tokens"],
            s["objects"],
        )
        for s in data["steps"]
    ]
    return reporting.Report(data["run_id"], data["started"], steps)


def test_the_readme_example_table_is_the_verify_report_of_make_lab():
    readme = (ROOT / "README.md").read_text()
    # the quick start's example: the end of `make lab`, from the deploy's last line
    block = next(b for b in re.findall(r"```\n(.*?)```", readme, re.S) if "[deploy]" in b)
    table = reporting.table(_recorded_report())
    assert table in block, "README's example table differs from the recorded report's"
    assert "router" in table and "cross-node" in table and "fallback" in table
    run_id = json.loads(REPORT.read_text())["run_id"]
    assert f"kvceph verify {run_id}: all checks passed" in block
