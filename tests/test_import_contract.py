"""The layers of pyproject.toml's import contract hold: the two protocol fronts never
import each other, and nothing in the core imports a front or the composition root; and
no module of service/ imports itself round a circle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contract_holds() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    proc = subprocess.run([lint, "--config", "pyproject.toml", "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


def test_no_module_in_service_is_in_an_import_circle() -> None:
    # imports under TYPE_CHECKING count too: a reader walks them as any other
    graph = grimp.build_graph("service", cache_dir=None)
    circles = {" -> ".join(graph.find_shortest_chain(importer=imported, imported=importer) or ()) + f" -> {imported}"
               for importer in graph.modules for imported in graph.find_modules_directly_imported_by(importer)
               if graph.chain_exists(importer=imported, imported=importer)}
    assert not circles, "\n".join(sorted(circles))
