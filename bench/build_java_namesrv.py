"""Build RocketMQ's NameServer 4.9.8 from source into the layout bench/java_namesrv.py starts.

    python bench/build_java_namesrv.py --rocketmq-src SRC --fastjson-src FJ --out DIR

SRC is a checkout (or `git archive`) of apache/rocketmq at tag `rocketmq-all-4.9.8`, FJ
one of alibaba/fastjson at tag `1.2.69`. No Maven repository is needed: the modules
`logging remoting common srvutil namesrv` and fastjson are compiled with the JDK's
`javac --release 8` against library jars of Debian packages (installed with apt-get when
missing; the versions differ a little from RocketMQ's pom, the APIs used do not), netty 4.1
from `libnetty-java` unless `--netty-jars DIR` names another netty 4.1 (e.g. pyspark's
`jars/`). A few classes the sources name but nothing provides get compile-only stubs
(bench/java_stubs.py says which and why); they are not in the result.

The result: DIR/lib/*.jar (one jar per module, fastjson, the libraries), DIR/conf/
logback_namesrv.xml (the distribution's), RocketMQ's LICENSE and NOTICE, and DIR/BUILD.txt
saying what went in. It is built in a temp dir beside DIR and moved there at the end, so a
failed build leaves DIR as it was. Bad input (a missing or wrong source tree, no JDK, a
non-empty DIR without --force) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import java_stubs  # noqa: E402

ROCKETMQ_VERSION = "4.9.8"
FASTJSON_VERSION = "1.2.69"
MODULES = ("logging", "remoting", "common", "srvutil", "namesrv")  # in dependency order
DEBIAN_JARS = Path("/usr/share/java")
# (jar name in /usr/share/java, Debian package): on the class path and copied into DIR/lib
RUNTIME_JARS = (("slf4j-api", "libslf4j-java"), ("logback-classic", "liblogback-java"),
                ("logback-core", "liblogback-java"), ("commons-lang3", "libcommons-lang3-java"),
                ("commons-cli", "libcommons-cli-java"), ("commons-validator", "libcommons-validator-java"),
                ("lz4-java", "liblz4-java"), ("zstd-jni", "libzstd-jni-java"))
# fastjson's GuavaCodec and JodaCodec name them; only used for values of those types
COMPILE_ONLY_JARS = (("guava", "libguava-java"), ("joda-time", "libjoda-time-java"))
NETTY_PACKAGE = "libnetty-java"
NETTY_MODULES = ("buffer", "codec", "common", "handler", "resolver", "transport",
                 "transport-native-unix-common", "transport-native-epoll")
NETTY_OPTIONAL = ("transport-classes-epoll",)  # netty >= 4.1.79 moved the epoll classes here
# fastjson's integrations with other frameworks; none is used by RocketMQ. The two files
# of it that fastjson's core names are compiled (against java_stubs.FASTJSON).
FASTJSON_SKIP = "com/alibaba/fastjson/support/"
FASTJSON_KEEP = ("com/alibaba/fastjson/support/moneta/MonetaCodec.java",
                 "com/alibaba/fastjson/support/springfox/SwaggerJsonSerializer.java")


class BadInput(Exception):
    """A setting the build cannot use: its message is the one line the user sees."""


def pom_version(pom: Path) -> tuple[str, str]:
    """(artifactId, version) of a pom's own project, not of its parent."""
    try:
        root = ET.parse(pom).getroot()
    except (OSError, ET.ParseError) as e:
        raise BadInput(f"{pom}: unreadable ({e})") from None
    ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    return root.findtext(f"{ns}artifactId", ""), root.findtext(f"{ns}version", "")


def check_tree(setting: str, path: Path, artifact: str, version: str, tag: str, needed: list[str]) -> Path:
    """The source tree of `setting`, resolved, if it is `artifact` at `version` with `needed` dirs."""
    what = f"{setting} {str(path)!r}"
    if not path.is_dir():
        raise BadInput(f"{what}: not a directory (expected a checkout of tag {tag})")
    if not (path / "pom.xml").is_file():
        raise BadInput(f"{what}: no pom.xml (expected a checkout of tag {tag})")
    found_artifact, found_version = pom_version(path / "pom.xml")
    if (found_artifact, found_version) != (artifact, version):
        raise BadInput(f"{what}: pom.xml is {found_artifact or '?'} {found_version or '?'}, "
                       f"expected {artifact} {version} (tag {tag})")
    for sub in needed:
        if not (path / sub).is_dir():
            raise BadInput(f"{what}: no {sub} (expected a checkout of tag {tag})")
    return path.resolve()


