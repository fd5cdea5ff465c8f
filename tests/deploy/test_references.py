"""Every name the Dockerfile and the k8s/ manifests use exists in the project or in what
the images install: the commands they run (the console script's subcommands, the files
the Dockerfile writes, pyspark's spark-submit, the Spark class, options and variables the
executor entrypoint relies on), the ports (the settings' defaults), the paths (what a
stage creates, what a pod mounts), the user, and every environment variable name (read
by service/config.py, by the analytics job, or by Python, pip or Spark). No container
runtime: the commands run here, from the test virtualenv, which installs the same lock."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tests.deploy.test_manifests as m
from service.config import ENV
from tests.deploy._common import ROOT
from tests.deploy.test_dockerfile import ANALYTICS, INSTRS, RUNTIME, STAGES, Stage, effective, exec_form, stage_chain
from tests.processes import console_script
from tests.settings_env import settings_from

IMAGES = {"rmq-registry": RUNTIME, "rmq-registry-analytics": ANALYTICS}
CRONJOB = m.one("CronJob", "rmq-analytics")
VARIANT_PATCH = m.one("CronJob", docs=m.load(m.VARIANT / "cronjob-patch.yaml"))


# ------------------------------------------------------------------ what the images hold
def written_files() -> dict[str, str]:
    """The files the Dockerfile writes with printf, by their path in the image."""
    files = {}
    for stage in STAGES:
        for run in stage.all("RUN"):
            for step in run.args.split("&&"):
                found = re.fullmatch(r"\s*printf '%s\\n' (.*) > (\S+)\s*", step, re.S)
                if found:
                    files[found.group(2)] = "\n".join(shlex.split(found.group(1))) + "\n"
    return files


def materialize(tmp_path: Path, argv: list[str]) -> list[str]:
    """argv with the files the Dockerfile writes taken from a copy in tmp_path."""
    files = written_files()
    out = []
    for word in argv:
        if word in files:
            copy = tmp_path / Path(word).name
            copy.write_text(files[word])
            copy.chmod(0o755)
            word = str(copy)
        out.append(word)
    return out


def run_here(argv: list[str]) -> subprocess.CompletedProcess:
    """A command as the image would run it, with the test virtualenv's scripts first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_") and k not in ("REDIS_URL", "PYTHONPATH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@functools.cache
def spark_bytes(*jar_globs: str, prefixes: tuple[str, ...] = ("",)) -> bytes:
    """The class files of Spark's jars (the named ones, under the given packages), concatenated."""
    chunks = []
    for pattern in jar_globs:
        for jar in (spark_home() / "jars").glob(pattern):
            with zipfile.ZipFile(jar) as z:
                chunks += [z.read(n) for n in z.namelist() if n.endswith(".class") and n.startswith(prefixes)]
    assert chunks, f"no Spark classes in {jar_globs} under {prefixes}"
    return b"".join(chunks)


def spark_reads(name: str) -> bool:
    """Whether pyspark (its Python, its launch scripts or its launcher) names the variable."""
    texts = [p.read_bytes() for p in spark_home().glob("*.py")]
    texts += [p.read_bytes() for p in (spark_home() / "bin").iterdir() if p.is_file()]
    texts.append(spark_bytes("spark-launcher_*.jar"))
    return any(name.encode() in t for t in texts)


@functools.cache
def python_env_help() -> str:
    return subprocess.run([sys.executable, "--help-env"], capture_output=True, text=True, check=True).stdout


@functools.cache
def pip_help() -> str:
    return subprocess.run([sys.executable, "-m", "pip", "--help"], capture_output=True, text=True, check=True).stdout


def analytics_env_reads() -> set[str]:
    """The environment variables the analytics package reads (os.environ[...], .get, in)."""
    names: set[str] = set()
    for path in (ROOT / "service" / "analytics").glob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"os\.environ(?:\.get\(|\[)\s*\"([A-Z_][A-Z0-9_]*)\"", text))
        names |= set(re.findall(r"\"([A-Z_][A-Z0-9_]*)\" in os\.environ", text))
    return names


def dockerfile_env() -> dict[str, str]:
    env = {}
    for stage in STAGES:
        for instr in stage.all("ENV"):
            for word in shlex.split(instr.args):
                name, _, value = word.partition("=")
                env[name] = value
    return env


