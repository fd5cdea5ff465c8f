"""The redis-sentinel variant (k8s/variants/redis-sentinel), rendered by kustomize from an
overlay outside k8s/ as docs/deploy.md shows: valid against the Kubernetes schemas, held
to the base manifests' rules (non-root, read-only root, resources, probes, no stray env),
and wired: three Redis pods each with a Sentinel, quorum 2, a PodDisruptionBudget, anti-
affinity, Services, NetworkPolicy, the workers on redis+sentinel with RMQ_REDIS_MIN_REPLICAS=1.
The init container's script is run (with a stand-in redis-cli) for each way a pod can find
the primary, and the files it writes are started with the real redis-server and Sentinel."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import redis
import yaml

import tests.deploy.test_manifests as m
from service.redis_url import parse_sentinel_url
from tests.settings_env import settings_from
from tests.waits import until_sync

VARIANT = m.K8S / "variants" / "redis-sentinel"
PASSWORD = "s3cret-test-password"
REDIS_LABELS = {"app.kubernetes.io/name": "redis", "app.kubernetes.io/component": "store"}


def render(target: Path) -> list[dict]:
    cmd = m._kustomize()
    if cmd is None:
        pytest.skip("neither kustomize nor kubectl on PATH")
    out = subprocess.run([*cmd, str(target)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> list[dict]:
    overlay = tmp_path_factory.mktemp("overlay")
    rel = os.path.relpath(m.K8S, overlay)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n  - {rel}/variants/redis-sentinel\n")
    return render(overlay)


@pytest.fixture(scope="module")
def sts(docs) -> dict:
    return m.one("StatefulSet", "redis", docs=docs)


def container(pod_spec: dict, name: str) -> dict:
    return next(c for c in pod_spec["containers"] + pod_spec.get("initContainers", []) if c["name"] == name)


def script() -> str:
    return m.one("ConfigMap", "redis-sentinel-scripts", docs=m.load(VARIANT / "redis-config.yaml"))["data"]["configure.sh"]


# --------------------------------------------------------------------------- rendering
def test_the_component_lists_every_file_of_its_folder():
    comp = yaml.safe_load((VARIANT / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    listed = set(comp["resources"]) | {p["path"] for p in comp["patches"]}
    assert listed == {p.name for p in VARIANT.glob("*.y*ml") if p.name not in m.KUSTOMIZE_FILES}


def test_the_default_build_stays_a_single_redis():
    """k8s/ alone must not pick the component up."""
    docs = render(m.K8S)
    sts = m.one("StatefulSet", "redis", docs=docs)
    assert sts["spec"]["replicas"] == 1
    assert [c["name"] for c in m.pod_template(sts)["spec"]["containers"]] == ["redis"]
    assert not [d for d in docs if "sentinel" in d["metadata"]["name"]]
    url = m.env_of(container(m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["spec"], "registry"))
    assert url["REDIS_URL"]["value"].startswith("redis://") and "RMQ_REDIS_MIN_REPLICAS" not in url


@pytest.mark.parametrize("version", m.K8S_VERSIONS)
def test_the_variant_is_valid_against_the_schemas(docs, version: str):
    for d in docs:
        kubernetes_validate.validate(d, version, strict=True)
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == m.NAMESPACE, d["metadata"]["name"]


# ---------------------------------------------------------------------------- the rules
def check_env(c: dict, where: str) -> None:
    """No env entry nobody reads: the workers' as in the base test; in the Redis pods an
    entry is used by the container's command, the init script or (REDISCLI_AUTH) redis-cli."""
    if c["name"] in ("registry", "spark"):
        m._check_env_names(c, where)
        return
    text = " ".join(c.get("command", []) + c.get("args", []))
    if "/scripts/configure.sh" in text:
        text += script()
    probes = " ".join(" ".join(c[p]["exec"]["command"]) for p in ("livenessProbe", "readinessProbe", "startupProbe")
                      if "exec" in c.get(p, {}))
    for e in c.get("env", []):
        if e["name"] == "REDISCLI_AUTH":
            assert "redis-cli" in text + probes, f"{where}: REDISCLI_AUTH but no redis-cli"
        else:
            assert f"${{{e['name']}}}" in text or f"${e['name']}" in text, f"{where}: env {e['name']} is not used"