def check_out(out: Path, force: bool) -> Path:
    """DIR resolved, if the build may end by putting its result there."""
    if not out.parent.is_dir():
        raise BadInput(f"--out {str(out)!r}: its parent directory does not exist")
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise BadInput(f"--out {str(out)!r}: exists and is not empty (--force replaces it once the build succeeds)")
    return out.resolve()


def check_jdk() -> str:
    """`javac -version`'s answer, if javac (9 or later, for --release) and jar are on PATH."""
    javac = shutil.which("javac")
    if javac is None:
        raise BadInput("javac: not on PATH (install a JDK 9 or later, e.g. apt-get install default-jdk-headless)")
    if shutil.which("jar") is None:
        raise BadInput(f"jar: not on PATH beside javac {javac!r} (a JDK's jar tool is needed)")
    proc = subprocess.run([javac, "-version"], capture_output=True, text=True)
    answer = (proc.stdout + proc.stderr).strip()
    m = re.search(r"javac (\d+)(?:\.(\d+))?", answer)
    if proc.returncode != 0 or m is None or (int(m.group(1)) == 1 or int(m.group(1)) < 9):
        raise BadInput(f"javac {javac!r}: {answer or 'no answer'!r}, need JDK 9 or later (--release 8)")
    return answer


def apt_install(packages: list[str]) -> None:
    """Install Debian packages the way scripts/_env.sh does (root, or through sudo)."""
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise BadInput(f"missing Debian packages {' '.join(packages)}: not root and no sudo; "
                           f"install them with apt-get install {' '.join(packages)}")
        sudo = ["sudo"]
    if shutil.which("apt-get") is None:
        raise BadInput(f"missing Debian packages {' '.join(packages)} and no apt-get to install them")
    print(f"==> installing {' '.join(packages)} from Debian packages", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*sudo, "apt-get", "update", "-qq"], stdout=sys.stderr, env=env, check=False)
    proc = subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *packages], stdout=sys.stderr, env=env)
    if proc.returncode != 0:
        raise BadInput(f"apt-get install {' '.join(packages)} failed with status {proc.returncode}")


def debian_jars(with_netty: bool) -> tuple[list[Path], list[Path]]:
    """(runtime jars, compile-only jars) from /usr/share/java, installing what is missing."""
    wanted = [*RUNTIME_JARS, *COMPILE_ONLY_JARS]
    missing = sorted({pkg for name, pkg in wanted if not (DEBIAN_JARS / f"{name}.jar").is_file()})
    if with_netty and not list(DEBIAN_JARS.glob("netty-common-4.1.*.jar")):
        missing.append(NETTY_PACKAGE)
    if missing:
        apt_install(missing)
    for name, pkg in wanted:
        if not (DEBIAN_JARS / f"{name}.jar").is_file():
            raise BadInput(f"{DEBIAN_JARS / f'{name}.jar'}: still missing after installing {pkg}")
    return ([DEBIAN_JARS / f"{n}.jar" for n, _ in RUNTIME_JARS],
            [DEBIAN_JARS / f"{n}.jar" for n, _ in COMPILE_ONLY_JARS])


def netty_jars(directory: Path, setting: str) -> list[Path]:
    """The netty 4.1 jars RocketMQ's remoting needs, all of one version, from `directory`.

    Named like Maven's (netty-buffer-4.1.48.Final.jar; the native epoll one may carry this
    machine's classifier, e.g. -linux-x86_64), as both Debian and pyspark ship them."""
    what = f"{setting} {str(directory)!r}"
    if not directory.is_dir():
        raise BadInput(f"{what}: not a directory")
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch_64", "arm64": "aarch_64"}.get(
        platform.machine().lower(), platform.machine().lower())
    jars: list[Path] = []
    versions: set[str] = set()
    for module in (*NETTY_MODULES, *NETTY_OPTIONAL):
        pattern = re.compile(rf"netty-{re.escape(module)}-(4\.1\.\d+\.Final)(-linux-{re.escape(arch)})?\.jar")
        found = sorted((m.group(1), p) for p in directory.glob(f"netty-{module}-4.1.*.jar")
                       if (m := pattern.fullmatch(p.name)))
        if not found:
            if module in NETTY_OPTIONAL:
                continue
            raise BadInput(f"{what}: no netty-{module}-4.1.*.Final.jar")
        versions.add(found[-1][0])
        jars.append(found[-1][1])
    if len(versions) > 1:
        raise BadInput(f"{what}: netty jars of several versions ({', '.join(sorted(versions))})")
    return jars


