"""The k8s/ manifests: valid against the Kubernetes OpenAPI schemas (offline, via
kubernetes-validate), buildable by kustomize, and wired together: selectors match
pod labels, ports and probe paths exist, env names are the ones service.config reads,
one image version everywhere, NetworkPolicies admit exactly the intended pods."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from service.config import ENV
from tests.deploy._common import (API_MD_OPERATION_PATHS, DOCKERFILE, GENERATED, K8S, app_paths, created_secrets,
                                  pyproject, readme_kubernetes_block)
from tests.settings_env import settings_from

VARIANT = K8S / "variants" / "spark-on-k8s"
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
NAMESPACE = "rocketmq"
KUSTOMIZE_FILES = {"kustomization.yaml", "kustomization.yml", "Kustomization"}


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.y*ml") if p.name not in KUSTOMIZE_FILES)


def base_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.y*ml") if p.name not in KUSTOMIZE_FILES)


BASE = [d for p in base_files() for d in load(p)]


def one(kind: str, name: str | None = None, docs: list[dict] = BASE) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_template(workload: dict) -> dict:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]
    if workload["kind"] == "Pod":
        return workload
    return workload["spec"]["template"]


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "CronJob", "Job", "DaemonSet")


def workloads(docs: list[dict] = BASE) -> list[dict]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def executor_template() -> dict:
    cm = one("ConfigMap", "rmq-spark-executor-template", docs=load(VARIANT / "executor-pod-template.yaml"))
    return yaml.safe_load(cm["data"]["executor.yaml"])


def all_pod_templates() -> dict[str, dict]:
    pods = {f'{w["kind"]}/{w["metadata"]["name"]}': pod_template(w) for w in workloads()}
    pods["spark-executor"] = executor_template()
    return pods


def selects(selector: dict, labels: dict) -> bool:
    """matchLabels / matchExpressions (In, NotIn, Exists, DoesNotExist) against labels."""
    match = selector.get("matchLabels", selector if "matchExpressions" not in selector else {})
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def container_ports(pod: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


# -------------------------------------------------------------------------- schemas
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_valid_against_openapi_schema(path: Path, version: str):
    docs = load(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        if (doc.get("kind") == "CronJob" and path.parent == VARIANT) or path.name.endswith("-patch.yaml"):
            continue  # a strategic-merge patch, validated once merged (test_kustomize_build and the variants' tests)
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's kinds have no Kubernetes schema: tests/test_monitoring.py
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_executor_pod_template_valid(version: str):
    pod = executor_template()
    # the template is completed by Spark (image, args); give it what the schema requires
    pod["spec"]["containers"][0].setdefault("image", "rmq-registry-analytics:0.2.0")
    pod.setdefault("metadata", {})["name"] = "executor"
    kubernetes_validate.validate(pod, version, strict=True)


def test_every_manifest_is_listed_in_its_kustomization():
    kz = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kz["namespace"] == NAMESPACE
    listed = set(kz["resources"])
    assert listed == {p.name for p in base_files()}, "k8s/kustomization.yaml resources != the yaml files in k8s/"
    comp = yaml.safe_load((VARIANT / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    patches = {p["path"] for p in comp.get("patches", [])}
    assert set(comp["resources"]) | patches == {p.name for p in VARIANT.glob("*.y*ml") if p.name not in KUSTOMIZE_FILES}


def _kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@pytest.mark.parametrize("with_variant", [False, True], ids=["base", "spark-on-k8s"])
def test_kustomize_build(tmp_path: Path, with_variant: bool):
    cmd = _kustomize()
    if cmd is None:
        pytest.skip("neither kustomize nor kubectl on PATH")
    target = K8S
    if with_variant:  # an overlay outside k8s/, as docs/deploy.md shows
        rel = os.path.relpath(K8S, tmp_path)
        (tmp_path / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"namespace: {NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n  - {rel}/variants/spark-on-k8s\n")
        target = tmp_path
    out = subprocess.run([*cmd, str(target)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
            "StatefulSet", "CronJob", "NetworkPolicy"} <= kinds
    for d in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(d, version, strict=True)
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == NAMESPACE, d["metadata"]["name"]
    cron = one("CronJob", "rmq-analytics", docs=docs)
    script = " ".join(pod_template(cron)["spec"]["containers"][0]["args"])
    if with_variant:
        pod = pod_template(cron)["spec"]
        assert "--master k8s://https://kubernetes.default.svc" in script
        assert pod["serviceAccountName"] == "rmq-spark" and pod["automountServiceAccountToken"] is True
        binding = one("RoleBinding", "rmq-spark-driver", docs=docs)
        assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "rmq-spark", "namespace": NAMESPACE}
        assert binding["roleRef"]["name"] == one("Role", docs=docs)["metadata"]["name"]
        container = pod["containers"][0]
        assert env_of(container)["SPARK_EXECUTOR_IMAGE"]["value"] == container["image"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert "spark.kubernetes.executor.podTemplateFile=" + mounts["executor-template"] + "/executor.yaml" in script
        assert {"tmp", "out", "executor-template"} <= {v["name"] for v in pod["volumes"]}
    else:
        assert "--master 'local[2]'" in script


# ------------------------------------------------------------------------- services
def test_service_selectors_and_ports_match_pods():
    pods = {k: v for k, v in all_pod_templates().items() if not k.startswith("CronJob")}
    for svc in (d for d in BASE if d["kind"] == "Service"):
        matched = [name for name, pod in pods.items() if selects(svc["spec"]["selector"], pod["metadata"]["labels"])]
        assert matched, f"Service {svc['metadata']['name']} selects no pod"
        for name in matched:
            ports = container_ports(pods[name])
            for p in svc["spec"]["ports"]:
                target = p.get("targetPort", p["port"])
                if isinstance(target, str):
                    assert target in ports, f"{svc['metadata']['name']}: no container port named {target} in {name}"
                    assert ports[target] == p["port"], f"{svc['metadata']['name']}: port {p['port']} != {ports[target]}"
                else:
                    assert target in ports.values()


def test_workload_selectors_match_their_templates():
    for w in workloads():
        if w["kind"] == "CronJob":
            continue
        assert selects(w["spec"]["selector"], pod_template(w)["metadata"]["labels"]), w["metadata"]["name"]
    redis = one("StatefulSet", "redis")
    svc = one("Service", redis["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None", "the StatefulSet's governing Service must be headless"


# ---------------------------------------------------------------------- registry pod
DEPLOY = one("Deployment", "rmq-registry")
POD = pod_template(DEPLOY)["spec"]
REGISTRY = next(c for c in POD["containers"] if c["name"] == "registry")
CONFIG = one("ConfigMap", "rmq-registry-config")


def test_probe_paths_are_real_routes():
    probes = {k: REGISTRY[k]["httpGet"] for k in ("livenessProbe", "readinessProbe", "startupProbe") if k in REGISTRY}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"].partition("?")[0] == "/readyz"  # its rule: tests/deploy/test_readiness.py
    for kind, probe in probes.items():
        path = probe["path"].partition("?")[0]
        assert path in API_MD_OPERATION_PATHS, kind
        assert path in app_paths(), f"{kind} {path} is not a route of the HTTP front"
        assert probe["port"] in container_ports(pod_template(DEPLOY)), kind
    annotations = pod_template(DEPLOY)["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in app_paths()
    assert int(annotations["prometheus.io/port"]) == container_ports(pod_template(DEPLOY))["http"]


def test_configmap_keys_are_config_env_names_and_parse():
    unknown = set(CONFIG["data"]) - set(ENV)
    assert not unknown, f"ConfigMap keys service.config does not read: {unknown}"
    settings = settings_from({**CONFIG["data"], "REDIS_URL": "redis://:x@redis:6379/0"})
    assert settings.port == container_ports(pod_template(DEPLOY))["http"]
    assert settings.auth_tokens_file, "auth must be on in the deployment"
    assert settings.auth_reads in ("open", "token")


def _check_env_names(container: dict, where: str) -> None:
    env = container.get("env", [])
    names = [e["name"] for e in env]
    text = " ".join(container.get("command", []) + container.get("args", []))
    for i, e in enumerate(env):
        value = e.get("value", "")
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value):
            assert ref in names[:i], f"{where}: $({ref}) in {e['name']} is not defined before it"
        name = e["name"]
        if name in ENV:
            continue
        assert not name.startswith("RMQ_") and name != "REDIS_URL", f"{where}: {name} is not read by service.config"
        used = any(f"$({name})" in x.get("value", "") for x in env) or re.search(rf"\${{?{name}\b", text)
        assert used, f"{where}: env {name} is neither a service.config variable nor used by another value"


def test_env_names_are_config_env_names():
    _check_env_names(REGISTRY, "registry")
    assert {e["name"] for e in REGISTRY["env"]} & set(ENV) == {"REDIS_URL"}
    assert [s["configMapRef"]["name"] for s in REGISTRY["envFrom"]] == [CONFIG["metadata"]["name"]]
    cron = one("CronJob", "rmq-analytics")
    _check_env_names(pod_template(cron)["spec"]["containers"][0], "analytics")
    patch = one("CronJob", docs=load(VARIANT / "cronjob-patch.yaml"))
    patched = dict(pod_template(cron)["spec"]["containers"][0])
    patched["env"] = patched["env"] + pod_template(patch)["spec"]["containers"][0]["env"]
    patched["args"] = pod_template(patch)["spec"]["containers"][0]["args"]
    _check_env_names(patched, "analytics (spark-on-k8s)")


# The Secrets README's first Kubernetes command creates (k8s/ ships none): name -> keys.
CREATED = created_secrets(readme_kubernetes_block())


def test_secret_and_configmap_references_resolve():
    configmaps = {d["metadata"]["name"]: d for d in BASE if d["kind"] == "ConfigMap"}
    for w in workloads():
        spec = pod_template(w)["spec"]
        for c in spec["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    r = ref["secretKeyRef"]
                    assert r["key"] in CREATED.get(r["name"], {}), (w["metadata"]["name"], e["name"])
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    assert r["key"] in configmaps[r["name"]]["data"], (w["metadata"]["name"], e["name"])
        for v in spec.get("volumes", []):
            if "secret" in v:
                keys = CREATED.get(v["secret"]["secretName"], {})
                for item in v["secret"].get("items", []):
                    assert item["key"] in keys, (w["metadata"]["name"], v["name"])


def test_k8s_ships_no_secret():
    """A Secret in k8s/ would be applied by `kubectl apply -k k8s/` over the real one
    created before it: a placeholder password would reach Redis."""
    assert not [(p.name, d["metadata"]["name"]) for p in manifest_files() for d in load(p) if d["kind"] == "Secret"]


def test_readmes_first_kubernetes_command_creates_generated_secrets_before_applying():
    """Redis and the workers start only on Secrets made on the spot: every key the command
    creates is generated (openssl rand / python secrets), and created before the apply."""
    block = readme_kubernetes_block()
    before_apply = block.split("kubectl apply -k k8s/", 1)[0]
    assert "REPLACE-ME" not in block
    assert created_secrets(before_apply) == CREATED and CREATED
    for name, keys in CREATED.items():
        for key, source in keys.items():
            made = GENERATED.findall(source)
            slots = source.count("%s") if "printf" in source else 1
            assert made and len(made) >= slots, f"Secret {name}/{key} is not generated: {source!r}"


def test_redis_url_points_at_the_redis_service_with_the_secret_password():
    env = env_of(REGISTRY)
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "rmq-redis", "key": "password"}
    m = re.fullmatch(r"redis://:\$\(REDIS_PASSWORD\)@([a-z0-9.-]+):(\d+)/\d+", env["REDIS_URL"]["value"])
    assert m, env["REDIS_URL"]["value"]
    svc = one("Service", m.group(1).split(".")[0])
    assert int(m.group(2)) in {p["port"] for p in svc["spec"]["ports"]}
    sts = one("StatefulSet", "redis")
    assert selects(svc["spec"]["selector"], pod_template(sts)["metadata"]["labels"])


def test_auth_tokens_file_is_the_mounted_secret():
    path = CONFIG["data"]["RMQ_AUTH_TOKENS_FILE"]
    directory, filename = path.rsplit("/", 1)
    mount = next(m for m in REGISTRY["volumeMounts"] if m["mountPath"] == directory)
    assert mount.get("readOnly") is True and "subPath" not in mount, "subPath mounts never see Secret updates"
    volume = next(v for v in POD["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "rmq-registry-auth"
    assert [i["path"] for i in volume["secret"]["items"]] == [filename]


def test_registry_deployment_shape():
    assert DEPLOY["spec"]["replicas"] >= 2
    grace = POD["terminationGracePeriodSeconds"]
    assert grace == 30
    pre = REGISTRY["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] == "sleep" and 0 < int(pre[1]) < grace
    for key in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(REGISTRY["resources"][key])
    assert REGISTRY["args"] == ["serve"]
    mounts = {m["mountPath"]: m["name"] for m in REGISTRY["volumeMounts"]}
    assert "emptyDir" in next(v for v in POD["volumes"] if v["name"] == mounts["/tmp"])


def test_hpa_and_pdb_target_the_registry():
    hpa = one("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", DEPLOY["metadata"]["name"])
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert hpa["spec"]["minReplicas"] <= DEPLOY["spec"]["replicas"]
    assert any(m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])
    pdb = one("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert selects(pdb["spec"]["selector"], pod_template(DEPLOY)["metadata"]["labels"])
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"], "the PDB must let a drain proceed"


# ---------------------------------------------------------------------- security
@pytest.mark.parametrize("name", list(all_pod_templates()))
def test_pods_are_locked_down(name: str):
    pod = all_pod_templates()[name]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert "add" not in sc["capabilities"]
        if name != "spark-executor":  # Spark sets the executors' resources
            for key in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][key]), (name, c["name"])
        assert "/tmp" in {m["mountPath"] for m in c.get("volumeMounts", [])}, "read-only root: /tmp must be a volume"
    if name.startswith("Deployment") or name.startswith("StatefulSet"):
        assert pod["automountServiceAccountToken"] is False


# -------------------------------------------------------------------------- redis
def test_redis_is_durable_and_password_protected():
    sts = one("StatefulSet", "redis")
    c = pod_template(sts)["spec"]["containers"][0]
    args = " ".join(c["args"])
    assert "--appendonly yes" in args and "--appendfsync everysec" in args
    assert "--requirepass $(REDIS_PASSWORD)" in args
    assert env_of(c)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "rmq-redis"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    data = next(m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert f"--dir {data['mountPath']}" in args
    image = c["image"]
    assert ":" in image and not image.endswith(":latest")


# -------------------------------------------------------------------------- images
def test_image_names_and_versions_are_consistent():
    version = pyproject()["project"]["version"]
    registry_image = REGISTRY["image"]
    cron = one("CronJob", "rmq-analytics")
    analytics_image = pod_template(cron)["spec"]["containers"][0]["image"]
    repo, _, tag = registry_image.rpartition(":")
    assert tag == version and not tag == "latest"
    assert analytics_image == f"{repo}-analytics:{version}"
    kz = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    images = {i["name"]: i for i in kz["images"]}
    assert set(images) == {repo, f"{repo}-analytics"}
    assert {i.get("newTag") for i in images.values()} == {version}
    assert len({i.get("newName", n).rsplit("/", 1)[0] if "newName" in i else "" for n, i in images.items()}) == 1
    patch = one("CronJob", docs=load(VARIANT / "cronjob-patch.yaml"))
    executor_image = env_of(pod_template(patch)["spec"]["containers"][0])["SPARK_EXECUTOR_IMAGE"]["value"]
    assert executor_image == analytics_image
    # the names the Dockerfile documents for its two targets
    text = DOCKERFILE.read_text()
    assert f"-t {repo}:{version} ." in text and f"--target analytics -t {repo}-analytics:{version} ." in text


# ----------------------------------------------------------------------- analytics
def script_commands(script: str) -> list[str]:
    """A shell script's commands, one a line, with the lines a backslash continues joined."""
    return [line.strip() for line in script.replace("\\\n", " ").splitlines() if line.strip()]


