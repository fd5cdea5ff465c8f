"""The operator's kit in k8s/monitoring/: the alert rules pass promtool (syntax and unit
tests of when they fire), and every metric the rules and the Grafana dashboard use is one
a real worker exports on /metrics; the gauges the kit added count what they say."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import registration
from tests.calls import register
from tests.processes import ROOT, console_script, start, wait_http
from tests.redis_server import free_port

KIT = ROOT / "k8s" / "monitoring"
RULES = yaml.safe_load((KIT / "prometheusrule.yaml").read_text())
DASHBOARD = json.loads((KIT / "grafana-dashboard.json").read_text())
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
# Prometheus' own series, not the workers'
PROMETHEUS_OWN = {"up"}


@pytest.fixture(scope="module")
def exported() -> Iterator[set[str]]:
    """Every sample name a real worker (HTTP and RocketMQ ports on, a broker registered
    and its route read) exports, as Prometheus stores them."""
    from tests.redis_server import RedisServer

    server = RedisServer()
    server.start()
    port = free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 {"REDIS_URL": server.url, "RMQ_REMOTING_PORT": str(free_port())})
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/readyz")
        body = json.dumps(registration()).encode()
        urllib.request.urlopen(urllib.request.Request(f"{base}/v1/brokers/register", data=body,
                                                      headers={"Content-Type": "application/json"}), timeout=5).close()
        urllib.request.urlopen(f"{base}/v1/routes/TopicTest", timeout=5).close()
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        server.cleanup()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + s for s in SAMPLE_SUFFIXES.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    yield names


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)  # label matchers, ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    keywords = {"and", "or", "unless", "bool", "offset"}
    return {m.group(1) for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
            if m.group(1) not in keywords}


def rule_exprs() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in RULES["spec"]["groups"] for r in g["rules"]}


def dashboard_exprs() -> dict[str, str]:
    return {f'{p["title"]}/{t["refId"]}': t["expr"] for p in DASHBOARD["panels"] for t in p["targets"]}


def test_the_metric_names_of_an_expression_are_found() -> None:
    assert metric_names('sum by (status, le) (rate(rmq_a_total{status=~"5.."}[5m])) / max(rmq_b) and up{job="x"}') \
        == {"rmq_a_total", "rmq_b", "up"}


@pytest.mark.parametrize("source", ["alert rules", "dashboard"])
def test_every_metric_used_is_one_a_real_worker_exports(exported: set[str], source: str) -> None:
    exprs = rule_exprs() if source == "alert rules" else dashboard_exprs()
    for where, expr in exprs.items():
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names - PROMETHEUS_OWN <= exported, f"{where}: not exported: {sorted(names - PROMETHEUS_OWN - exported)}"


def test_the_alerts_cover_what_an_operator_must_know() -> None:
    used = set().union(*map(metric_names, rule_exprs().values()))
    for needed in ("rmq_cluster_broker_groups", "rmq_live_brokers", "rmq_broker_groups_without_master",
                   "rmq_scanner_expired_brokers_total", "rmq_redis_refusals_total", "rmq_cache_stale_served_total",
                   "rmq_scanner_lag_ms", "rmq_http_requests_total"):
        assert needed in used, needed


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian package prometheus; scripts/test installs it)")
    return path


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    """The PrometheusRule's groups as the plain rules file Prometheus reads."""
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": RULES["spec"]["groups"]}))
    return path