def versioned_name(jar: Path) -> str:
    """The file name to give a Debian jar in DIR/lib: its versioned alias when it has one."""
    target = jar.resolve()
    for alias in sorted(jar.parent.glob(f"{jar.stem}-[0-9]*.jar")):
        if alias.resolve() == target and re.fullmatch(rf"{re.escape(jar.stem)}-\d[\w.~+-]*\.jar", alias.name):
            return alias.name
    return jar.name


def javac(sources: list[Path], out: Path, classpath: list[Path], work: Path, label: str) -> None:
    """Compile `sources` into `out`; on failure show javac's output and stop."""
    out.mkdir(parents=True)
    argfile = work / f"{label}.sources"
    argfile.write_text("".join(f'"{s.as_posix()}"\n' for s in sources))
    args = ["javac", "--release", "8", "-encoding", "UTF-8", "-g", "-nowarn", "-proc:none",
            "-d", str(out), "-cp", os.pathsep.join(map(str, classpath)), f"@{argfile}"]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise RuntimeError(f"javac failed on {label} ({len(sources)} files), status {proc.returncode}")


def write_sources(files: dict[str, str], root: Path) -> list[Path]:
    paths = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


def copy_resources(src_main: Path, classes: Path) -> None:
    """src/main/resources into the classes dir, without ServiceLoader registrations: the
    only ones (fastjson's JAX-RS providers) name classes this build leaves out."""
    resources = src_main / "resources"
    if resources.is_dir():
        shutil.copytree(resources, classes, dirs_exist_ok=True,
                        ignore=lambda d, names: ["services"] if Path(d).name == "META-INF" else [])


def make_jar(classes: Path, jar: Path) -> None:
    subprocess.run(["jar", "--create", "--file", str(jar), "-C", str(classes), "."], check=True)


