"""The HTTP front: docs/api.md over aiohttp, on a worker's Node (service.node)."""
