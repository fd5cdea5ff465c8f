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
from typing import Any, Iterator

import pytest
import yaml
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.config import Settings
from tests import waits
from tests.builders import registration
from tests.calls import register
from tests.processes import ROOT, console_script, start, wait_http
from tests.redis_server import RedisServer, free_port

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
    for needed in ("rmq_cluster_broker_groups", "rmq_live_brokers", "rmq_broker_group_without_master",
                   "rmq_cluster_expired_brokers_total", "rmq_redis_refusals_total", "rmq_cache_stale_served_total",
                   "rmq_redis_unreachable_seconds", "rmq_scanner_lag_ms", "rmq_http_requests_total",
                   "rmq_store_resets_total", "rmq_store_reset_open", "rmq_late_brokers"):
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


# promtool unit tests, one behaviour each: input series per worker, and which alerts must
# fire when (exp_alerts [] = must not fire then). Every alert has a firing and a
# non-firing case (checked below).
def case(name: str, series: dict[str, str], *expected: tuple[str, str, list[dict[str, str]]]) -> dict[str, Any]:
    return {"name": name, "interval": "1m",
            "input_series": [{"series": k, "values": v} for k, v in series.items()],
            "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": [{"exp_labels": e} for e in labels]}
                                for t, a, labels in expected]}


