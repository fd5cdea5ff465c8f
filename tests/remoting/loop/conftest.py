"""The tests here measure the event loop the worker runs on (service/cli.py installs uvloop);
the other tests keep asyncio's."""

from __future__ import annotations

from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    return {"uvloop": uvloop.new_event_loop}
