"""What every request gets: a request id, the auth rule, JSON error answers, metrics.

Not an aiohttp middleware: with any middleware at all, aiohttp runs every request through
a handler chain it looks up per request plus a layer of its own, and the middleware's
coroutine on top; on one worker that was about a tenth of a cached route read
(bench/route_query.py). So each route's handler is wrapped once, when the route is
added (Observer.wrap), with its route label, metrics slot and auth check already
resolved. Requests no route matches reach ``Unmatched``, a catch-all resource whose
handler is wrapped the same way, so their 404/405 are JSON, carry an id and are counted
like every other answer.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator

from aiohttp import web
from yarl import URL

from service import auth
from service.http.connections import deadline_of
from service.http.errors import ApiError, error_response
from service.http.request_metrics import RequestTally
from service.logs import REQUEST_ID, RefusalLog, WindowedLog, new_request_id, printable
from service.registry import Busy
from service.store import NotReplicated, StoreRefusing, StoreUnavailable, outcome_text

log = logging.getLogger(__name__)

READ_METHODS = frozenset({"GET", "HEAD"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

UNMATCHED = "unmatched"  # the route label of requests no route matched


@dataclass(frozen=True)
class Observer:
    """One app's request tally and auth settings, which every wrapped handler applies."""

    tally: RequestTally
    tokens: auth.TokenFile | None  # None: auth is off
    reads: str
    refusals: RefusalLog | None = None  # where 401 and 403 answers are told
    failures: WindowedLog | None = None  # where Redis failures are told, a line per kind and window

    def wrap(self, method: str, route: str, handler: Handler, required: str) -> Handler:
        return observed(handler, self.tally, method, route, guard(self.tokens, self.reads, required, self.refusals),
                        self.failures)


def observed(handler: Handler, tally: RequestTally, method: str, route: str,
             guard: Guard | None = None, failures: WindowedLog | None = None) -> Handler:
    """`handler` giving every request an id (the caller's X-Request-Id, or a new one) for
    the log lines written for it and for the answer; checking `guard` first; answering
    errors as docs/api.md's JSON; and counting the request under (`method`, `route`) and its
    status, with its latency. Method "*" counts each request under its own method.
    It also tells the connection's head deadline (service.http.connections) that the
    request's head is complete, and when the request is done. A Redis failure is told to
    `failures` (one line per kind and window), or logged as it is without one."""
    slot = tally.labelled(method, route) if method != "*" else None
    perf_counter = time.perf_counter

    @functools.wraps(handler)
    async def observe(request: web.Request) -> web.StreamResponse:
        started = perf_counter()
        status = 500  # what a request counts as when something escapes even the mapping below
        request_id = request.headers.get("X-Request-Id") or new_request_id()
        REQUEST_ID.set(request_id)
        deadline = deadline_of(request)
        if deadline is not None:
            deadline.begin()
        try:
            try:
                denied = guard(request) if guard is not None else None
                response = denied if denied is not None else await handler(request)
            except web.HTTPException as e:
                response = http_error(request, e)
            except ApiError as e:
                response = error_response(e.status, e.code, e.message)
            except Busy as e:  # counted and logged once per burst by the registry
                response = error_response(503, "BUSY", str(e), headers={"Retry-After": "1"})
            except StoreUnavailable as e:
                if isinstance(e, (StoreRefusing, NotReplicated)):
                    pass  # refusals are logged once per burst by the store
                elif failures is not None:
                    failures.write(type(e).__name__, f"Redis unavailable: {e}")
                else:
                    log.warning("Redis unavailable: %s", e)
                response = error_response(503, "STORE_UNAVAILABLE", unavailable_message(e, request.method),
                                          headers={"Retry-After": "1"})
            except ConnectionResetError as e:  # the client hung up (mid-body): nobody to answer
                log.info("client %s hung up during %s %s: %s", request.remote, request.method, request.path, e)
                response = error_response(499, "CLIENT_CLOSED", "the client closed the connection")
            except Exception:
                log.exception("unhandled error in %s %s", request.method, request.path)
                response = error_response(500, "INTERNAL_ERROR", "internal error; see the registry's log")
            response.headers["X-Request-Id"] = request_id
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            if deadline is not None:
                deadline.end()
            (slot or tally.labelled(request.method, route)).add(status, perf_counter() - started)

    return observe