# ---------------------------------------------------------------------------- commands
def test_the_dockerfile_writes_the_files_its_entrypoint_and_the_cronjob_run():
    files = written_files()
    assert exec_form(effective(ANALYTICS, "ENTRYPOINT"))[0] in files
    for cron in (CRONJOB, VARIANT_PATCH):
        script = m.pod_template(cron)["spec"]["containers"][0]["args"][0]
        assert set(re.findall(r"/opt/rmq/\S+", script)) <= set(files), script


@pytest.mark.parametrize("image", list(IMAGES))
def test_each_images_entrypoint_and_command_run_the_console_script(tmp_path: Path, image: str):
    stage = IMAGES[image]
    argv = exec_form(effective(stage, "ENTRYPOINT")) + exec_form(effective(stage, "CMD"))
    out = run_here(materialize(tmp_path, argv) + ["--help"])
    assert out.returncode == 0, out.stderr
    assert "usage: rmq-registry" in out.stdout


def test_the_registry_pods_arguments_are_a_command_of_its_image(tmp_path: Path):
    container = m.REGISTRY
    image = IMAGES[container["image"].rpartition(":")[0]]
    argv = container.get("command") or exec_form(effective(image, "ENTRYPOINT"))
    out = run_here(materialize(tmp_path, argv) + container["args"] + ["--help"])
    assert out.returncode == 0, out.stderr
    assert shutil.which(container["lifecycle"]["preStop"]["exec"]["command"][0])


def app_args(script: str) -> list[str]:
    words = shlex.split(m.analytics_commands(script)[0])
    return words[words.index("/opt/rmq/analytics_driver.py") + 1:]


@pytest.mark.parametrize("cron", [CRONJOB, VARIANT_PATCH], ids=["local", "spark-on-k8s"])
def test_the_analytics_job_runs_spark_submit_on_the_driver_with_options_the_job_has(tmp_path: Path, cron: dict):
    from importlib.metadata import distribution

    from service.analytics.cli import parser

    script = m.pod_template(cron)["spec"]["containers"][0]["args"][0]
    assert m.analytics_commands(script)[0].startswith("spark-submit ")
    assert any(Path(str(f)).parent.name == "bin" and Path(str(f)).name == "spark-submit"
               for f in distribution("pyspark").files), "pyspark installs no spark-submit script"
    args = app_args(script)
    assert args and parser().parse_args(args).job == args[0]
    # the driver file itself: the same command line, as spark-submit hands it over
    (driver,) = materialize(tmp_path, ["/opt/rmq/analytics_driver.py"])
    out = run_here([sys.executable, driver, "--help"])
    assert out.returncode == 0 and "usage: rmq-registry analytics" in out.stdout, out.stderr


def test_the_executor_entrypoint_starts_a_class_spark_ships_with_options_and_variables_spark_knows():
    script = written_files()["/opt/rmq/entrypoint.sh"]
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    (cls,) = re.findall(r"org\.apache\.spark\.[\w.]+", script)
    kubernetes = spark_bytes("spark-kubernetes_*.jar")
    assert zipfile.ZipFile(next((spark_home() / "jars").glob("spark-kubernetes_*.jar"))).getinfo(
        cls.replace(".", "/") + ".class")
    executor = spark_bytes("spark-core_*.jar", prefixes=("org/apache/spark/executor/",)) + kubernetes
    for option in re.findall(r" (--[a-zA-Z-]+) ", script[script.index(cls):]):
        assert option.encode() in executor, f"{option}: not an option of {cls}"
    for name in set(re.findall(r"\b(SPARK_[A-Z_]+)", script)) - {"SPARK_HOME"}:
        assert name.encode() in kubernetes, f"{name}: Spark on Kubernetes sets no such variable"


# ------------------------------------------------------------------------------- paths
def made_in(stage: Stage) -> set[str]:
    """Paths a stage (with its parents) creates: COPY destinations, pip's --dest/--wheel-dir."""
    made: set[str] = set()
    for s in reversed(stage_chain(stage)):
        workdir = "/"
        for i in s.instrs:
            if i.cmd == "WORKDIR":
                workdir = i.args
            elif i.cmd == "COPY":
                dest = shlex.split(i.args)[-1]
                made.add(os.path.normpath(os.path.join(workdir, dest)))
            elif i.cmd == "RUN":
                made |= set(re.findall(r"--(?:dest|wheel-dir)[ =](\S+)", i.args))
    return made


def test_every_bind_mount_reads_a_path_its_stage_creates():
    mounts = [(i, dict(kv.split("=", 1) for kv in opt.split(","))) for i in INSTRS if i.cmd == "RUN"
              for opt in re.findall(r"--mount=(\S+)", i.args)]
    assert mounts
    for instr, mount in mounts:
        source = next(s for s in STAGES if s.name == mount["from"])
        assert mount["source"] in made_in(source), f"line {instr.line}: {mount['source']} is not made in {source.name}"


