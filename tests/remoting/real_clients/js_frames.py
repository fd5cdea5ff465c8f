"""Requests for the ali-ons session, built as the Java broker builds them (tests/remoting/frames.py)."""

from __future__ import annotations

from typing import Any

from tests.builders import registration
from tests.remoting import frames


def register_request(reg: dict[str, Any] | None = None) -> tuple[int, dict[str, str], str]:
    """REGISTER_BROKER: code, header fields (strings) and RegisterBrokerBody JSON with its CRC32."""
    cmd = frames.register(reg or registration())
    return cmd.code, dict(cmd.ext_fields), cmd.body.decode()


async def js_register(session: Any, reg: dict[str, Any] | None = None) -> dict[str, Any]:
    code, ext, body = register_request(reg)
    answer = await session.call(code, ext, body)
    assert answer["code"] == 0, answer
    return answer