def test_every_pod_is_locked_down_with_resources_and_probes(docs):
    for w in m.workloads(docs):
        name = f'{w["kind"]}/{w["metadata"]["name"]}'
        pod = m.pod_template(w)["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for c in pod["containers"] + pod.get("initContainers", []):
            where = (name, c["name"])
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            for key in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][key]), where
            assert "/tmp" in {v["mountPath"] for v in c.get("volumeMounts", [])}, where
            if w["kind"] != "CronJob" and c in pod["containers"]:  # servers, not jobs
                assert {"livenessProbe", "readinessProbe"} <= set(c), where
            check_env(c, f"{name}/{c['name']}")
        if w["kind"] in ("Deployment", "StatefulSet"):
            assert pod["automountServiceAccountToken"] is False, name


def test_secret_references_resolve(docs):
    assert not [d for d in docs if d["kind"] == "Secret"], "the variant ships no Secret either"
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    for w in m.workloads(docs):
        pod = m.pod_template(w)["spec"]
        for c in pod["containers"] + pod.get("initContainers", []):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in m.CREATED.get(ref["name"], {}), (c["name"], e["name"])
        for v in pod.get("volumes", []):
            if "configMap" in v:
                assert v["configMap"]["name"] in configmaps, v


# ------------------------------------------------------------------------- redis pods
def test_three_redis_pods_each_with_a_sentinel(sts):
    assert sts["spec"]["replicas"] == 3
    pod = m.pod_template(sts)["spec"]
    assert [c["name"] for c in pod["containers"]] == ["redis", "sentinel"]
    assert m.container_ports(m.pod_template(sts)) == {"redis": 6379, "sentinel": 26379}
    assert [c["name"] for c in pod["initContainers"]] == ["configure"]
    # every container runs the same Redis build
    assert len({c["image"] for c in pod["containers"] + pod["initContainers"]}) == 1


def test_the_init_container_writes_what_redis_and_the_sentinel_read(sts):
    pod = m.pod_template(sts)["spec"]
    init, server, sentinel = (container(pod, n) for n in ("configure", "redis", "sentinel"))
    mounts = {c["name"]: {v["mountPath"]: v["name"] for v in c["volumeMounts"]} for c in (init, server, sentinel)}
    scripts = next(v for v in pod["volumes"] if v["name"] == mounts["configure"]["/scripts"])
    assert scripts["configMap"]["name"] == "redis-sentinel-scripts"
    assert init["command"] == ["sh", "/scripts/configure.sh"]
    assert m.env_of(init)["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # redis.conf in a volume both see, the Sentinel's file on the claim (it must outlive the pod)
    assert server["args"] == ["redis-server", "/conf/redis.conf"] and mounts["redis"]["/conf"] == mounts["configure"]["/conf"]
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    assert mounts["sentinel"]["/data"] == mounts["configure"]["/data"] == mounts["redis"]["/data"] == claim
    assert sentinel["args"] == ["redis-server", "/data/sentinel/sentinel.conf", "--sentinel"]
    assert "--requirepass" not in " ".join(server["args"]), "the password stays off the command line"


def test_the_pdb_lets_one_redis_pod_go_at_a_time(docs, sts):
    pdb = m.one("PodDisruptionBudget", "redis", docs=docs)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": REDIS_LABELS}}
    assert m.selects(pdb["spec"]["selector"], m.pod_template(sts)["metadata"]["labels"])
    registry = m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["metadata"]["labels"]
    assert not m.selects(pdb["spec"]["selector"], registry)


def test_anti_affinity_spreads_the_pods_over_nodes(sts):
    anti = m.pod_template(sts)["spec"]["affinity"]["podAntiAffinity"]
    terms = {t["podAffinityTerm"]["topologyKey"]: t for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]}
    assert set(terms) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert terms["kubernetes.io/hostname"]["weight"] > terms["topology.kubernetes.io/zone"]["weight"]
    for t in terms.values():
        assert m.selects(t["podAffinityTerm"]["labelSelector"], m.pod_template(sts)["metadata"]["labels"])


def test_services_reach_the_pods(docs, sts):
    labels = m.pod_template(sts)["metadata"]["labels"]
    ports = m.container_ports(m.pod_template(sts))
    headless = m.one("Service", sts["spec"]["serviceName"], docs=docs)
    assert headless["spec"]["clusterIP"] == "None"
    sentinel = m.one("Service", "redis-sentinel", docs=docs)
    assert sentinel["spec"].get("clusterIP") != "None"
    for svc, port in ((headless, 6379), (sentinel, 26379)):
        assert m.selects(svc["spec"]["selector"], labels)
        [p] = svc["spec"]["ports"]
        assert p["port"] == port and ports[p["targetPort"]] == port, svc["metadata"]["name"]


