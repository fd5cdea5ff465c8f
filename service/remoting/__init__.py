"""RocketMQ's remoting protocol (TCP, default port 9876) in front of the same Registry.

- ``codec``: frames and both header serializations (JSON, ROCKETMQ binary), and the JSON
  dialect RocketMQ writes (unquoted integer map keys), both ways.
- ``context``: the context every request runs on, and how a request's body is decoded and validated.
- ``dispatch``: the table naming each request code's handler.
- ``broker_handlers``: the brokers' requests.
- ``handlers``: the clients' reads and the operators' changes, on the shared Registry and ReadCache.
- ``bodies``: the bodies both ways (RegisterBrokerBody, the answers).
- ``server``: the asyncio TCP server; ``service.worker.install_remoting`` ties it to an aiohttp app.
"""
