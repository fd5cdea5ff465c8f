"""A horizontally scaled route registry for RocketMQ: stateless aiohttp workers, route tables in Redis."""

from importlib import metadata

try:
    # pyproject.toml's version, as the installed distribution records it: the one place a
    # release names itself (rmq-registry --version, /healthz, rmq_build_info, the OpenAPI info)
    __version__ = metadata.version("rmq-registry")
except metadata.PackageNotFoundError:  # the source tree run without being installed
    __version__ = "0+unknown"
