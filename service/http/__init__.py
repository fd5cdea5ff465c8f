"""The HTTP front: API.md over aiohttp, on a worker's Node (service.node)."""
