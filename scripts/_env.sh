# Sourced by scripts/serve and scripts/test: a project virtualenv with the package
# installed in it, made on first use and refreshed when pyproject.toml changes.
# Usage: ensure_venv "<extras>"   (e.g. "" or "test,analytics")

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RMQ_VENV:-$ROOT/.venv}"

ensure_venv() {
    local extras="$1" spec="." stamp
    [ -n "$extras" ] && spec=".[$extras]"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating virtualenv $VENV" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip >&2
    fi
    stamp="$VENV/.installed-$(printf '%s' "$extras" | tr ',' '-')-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        echo "==> installing $spec into $VENV" >&2
        (cd "$ROOT" && "$VENV/bin/python" -m pip install -q -e "$spec") >&2
        touch "$stamp"
    fi
}

# apt-get install, as root or through sudo, updating the package lists once.
apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "==> installing $* from Debian packages" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}
