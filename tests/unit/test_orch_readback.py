"""Read-back after `ceph orch apply` / `orch restart`, against answers recorded from a real
Ceph 20.2.4 cephadm cluster (tests/fixtures/ceph-tentacle-20.2.4, README there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploys.facts.ceph import CephSpecProbe, orch_apply_refusal
from deploys.operations import orch_readback

REC = Path(__file__).resolve().parent.parent / "fixtures" / "ceph-tentacle-20.2.4"
T = {"connect_timeout": 10, "command_timeout": 60}
RGW = yaml.safe_load(
    """
service_type: rgw
service_id: standard
service_name: rgw.standard
placement: {count_per_host: 2, label: rgw}
networks: [10.213.9.0/24]
spec: {rgw_frontend_port: 8080}
"""
)
ONE = {**RGW, "placement": {"count_per_host": 1, "label": "rgw"}}  # count 2 -> 1
INGRESS = yaml.safe_load(
    """
service_type: ingress
service_id: rgw.standard
service_name: ingress.rgw.standard
placement: {label: rgw}
spec: {backend_service: rgw.standard, virtual_ip: 10.213.9.100/24, frontend_port: 80,
       monitor_port: 1967}
"""
)


def recorded(name: str) -> tuple[int, list[str]]:
    lines = (REC / f"{name}.txt").read_text().splitlines()
    rc = int(lines[-1].split("kvceph-rc=")[1])
    last = lines[-1].split("kvceph-rc=")[0]
    return rc, [line for line in lines[:-1] + [last] if line]


class Cluster:
    """Answers each command with the next recording for its kind (the last one repeats)."""

    def __init__(self, **answers: list[str]):
        self.answers = {k: list(v) for k, v in answers.items()}
        self.commands: list[str] = []

    def __call__(self, command) -> tuple[int, list[str]]:
        text = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
        self.commands.append(text)
        if " orch apply " in text:
            kind = "apply"
        elif " orch daemon restart " in text:
            kind = "restart"
        elif " orch ls " in text:
            kind = "ls"
        else:
            kind = "ps"
        queue = self.answers[kind]
        name = queue.pop(0) if len(queue) > 1 else queue[0]
        return recorded(name)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def wait(cluster, wanted, **kw):
    clock = Clock()
    return orch_readback.wait_converged(
        cluster, wanted["service_name"], wanted, T, clock=clock, sleep=clock.sleep, **kw
    )


def test_concentrator_refusal_with_exit_0_fails_in_one_line_without_polling():
    cluster = Cluster(
        apply=["apply_conc"],
    )
    problem = orch_readback.apply_and_wait(cluster, "/tmp/x.yaml", "rgw.standard", RGW, T)
    assert problem == (
        "ceph orch apply rgw.standard refused: ServiceSpec: RGWSpec.__init__() got an "
        "unexpected keyword argument 'concentrator'"
    )
    assert len(cluster.commands) == 1 and "rm -f /tmp/x.yaml" in cluster.commands[0]


def test_label_placement_refused_with_einval():
    rc, lines = recorded("dryrun_plain")
    assert rc == 22
    assert orch_apply_refusal(lines, rc).startswith("Error EINVAL: Cannot place")


def test_plain_spec_converges_and_the_orchestrators_additions_are_not_drift():
    rc, lines = recorded("export_plain")
    assert "rgw_exit_timeout_secs" in lines[0]
    cluster = Cluster(
        ls=["ls_missing", "ls_conv_1", "ls_plain"],
        ps=["ps_missing", "ps_conv_1", "ps_conv_2", "ps_plain"],
    )
    assert wait(cluster, RGW) is None


def test_service_that_never_appears_fails_after_the_bounded_wait():
    cluster = Cluster(ls=["ls_missing"], ps=["ps_missing"])
    problem = wait(cluster, RGW, wait=30)
    assert problem == "service rgw.standard is not in `ceph orch ls` after 30 s"


def test_daemons_that_never_run_fail_with_the_orchestrators_last_error_on_one_line():
    cluster = Cluster(ls=["ls_ingress"], ps=["ps_ingress_after"])
    problem = wait(cluster, INGRESS, wait=60)
    assert "\n" not in problem
    assert problem.startswith(
        "service ingress.rgw.standard: 1 of 2 daemons running "
        "(haproxy.rgw.standard.ceph1.fkgpjc stopped) after 60 s; orchestrator: "
    )
    assert "Failed while placing keepalived" in problem


def test_ingress_export_addition_first_virtual_router_id_is_ignored():
    cluster = Cluster(ls=["ls_ingress_ok"], ps=["ps_ingress_ok"])
    assert wait(cluster, INGRESS) is None


def test_count_per_host_2_to_1_waits_until_the_extra_daemon_is_gone():
    seen = orch_readback.read_service(
        Cluster(ls=["ls_count1_1"], ps=["ps_count1_1"]),
        "rgw.standard",
        T,
    )
    assert orch_readback.converged("rgw.standard", ONE, seen) == (
        "service rgw.standard: 2 of 1 daemons running; 2 placed"
    )
    seen = orch_readback.read_service(
        Cluster(ls=["ls_count1_4"], ps=["ps_count1_4"]),
        "rgw.standard",
        T,
    )
    assert orch_readback.converged("rgw.standard", ONE, seen) is None


class StaleCache(Cluster):
    """cephadm with a stale daemon cache: the scale-down happens only after `orch ps --refresh`
    (the lab's intermittent count 2 -> 1: its loop skipped the removal and slept)."""

    def __call__(self, command):
        text = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
        if " --refresh" in text:
            self.answers = {"ls": ["ls_count1_4"], "ps": ["ps_count1_4"]}
            self.commands.append(text)
            return recorded("ps_count1_1")  # the answer to the refreshing read is the old cache
        return super().__call__(command)


def test_a_stale_orchestrator_cache_is_refreshed_and_the_scale_down_converges():
    cluster = StaleCache(ls=["ls_count1_1"], ps=["ps_count1_1"])
    clock = Clock()
    problem = orch_readback.wait_converged(
        cluster, "rgw.standard", ONE, T, clock=clock, sleep=clock.sleep
    )
    assert problem is None
    refreshes = [c for c in cluster.commands if " orch ps " in c and "--refresh" in c]
    assert len(refreshes) == 1 and clock.now == orch_readback.REFRESH_EVERY + orch_readback.POLL
    assert " orch ps " in cluster.commands[1] and "--refresh" not in cluster.commands[1]


def test_refresh_is_asked_at_most_every_refresh_every_seconds():
    cluster = Cluster(ls=["ls_count1_1"], ps=["ps_count1_1"])
    problem = wait(cluster, ONE, wait=100)
    assert problem == "service rgw.standard: 2 of 1 daemons running; 2 placed after 100 s"
    refreshes = sum("--refresh" in c for c in cluster.commands)
    assert refreshes == 100 // orch_readback.REFRESH_EVERY


def test_restart_rolls_one_daemon_at_a_time_each_started_again_before_the_next():
    # ps_restart_first_of_2: ps_restart_1 with fswhtg's start from ps_restart_6 (the first
    # daemon back, the second not restarted yet).
    cluster = Cluster(
        restart=["daemon_restart_fswhtg", "daemon_restart_kdzbjl"],
        ls=["ls_plain"],
        ps=["ps_rgw_before_restart", "ps_restart_1", "ps_restart_first_of_2", "ps_restart_6"],
    )
    assert orch_readback.restart_and_wait(cluster, "rgw.standard", T) is None
    restarts = [c for c in cluster.commands if " orch daemon restart " in c]
    assert [c.split(" orch daemon restart ")[1].split()[0] for c in restarts] == [
        "rgw.standard.ceph1.fswhtg",
        "rgw.standard.ceph1.kdzbjl",
    ]
    # the second restart only once the first daemon started again
    second = cluster.commands.index(restarts[1])
    assert sum(" orch ps " in c for c in cluster.commands[:second]) == 3


def test_restart_that_never_happens_fails():
    cluster = Cluster(restart=["restart_rgw"], ls=["ls_plain"], ps=["ps_restart_1"])
    clock = Clock()
    problem = orch_readback.wait_converged(
        cluster,
        "rgw.standard",
        {"service_name": "rgw.standard"},
        T,
        wait=20,
        restarted={
            "rgw.standard.ceph1.fswhtg": "2026-12-01T03:03:02.275560Z",
            "rgw.standard.ceph1.kdzbjl": "2026-12-01T03:02:57.193031Z",
        },
        clock=clock,
        sleep=clock.sleep,
    )
    assert problem.startswith("service rgw.standard: not restarted yet: rgw.standard.ceph1.")


@pytest.mark.parametrize(
    ("case", "accepted"),
    [("dryrun_conc", False), ("dryrun_plain", False), ("apply_plain", True)],
)
def test_probe_reads_the_recorded_dry_runs(case, accepted):
    rc, lines = recorded(case)
    answer = CephSpecProbe().process(lines + [f"kvceph-orch-apply-rc={rc}"])
    assert answer["accepted"] is accepted


def test_frontend_port_change_waits_for_daemons_seen_on_the_new_ports():
    """Recorded every ~5 s after `orch apply` of rgw_frontend_port 8080 -> 8090 (README there).

    The first answer lists the old daemons on 8080/8081, refreshed after the apply: before the
    port check, the read-back passed there and the run went on while RGW moved.
    """
    moved = {**RGW, "spec": {"rgw_frontend_port": 8090}}

    def look(n: int) -> str | None:
        cluster = Cluster(ls=[f"ls_port_{n}"], ps=[f"ps_port_{n}"])
        return orch_readback.converged(
            "rgw.standard", moved, orch_readback.read_service(cluster, "rgw.standard", T)
        )

    assert look(1) == (
        "service rgw.standard: daemons not on ports 8090-8091 yet: "
        "rgw.standard.ceph1.atdnef on [8081], rgw.standard.ceph1.hbgpuk on [8080]"
    )
    assert look(2).endswith("4 placed")  # new daemons starting, old ones not yet removed
    assert look(5) == "service rgw.standard: 3 of 2 daemons running; 3 placed"
    # cephadm stored the spec again (status.created) after the daemons' last refresh.
    assert look(8) == (
        "service rgw.standard: not refreshed since the apply: "
        "rgw.standard.ceph1.kqcugp, rgw.standard.ceph1.uoyirw"
    )
    assert look(9) is None
    cluster = Cluster(
        ls=[f"ls_port_{n}" for n in (1, 2, 5, 8, 9)],
        ps=[f"ps_port_{n}" for n in (1, 2, 5, 8, 9)],
    )
    assert wait(cluster, moved) is None
    assert sum(" orch ps " in c for c in cluster.commands) == 5


def test_a_daemon_without_last_refresh_is_not_counted_as_seen():
    seen = {
        "export": ONE,
        "size": 1,
        "created": "2026-12-01T06:06:14.000000Z",
        "daemons": [
            {"name": "rgw.a", "status": "running", "started": None, "refreshed": None,
             "ports": [8080]},
        ],
    }  # fmt: skip
    assert orch_readback.converged("rgw.standard", ONE, seen) == (
        "service rgw.standard: not refreshed since the apply: rgw.a"
    )


def test_the_wait_tells_what_is_missing_every_15_s():
    cluster = Cluster(ls=["ls_missing"], ps=["ps_missing"])
    told = []
    problem = wait(cluster, RGW, wait=40, progress=told.append)
    assert problem.endswith("after 40 s")
    assert told == [
        "waiting 15 s of 40 s: service rgw.standard is not in `ceph orch ls`",
        "waiting 30 s of 40 s: service rgw.standard is not in `ceph orch ls`",
    ]