def unavailable_message(e: StoreUnavailable, method: str) -> str:
    """What a 503 tells the caller: whether the change was applied, and whether a retry is
    safe; a read's, only that the store is unavailable (the remoting front says the same)."""
    return outcome_text(e, read=method in READ_METHODS)


def http_error(request: web.Request, e: web.HTTPException) -> web.Response:
    """aiohttp's own errors as JSON; any other HTTPException (a redirect) goes out as it is."""
    if isinstance(e, web.HTTPRequestEntityTooLarge):
        return error_response(413, "PAYLOAD_TOO_LARGE", e.text or "request body too large")
    if isinstance(e, web.HTTPNotFound):
        return error_response(404, "NOT_FOUND", f"no such endpoint: {request.method} {request.path}")
    if isinstance(e, web.HTTPMethodNotAllowed):
        return error_response(405, "METHOD_NOT_ALLOWED", f"{request.method} is not allowed on {request.path}",
                              headers={"Allow": ",".join(sorted(e.allowed_methods))})
    raise e


Guard = Callable[[web.Request], "web.Response | None"]


def guard(tokens: auth.TokenFile | None, reads: str, required: str,
          refusals: RefusalLog | None = None) -> Guard | None:
    """The check for an endpoint that requires `required`: it answers 401 or 403 (each
    told to `refusals`), or None to let the request through. None instead of a check when
    there is nothing to check (auth off, or an endpoint anyone may call), so those
    requests pay nothing for auth."""
    if tokens is None or required == auth.OPEN or (required == auth.READ and reads == "open"):
        return None

    def check(request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        role = tokens.role_of(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if role is None:
            if refusals is not None:
                why = "an unknown bearer token" if scheme.lower() == "bearer" and token.strip() else "no bearer token"
                refused(refusals, request, 401, why)
            return error_response(401, "UNAUTHENTICATED", "a valid bearer token is required",
                                  headers={"WWW-Authenticate": 'Bearer realm="rmq-registry"'})
        if not auth.allowed(role, required, reads):
            if refusals is not None:
                refused(refusals, request, 403, f"a {role} token, {required} needed")
            return error_response(403, "FORBIDDEN", f"the {role} role may not do this")
        return None

    return check


def refused(refusals: RefusalLog, request: web.Request, status: int, why: str) -> None:
    """Tells a 401 or 403 (never the token: its role at most)."""
    client = request.remote or ""
    refusals.refused(client, f"HTTP {request.method} {printable(request.path)} from {client or 'an unknown address'}: "
                             f"{status}, {why}")


class Unmatched(web.AbstractResource):
    """Matches every request that no route matched, and answers it 404, or 405 when the
    path exists with other methods (as aiohttp's router would), through ``observed``.

    Register it after every other resource: it is indexed under "/", the last place the
    router looks and where it looks in registration order. It lists no routes, so
    ``router.routes()`` (the OpenAPI check, anything listing endpoints) does not see it.
    """

    def __init__(self, router: web.UrlDispatcher, tally: RequestTally) -> None:
        super().__init__()
        self._router = router
        self._route = web.ResourceRoute("*", observed(self._answer, tally, "*", UNMATCHED), self)

    @property
    def canonical(self) -> str:
        return "/"

    def url_for(self, **kwargs: str) -> URL:
        raise RuntimeError("the catch-all resource has no URL")

    async def resolve(self, request: web.Request) -> tuple[web.UrlMappingMatchInfo, set[str]]:
        return web.UrlMappingMatchInfo({}, self._route), set()

    def add_prefix(self, prefix: str) -> None:
        raise RuntimeError("the catch-all resource cannot move into a sub-application")

    def get_info(self) -> dict[str, str]:
        return {}

    def raw_match(self, path: str) -> bool:
        return False  # add_resource never reuses it for a path

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[web.AbstractRoute]:
        return iter(())

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        # only on the error path: ask every other resource which methods its path allows
        allowed: set[str] = set()
        for resource in self._router.resources():
            if resource is not self:
                allowed |= (await resource.resolve(request))[1]
        if allowed:
            raise web.HTTPMethodNotAllowed(request.method, allowed)
        raise web.HTTPNotFound()
