"""The worker's settings as it reads them at its start (``from_env``, through pydantic-settings,
which reads only the process' environment), from the variables a test names."""

from __future__ import annotations

from typing import Mapping

import pytest

from service.config import ENV, Settings, from_env


def settings_from(variables: Mapping[str, str]) -> Settings:
    """``from_env()`` with these variables and no other setting's set (the shell that runs the
    tests may hold some); the environment is as it was again afterwards."""
    with pytest.MonkeyPatch.context() as env:
        for var in ENV:
            env.delenv(var, raising=False)
        for var, value in variables.items():
            env.setenv(var, value)
        return from_env()
