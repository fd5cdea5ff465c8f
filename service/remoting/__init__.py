"""RocketMQ's remoting protocol (TCP, default port 9876) in front of the same Registry.

- ``codec``: frames and both header serializations (JSON, ROCKETMQ binary), and the JSON
  dialect RocketMQ writes (unquoted integer map keys), both ways.
- ``bodies``: request bodies (RegisterBrokerBody plain or compressed, DataVersion, ...).
- ``handlers``: one coroutine per request code, on the shared Registry and ReadCache.
- ``server``: the asyncio TCP server; ``lifecycle.install`` ties it to an aiohttp app.
"""
