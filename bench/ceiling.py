"""The aiohttp static-JSON ceiling: one handler answering constant bytes.

Same server stack as a registry worker (aiohttp, uvloop when importable, no access
log), none of the registry's work: what one worker process could serve at best.
Usage: python bench/ceiling.py --port P --body-file route.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aiohttp import web


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--body-file", type=Path, required=True)
    args = p.parse_args()
    body = args.body_file.read_bytes()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def route(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(body=b"{}", content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/routes/{topic}", route)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