# ---------------------------------------------------------------------------- workers
def test_workers_find_the_primary_through_the_sentinels(docs):
    registry = container(m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["spec"], "registry")
    env = m.env_of(registry)
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "rmq-redis", "key": "password"}
    url = env["REDIS_URL"]["value"]
    assert url.startswith("redis+sentinel://")
    target = parse_sentinel_url(url.replace("$(REDIS_PASSWORD)", PASSWORD))
    service = m.one("Service", target.sentinels[0][0], docs=docs)
    assert target.sentinels == [("redis-sentinel", 26379)] and service["spec"]["ports"][0]["port"] == 26379
    assert (target.master, target.db) == ("rmq", 0)
    assert f"sentinel monitor {target.master} " in script().replace("$master", target.master)
    assert target.password == target.sentinel_password == PASSWORD
    assert env["RMQ_REDIS_MIN_REPLICAS"]["value"] == "1"
    config = m.one("ConfigMap", "rmq-registry-config", docs=docs)["data"]
    settings = settings_from({**config, "REDIS_URL": url,
                              "RMQ_REDIS_MIN_REPLICAS": env["RMQ_REDIS_MIN_REPLICAS"]["value"]})
    assert settings.redis_min_replicas == 1 and not settings.redis_cluster


# ----------------------------------------------------------------------- network policy
def test_only_workers_analytics_and_redis_itself_reach_redis_and_sentinel(docs, sts):
    policy = m.one("NetworkPolicy", "redis", docs=docs)
    assert m.selects(policy["spec"]["podSelector"], m.pod_template(sts)["metadata"]["labels"])
    ports = m.container_ports(m.pod_template(sts))
    [rule] = policy["spec"]["ingress"]
    assert {ports[p["port"]] for p in rule["ports"]} == {6379, 26379}
    pods = {f'{w["kind"]}/{w["metadata"]["name"]}': m.pod_template(w)["metadata"]["labels"] for w in m.workloads(docs)}
    assert set(pods) == {"Deployment/rmq-registry", "StatefulSet/redis", "CronJob/rmq-analytics"}
    for name, labels in pods.items():
        assert m._admitted(policy, labels), name
    assert not m._admitted(policy, {"rmq-registry/client": "true"})
    assert not m._admitted(policy, {"app.kubernetes.io/name": "rmq-registry", "app.kubernetes.io/component": "registry"},
                           same_namespace=False)
    assert not m._admitted(policy, {"app.kubernetes.io/name": "redis"})


