"""A broker removed because its remoting connection closed is recorded as such."""

from __future__ import annotations


from service.remoting import codes
from tests.builders import registration
from tests.remoting import frames
from tests.remoting.client import RemotingClient
from tests.waits import until

GONE_WITHIN_S = 10.0  # the close removes it at once; a loaded machine is slow, not wrong


async def test_a_closed_connection_is_recorded_as_connection_closed(worker) -> None:
    client = await RemotingClient.connect(worker.port)
    reg = registration(addr="10.0.0.7:10911", name="broker-z", broker_id=2, cluster="C9", topics=["T1"])
    assert (await client.call(frames.register(reg))).code == codes.SUCCESS
    await client.close()
    async def departures() -> list:
        return (await (await worker.http.get("/v1/departures")).json())["departures"]

    listed = await until(departures, GONE_WITHIN_S, "a departure recorded")
    assert [{k: v for k, v in d.items() if k != "at"} for d in listed] == [
        {"brokerAddr": "10.0.0.7:10911", "brokerName": "broker-z", "cluster": "C9", "brokerId": 2,
         "cause": "connection closed", "backAt": None}]
