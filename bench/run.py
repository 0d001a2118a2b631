"""Provisioning benchmark: kvceph vs the floor vs ansible-core, on N lab inference hosts.

    KVCEPH_LAB_INSTANCE=4 .venv/bin/python bench/run.py --hosts 2 4 8 16 --repeat 3

A benchmark, not a test (never part of ``make test``). For each N it grows the lab to ceph1 +
gpu1..gpuN (``KVCEPH_LAB_HOSTS=N lab/lab.sh up``), converges it once, then times, ``--repeat``
times each (min / median / max):

  floor        one new SSH connection per host, all in parallel, each running the commands
               kvceph sends it while planning (its fact reads; bench/fact_commands.py)
  pyinfra      pyinfra alone on the same inventory: bench/empty_deploy.py, no operation
  noop         kvceph's converged re-run (``pyinfra -y inventories/lab.py deploy.py``): checked
               to change nothing
  ansible-noop the ansible-core peer (bench/ansible/site.yml) on the same hosts: checked
               ``changed=0``
  converge     blank disks on every gpu host (``lab.sh blank``, untimed), then kvceph's deploy
  ansible-converge  the same, then the peer's play

After the first peer converge it checks that kvceph plans no change on those hosts (the peer
writes the same files, modes and unit). Writes ``bench/results/bench-<stamp>.{json,png}`` and
prints the table and the ratios. The machine's load average is recorded at every case:
figures from a busy machine say how the tools behave there, not what they cost.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import ansible_vars  # noqa: E402

INSTANCE = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
LAB = Path(os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{INSTANCE or ''}"))
NET = f"10.213.{7 + INSTANCE}"
PYINFRA = REPO / ".venv" / "bin" / "pyinfra"
ANSIBLE = REPO / ".venv" / "ansible" / "bin" / "ansible-playbook"
CASES = ("floor", "pyinfra", "noop", "ansible-noop", "converge", "ansible-converge")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def env_for(n: int) -> dict:
    return {
        **os.environ,
        "KVCEPH_LAB_HOSTS": str(n),
        "KVCEPH_LAB_INSTANCE": str(INSTANCE),
        "KVCEPH_SECRETS_FILE": str(LAB / "secrets.env"),
        "PYINFRA_PROGRESS": "off",
        "ANSIBLE_CONFIG": str(REPO / "bench" / "ansible" / "ansible.cfg"),
    }


LAST_CPU = [0.0]  # controller CPU seconds (user + system) of the last command run


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run(cmd: list[str], env: dict, timeout: int = 1800):
    """(seconds, completed process) of one command, run from the repository root.

    The controller's CPU time for it (the tool and its ssh clients; the lab hosts' work is in
    their own containers, not counted) is left in LAST_CPU.
    """
    cpu0 = children_cpu()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    secs = time.monotonic() - start
    LAST_CPU[0] = children_cpu() - cpu0
    return secs, proc


def must(what: str, proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise SystemExit(f"{what} failed ({proc.returncode}): {tail}")


def gpus(n: int) -> list[str]:
    return [f"gpu{i}" for i in range(1, n + 1)]


# --- the tools ---------------------------------------------------------------------------------


def kvceph(env: dict, *extra: str) -> tuple[float, int, subprocess.CompletedProcess]:
    """Time one deploy; (seconds, operations that changed something, process)."""
    yes = [] if "--dry" in extra else ["-y"]
    secs, proc = run([str(PYINFRA), *yes, "--json", *extra, "inventories/lab.py", "deploy.py"], env)
    must("kvceph deploy", proc)
    doc = json.loads(proc.stdout[proc.stdout.find("{") :])
    if "--dry" in extra:
        changed = sum(
            len(op["hosts_with_change"]) + len(op["hosts_with_conditional_change"])
            for op in doc.get("plan", [])
        )
    else:
        changed = sum(len(op["success"]) for op in doc["results"]["operations"])
    return secs, changed, proc


def ansible_inventory(n: int) -> Path:
    path = LAB / "bench" / f"hosts-{n}.ini"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["[gpu]"] + [f"{h} ansible_host={NET}.{20 + i}" for i, h in enumerate(gpus(n), 1)]
    lines += [
        "[gpu:vars]",
        "ansible_user=root",
        f"ansible_ssh_private_key_file={LAB / 'id_ed25519'}",
        f"ansible_ssh_extra_args=-o UserKnownHostsFile={LAB / 'known_hosts'} "
        "-o StrictHostKeyChecking=yes",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible(env: dict, n: int, vars_file: Path) -> tuple[float, int, subprocess.CompletedProcess]:
    """Time one play; (seconds, changed tasks from PLAY RECAP, process)."""
    cmd = [
        str(ANSIBLE),
        "-i",
        str(ansible_inventory(n)),
        "-e",
        f"kvceph_vars_file={vars_file}",
        str(REPO / "bench" / "ansible" / "site.yml"),
    ]
    secs, proc = run(cmd, env)
    must("ansible-playbook", proc)
    changed = sum(int(c) for c in re.findall(r"\schanged=(\d+)", proc.stdout))
    return secs, changed, proc


# --- the floor ----------------------------------------------------------------------------------


def fact_commands(env: dict) -> dict[str, list[str]]:
    """host -> the commands behind the facts kvceph reads there (bench/fact_commands.py)."""
    out = LAB / "bench" / "fact-commands.json"
    script = REPO / "bench" / "fact_commands.py"
    python = REPO / ".venv" / "bin" / "python"
    args = ["--dry", "inventories/lab.py", "deploy.py"]
    _, proc = run([str(python), str(script), str(out), "--", *args], env)
    must("kvceph fact recording (--dry)", proc)
    commands = json.loads(out.read_text())
    if not commands.get("gpu1") or not commands.get("ceph1"):
        raise SystemExit(f"fact recording found no commands for gpu1 or ceph1: {list(commands)}")
    return commands


def address(host: str) -> str:
    return f"{NET}.11" if host == "ceph1" else f"{NET}.{20 + int(host[3:])}"


def floor(commands: dict[str, list[str]]) -> float:
    """One fresh SSH connection per host, all in parallel, each running its fact commands."""
    ssh = [
        "ssh",
        "-i",
        str(LAB / "id_ed25519"),
        "-o",
        f"UserKnownHostsFile={LAB / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ControlMaster=no",
    ]
    start = time.monotonic()
    procs = []
    for host, cmds in commands.items():
        script = "".join(f"sh -c {shlex.quote(c)} >/dev/null 2>&1\n" for c in cmds) + "exit 0\n"
        p = subprocess.Popen(
            [*ssh, f"root@{address(host)}", "sh -s"], stdin=subprocess.PIPE, text=True
        )
        procs.append((p, script))
    for p, script in procs:
        p.communicate(script, timeout=300)
    secs = time.monotonic() - start
    if any(p.returncode for p, _ in procs):
        raise SystemExit("floor: an SSH session failed")
    return secs


# --- one host count ------------------------------------------------------------------------------


def bench_n(n: int, repeat: int, vars_file: Path) -> dict:
    env = env_for(n)
    log(f"N={n}: lab up (ceph1 + {n} gpu hosts)")
    _, proc = run([str(REPO / "lab" / "lab.sh"), "up"], env)
    must("lab.sh up", proc)
    _, changed, _ = kvceph(env)
    log(f"N={n}: first converge changed {changed} operations")
    ansible_vars.write(vars_file, env)
    commands = fact_commands(env)
    samples: dict[str, list[float]] = {c: [] for c in CASES}
    loads: dict[str, list[float]] = {c: [] for c in CASES}
    cpu: dict[str, list[float]] = {c: [] for c in CASES if c != "floor"}
    checks: list[str] = []

    def sample(case: str, secs: float) -> None:
        samples[case].append(secs)
        loads[case].append(loadavg())
        if case in cpu:
            cpu[case].append(LAST_CPU[0])
        log(f"N={n} {case}: {secs:.2f} s (load {loads[case][-1]:.1f})")

    for _ in range(repeat):
        sample("floor", floor(commands))
    for _ in range(repeat):
        secs, proc = run([str(PYINFRA), "-y", "inventories/lab.py", "bench/empty_deploy.py"], env)
        must("pyinfra with no operation", proc)
        sample("pyinfra", secs)
    for _ in range(repeat):
        secs, changed, _ = kvceph(env)
        if changed:
            checks.append(f"kvceph no-op changed {changed} operations")
        sample("noop", secs)
    ansible(env, n, vars_file)  # first peer run on kvceph's hosts: must change nothing either
    for _ in range(repeat):
        secs, changed, _ = ansible(env, n, vars_file)
        if changed:
            checks.append(f"ansible no-op changed {changed} tasks")
        sample("ansible-noop", secs)
    blank = [str(REPO / "lab" / "lab.sh"), "blank", *gpus(n)]
    for i in range(repeat):
        for case in ("converge", "ansible-converge"):
            _, proc = run(blank, env)
            must("lab.sh blank", proc)
            if case == "converge":
                secs, _, _ = kvceph(env)
                sample(case, secs)
            else:
                secs, _, _ = ansible(env, n, vars_file)
                sample(case, secs)
                if i == 0:
                    _, planned, _ = kvceph(env, "--dry")
                    checks.append(f"kvceph plans {planned} changes on peer-converged hosts")
    kvceph(env)  # leave the lab converged by kvceph
    return {
        "hosts": n,
        "samples": samples,
        "loadavg": loads,
        "stats": {c: stats(s) for c, s in samples.items() if s},
        "controller_cpu_s": cpu,
        "controller_cpu_stats": {c: stats(s) for c, s in cpu.items() if s},
        "checks": checks,
        "fact_commands": {h: len(c) for h, c in commands.items()},
    }


def stats(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


# --- report ------------------------------------------------------------------------------------


def ratios(results: list[dict]) -> dict:
    out = {}
    for r in results:
        s = {c: v["median"] for c, v in r["stats"].items()}
        out[r["hosts"]] = {
            "noop_over_floor": s["noop"] / s["floor"],
            # What the no-op spends beyond the floor, and how much of a run is pyinfra's alone.
            "noop_minus_floor_s": s["noop"] - s["floor"],
            "pyinfra_alone_over_noop": s["pyinfra"] / s["noop"],
            "ansible_over_kvceph_noop": s["ansible-noop"] / s["noop"],
            "ansible_over_kvceph_converge": s["ansible-converge"] / s["converge"],
        }
    if len(results) > 1:
        lo, hi = results[0], results[-1]

        def overhead(r: dict) -> float:
            # A no-op runs only fact commands on the hosts, which is what the floor runs: what a
            # no-op costs beyond the floor is the controller's (planning, round trips, barrier).
            return r["stats"]["noop"]["median"] - r["stats"]["floor"]["median"]

        out["controller_overhead_noop_s"] = {r["hosts"]: overhead(r) for r in results}
        out["controller_overhead_growth"] = {
            f"{hi['hosts']}_over_{lo['hosts']}": overhead(hi) / overhead(lo)
        }
        out["converge_per_host_s"] = {
            r["hosts"]: r["stats"]["converge"]["median"] / r["hosts"] for r in results
        }
        out["converge_growth"] = {
            f"kvceph_{hi['hosts']}_over_{lo['hosts']}": hi["stats"]["converge"]["median"]
            / lo["stats"]["converge"]["median"],
            f"ansible_{hi['hosts']}_over_{lo['hosts']}": hi["stats"]["ansible-converge"]["median"]
            / lo["stats"]["ansible-converge"]["median"],
        }
    return out


def table(results: list[dict]) -> str:
    lines = [
        f"{'N':>3}  {'case':<17} {'min s':>7} {'median s':>9} {'max s':>7}  "
        f"{'ctl cpu s':>9}  load avg"
    ]
    for r in results:
        for case in CASES:
            st = r["stats"].get(case)
            if not st:
                continue
            la = r["loadavg"][case]
            cpu = r.get("controller_cpu_stats", {}).get(case)
            cpu_s = f"{cpu['median']:>9.2f}" if cpu else f"{'-':>9}"
            lines.append(
                f"{r['hosts']:>3}  {case:<17} {st['min']:>7.2f} {st['median']:>9.2f} "
                f"{st['max']:>7.2f}  {cpu_s}  {min(la):.1f}-{max(la):.1f}"
            )
    return "\n".join(lines)


def png(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ns = [r["hosts"] for r in results]
    for case in CASES:
        med = [r["stats"][case]["median"] for r in results]
        lo = [r["stats"][case]["median"] - r["stats"][case]["min"] for r in results]
        hi = [r["stats"][case]["max"] - r["stats"][case]["median"] for r in results]
        ax.errorbar(ns, med, yerr=[lo, hi], marker="o", capsize=3, label=case)
    ax.set_xlabel("inference hosts (N)")
    ax.set_ylabel("seconds (median, min-max bars)")
    ax.set_xticks(ns)
    loads = [x for r in results for v in r["loadavg"].values() for x in v]
    ax.set_title(
        f"kvceph vs floor vs ansible-core, {os.cpu_count()} cores, "
        f"load avg {min(loads):.1f}-{max(loads):.1f}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def versions() -> dict:
    out = {}
    for name, tool in (("pyinfra", PYINFRA), ("ansible", ANSIBLE)):
        cmd = [str(tool), "--version"]
        try:
            out[name] = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError):
            out[name] = None
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8, 16])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = p.parse_args(argv)
    if not ANSIBLE.exists():
        raise SystemExit(f"{ANSIBLE} missing: python3 -m venv .venv/ansible && "
                         ".venv/ansible/bin/pip install ansible-core")  # fmt: skip
    vars_file = LAB / "bench" / "peer-vars.json"
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in sorted(args.hosts):
        results.append(bench_n(n, args.repeat, vars_file))
        # Written after every host count: a later count that fails leaves the earlier figures.
        doc = {
            "started": started,
            "command": "bench/run.py " + shlex.join(argv),
            "machine": {"cores": os.cpu_count(), "loadavg_end": loadavg()},
            "versions": versions(),
            "results": results,
            "ratios": ratios(results),
        }
        (out / f"bench-{started}.json").write_text(json.dumps(doc, indent=2) + "\n")
    png(results, out / f"bench-{started}.png")
    print(table(results))
    print(json.dumps(doc["ratios"], indent=2))
    for r in results:
        for c in r["checks"]:
            print(f"N={r['hosts']}: {c}")
    log(f"wrote {out}/bench-{started}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
