"""A Redis Cluster (3 primaries, one replica each, 1 s node timeout: real processes)
under the registry with RMQ_REDIS_MIN_REPLICAS=1.

Each change and its WAIT go to the primary owning the registry's slot on one connection,
so an acknowledgement means the slot owner's replica has the change, as with Sentinel;
the failover test SIGKILLs that primary under the same load and asserts what the Sentinel
failover test asserts. With RMQ_REDIS_MIN_REPLICAS=0 the losses are reported, not
asserted. Run with -s to see the figures."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from typing import Any, Iterator

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import Settings
from service.http.app_keys import NODE
from service.worker import create_app
from tests.failover.load import assert_nothing_acknowledged_lost, outcome, run_load, workers_settings
from tests.processes import console_script, start, wait_http
from tests.redis_cluster import RedisClusterNodes
from tests.redis_server import free_port
from tests.tables import violations
from tests.waits import until

# a failover takes the 1 s node timeout plus an election (0.5-1 s); the restarted node must
# then rejoin as the new primary's replica and resync before a write is acknowledged
# again. Measured 2.8-5.0 s on two cores at load average 8-13; the bound leaves room.
RESUME_WITHIN_S = 12.0


@pytest.fixture
def cluster() -> Iterator[RedisClusterNodes]:
    nodes = RedisClusterNodes(masters=3, replicas=1)
    yield nodes
    nodes.stop()


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[RedisClusterNodes]:
    """For the tests that leave the cluster as they found it."""
    nodes = RedisClusterNodes(masters=3, replicas=1)
    yield nodes
    nodes.stop()


def other_primary(cluster: RedisClusterNodes) -> int:
    """A primary that does not own the registry's slot."""
    owner = cluster.current_primary()
    return next(n.port for n in cluster.live()
                if n.port != owner and cluster.client(n.port).info("replication")["role"] == "master")


async def worker(aiohttp_client: Any, url: str, **overrides: Any) -> TestClient:
    return await aiohttp_client(create_app(Settings(redis_url=url, redis_cluster=True, **workers_settings(**overrides))))


async def test_an_acknowledged_change_is_on_the_slot_owners_replica(aiohttp_client, shared_cluster) -> None:
    # reached through a primary that does not own the slot: WAIT there would count its own replica
    client = await worker(aiohttp_client, f"redis://127.0.0.1:{other_primary(shared_cluster)}/0",
                          redis_min_replicas=1)
    [replica] = shared_cluster.replicas_of(shared_cluster.current_primary())
    on_replica = redis.Redis(port=replica, decode_responses=True, single_connection_client=True)
    on_replica.execute_command("READONLY")  # a cluster replica answers reads of its primary's slots
    for i in range(20):
        assert (await client.put(f"/v1/kv/ACK/k{i}", json={"value": f"v{i}"})).status == 200
        assert on_replica.hget("{rmq}:kv:ACK", f"k{i}") == f"v{i}"  # read right after the answer
    on_replica.close()


