# Sourced by scripts/serve, scripts/test and scripts/lock: a project virtualenv with the
# package installed in it, made on first use and refreshed when pyproject.toml or the lock
# files change.
# Usage: ensure_venv "<extras>"   (one of "", "analytics", "test,analytics")

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RMQ_VENV:-$ROOT/.venv}"

# The lock files (scripts/lock writes them) are resolved for this interpreter and platform.
LOCK_PYTHON=3.11
LOCK_TARGET="cpython-$LOCK_PYTHON-Linux-x86_64"
BUILD_LOCK="requirements/build.txt"

# The lock file of an extras set: requirements/base.txt, analytics.txt, test-analytics.txt.
lock_file() {
    local name="${1//,/-}"
    echo "requirements/${name:-base}.txt"
}

# The interpreter a new virtualenv gets: $RMQ_PYTHON, else python3.11 when there is one
# (the lock's), else python3.
base_python() {
    if [ -n "${RMQ_PYTHON:-}" ]; then echo "$RMQ_PYTHON"
    elif command -v "python$LOCK_PYTHON" >/dev/null; then echo "python$LOCK_PYTHON"
    else echo python3
    fi
}

ensure_venv() {
    local extras="$1" spec="." lock target stamp
    [ -n "$extras" ] && spec=".[$extras]"
    lock="$(lock_file "$extras")"
    if [ ! -f "$ROOT/$lock" ]; then
        echo "no lock file $lock for the extras '$extras' (scripts/lock writes them)" >&2
        exit 2
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating virtualenv $VENV" >&2
        "$(base_python)" -m venv "$VENV"
    fi
    target="$("$VENV/bin/python" -c 'import platform, sys; v = sys.version_info
print(f"{sys.implementation.name}-{v[0]}.{v[1]}-{platform.system()}-{platform.machine()}")')"
    if [ "$target" != "$LOCK_TARGET" ]; then
        if [ -n "${RMQ_REQUIRE_LOCK:-}" ]; then
            echo "RMQ_REQUIRE_LOCK is set but $VENV/bin/python is $target and the lock is for $LOCK_TARGET: set RMQ_PYTHON to a Python $LOCK_PYTHON, or remove $VENV" >&2
            exit 2
        fi
        stamp="$VENV/.installed-unlocked-${extras//,/-}-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
        if [ ! -f "$stamp" ]; then
            echo "==> $VENV/bin/python is $target, the lock is for $LOCK_TARGET: installing $spec from pyproject.toml's version ranges, not the lock" >&2
            "$VENV/bin/python" -m pip install -q --upgrade pip >&2
            (cd "$ROOT" && "$VENV/bin/python" -m pip install -q -e "$spec") >&2
            touch "$stamp"
        fi
        return
    fi
    stamp="$VENV/.installed-${extras//,/-}-$(cat "$ROOT/pyproject.toml" "$ROOT/$BUILD_LOCK" "$ROOT/$lock" | sha1sum | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        echo "==> installing $spec into $VENV from $lock" >&2
        # pip and the build backend first (pinned too), then the lock, then the project
        # alone: --no-deps and no build isolation, so nothing comes from outside the lock.
        # (The backend's own chatter about editable installs is shown only if it fails.)
        (cd "$ROOT" \
            && "$VENV/bin/python" -m pip install -q --require-hashes -r "$BUILD_LOCK" \
            && "$VENV/bin/python" -m pip install -q --require-hashes -r "$lock" \
            && { "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e . \
                     >"$VENV/.project-install.log" 2>&1 || { cat "$VENV/.project-install.log"; false; }; }) >&2
        touch "$stamp"
    fi
}

# apt-get install, as root or through sudo, updating the package lists once. Two set-ups on
# one machine at once (two suites side by side) take turns: apt's own lock on its lists
# fails the second one at once rather than waiting for it.
apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "==> installing $* from Debian packages" >&2
    (
        flock -w 900 9 || { echo "apt_install: another install held ${TMPDIR:-/tmp}/rmq-registry-apt.lock for 15 minutes" >&2; exit 1; }
        $sudo apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 "$@" >&2
    ) 9>"${TMPDIR:-/tmp}/rmq-registry-apt.lock"
}
