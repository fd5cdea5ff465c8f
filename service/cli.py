"""`rmq-registry` / `python -m service`: serve, scan, analytics."""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys

import logging

from service import __version__, logs, start_log
from service.config import Settings, StartupError, from_env, unknown_variables

log = logging.getLogger("service")


def _serve(settings: Settings) -> int:
    from service.worker import create_app, serve

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # optional: the stock loop works, only slower
        pass
    try:
        asyncio.run(serve(create_app(settings), settings))
    except StartupError as exc:
        start_log.fail(log, f"cannot start: {exc}")  # first: what was held since the start follows, or not
        return 2
    finally:
        start_log.release()
    return 0


def _scan(settings: Settings) -> int:
    """One expiry pass and exit, for a CronJob or an operator's shell."""
    from service.registry import Registry
    from service.scanner import Scanner
    from service.store import Store

    async def once() -> int:
        store = Store(settings)
        scanner = Scanner(Registry(store), settings.scan_interval_ms, settings.scan_batch)
        try:
            removed = await scanner.scan_once()
        finally:
            await scanner.removals.stop()
            await store.close()
        print(f"expired brokers removed: {removed}")
        return 0

    return asyncio.run(once())


def _compare(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import os

    from service.remoting.client import Credentials
    from service.remoting.compare import run

    if args.in_flight < 1:
        parser.error(f"--in-flight must be at least 1, not {args.in_flight}")
    credentials = None
    if args.access_key:
        secret = os.environ.get("RMQ_COMPARE_SECRET_KEY")
        if not secret:
            parser.error("--access-key needs the secret key in RMQ_COMPARE_SECRET_KEY")
        credentials = Credentials(args.access_key, secret)
    if args.zone is not None and not args.zone.strip():
        parser.error("--zone must name a zone (the brokers' -Drocketmq.zone), not be blank")
    return run(args.a, args.b, args.in_flight, args.timeout, credentials, args.most, args.zone,
               _compare_tls(parser, args))


def _compare_tls(parser: argparse.ArgumentParser,
                 args: argparse.Namespace) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """The client TLS for each NameServer (None: plain), from --tls/--tls-a/--tls-b and the
    tls.client.* equivalents; a bad one ends the command with one line, exit 2."""
    from service.remoting.compare import tls_context

    sides = (args.tls or args.tls_a, args.tls or args.tls_b)
    given = [f"--{name.replace('_', '-')}" for name in ("tls_trust_cert", "tls_cert", "tls_key", "tls_insecure")
             if getattr(args, name)]
    if not any(sides):
        if given:
            parser.error(f"{given[0]} needs --tls (or --tls-a, --tls-b)")
        return None, None
    if args.tls_insecure and args.tls_trust_cert:
        parser.error("--tls-insecure checks no certificate: --tls-trust-cert would be ignored")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together (the client's certificate and its key)")
    try:
        context = tls_context(args.tls_trust_cert, args.tls_cert, args.tls_key,
                              os.environ.get("RMQ_COMPARE_TLS_KEY_PASSWORD"), args.tls_insecure)
    except ValueError as e:
        parser.error(f"TLS: {e}")
    return (context if sides[0] else None), (context if sides[1] else None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["analytics"]:
        # the analytics CLI has its own options (and --help); hand it everything after the word
        from service.analytics.cli import main as analytics_main

        return analytics_main(argv[1:])
    parser = argparse.ArgumentParser(prog="rmq-registry", description="A horizontally scaled route registry for RocketMQ")
    parser.add_argument("--version", action="version", version=f"rmq-registry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a registry worker (HTTP API and expiry scanner)")
    serve.add_argument("--host", help="listen address (RMQ_HOST, default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="listen port (RMQ_PORT, default 8080)")
    serve.add_argument("--redis-url", help="Redis URL (REDIS_URL; unset: embedded store)")
    serve.add_argument("--remoting-port", type=int, help="RocketMQ protocol port (RMQ_REMOTING_PORT, default 9876; 0: off)")
    sub.add_parser("scan", help="run one expiry pass against REDIS_URL and exit")
    compare = sub.add_parser("compare", help="compare what two NameServers answer (host:port each); exit 1 when "
                                             "anything differs, 2 when either cannot be read")
    compare.add_argument("a", help="a NameServer, host:port (e.g. a Java NameServer)")
    compare.add_argument("b", help="another one, host:port (e.g. the registry's RocketMQ port)")
    compare.add_argument("--in-flight", type=int, default=64, help="requests in flight per NameServer (default 64)")
    compare.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for one answer (default 10)")
    compare.add_argument("--most", type=int, default=None, help="print at most this many differences")
    compare.add_argument("--zone", help="also read every route as a client in this zone's zone mode reads it "
                                        "(-Drocketmq.zone.mode=true -Drocketmq.zone=ZONE) and compare those too")
    compare.add_argument("--access-key", help="sign requests (ACL) with this access key; the secret key comes from "
                                              "RMQ_COMPARE_SECRET_KEY")
    # TLS as RocketMQ's clients and tools take it (-Dtls.enable=true, TlsSystemConfig's tls.client.*)
    compare.add_argument("--tls", action="store_true", help="read both NameServers over TLS (-Dtls.enable=true)")
    compare.add_argument("--tls-a", action="store_true", help="read only the first one over TLS")
    compare.add_argument("--tls-b", action="store_true", help="read only the second one over TLS")
    compare.add_argument("--tls-trust-cert", metavar="PEM", help="check the servers' certificates against this CA "
                                                                 "(tls.client.trustCertPath; default: the system's)")
    compare.add_argument("--tls-insecure", action="store_true",
                         help="check no server certificate (tls.client.authServer=false, RocketMQ's default)")
    compare.add_argument("--tls-cert", metavar="PEM", help="the client's certificate, for a server that asks for one "
                                                           "(tls.client.certPath; with --tls-key)")
    compare.add_argument("--tls-key", metavar="PEM",
                         help="its key (tls.client.keyPath); an encrypted key's password comes from "
                              "RMQ_COMPARE_TLS_KEY_PASSWORD (tls.client.keyPassword)")
    sub.add_parser("analytics", help="run a PySpark analytics job: rmq-registry analytics --help")

    args = parser.parse_args(argv)
    if args.command == "compare":
        return _compare(parser, args)
    try:
        settings = from_env()
        if args.command == "serve":
            settings = settings.with_overrides(host=args.host, port=args.port, redis_url=args.redis_url,
                                               remoting_port=args.remoting_port)
    except StartupError as exc:
        # before anything starts, in the default log format (the settings may not say another)
        logs.setup("INFO", "text")
        log.critical("cannot start: %s", exc)
        return 2
    logs.setup(settings.log_level, settings.log_format)
    if args.command == "serve":
        start_log.hold()  # until it serves: a worker that cannot start says so first
    for line in unknown_variables(os.environ):
        logging.getLogger("service.config").warning("%s", line)
    if args.command == "serve":
        return _serve(settings)
    if settings.embedded:
        parser.error("scan needs REDIS_URL")
    return _scan(settings)


if __name__ == "__main__":
    sys.exit(main())
