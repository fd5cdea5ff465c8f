"""The analytics CronJob keeps its volume bounded and its trend chart current, as rendered by
kustomize (the base and the Spark-on-Kubernetes variant): the retention init container's own
script is run on a folder laid out as the job leaves /out, and the trend report's command is
parsed by the job's own argument parser."""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import tests.deploy.test_manifests as m
from service.analytics.cli import parser
from tests.deploy.test_redis_sentinel import render


@pytest.fixture(scope="module", params=["base", "spark-on-k8s"])
def cron(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    target = m.K8S
    if request.param == "spark-on-k8s":
        target = tmp_path_factory.mktemp("overlay")
        rel = os.path.relpath(m.K8S, target)
        (target / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n  - {rel}/variants/spark-on-k8s\n")
    return m.one("CronJob", "rmq-analytics", docs=render(target))


def pod(cron: dict) -> dict:
    return m.pod_template(cron)["spec"]


def retention(cron: dict) -> dict:
    (init,) = [c for c in pod(cron).get("initContainers", []) if c["name"] == "retention"]
    return init


def job_args(command: str) -> list[str]:
    words = shlex.split(command)
    start = words.index("/opt/rmq/analytics_driver.py") + 1 if "/opt/rmq/analytics_driver.py" in words \
        else words.index("analytics") + 1
    return words[start:]


def run_retention(cron: dict, out: Path) -> None:
    init = retention(cron)
    script = init["args"][0].replace("/out", str(out))
    env = {**os.environ, **{e["name"]: e["value"] for e in init["env"]}}
    done = subprocess.run(init["command"] + [script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_retention_runs_before_the_job_on_its_output_volume(cron: dict) -> None:
    init, (job,) = retention(cron), pod(cron)["containers"]
    mounts = {mount["mountPath"]: mount["name"] for mount in init["volumeMounts"]}
    assert mounts["/out"] == {mount["mountPath"]: mount["name"] for mount in job["volumeMounts"]}["/out"]
    assert init["image"] == job["image"]


def test_retention_keeps_the_newest_runs_so_that_the_new_one_makes_keep_runs(cron: dict, tmp_path: Path) -> None:
    keep = int(m.env_of(retention(cron))["KEEP_RUNS"]["value"])
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    runs = [f"snapshot-{(start + dt.timedelta(minutes=15 * i)):%Y%m%dT%H%M%SZ}" for i in range(keep + 20)]
    for run in runs:
        (tmp_path / run).mkdir()
        (tmp_path / run / "summary.json").write_text("{}")
    (tmp_path / "trend").mkdir()
    run_retention(cron, tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("snapshot-"))
    assert left == runs[-(keep - 1):]
    assert (tmp_path / "trend").is_dir(), "only run folders go"


def test_retention_drops_history_partitions_past_keep_history_days(cron: dict, tmp_path: Path) -> None:
    days = int(m.env_of(retention(cron))["KEEP_HISTORY_DAYS"]["value"])
    today = dt.datetime.now(dt.timezone.utc).date()
    ages = {age: tmp_path / "history" / f"date={today - dt.timedelta(days=age)}" for age in (0, days - 1, days + 1, 400)}
    for part in ages.values():
        part.mkdir(parents=True)
        (part / "row.parquet").write_bytes(b"x")
    run_retention(cron, tmp_path)
    assert {age for age, part in ages.items() if part.exists()} == {0, days - 1}


def test_each_run_then_rewrites_the_trend_report_from_the_history_it_appended_to(cron: dict) -> None:
    submit, history = m.analytics_commands(pod(cron)["containers"][0]["args"][0])
    run, trend = parser().parse_args(job_args(submit)), parser().parse_args(job_args(history))
    assert (run.job, trend.job) == ("all", "history")
    assert trend.history == run.history
    assert "$" not in history, "one trend folder, rewritten by every run, not one more per run"
    assert trend.master and trend.master.startswith("local["), "the report reads the driver's disk"


def test_docs_patch_for_the_retention_changes_keep_runs(tmp_path: Path) -> None:
    text = (m.K8S.parent / "docs" / "deploy.md").read_text()
    section = text.split("**The volume stays bounded.**", 1)[1]
    patches = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    rel = os.path.relpath(m.K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\n" + patches)
    cron = m.one("CronJob", "rmq-analytics", docs=render(tmp_path))
    assert m.env_of(retention(cron))["KEEP_RUNS"]["value"] == re.search(r'value: "(\d+)"', patches).group(1)