async def test_with_the_slot_owners_replica_stopped_a_change_is_a_503_that_says_it_was_applied(
        aiohttp_client, shared_cluster) -> None:
    client = await worker(aiohttp_client, f"redis://127.0.0.1:{other_primary(shared_cluster)}/0",
                          redis_min_replicas=1)
    assert (await client.put("/v1/kv/STOPPED/before", json={"value": "1"})).status == 200
    [replica] = shared_cluster.replicas_of(shared_cluster.current_primary())
    pid = shared_cluster.node_on(replica).proc.pid
    os.kill(pid, signal.SIGSTOP)  # alive for the cluster (well within the node timeout), acknowledging nothing
    try:
        resp = await client.put("/v1/kv/STOPPED/during", json={"value": "2"})
        message = (await resp.json())["message"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert resp.status == 503 and "0 of 1 replicas" in message and "sending it again is safe" in message
    owner = shared_cluster.client(shared_cluster.current_primary())
    assert owner.hget("{rmq}:kv:STOPPED", "during") == "2"  # applied on the primary, unconfirmed
    async def acknowledged() -> bool:
        return (await client.put("/v1/kv/STOPPED/after", json={"value": "3"})).status == 200

    await until(acknowledged, 10, "the replica acknowledging again", poll_s=0)


async def test_a_change_follows_the_slot_to_another_primary_and_waits_for_that_ones_replica(
        aiohttp_client, shared_cluster) -> None:
    client = await worker(aiohttp_client, shared_cluster.url, redis_min_replicas=1)
    assert (await client.put("/v1/kv/MOVED/before", json={"value": "1"})).status == 200
    to_port = other_primary(shared_cluster)
    shared_cluster.move_slot(to_port)  # the worker still holds the old layout: its next change gets MOVED
    shared_cluster.wait_formed(1)
    [replica] = shared_cluster.replicas_of(to_port)
    on_replica = redis.Redis(port=replica, decode_responses=True, single_connection_client=True)
    on_replica.execute_command("READONLY")
    assert (await client.put("/v1/kv/MOVED/after", json={"value": "2"})).status == 200
    assert on_replica.hgetall("{rmq}:kv:MOVED") == {"before": "1", "after": "2"}
    on_replica.close()


def test_a_worker_starts_and_writes_with_its_first_seed_node_down(shared_cluster) -> None:
    # the first seed is down: a replica, so the cluster itself goes on as before
    down = shared_cluster.node_on(shared_cluster.replicas_of(other_primary(shared_cluster))[0])
    seeds = [down.port] + [n.port for n in shared_cluster.nodes if n is not down]
    down.stop()
    port = free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env={"REDIS_URL": f"redis://{','.join(f'127.0.0.1:{p}' for p in seeds)}/0",
                      "RMQ_REDIS_CLUSTER": "true", "RMQ_REDIS_MIN_REPLICAS": "1"})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", limit_s=30)
        put = urllib.request.Request(f"http://127.0.0.1:{port}/v1/kv/SEEDS/k", method="PUT",
                                     data=json.dumps({"value": "v"}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(put, timeout=5) as resp:
            assert resp.status == 200
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        down.start()
    assert shared_cluster.client(shared_cluster.current_primary()).hget("{rmq}:kv:SEEDS", "k") == "v", out[-2000:]


async def test_a_worker_whose_only_seed_is_down_at_start_waits_for_it_and_serves_when_it_returns(
        aiohttp_client, shared_cluster) -> None:
    down = shared_cluster.node_on(shared_cluster.replicas_of(other_primary(shared_cluster))[0])
    down.stop()
    try:
        starting = asyncio.ensure_future(worker(aiohttp_client, f"redis://127.0.0.1:{down.port}/0",
                                                redis_min_replicas=1, redis_start_timeout_ms=30_000))
        await asyncio.sleep(2)
        assert not starting.done()  # it waits for Redis (RMQ_REDIS_START_TIMEOUT_MS), it does not serve blind
    finally:
        down.start()
    client = await asyncio.wait_for(starting, 30)
    async def served() -> bool:
        return (await client.put("/v1/kv/ONE/k", json={"value": "v"})).status == 200

    await until(served, 15, "the worker serving", poll_s=0.2)
    assert (await client.get("/readyz")).status == 200
    # the scanner, the change poller and the change listener all run
    assert [t.get_name() for t in client.app[NODE]._tasks if t.done()] == []


def test_a_bad_seed_list_stops_the_worker_with_one_line() -> None:
    proc = start([console_script("rmq-registry"), "serve", "--port", str(free_port())],
                 env={"REDIS_URL": "redis://:secret@127.0.0.1:7000,127.0.0.1:port/0", "RMQ_REDIS_CLUSTER": "true"})
    out, _ = proc.communicate(timeout=30)
    lines = out.decode().strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "secret" not in lines[0]
    assert lines[0].endswith("cannot start: REDIS_URL=redis://:***@127.0.0.1:7000,127.0.0.1:port/0 with "
                             "RMQ_REDIS_CLUSTER=true: seed '127.0.0.1:port' is not host:port")


async def test_a_cluster_failover_with_one_replica_required_loses_no_acknowledged_write(aiohttp_client, cluster) -> None:
    clients = [await worker(aiohttp_client, cluster.url, redis_min_replicas=1) for _ in range(2)]
    # the primary is killed; a supervisor starts it again once its replica took over, and
    # it comes back as that replica's replica (with one replica per primary, writes that
    # need one wait for it)
    rec, killed_at, new_port = await run_load(clients, cluster, restart_killed=True)
    r = cluster.client(new_port)
    out = outcome(rec, killed_at, r)
    print(f"\nRedis Cluster, min replicas 1: {out}")
    assert_nothing_acknowledged_lost(rec, out, r, RESUME_WITHIN_S)


async def test_a_cluster_failover_without_replicas_required_reports_what_was_lost(aiohttp_client, cluster) -> None:
    clients = [await worker(aiohttp_client, cluster.url, redis_min_replicas=0) for _ in range(2)]
    rec, killed_at, new_port = await run_load(clients, cluster)
    r = cluster.client(new_port)
    out = outcome(rec, killed_at, r)
    window = [round(rec.kv_at[k] - killed_at, 2) for k in out.lost_kv]
    print(f"\nRedis Cluster, min replicas 0: {out} (KV lost acknowledged {min(window, default=0)}..{max(window, default=0)} s "
          "from the kill)")
    assert rec.kv and out.resumed_s is not None
    assert violations(r) == []
