"""A horizontally scaled route registry for RocketMQ: stateless aiohttp workers, route tables in Redis."""

__version__ = "0.1.0"