def build(rocketmq: Path, fastjson: Path, netty: list[Path], runtime: list[Path],
          compile_only: list[Path], jdk: str, stage: Path) -> None:
    """Compile, package and lay out the NameServer in `stage` (DIR's future contents)."""
    work = stage / ".work"
    lib = stage / "lib"
    lib.mkdir(parents=True)
    (stage / "conf").mkdir()

    stubs_fastjson = work / "stubs-fastjson"
    javac(write_sources(java_stubs.FASTJSON, work / "stubs-src"), stubs_fastjson, [], work, "stubs-fastjson")
    fj_root = fastjson / "src/main/java"
    fj_sources = [p for p in sorted(fj_root.rglob("*.java"))
                  if not p.relative_to(fj_root).as_posix().startswith(FASTJSON_SKIP)]
    fj_sources += [fj_root / keep for keep in FASTJSON_KEEP]
    fj_classes = work / "classes/fastjson"
    print(f"==> fastjson {FASTJSON_VERSION}: {len(fj_sources)} files", flush=True)
    javac(fj_sources, fj_classes, [stubs_fastjson, *compile_only], work, "fastjson")
    copy_resources(fastjson / "src/main", fj_classes)
    make_jar(fj_classes, lib / f"fastjson-{FASTJSON_VERSION}.jar")

    classpath = [fj_classes, *runtime, *netty]
    for module in MODULES:
        extra: list[Path] = []
        if module == "namesrv":
            extra = [work / "stubs-namesrv"]
            javac(write_sources(java_stubs.NAMESRV, work / "stubs-src"), extra[0], classpath, work, "stubs-namesrv")
        sources = sorted((rocketmq / module / "src/main/java").rglob("*.java"))
        classes = work / f"classes/{module}"
        print(f"==> rocketmq-{module}: {len(sources)} files", flush=True)
        javac(sources, classes, [*extra, *classpath], work, module)
        copy_resources(rocketmq / module / "src/main", classes)
        make_jar(classes, lib / f"rocketmq-{module}-{ROCKETMQ_VERSION}.jar")
        classpath.insert(0, classes)

    names = {}
    for jar in [*runtime, *netty]:
        names[jar] = versioned_name(jar) if jar.parent == DEBIAN_JARS else jar.name
        shutil.copyfile(jar, lib / names[jar])
    logback = rocketmq / "distribution/conf/logback_namesrv.xml"
    if logback.is_file():
        shutil.copyfile(logback, stage / "conf/logback_namesrv.xml")
    for notice in ("LICENSE", "NOTICE"):
        if (rocketmq / notice).is_file():
            shutil.copyfile(rocketmq / notice, stage / notice)
    shutil.rmtree(work)
    (stage / "BUILD.txt").write_text(
        f"RocketMQ NameServer {ROCKETMQ_VERSION}, built {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC} "
        f"by bench/build_java_namesrv.py with {jdk} (--release 8)\n"
        f"rocketmq source: {rocketmq} (modules {' '.join(MODULES)})\n"
        f"fastjson source: {fastjson} ({FASTJSON_VERSION}, without com.alibaba.fastjson.support "
        f"but {', '.join(Path(k).stem for k in FASTJSON_KEEP)})\n"
        f"compile-only stubs (not in lib/): {', '.join(Path(k).stem for k in (*java_stubs.FASTJSON, *java_stubs.NAMESRV))}\n"
        f"compile-only jars: {' '.join(str(j.resolve()) for j in compile_only)}\n"
        "libraries:\n" + "".join(f"  lib/{names[j]} <- {j.resolve()}\n" for j in [*runtime, *netty]))


def replace(stage: Path, out: Path) -> None:
    """Put the finished build at `out`, removing what was there only once it is in place."""
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    old = None
    if out.exists():
        old = stage.parent / f"{stage.name}.old"
        out.rename(old)
    stage.rename(out)
    if old is not None:
        shutil.rmtree(old)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rocketmq-src", type=Path, required=True,
                   help=f"apache/rocketmq at tag rocketmq-all-{ROCKETMQ_VERSION}")
    p.add_argument("--fastjson-src", type=Path, required=True, help=f"alibaba/fastjson at tag {FASTJSON_VERSION}")
    p.add_argument("--out", type=Path, required=True, help="where the build goes (DIR/lib/*.jar); absent or empty")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out once the build succeeds")
    p.add_argument("--netty-jars", type=Path, default=None,
                   help=f"a directory of netty 4.1 jars to use instead of Debian's {NETTY_PACKAGE}")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        rocketmq = check_tree("--rocketmq-src", args.rocketmq_src, "rocketmq-all", ROCKETMQ_VERSION,
                              f"rocketmq-all-{ROCKETMQ_VERSION}", [f"{m}/src/main/java" for m in MODULES])
        fastjson = check_tree("--fastjson-src", args.fastjson_src, "fastjson", FASTJSON_VERSION,
                              FASTJSON_VERSION, ["src/main/java/com/alibaba/fastjson"])
        out = check_out(args.out, args.force)
        if args.netty_jars is not None:
            netty_jars(args.netty_jars, "--netty-jars")  # a wrong directory fails before apt-get runs
        jdk = check_jdk()
        runtime, compile_only = debian_jars(with_netty=args.netty_jars is None)
        netty = netty_jars(args.netty_jars or DEBIAN_JARS, "--netty-jars" if args.netty_jars else NETTY_PACKAGE)
    except BadInput as e:
        print(f"build_java_namesrv: {e}", file=sys.stderr)
        return 2
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        build(rocketmq, fastjson, netty, runtime, compile_only, jdk, stage)
        replace(stage, out)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        print(f"build_java_namesrv: build failed, {str(out)!r} left as it was: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(stage.parent / f"{stage.name}.old", ignore_errors=True)
    print(f"built RocketMQ NameServer {ROCKETMQ_VERSION} into {out} in {time.monotonic() - started:.1f} s; "
          f"check it: python bench/java_namesrv.py --java-namesrv-home {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
