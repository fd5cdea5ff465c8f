"""RocketMQ's remoting protocol (TCP, default port 9876) in front of the same Registry.

- ``codec``: frames and both header serializations (JSON, ROCKETMQ binary), and the JSON
  dialect RocketMQ writes (unquoted integer map keys), both ways.
- ``dispatch``: the table naming each request code's handler, and the context they run on.
- ``broker_handlers``: the brokers' requests and the RegisterBrokerBody they carry.
- ``handlers``: the clients' reads and the operators' changes, on the shared Registry and ReadCache.
- ``bodies``: the read answers' bodies.
- ``server``: the asyncio TCP server; ``service.worker.install_remoting`` ties it to an aiohttp app.
"""