@pytest.mark.parametrize("image", list(IMAGES))
def test_where_an_image_writes_is_a_volume_of_every_pod_that_runs_it(image: str):
    stage = IMAGES[image]
    writable = {effective(stage, "WORKDIR").args}
    if image == "rmq-registry-analytics":
        writable.add(dockerfile_env()["HOME"])
    pods = [p for p in m.all_pod_templates().values()
            if any(c.get("image", "").rpartition(":")[0] == image for c in p["spec"]["containers"])]
    assert pods
    for pod in pods:
        for c in pod["spec"]["containers"]:
            assert writable <= {v["mountPath"] for v in c.get("volumeMounts", [])}, (image, c["name"])


# ------------------------------------------------------------------------------- ports
def test_the_exposed_ports_are_the_settings_defaults():
    defaults = settings_from({})
    exposed = {int(p.split("/")[0]) for i in RUNTIME.all("EXPOSE") for p in i.args.split()}
    assert exposed == {defaults.port, defaults.remoting_port}


def test_the_healthcheck_reads_the_port_setting_with_its_default():
    code = json.loads(effective(RUNTIME, "HEALTHCHECK").args.partition("CMD")[2])[2]
    (name, default), = re.findall(r"os\.environ\.get\('(\w+)', '(\d+)'\)", code)
    assert ENV[name] == "port" and int(default) == settings_from({}).port


def test_the_registry_pods_ports_are_the_ports_its_settings_give():
    settings = settings_from({**m.CONFIG["data"], "REDIS_URL": "redis://:x@redis:6379/0"})
    ports = m.container_ports(m.pod_template(m.DEPLOY))
    assert (ports["http"], ports["remoting"]) == (settings.port, settings.remoting_port)


# -------------------------------------------------------------------------------- user
def test_the_images_and_the_pods_run_as_the_user_the_dockerfile_creates():
    runs = " ".join(i.args for i in INSTRS if i.cmd == "RUN")
    gid = re.search(r"groupadd [^&]*--gid (\d+)", runs).group(1)
    uid, user_gid = re.search(r"useradd [^&]*--uid (\d+) --gid (\d+)", runs).groups()
    assert user_gid == gid
    for stage in IMAGES.values():
        assert effective(stage, "USER").args == f"{uid}:{gid}"
    for name, pod in m.all_pod_templates().items():
        images = {c.get("image", "rmq-registry-analytics").rpartition(":")[0] for c in pod["spec"]["containers"]}
        if images & set(IMAGES):
            sc = pod["spec"]["securityContext"]
            assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (int(uid), int(gid), int(gid)), name


# ----------------------------------------------------------------- environment names
def test_every_env_name_the_dockerfile_sets_is_read_by_what_runs_in_the_image():
    unread = []
    for name in dockerfile_env():
        if name.startswith("RMQ_") or name == "REDIS_URL":
            known = name in ENV
        elif name.startswith("PYTHON"):
            known = re.search(rf"^{name}\b", python_env_help(), re.M) is not None
        elif name.startswith("PIP_"):  # pip reads PIP_<OPTION> for each of its options
            known = "--" + name.removeprefix("PIP_").lower().replace("_", "-") in pip_help()
        elif name.startswith(("PYSPARK_", "SPARK_")):
            known = spark_reads(name)
        else:
            known = name == "HOME"  # every program's, Spark's and Ivy's cache included
        if not known:
            unread.append(name)
    assert not unread, f"ENV names nothing in the image reads: {unread}"


@pytest.mark.parametrize("cron", ["local", "spark-on-k8s"])
def test_every_env_name_of_the_analytics_pod_is_read_by_the_job_or_used_by_its_command(cron: str):
    container = dict(m.pod_template(CRONJOB)["spec"]["containers"][0])
    if cron == "spark-on-k8s":
        patched = m.pod_template(VARIANT_PATCH)["spec"]["containers"][0]
        container["env"] = container["env"] + patched["env"]
        container["args"] = patched["args"]
    env = container["env"]
    script = " ".join(container["args"])
    read = analytics_env_reads()
    for name in (e["name"] for e in env):
        used = any(f"$({name})" in e.get("value", "") for e in env) or re.search(rf"\${name}\b|\${{{name}\}}", script)
        assert name in read or used, f"{cron}: {name} is read by neither the analytics job nor its command"
