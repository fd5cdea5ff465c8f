"""What the model test (tests/model/test_model.py) found the registry doing otherwise than
RocketMQ 5.3.3's NameServer, each as a plain test named after the behaviour, fixed since.
(Its other finding, the whole topic list failing past 20,000 topics, is held by
tests/remoting/test_list_limits.py.)"""

from __future__ import annotations

from tests.builders import registration
from tests.calls import register, route


def member(broker_id: int, zone: str | None, acting: bool | None) -> dict:
    body = registration(addr=f"10.0.0.{broker_id + 1}:10911", broker_id=broker_id, topics=["T1", "T2"])
    if acting is not None:
        body["enableActingMaster"] = acting
    if zone is not None:
        body["zoneName"] = zone
    return body


async def test_an_unchanged_registration_sets_the_groups_zone(client) -> None:
    # the model test's shrunk run: a 5.x slave of zone-b registers first (prime slave), a
    # 4.x master without a zone joins (Java: the group's zone becomes null), the slave's
    # periodic registration, byte for byte its first, makes it zone-b again on Java
    slave = member(1, "zone-b", False)
    await register(client, slave)
    await register(client, member(0, None, None))
    await register(client, slave)
    answer = await route(client, "T1")
    assert answer is not None and answer["brokerDatas"][0].get("zoneName") == "zone-b"


async def test_an_unchanged_registration_sets_the_groups_acting_master_flag(client) -> None:
    acting_slave = member(1, None, True)
    await register(client, acting_slave)
    await register(client, member(0, None, None))  # a 4.x master: Java's flag becomes false
    await register(client, acting_slave)
    answer = await route(client, "T1")
    assert answer is not None and answer["brokerDatas"][0].get("enableActingMaster") is True
