"""README's walk-through works as written, against a real worker."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess

import pytest

from tests.processes import ROOT, console_script, start, wait_http
from tests.redis_server import free_port


def walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Walk-through", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_walkthrough_runs_as_written() -> None:
    port = free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)])
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        script = walkthrough().replace("localhost:8080", f"localhost:{port}")
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60).stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    # the README shows each answer as a comment (long ones folded over two lines);
    # curl prints them without newlines, one after the other
    shown = [line[2:].strip() for line in walkthrough().splitlines() if line.startswith(("# {", '#  "'))]
    assert out == "".join(shown)