# ------------------------------------------------------------------- the init script
def run_script(tmp_path: Path, pod: str, sentinel_answer: str = "", known: str | None = None) -> dict[str, str]:
    """Runs configure.sh as pod ``pod`` would, redis-cli answering ``sentinel_answer``;
    ``known``: the Sentinel file a previous life of the pod left on its volume."""
    bin_dir, conf, data = tmp_path / "bin", tmp_path / "conf", tmp_path / "data"
    for d in (bin_dir, conf, data):
        d.mkdir(parents=True, exist_ok=True)
    (bin_dir / "redis-cli").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\necho "$FAKE_ANSWER"\n')
    (bin_dir / "sleep").write_text("#!/bin/sh\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    if known is not None:
        (data / "sentinel").mkdir(exist_ok=True)
        (data / "sentinel" / "sentinel.conf").write_text(known)
    (tmp_path / "configure.sh").write_text(script())
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "POD_NAME": pod, "REDIS_PASSWORD": PASSWORD,
           "CONF_DIR": str(conf), "DATA_DIR": str(data), "FAKE_ANSWER": sentinel_answer}
    out = subprocess.run(["sh", str(tmp_path / "configure.sh")], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return {"redis": (conf / "redis.conf").read_text(), "sentinel": (data / "sentinel" / "sentinel.conf").read_text(),
            "calls": (tmp_path / "calls").read_text()}


def directives(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line and not line.startswith("#")]


def test_first_start_makes_redis_0_the_primary(tmp_path: Path):
    primary = run_script(tmp_path / "0", "redis-0")
    replica = run_script(tmp_path / "1", "redis-1")
    assert not any(d.startswith("replicaof") for d in directives(primary["redis"]))
    assert "replicaof redis-0.redis 6379" in directives(replica["redis"])
    for out in (primary, replica):
        assert "sentinel monitor rmq redis-0.redis 6379 2" in directives(out["sentinel"])
        # it asked the Sentinel Service before falling back
        assert "-h redis-sentinel -p 26379 --raw sentinel get-master-addr-by-name rmq" in out["calls"]


def test_a_restarted_old_primary_comes_back_as_a_replica(tmp_path: Path):
    """redis-0 was the primary; the Sentinels promoted redis-2 meanwhile."""
    out = run_script(tmp_path, "redis-0", sentinel_answer="redis-2.redis",
                     known="sentinel myid 0123abcd\nsentinel monitor rmq redis-0.redis 6379 2\n")
    assert "replicaof redis-2.redis 6379" in directives(out["redis"])
    assert "sentinel monitor rmq redis-2.redis 6379 2" in directives(out["sentinel"])
    assert "sentinel myid 0123abcd" in directives(out["sentinel"]), "a restarted Sentinel keeps its id"


def test_an_error_from_the_sentinels_is_not_taken_for_a_primary(tmp_path: Path):
    out = run_script(tmp_path, "redis-1", sentinel_answer="NOAUTH Authentication required.")
    assert "replicaof redis-0.redis 6379" in directives(out["redis"])
    assert out["calls"].count("get-master-addr-by-name") == 3, "it retries before falling back"


def test_without_sentinels_a_pod_follows_the_primary_its_sentinel_last_knew(tmp_path: Path):
    """Every pod restarting at once after a failover to redis-1: redis-0 must not take over."""
    known = 'sentinel myid 0123abcd\nsentinel monitor rmq "redis-1.redis" 6379 2\nsentinel current-epoch 3\n'
    out = run_script(tmp_path / "0", "redis-0", known=known)
    assert "replicaof redis-1.redis 6379" in directives(out["redis"])
    out = run_script(tmp_path / "1", "redis-1", known=known)
    assert not any(d.startswith("replicaof") for d in directives(out["redis"]))


def test_the_files_carry_auth_durability_and_quorum(tmp_path: Path, sts):
    out = run_script(tmp_path, "redis-1", sentinel_answer="redis-0.redis")
    r, s = directives(out["redis"]), directives(out["sentinel"])
    claim = next(v["mountPath"] for v in container(m.pod_template(sts)["spec"], "redis")["volumeMounts"]
                 if v["name"] == sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"])
    assert claim == "/data"
    for line in (f"dir {tmp_path / 'data'}", "appendonly yes", "appendfsync everysec", "maxmemory-policy noeviction",
                 f"requirepass {PASSWORD}", f"masterauth {PASSWORD}", "replica-announce-ip redis-1.redis"):
        assert line in r, line
    for line in ("port 26379", f"requirepass {PASSWORD}", f"sentinel auth-pass rmq {PASSWORD}",
                 "sentinel announce-ip redis-1.redis", "sentinel resolve-hostnames yes"):
        assert line in s, line
    [monitor] = [line.split() for line in s if line.startswith("sentinel monitor ")]
    quorum = int(monitor[-1])
    assert quorum == 2 and quorum > sts["spec"]["replicas"] // 2, "a majority of the three Sentinels"
    assert s.index("sentinel monitor rmq redis-0.redis 6379 2") < s.index(f"sentinel auth-pass rmq {PASSWORD}")
    assert oct((tmp_path / "conf" / "redis.conf").stat().st_mode & 0o777) == "0o600"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def listening() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"{args} exited: {proc.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    try:
        until_sync(listening, 10, f"{args} listening on {port}", poll_s=0.05)
    except AssertionError:
        proc.kill()
        raise
    return proc


def test_redis_and_the_sentinel_start_with_the_generated_files(tmp_path: Path):
    """The real servers accept every directive and apply the ones that matter."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not on PATH")
    run_script(tmp_path, "redis-0")
    procs = []
    try:
        rport, sport = _free_port(), _free_port()
        procs.append(_start(["redis-server", str(tmp_path / "conf" / "redis.conf"), "--port", str(rport)], rport))
        procs.append(_start(["redis-server", str(tmp_path / "data" / "sentinel" / "sentinel.conf"), "--sentinel",
                             "--port", str(sport)], sport))
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=rport).ping()
        r = redis.Redis(port=rport, password=PASSWORD, decode_responses=True)
        assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        assert r.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert r.info("replication")["role"] == "master"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=sport).ping()
        s = redis.Redis(port=sport, password=PASSWORD, decode_responses=True)
        master = s.sentinel_master("rmq")
        assert (master["ip"], master["port"], master["quorum"]) == ("redis-0.redis", 6379, 2)
        # the Sentinel can rewrite its file where the next start will look for it
        assert "sentinel myid " in (tmp_path / "data" / "sentinel" / "sentinel.conf").read_text()
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
