"""API errors: every non-2xx answer is {"error": CODE, "message": text} (docs/api.md)."""

from __future__ import annotations

from aiohttp import web
import orjson


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_REQUEST", message)


def topic_not_exist(topic: str) -> ApiError:
    # RocketMQ's own wording, which operators grep their logs for
    return ApiError(404, "TOPIC_NOT_EXIST", f"No topic route info in name server for the topic: {topic}")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error": code, "message": message}),
        content_type="application/json",
        headers=headers,
    )