def test_the_alert_rules_pass_promtool_check(rules_file: Path) -> None:
    out = subprocess.run([promtool(), "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in out.stdout


# promtool unit tests: input series per worker, and which alerts must fire when
UNIT_TESTS = [
    {"interval": "1m",
     "input_series": [
         {"series": 'rmq_broker_groups_without_master{instance="w1"}', "values": "0 0 1 1 1 1 1"},
         {"series": 'rmq_broker_groups_without_master{instance="w2"}', "values": "0 0 1 1 1 1 1"}],
     "alert_rule_test": [
         {"eval_time": "3m", "alertname": "RmqBrokerGroupWithoutMaster", "exp_alerts": []},
         {"eval_time": "5m", "alertname": "RmqBrokerGroupWithoutMaster",
          "exp_alerts": [{"exp_labels": {"severity": "warning"}}]}]},
    {"interval": "1m",
     "input_series": [
         {"series": 'rmq_cluster_broker_groups{cluster="A",instance="w1"}', "values": "2 2 2 2 2 2 2 2 2 2"},
         {"series": 'rmq_cluster_broker_groups{cluster="B",instance="w1"}', "values": "1 1 1 stale"}],
     "alert_rule_test": [
         {"eval_time": "9m", "alertname": "RmqClusterLostAllBrokers",
          "exp_alerts": [{"exp_labels": {"severity": "critical", "cluster": "B"}}]}]},
    {"interval": "1m",
     "input_series": [
         {"series": 'rmq_live_brokers{instance="w1"}', "values": "20x10"},
         {"series": 'rmq_scanner_expired_brokers_total{instance="w1"}', "values": "0 0 0 0 4 5 5 5 5 5"},
         {"series": 'rmq_scanner_expired_brokers_total{instance="w2"}', "values": "0 0 0 0 1 1 1 1 1 1"}],
     "alert_rule_test": [
         {"eval_time": "3m", "alertname": "RmqBrokerExpiryStorm", "exp_alerts": []},
         {"eval_time": "6m", "alertname": "RmqBrokerExpiryStorm", "exp_alerts": [{"exp_labels": {"severity": "warning"}}]}]},
    {"interval": "1m",
     "input_series": [
         {"series": 'rmq_http_requests_total{status="200",route="/v1/routes/{topic}",method="GET",instance="w1"}',
          "values": "0+100x20"},
         {"series": 'rmq_http_requests_total{status="503",route="/v1/routes/{topic}",method="GET",instance="w1"}',
          "values": "0+1x5 5+20x15"}],
     "alert_rule_test": [
         {"eval_time": "5m", "alertname": "RmqHttp5xxRate", "exp_alerts": []},
         {"eval_time": "20m", "alertname": "RmqHttp5xxRate", "exp_alerts": [{"exp_labels": {"severity": "warning"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": 'rmq_redis_refusals_total{cause="out of memory",instance="w1"}', "values": "0 0 3 3"}],
     "alert_rule_test": [
         {"eval_time": "3m", "alertname": "RmqRedisRefusingWrites",
          "exp_alerts": [{"exp_labels": {"severity": "critical", "cause": "out of memory"}}]}]},
]


def test_the_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    # without their annotations: promtool would compare the rendered texts too
    groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
              for g in RULES["spec"]["groups"]]
    rules, tests = tmp_path / "rules.yaml", tmp_path / "tests.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": UNIT_TESTS}))
    out = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_dashboard_is_grafana_json_over_one_prometheus_datasource() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["panels"]
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    assert [v["name"] for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    for p in DASHBOARD["panels"]:
        assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"]


def test_the_component_lists_every_file_of_its_folder() -> None:
    comp = yaml.safe_load((KIT / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    listed = set(comp["resources"]) | {f.split("=")[-1] for g in comp["configMapGenerator"] for f in g["files"]}
    assert listed == {p.name for p in KIT.iterdir() if p.name != "kustomization.yaml"}


def test_the_component_renders_beside_the_base_in_the_namespace(tmp_path: Path) -> None:
    import os

    import tests.deploy.test_manifests as m
    from tests.deploy.test_redis_sentinel import render

    rel = os.path.relpath(m.K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n  - {rel}/monitoring\n")
    docs = render(tmp_path)
    kit = {(d["kind"], d["metadata"]["name"]): d for d in docs
           if d["kind"] in ("ServiceMonitor", "PrometheusRule", "ConfigMap")}
    assert {("ServiceMonitor", "rmq-registry"), ("PrometheusRule", "rmq-registry"),
            ("ConfigMap", "rmq-registry-dashboard")} <= set(kit)
    dashboard = kit[("ConfigMap", "rmq-registry-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["rmq-registry.json"]) == DASHBOARD
    assert all(d["metadata"]["namespace"] == m.NAMESPACE for d in kit.values())


def test_the_service_monitor_scrapes_the_registry_services_http_port() -> None:
    import tests.deploy.test_manifests as m

    monitor = yaml.safe_load((KIT / "servicemonitor.yaml").read_text())
    service = m.one("Service", "rmq-registry")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"


async def test_groups_without_a_master_are_counted_at_each_scan(client: TestClient) -> None:
    from service.http.context import SCANNER

    async def gauge() -> str:
        await client.app[SCANNER].observe_tables()
        text = await (await client.get("/metrics")).text()
        return re.search(r"^rmq_broker_groups_without_master (\S+)$", text, re.M).group(1)  # type: ignore[union-attr]

    await register(client, registration("10.0.0.2:10911", "broker-a", broker_id=1))
    await register(client, registration("10.0.0.3:10911", "broker-b", broker_id=0))
    assert await gauge() == "1.0"
    await register(client, registration("10.0.0.1:10911", "broker-a", broker_id=0))
    assert await gauge() == "0.0"
    await client.post("/v1/brokers/unregister", json={"clusterName": "DefaultCluster", "brokerAddr": "10.0.0.1:10911",
                                                      "brokerName": "broker-a", "brokerId": 0})
    assert await gauge() == "1.0"


async def test_broker_groups_are_counted_per_cluster_at_each_scan(client: TestClient) -> None:
    from service.http.context import SCANNER

    await register(client, registration("10.0.0.1:10911", "broker-a", cluster="A"))
    await register(client, registration("10.0.0.2:10911", "broker-b", cluster="A"))
    await register(client, registration("10.0.0.3:10911", "broker-c", cluster="B"))
    await client.app[SCANNER].observe_tables()
    text = await (await client.get("/metrics")).text()
    assert 'rmq_cluster_broker_groups{cluster="A"} 2.0' in text and 'rmq_cluster_broker_groups{cluster="B"} 1.0' in text


async def test_a_starting_worker_counts_groups_without_master_written_before_the_count_existed(
        make_client, r) -> None:
    from service.http.context import SCANNER
    from service.keys import Keys

    first = await make_client()
    await register(first, registration("10.0.0.2:10911", "broker-a", broker_id=1))
    await register(first, registration("10.0.0.3:10911", "broker-b", broker_id=0))
    r.delete(Keys().masterless)  # tables as an older version left them
    second = await make_client()
    await second.app[SCANNER].observe_tables()
    assert "rmq_broker_groups_without_master 1.0" in await (await second.get("/metrics")).text()
    assert r.smembers(Keys().masterless) == {"broker-a"}