def analytics_commands(script: str) -> tuple[str, str]:
    """The CronJob script's two steps: the run (spark-submit ... all) and the trend report."""
    submit = next(c for c in script_commands(script) if c.startswith("spark-submit "))
    history = next(c for c in script_commands(script) if " analytics history " in c)
    return submit, history


def test_analytics_cronjob_runs_spark_submit_in_local_mode_with_no_secret_in_its_command():
    cron = one("CronJob", "rmq-analytics")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_template(cron)["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    c = pod["containers"][0]
    script = c["args"][0]
    submit, _ = analytics_commands(script)
    assert re.search(r"--master 'local\[(\d+)\]'", submit)
    cores = int(re.search(r"--master 'local\[(\d+)\]'", submit).group(1))
    assert cores <= float(c["resources"]["limits"]["cpu"]), "local[N] within the pod's CPU limit"
    dockerfile = DOCKERFILE.read_text()
    assert "/opt/rmq/analytics_driver.py" in script and "/opt/rmq/analytics_driver.py" in dockerfile
    assert re.search(r"analytics_driver\.py[\s\\]+all\b", script)
    assert "--history /out/history" in script, "every run appends to one trend"
    # the Redis URL (with its password) comes from the environment, never the command line or Spark conf
    assert "REDIS_URL" in env_of(c) and "$REDIS_URL" not in script and "REDIS_PASSWORD" not in script
    assert "spark.redis.auth" not in script
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    out = next(v for v in pod["volumes"] if v["name"] == mounts["/out"])
    one("PersistentVolumeClaim", out["persistentVolumeClaim"]["claimName"])


def test_spark_on_k8s_variant_asks_the_api_server_for_executor_pods():
    patch = one("CronJob", docs=load(VARIANT / "cronjob-patch.yaml"))
    c = pod_template(patch)["spec"]["containers"][0]
    script = c["args"][0]
    submit, _, app_args = analytics_commands(script)[0].partition("/opt/rmq/analytics_driver.py")
    # the master is spark-submit's (the job sets none of its own: no --master after the app)
    assert "--master k8s://https://kubernetes.default.svc" in submit and "--deploy-mode client" in submit
    assert "--master" not in app_args
    confs = dict(re.findall(r"--conf ([\w.]+)=(\S+)", submit))
    assert int(confs["spark.executor.instances"]) >= 1
    assert confs["spark.kubernetes.container.image"] == '"$SPARK_EXECUTOR_IMAGE"'
    assert confs["spark.kubernetes.executor.podTemplateFile"] == "/etc/spark/executor.yaml"
    assert confs["spark.driver.host"] == '"$POD_IP"', "executors connect back to the driver pod"
    assert confs["spark.pyspark.python"] == "python3", "the executors' Python: the image's"
    assert {"spark.kubernetes.authenticate.caCertFile", "spark.kubernetes.authenticate.oauthTokenFile"} <= set(confs)
    template = yaml.safe_load(one("ConfigMap", "rmq-spark-executor-template", docs=load(
        VARIANT / "executor-pod-template.yaml"))["data"]["executor.yaml"])
    names = [x["name"] for x in template["spec"]["containers"]]
    assert confs["spark.kubernetes.executor.podTemplateContainerName"] in names
    assert pod_template(patch)["spec"]["serviceAccountName"] == "rmq-spark"
    assert "spark.redis.auth" not in script and "$REDIS_URL" not in script


# ------------------------------------------------------------------ network policy
def _admitted(policy: dict, labels: dict, same_namespace: bool = True) -> bool:
    for rule in policy["spec"].get("ingress", []):
        for peer in rule.get("from", []):
            if "ipBlock" in peer:
                continue
            ns_ok = same_namespace if "namespaceSelector" not in peer else True
            if ns_ok and selects(peer.get("podSelector", {}), labels):
                return True
    return False


def test_network_policies_select_real_pods_and_ports():
    pods = all_pod_templates()
    for np in (d for d in BASE if d["kind"] == "NetworkPolicy"):
        targets = [n for n, p in pods.items() if selects(np["spec"]["podSelector"], p["metadata"]["labels"])]
        assert targets, f"NetworkPolicy {np['metadata']['name']} selects no pod"
        assert np["spec"]["policyTypes"] == ["Ingress"]
        for rule in np["spec"]["ingress"]:
            for port in rule["ports"]:
                for t in targets:
                    assert port["port"] in container_ports(pods[t]), (np["metadata"]["name"], port, t)
            for peer in rule["from"]:
                sel = peer.get("podSelector", {}).get("matchLabels", {})
                if "namespaceSelector" not in peer:  # same namespace: must be one of our pods
                    assert any(selects(peer["podSelector"], p["metadata"]["labels"]) for p in pods.values()), sel


def test_only_registry_and_analytics_reach_redis():
    policy = one("NetworkPolicy", "redis")
    for name, pod in all_pod_templates().items():
        labels = pod["metadata"]["labels"]
        expected = labels.get("app.kubernetes.io/component") in ("registry", "analytics")
        assert _admitted(policy, labels) is expected, name
    assert not _admitted(policy, {"rmq-registry/client": "true"})
    assert not _admitted(policy, {"app.kubernetes.io/name": "rmq-registry", "app.kubernetes.io/component": "registry"},
                         same_namespace=False)


def test_only_labelled_clients_reach_the_registry():
    policy = one("NetworkPolicy", "rmq-registry")
    assert _admitted(policy, {"rmq-registry/client": "true"}, same_namespace=False)
    assert _admitted(policy, {"app.kubernetes.io/name": "rmq-analytics", "app.kubernetes.io/component": "analytics"})
    assert not _admitted(policy, {"app": "something-else"})
    assert not _admitted(policy, {"rmq-registry/client": "false"}, same_namespace=False)
    redis = pod_template(one("StatefulSet", "redis"))["metadata"]["labels"]
    assert not _admitted(policy, redis)


# The redis-sentinel variant: tests/deploy/test_redis_sentinel.py