CRIT, WARN = {"severity": "critical"}, {"severity": "warning"}
UNIT_TESTS = [
    case("a group without master fires with its group and cluster after 2 minutes",
         {'rmq_broker_group_without_master{cluster="C",group="broker-b",instance="w1"}': "_ _ 1 1 1 1 1 1",
          'rmq_broker_group_without_master{cluster="C",group="broker-b",instance="w2"}': "_ _ 1 1 1 1 1 1"},
         ("3m", "RmqBrokerGroupWithoutMaster", []),
         ("5m", "RmqBrokerGroupWithoutMaster", [{**WARN, "cluster": "C", "group": "broker-b"}])),
    case("a group whose master returns within 2 minutes does not fire",
         {'rmq_broker_group_without_master{cluster="C",group="broker-b",instance="w1"}': "_ _ 1 stale"},
         ("5m", "RmqBrokerGroupWithoutMaster", [])),
    case("a cluster lost by expiry fires, one decommissioned (unregistered) does not",
         {'rmq_cluster_broker_groups{cluster="A",instance="w1"}': "2x70",
          'rmq_cluster_broker_groups{cluster="B",instance="w1"}': "1 1 1 stale",
          'rmq_cluster_broker_groups{cluster="D",instance="w1"}': "1 1 1 stale",
          'rmq_cluster_expired_brokers_total{cluster="A",instance="w1"}': "0x70",
          'rmq_cluster_expired_brokers_total{cluster="B",instance="w1"}': "0 0 0 1x67",
          'rmq_cluster_expired_brokers_total{cluster="D",instance="w1"}': "0x70"},
         ("4m", "RmqClusterLostAllBrokers", []),
         ("9m", "RmqClusterLostAllBrokers", [{**CRIT, "cluster": "B"}]),
         ("30m", "RmqClusterLostAllBrokers", [{**CRIT, "cluster": "B"}]),
         # an hour after its last expiry
         ("65m", "RmqClusterLostAllBrokers", [])),
    case("a cluster lost by expiry stops firing when it registers again",
         {'rmq_cluster_broker_groups{cluster="B",instance="w1"}': "1 1 1 stale _ _ _ _ _ 1 1",
          'rmq_cluster_expired_brokers_total{cluster="B",instance="w1"}': "0 0 0 1x7"},
         ("7m", "RmqClusterLostAllBrokers", [{**CRIT, "cluster": "B"}]),
         ("10m", "RmqClusterLostAllBrokers", [])),
    case("a cluster emptied by a store reset is the store reset's alert, not a lost cluster's",
         {'rmq_cluster_broker_groups{cluster="B",instance="w1"}': "1 1 1 1 1 1 stale _ _ _ _ _ _ 1 1",
          'rmq_cluster_expired_brokers_total{cluster="B",instance="w1"}': "0 0 1x13",
          'rmq_store_resets_total{instance="w1"}': "0 0 0 0 0 0 1x9",
          'rmq_store_reset_open{instance="w1"}': "0 0 0 0 0 0 1x9"},
         *((f"{m}m", "RmqClusterLostAllBrokers", []) for m in (7, 9, 11, 13)),
         ("9m", "RegistryStoreReset", [CRIT])),
    case("no live broker for 5 minutes fires",
         {'rmq_live_brokers{instance="w1"}': "1 1 0x10"},
         ("5m", "RmqNoLiveBroker", []),
         ("8m", "RmqNoLiveBroker", [CRIT])),
    case("a late broker fires at once, and resolves when it heartbeats or expires",
         {'rmq_late_brokers{instance="w1"}': "0 0 2 1 0 0",
          'rmq_late_brokers{instance="w2"}': "0 0 0 1 0 0"},
         ("1m", "RmqBrokersLate", []),
         ("2m", "RmqBrokersLate", [WARN]),
         ("3m", "RmqBrokersLate", [WARN]),
         ("4m", "RmqBrokersLate", [])),
    case("live brokers do not fire RmqNoLiveBroker",
         {'rmq_live_brokers{instance="w1"}': "1x10"},
         ("8m", "RmqNoLiveBroker", [])),
    case("an expiry storm fires by cluster",
         {'rmq_live_brokers{instance="w1"}': "20x10",
          'rmq_cluster_expired_brokers_total{cluster="C",instance="w1"}': "0 0 0 0 4 5 5 5 5 5",
          'rmq_cluster_expired_brokers_total{cluster="C",instance="w2"}': "0 0 0 0 1 1 1 1 1 1",
          'rmq_cluster_expired_brokers_total{cluster="E",instance="w1"}': "0x10"},
         ("3m", "RmqBrokerExpiryStorm", []),
         ("6m", "RmqBrokerExpiryStorm", [{**WARN, "cluster": "C"}]),
         ("10m", "RmqBrokerExpiryStorm", [])),
    case("a few expiries among many brokers are no storm",
         {'rmq_live_brokers{instance="w1"}': "100x10",
          'rmq_cluster_expired_brokers_total{cluster="C",instance="w1"}': "0 0 0 0 5 5 5 5 5 5"},
         ("6m", "RmqBrokerExpiryStorm", [])),
    case("half the fleet expiring loses the routes",
         {'rmq_live_brokers{instance="w1"}': "4 4 4 4 0 0 0 0",
          'rmq_cluster_expired_brokers_total{cluster="C",instance="w1"}': "0 0 0 0 4 4 4 4"},
         ("3m", "RmqRoutesLost", []),
         ("5m", "RmqRoutesLost", [CRIT])),
    case("a fifth of the fleet expiring, or the whole fleet unregistering, keeps the routes",
         {'rmq_live_brokers{instance="w1"}': "20 20 20 20 16 16 16 0 0 0",
          'rmq_cluster_expired_brokers_total{cluster="C",instance="w1"}': "0 0 0 0 4 4 4 4 4 4"},
         ("5m", "RmqRoutesLost", []),
         ("9m", "RmqRoutesLost", [])),
    case("a single refused write fires, by cause, and resolves 5 minutes later",
         {'rmq_redis_refusals_total{cause="out of memory",instance="w1"}': "0 0 1x10",
          'rmq_redis_refusals_total{cause="read-only replica",instance="w1"}': "0x12"},
         ("1m", "RmqRedisRefusingWrites", []),
         ("3m", "RmqRedisRefusingWrites", [{**CRIT, "cause": "out of memory"}]),
         ("9m", "RmqRedisRefusingWrites", [])),
    case("Redis unreachable for a minute fires for that worker",
         {'rmq_redis_unreachable_seconds{instance="w1"}': "0 0 5 65 125 185 0 0",
          'rmq_redis_unreachable_seconds{instance="w2"}': "0x7"},
         ("2m", "RmqRedisUnavailable", []),
         ("4m", "RmqRedisUnavailable", [{**CRIT, "instance": "w1"}]),
         ("7m", "RmqRedisUnavailable", [])),
    case("a read-only replica (reached, refusing) or a one-poll blip is not Redis unavailable",
         {'rmq_redis_unreachable_seconds{instance="w1"}': "0 3 0 2 0 0 0 0",
          'rmq_redis_refusals_total{cause="read-only replica",instance="w1"}': "0 10 20 30 40 50 60 70"},
         *((f"{m}m", "RmqRedisUnavailable", []) for m in range(1, 8))),
    case("a store reset fires at once, one alert for every worker, and resolves when the fleet is back",
         {'rmq_store_reset_open{instance="w1"}': "0 0 1 1 1 1 0x10",
          'rmq_store_reset_open{instance="w2"}': "0 0 0 1 1 1 0x10"},
         ("1m", "RegistryStoreReset", []),
         ("3m", "RegistryStoreReset", [CRIT]),
         ("5m", "RegistryStoreReset", [CRIT]),
         ("6m", "RegistryStoreReset", [])),
    case("workers that know of no open store reset do not fire RegistryStoreReset",
         {'rmq_store_reset_open{instance="w1"}': "0x20"},
         *((f"{m}m", "RegistryStoreReset", []) for m in (5, 10, 15))),
    case("stale reads fire while Redis stays unreachable, after the stale answers ended",
         {'rmq_redis_unreachable_seconds{instance="w1"}': "0 0 60 120 180 240 300 0",
          'rmq_cache_stale_served_total{instance="w1"}': "0 0 10 20 20 20 20 20"},
         ("1m", "RmqServingStaleReads", []),
         ("3m", "RmqServingStaleReads", [WARN]),
         ("6m", "RmqServingStaleReads", [WARN]),
         ("7m", "RmqServingStaleReads", [])),
    case("Redis unreachable with no stale reader is no stale read",
         {'rmq_redis_unreachable_seconds{instance="w1"}': "0 0 60 120 180 240 300 0",
          'rmq_cache_stale_served_total{instance="w1"}': "0x7"},
         ("4m", "RmqServingStaleReads", [])),
    case("every scanner lagging over 30 s for 2 minutes fires",
         {'rmq_scanner_lag_ms{instance="w1"}': "0 0 40000 100000 160000 220000 0 0",
          'rmq_scanner_lag_ms{instance="w2"}': "0 0 40000 100000 160000 220000 0 0"},
         ("3m", "RmqScannerLagging", []),
         ("4m", "RmqScannerLagging", [WARN]),
         ("7m", "RmqScannerLagging", [])),
    case("one scanner lagging while another keeps up does not fire",
         {'rmq_scanner_lag_ms{instance="w1"}': "0 0 40000 100000 160000 220000 280000",
          'rmq_scanner_lag_ms{instance="w2"}': "0 0 0 0 0 0 0"},
         ("5m", "RmqScannerLagging", [])),
    case("no scanner completing a pass fires after 3 minutes",
         {'rmq_scanner_passes_total{instance="w1"}': "0+5x3 15x10",
          'rmq_scanner_failures_total{instance="w1"}': "0 0 0 0 1+5x10"},
         ("4m", "RmqScannerFailing", []),
         ("6m", "RmqScannerFailing", [CRIT])),
    case("one scanner completing passes keeps RmqScannerFailing quiet",
         {'rmq_scanner_passes_total{instance="w1"}': "0+5x3 15x10",
          'rmq_scanner_failures_total{instance="w1"}': "0 0 0 0 1+5x10",
          'rmq_scanner_passes_total{instance="w2"}': "0+5x14"},
         ("8m", "RmqScannerFailing", [])),
    case("over 5 % of HTTP answers 5xx for 5 minutes fires",
         {'rmq_http_requests_total{status="200",route="/v1/routes/{topic}",method="GET",instance="w1"}': "0+100x20",
          'rmq_http_requests_total{status="503",route="/v1/routes/{topic}",method="GET",instance="w1"}': "0+1x5 5+20x15"},
         ("5m", "RmqHttp5xxRate", []),
         ("20m", "RmqHttp5xxRate", [WARN])),
    case("a worker not scraped for 5 minutes fires, and resolves when it answers",
         {'up{job="rmq-registry",instance="w1"}': "1 1 0 0 0 0 0 0 0 1 1",
          'up{job="rmq-registry",instance="w2"}': "1x10"},
         ("5m", "RmqWorkerDown", []),
         ("7m", "RmqWorkerDown", [{**WARN, "job": "rmq-registry", "instance": "w1"}]),
         ("10m", "RmqWorkerDown", [])),
]


def run_promtool_tests(tmp_path: Path, rule_groups: list[dict[str, Any]], tests: list[dict[str, Any]],
                       every: str = "1m") -> None:
    rules, spec = tmp_path / "rules.yaml", tmp_path / "tests.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups}))
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": every, "tests": tests}))
    out = subprocess.run([promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing = {t["alertname"] for c in UNIT_TESTS for t in c["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for c in UNIT_TESTS for t in c["alert_rule_test"] if not t["exp_alerts"]}
    assert firing == quiet == set(rule_exprs())


def test_the_alerts_fire_when_they_should_and_not_otherwise(tmp_path: Path) -> None:
    # without their annotations: promtool would compare the rendered texts too
    groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
              for g in RULES["spec"]["groups"]]
    run_promtool_tests(tmp_path, groups, UNIT_TESTS)


def test_counts_in_alert_texts_are_whole_numbers(tmp_path: Path) -> None:
    # evaluated 20 s after a scrape, increase() extrapolates 5 expiries to 5.42: the texts round
    groups = [{**g, "rules": [r for r in g["rules"] if r["alert"] in ("RmqBrokerExpiryStorm", "RmqRoutesLost")]}
              for g in RULES["spec"]["groups"]]
    series = {'rmq_live_brokers{instance="w1"}': "10x5 5x3",
              'rmq_topics{instance="w1"}': "30x5 15x3",
              'rmq_cluster_expired_brokers_total{cluster="C",instance="w1"}': "0x5 5x3"}
    exp = case("", series, ("7m20s", "RmqBrokerExpiryStorm", [{**WARN, "cluster": "C"}]),
               ("7m20s", "RmqRoutesLost", [CRIT]))
    storm, lost = (t["exp_alerts"][0] for t in exp["alert_rule_test"])
    rule = {r["alert"]: r for g in groups for r in g["rules"]}
    storm["exp_annotations"] = {"summary": "5 brokers of cluster C expired in 5 minutes",
                                "description": rule["RmqBrokerExpiryStorm"]["annotations"]["description"]}
    lost["exp_annotations"] = {"summary": "5 brokers expired within 10 minutes: half the fleet or more lost its routes",
                               "description": rule["RmqRoutesLost"]["annotations"]["description"]
                               .replace('{{ with query "max(rmq_topics)" }}{{ . | first | value | printf "%.0f" }}{{ end }}', "15")
                               .replace('{{ range $i, $s := query "sum by (cluster) (increase(rmq_cluster_expired_brokers_total'
                                        '[10m])) > 0" }}{{ if $i }}, {{ end }}cluster {{ $s.Labels.cluster }}{{ end }}', "cluster C")
                               .replace('{{ with query "max(max_over_time(rmq_topics[10m]))" }}{{ . | first | value | printf '
                                        '"%.0f" }}{{ end }}', "30")}
    groups = [g for g in groups if g["rules"]]
    run_promtool_tests(tmp_path, groups, [exp], every="20s")


def test_the_dashboard_is_grafana_json_over_one_prometheus_datasource() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["panels"]
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    assert [v["name"] for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    for p in DASHBOARD["panels"]:
        assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"]


def test_the_dashboard_names_rocketmq_answers_and_reads_no_stuck_gauge() -> None:
    panels = {p["title"]: p for p in DASHBOARD["panels"]}
    [requests] = panels["RocketMQ requests (9876)"]["targets"]
    assert requests["legendFormat"] == "{{code}}: {{response_name}}"  # GET_ROUTEINFO_BY_TOPIC: TOPIC_NOT_EXIST
    # the last stale answer's age stays at its last value for ever: the time since Redis was reached does not
    assert "rmq_cache_stale_age_ms" not in json.dumps(DASHBOARD)
    assert any("rmq_redis_unreachable_seconds" in t["expr"] for p in DASHBOARD["panels"] for t in p["targets"])


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
    from service.http.app_keys import SCANNER

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
    from service.http.app_keys import SCANNER

    await register(client, registration("10.0.0.1:10911", "broker-a", cluster="A"))
    await register(client, registration("10.0.0.2:10911", "broker-b", cluster="A"))
    await register(client, registration("10.0.0.3:10911", "broker-c", cluster="B"))
    await client.app[SCANNER].observe_tables()
    text = await (await client.get("/metrics")).text()
    assert 'rmq_cluster_broker_groups{cluster="A"} 2.0' in text and 'rmq_cluster_broker_groups{cluster="B"} 1.0' in text


async def test_a_starting_worker_counts_groups_without_master_written_before_the_count_existed(
        make_client, r) -> None:
    from service.http.app_keys import SCANNER
    from service.keys import Keys

    first = await make_client()
    await register(first, registration("10.0.0.2:10911", "broker-a", broker_id=1))
    await register(first, registration("10.0.0.3:10911", "broker-b", broker_id=0))
    r.delete(Keys().masterless)  # tables as an older version left them
    second = await make_client()
    await second.app[SCANNER].observe_tables()
    assert "rmq_broker_groups_without_master 1.0" in await (await second.get("/metrics")).text()
    assert r.smembers(Keys().masterless) == {"broker-a"}


async def metric(client: TestClient, sample: str) -> float | None:
    """The value of one sample (name and labels as /metrics writes them), None when absent."""
    text = await (await client.get("/metrics")).text()
    m = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


async def until(check: Any, limit_s: float = 20.0) -> Any:
    """Polls an async check until it returns something true; fails past the bound."""
    return await waits.until(check, limit_s, "the metric's condition", poll_s=0.05)


async def test_labelled_counters_are_exported_from_zero_before_their_first_event(client: TestClient) -> None:
    from service.models import SKIP_REASONS
    from service.store import REFUSAL_CAUSES

    for cause in REFUSAL_CAUSES:
        assert await metric(client, f'rmq_redis_refusals_total{{cause="{cause}"}}') == 0
    for reason in SKIP_REASONS:
        assert await metric(client, f'rmq_skipped_topic_configs_total{{reason="{reason}"}}') == 0
    for script in ("register", "unregister", "heartbeat", "remove_batch"):
        assert await metric(client, f'rmq_table_changes_total{{script="{script}"}}') == 0
    assert await metric(client, 'rmq_full_registrations_total{path="full"}') == 0


async def test_groups_without_a_master_are_exported_by_group_and_cluster(client: TestClient) -> None:
    from service.http.app_keys import SCANNER

    await register(client, registration("10.0.0.2:10911", "broker-a", broker_id=1, cluster="A"))
    await register(client, registration("10.0.0.3:10911", "broker-b", broker_id=1, cluster="B"))
    await register(client, registration("10.0.0.4:10911", "broker-c", broker_id=0, cluster="B"))
    await client.app[SCANNER].observe_tables()
    assert await metric(client, 'rmq_broker_group_without_master{cluster="A",group="broker-a"}') == 1
    assert await metric(client, 'rmq_broker_group_without_master{cluster="B",group="broker-b"}') == 1
    assert await metric(client, 'rmq_broker_group_without_master{cluster="B",group="broker-c"}') is None
    assert await metric(client, "rmq_broker_groups_without_master") == 2


async def test_expiries_are_counted_by_cluster_and_unregistering_is_not(client: TestClient) -> None:
    from service.http.app_keys import SCANNER

    scanner = client.app[SCANNER]
    await register(client, registration("10.0.0.1:10911", "broker-a", cluster="Expiring", timeout_ms=100))
    await register(client, registration("10.0.0.2:10911", "broker-b", cluster="Leaving"))
    await scanner.observe_tables()
    # known clusters start at 0, so a rule's increase() sees their first expiry
    assert await metric(client, 'rmq_cluster_expired_brokers_total{cluster="Expiring"}') == 0
    assert await metric(client, 'rmq_cluster_expired_brokers_total{cluster="Leaving"}') == 0
    await client.post("/v1/brokers/unregister", json={"clusterName": "Leaving", "brokerAddr": "10.0.0.2:10911",
                                                      "brokerName": "broker-b", "brokerId": 0})
    await until(scanner.scan_once)
    assert await metric(client, 'rmq_cluster_expired_brokers_total{cluster="Expiring"}') == 1
    assert await metric(client, 'rmq_cluster_expired_brokers_total{cluster="Leaving"}') == 0
    assert await metric(client, "rmq_scanner_expired_brokers_total") == 1


async def test_redis_unreachable_seconds_grow_while_redis_is_down_and_return_to_zero(
        aiohttp_client, own_redis: RedisServer) -> None:
    from service.worker import create_app

    client = await aiohttp_client(create_app(Settings(redis_url=own_redis.url, redis_timeout_ms=200)))
    assert await metric(client, "rmq_redis_unreachable_seconds") == 0
    own_redis.stop()
    first = await until(lambda: metric(client, "rmq_redis_unreachable_seconds"))
    await until(lambda: later(client, "rmq_redis_unreachable_seconds", first))
    own_redis.start()
    await until(lambda: zero(client, "rmq_redis_unreachable_seconds"))


async def test_the_scanner_lag_grows_while_no_scan_can_run(aiohttp_client, own_redis: RedisServer) -> None:
    from service.worker import create_app

    client = await aiohttp_client(create_app(Settings(redis_url=own_redis.url, redis_timeout_ms=200,
                                                      scan_interval_ms=100)))
    await register(client, registration(timeout_ms=1_500))
    await until(lambda: later(client, "rmq_live_brokers", 0))  # a scan read the broker's deadline
    assert await metric(client, "rmq_scanner_lag_ms") == 0
    own_redis.stop()  # the broker's deadline passes while nothing can remove it
    first = await until(lambda: metric(client, "rmq_scanner_lag_ms"))
    await until(lambda: later(client, "rmq_scanner_lag_ms", first))


async def later(client: TestClient, sample: str, than: float) -> bool:
    value = await metric(client, sample)
    return value is not None and value > than


async def zero(client: TestClient, sample: str) -> bool:
    return await metric(client, sample) == 0


def _heartbeat_ago(r, addr: str, age_ms: int, timeout_ms: int) -> None:
    """Leaves `addr`'s live row and deadline as a heartbeat `age_ms` ago (Redis' clock) left them."""
    from service.keys import Keys

    keys = Keys()
    seconds, micros = r.time()
    last = seconds * 1000 + micros // 1000 - age_ms
    r.hset(keys.live(addr), "lastUpdateTimestamp", last)
    r.zadd(keys.expiry, {addr: last + timeout_ms})


async def test_late_brokers_are_counted_at_each_scan_by_the_dashboards_rule(client: TestClient, r) -> None:
    from service.http.app_keys import SCANNER
    from service.liveness import LATE_FRACTION

    timeout_ms = 100_000
    # of a 100 s timeout: late past 80 s, expired past 100 s (margins for a slow machine's seconds)
    for i, age_s in enumerate((10, 70, 90, 95, 105)):
        addr = f"10.0.0.{i + 1}:10911"
        await register(client, registration(addr, f"broker-{i}", timeout_ms=timeout_ms))
        _heartbeat_ago(r, addr, age_s * 1000, timeout_ms)
    await client.app[SCANNER].observe_tables()
    text = await (await client.get("/metrics")).text()
    assert re.search(r"^rmq_late_brokers 2\.0$", text, re.M), text
    live = await (await client.get("/v1/brokers/live")).json()
    assert live["lateFraction"] == LATE_FRACTION  # the dashboard's rule is this one


async def test_late_brokers_past_the_members_read_per_count_are_counted_up_to_it(client: TestClient, r) -> None:
    from service.http.app_keys import STORE
    from service.liveness import count_late

    timeout_ms = 100_000
    for i in range(4):
        addr = f"10.0.0.{i + 1}:10911"
        await register(client, registration(addr, f"broker-{i}", timeout_ms=timeout_ms))
        _heartbeat_ago(r, addr, 90_000, timeout_ms)
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    store = client.app[STORE]
    assert await count_late(store, now, timeout_ms, limit=4) == 4
    assert await count_late(store, now, timeout_ms, limit=3) == 3
