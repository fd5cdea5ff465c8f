"""The jobs end to end on a seeded redis-server: exact figures, Parquet, PNG, history."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark not installed (pip install '.[analytics]')")

import pyarrow.parquet as pq  # noqa: E402
import redis  # noqa: E402

from service.analytics import cli  # noqa: E402
from service.analytics.jobs import Context, gini, run  # noqa: E402
from service.analytics.reader import spark_redis_available, url_to_options  # noqa: E402
from service.keys import Keys  # noqa: E402
from tests.analytics import expected  # noqa: E402
from tests.analytics.seed import DATASET, build_model, remove_member, write_model  # noqa: E402

pytestmark = pytest.mark.spark

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: str | Path) -> None:
    p = Path(path)
    data = p.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{p} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    assert width > 100 and height > 100
    from PIL import Image

    with Image.open(p) as img:
        img.verify()
    with Image.open(p) as img:
        extrema = img.convert("L").getextrema()
    assert extrema[0] < extrema[1], f"{p} is a blank image"


def test_gini_reference_points():
    assert gini([]) == 0.0
    assert gini([5, 5, 5, 5]) == 0.0
    assert gini([0, 0, 0, 12]) == pytest.approx(0.75)
    assert gini([1, 2, 3, 4, 10]) == pytest.approx(expected.gini_mad([1, 2, 3, 4, 10]))


def test_all_job_reports_exact_figures_tables_and_charts(spark, seeded, tmp_path):
    model, seeded_at, url = seeded
    out = tmp_path / "out"
    rc = cli.main(["all", "--redis-url", url, "--out", str(out), "--json", str(tmp_path / "all.json"),
                   "--partitions", "2", "--reader", "auto"])
    assert rc == 0
    result = json.loads((tmp_path / "all.json").read_text())
    snap, tops = result["snapshot"], result["topics"]

    # -- snapshot
    delta = snap["redisTimeMs"] - seeded_at
    assert 0 <= delta < 120_000, "the job ran too long after seeding for the exact flagging below"
    exp = expected.snapshot(model, delta)
    assert snap["reader"] == "index"
    host, port = url.split("//")[1].split("/")[0].split(":")
    source = {"host": host, "port": int(port), "db": 0, "prefix": "rmq", "dataset": DATASET, "replica": False}
    assert snap["source"] == tops["source"] == result["source"] == source
    assert snap["counts"] == exp["counts"]
    assert snap["counts"] == {
        "clusters": 3, "brokerGroups": 9, "members": 18, "masters": 8, "slaves": 10, "liveBrokers": 16,
        "groupsWithoutMaster": 1, "groupsWithoutLiveMaster": 2, "groupsWithoutSlave": 1,
        "flaggedBrokers": 2, "membersWithoutLiveRow": 2,
    }
    assert [c["cluster"] for c in snap["clusters"]] == ["ClusterA", "ClusterB", "ClusterC"]
    assert [c["brokerGroups"] for c in snap["clusters"]] == [4, 3, 2]
    for g in snap["groups"]:
        want = exp["groups"][g["brokerName"]]
        assert {k: g[k] for k in want} == want, g["brokerName"]
    assert snap["groupsWithoutMaster"] == exp["groupsWithoutMaster"] == ["broker-a3"]
    assert sorted(snap["groupsWithoutLiveMaster"]) == exp["groupsWithoutLiveMaster"] == ["broker-a3", "broker-b2"]
    assert snap["groupsWithoutSlave"] == exp["groupsWithoutSlave"] == ["broker-c1"]  # the count's group, named
    hb = {b["brokerAddr"]: b for b in snap["heartbeat"]["brokers"]}
    assert {a: b["ageMs"] for a, b in hb.items()} == exp["ages"]
    assert sorted(snap["heartbeat"]["flagged"]) == exp["flagged"] == ["10.1.1.10:10911", "10.2.0.11:10911"]
    ages = [b["ageMs"] for b in snap["heartbeat"]["brokers"]]
    assert ages == sorted(ages, reverse=True)  # oldest heartbeat first
    assert hb["10.2.0.11:10911"]["ageRatio"] == pytest.approx((1_250_000 + delta) / 1_500_000, abs=1e-6)
    assert [m["brokerAddr"] for m in snap["membersWithoutLiveRow"]] == exp["unseen"]
    assert snap["memberAddrs"] == exp["memberAddrs"]

    # -- topics
    et = expected.topics(model)
    c = tops["counts"]
    assert c["topics"] == et["topics"] == 320
    assert c["queueRows"] == et["queueRows"]
    assert (c["readQueues"], c["writeQueues"]) == (et["readQueues"], et["writeQueues"])
    assert c["orderTopics"] == len(model.order) and c["queueRowsWithoutBroker"] == 0
    assert {g["brokerName"]: {k: g[k] for k in ("cluster", "topics", "readQueues", "writeQueues")}
            for g in tops["perBrokerGroup"]} == et["perGroup"]
    assert {p["cluster"]: {k: p[k] for k in ("topics", "brokerGroups", "readQueues", "writeQueues")}
            for p in tops["perCluster"]} == et["perCluster"]
    for name, got, want in (("write", tops["skew"]["writeQueues"], et["skewWrite"]),
                            ("read", tops["skew"]["readQueues"], et["skewRead"])):
        assert got["max"] == want["max"], name
        assert got["mean"] == pytest.approx(want["mean"], abs=1e-6), name
        assert got["maxOverMean"] == pytest.approx(want["maxOverMean"], abs=1e-6), name
        assert got["gini"] == pytest.approx(want["gini"], abs=1e-6), name
        assert 0 < got["gini"] < 1
    for cluster, want in et["skewWriteByCluster"].items():
        got = tops["skew"]["byCluster"][cluster]["writeQueues"]
        assert got["gini"] == pytest.approx(want["gini"], abs=1e-6)
        assert got["maxOverMean"] == pytest.approx(want["maxOverMean"], abs=1e-6)
    assert tops["singleGroupTopics"] == et["single"] and c["singleGroupTopics"] == len(et["single"])
    assert sorted((m["topic"], m["brokerName"], m["readQueueNums"], m["writeQueueNums"])
                  for m in tops["readWriteMismatch"]) == et["mismatch"]
    assert c["readWriteMismatchTopics"] == len({m[0] for m in et["mismatch"]})
    assert sorted((w["topic"], w["brokerName"], w["perm"]) for w in tops["writeWiped"]) == et["wiped"]
    assert c["writeWipedTopics"] == len({w[0] for w in et["wiped"]})
    assert tops["unwritableTopics"] == et["unwritable"]
    assert {o["topic"]: (o["orderTopicConf"], o["routed"]) for o in tops["orderTopics"]} == et["order"]
    assert et["order"]["OrderTopicGone"] == ("broker-a0:4", False)
    # the seed has what the figures are about
    assert et["mismatch"] and et["wiped"] and et["unwritable"] and len(et["single"]) > 100

    # -- outputs: Parquet tables, PNG charts, one history row
    assert_png(snap["outputs"]["heartbeatChart"])
    assert_png(tops["outputs"]["queueChart"])
    assert Path(snap["outputs"]["heartbeatChart"]) == out / "snapshot" / "heartbeat_age.png"
    assert pq.read_table(snap["outputs"]["groups"]).num_rows == 9
    assert pq.read_table(snap["outputs"]["brokers"]).num_rows == 18
    assert pq.read_table(tops["outputs"]["perTopic"]).num_rows == 320
    per_group = pq.read_table(tops["outputs"]["perBrokerGroup"]).to_pylist()
    assert sum(r["writeQueues"] for r in per_group) == et["writeQueues"]
    assert result["history"]["date"] == snap["redisTime"][:10]
    date_dir = out / "history" / f"date={snap['redisTime'][:10]}"
    assert date_dir.is_dir() and list(date_dir.glob("*.parquet"))
    row = pq.read_table(out / "history").to_pylist()[0]
    assert (row["dataset"], row["sourceHost"], row["sourcePort"], row["sourceDb"]) == (DATASET, host, int(port), 0)


def test_the_summary_reports_what_the_run_cost_redis_and_the_index_read_scans_nothing(spark, seeded, tmp_path):
    _, _, url = seeded
    result = run(Context(spark, options=url_to_options(url)), "all")
    cost = result["redisCost"]
    assert cost["commands"] == sum(c["calls"] for c in cost["byCommand"].values()) > 0
    assert 0 < cost["redisSeconds"] < 1
    assert "scan" not in cost["byCommand"] and "hscan" not in cost["byCommand"]
    assert cost["sharedServer"] is False and cost["otherClients"]["commands"] == 0  # no worker ran meanwhile
    # each broker name's topics in one HGETALL (all are small), plus the order-topic KV;
    # no HMGET per queue row (the 508 of them), only per broker and address row
    groups = len(build_model().groups)
    assert cost["byCommand"]["hlen"]["calls"] == groups
    assert cost["byCommand"]["hgetall"]["calls"] == groups + 1
    assert cost["byCommand"]["hmget"]["calls"] < 100


def test_history_appends_runs_and_trend_reads_them_back(spark, seeded, tmp_path):
    model, _, url = seeded
    history = tmp_path / "history"
    ctx = lambda out=None: Context(spark, options=url_to_options(url), history=history, out=out)  # noqa: E731
    first = run(ctx(), "snapshot")
    assert first["history"]["path"] == str(history)
    # a slave goes away between the runs (what the expiry cascade does)
    gone = "10.1.1.12:10911"
    client = redis.Redis.from_url(url)
    try:
        remove_member(client, model, gone)
    finally:
        client.close()
    second = run(ctx(), "all")
    assert second["snapshot"]["counts"]["members"] == first["counts"]["members"] - 1

    report = run(ctx(tmp_path / "out"), "history")
    assert report["runs"] == 2
    s1, s2 = report["series"]
    assert (s1["job"], s2["job"]) == ("snapshot", "snapshot+topics")
    assert s1["departedMembers"] is None and s1["topics"] is None  # first run: nothing to compare
    assert s2["departedMembers"] == 1 and s2["departed"] == [gone]
    assert s2["joinedMembers"] == 0
    assert s2["topics"] == 320 and s2["members"] == 17
    assert s2["liveBrokers"] == first["counts"]["liveBrokers"] - 1
    assert report["totals"] == {"departedMembers": 1, "joinedMembers": 0}
    assert report["change"]["members"] == -1
    assert_png(report["outputs"]["trendChart"])
    assert pq.read_table(report["outputs"]["trend"]).num_rows == 2
    assert (history / f"date={s1['date']}").is_dir() and (history / f"date={s2['date']}").is_dir()


def test_cli_prints_the_summary_on_stdout(spark, seeded, capsys):
    _, _, url = seeded
    assert cli.main(["snapshot", "--redis-url", url, "--no-out", "--no-history", "--log-level", "WARNING"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["job"] == "snapshot" and printed["counts"]["brokerGroups"] == 9
    assert printed["history"] is None and "outputs" not in printed


def test_history_without_runs_is_empty(spark, tmp_path):
    report = run(Context(spark, history=tmp_path / "nothing"), "history")
    assert report["runs"] == 0 and report["series"] == []


def test_an_empty_store_is_refused_in_one_line_and_appends_nothing(spark, redis_url, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["all", "--redis-url", redis_url, "--out", str(out), "--log-level", "WARNING"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: all: no broker group under {rmq} in redis 127.0.0.1:")
    assert "--allow-empty" in err[0] and "--prefix" in err[0]
    assert not (out / "history").exists()


def test_a_wrong_prefix_is_refused_like_an_empty_store(spark, redis_url, capsys):
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, build_model(), prefix="other")
    finally:
        client.close()
    args = ["snapshot", "--redis-url", redis_url, "--no-out", "--no-history", "--log-level", "WARNING"]
    assert cli.main(args) == 1
    assert "no broker group under {rmq}" in capsys.readouterr().err
    assert cli.main(args + ["--prefix", "other"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["source"]["prefix"] == "other" and other["counts"]["members"] == 18


def test_allow_empty_reports_an_empty_store_as_zero_counts(spark, redis_url, capsys):
    assert cli.main(["all", "--redis-url", redis_url, "--no-out", "--no-history", "--allow-empty",
                     "--log-level", "WARNING"]) == 0
    empty = json.loads(capsys.readouterr().out)
    assert set(empty["snapshot"]["counts"].values()) == {0}
    assert set(empty["topics"]["counts"].values()) == {0}
    assert empty["topics"]["skew"]["writeQueues"]["gini"] == 0.0
    assert empty["source"]["dataset"] is None


def test_without_redis_url_the_jobs_refuse_and_say_how_to_point_them(monkeypatch, capsys):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert cli.main(["all", "--no-out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "REDIS_URL" in err[0] and "--redis-url redis://HOST:PORT/DB" in err[0]


def test_the_log_level_is_the_registrys_setting_unless_given(monkeypatch):
    monkeypatch.setenv("RMQ_LOG_LEVEL", "DEBUG")
    assert cli.parser().parse_args(["all"]).log_level == "DEBUG"
    assert cli.parser().parse_args(["all", "--log-level", "ERROR"]).log_level == "ERROR"
    monkeypatch.delenv("RMQ_LOG_LEVEL")
    assert cli.parser().parse_args(["all"]).log_level == "INFO"


def test_a_wrong_password_is_one_line_naming_host_and_setting_without_the_password(spark, seeded, capsys):
    _, _, url = seeded
    admin = redis.Redis.from_url(url)
    admin.execute_command("ACL", "SETUSER", "analytics", "on", ">right", "~*", "+@all")
    try:
        wrong = url.replace("redis://", "redis://analytics:Wr0ngPa55@")
        assert cli.main(["snapshot", "--redis-url", wrong, "--no-out", "--no-history"]) == 1
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        hostport = url.split("//")[1].split("/")[0]
        assert err[-1].startswith(f"error: snapshot: redis {hostport} db 0 refused the credentials of --redis-url")
        assert "Traceback" not in captured.err and "Wr0ngPa55" not in captured.err + captured.out
    finally:
        admin.execute_command("ACL", "DELUSER", "analytics")
        admin.close()


def test_a_run_on_another_data_set_than_the_history_s_is_refused_in_one_line_and_appends_nothing(
        spark, redis_url, tmp_path, capsys):
    history = tmp_path / "history"
    client = redis.Redis.from_url(redis_url)
    try:
        write_model(client, build_model(), dataset="aaaa")
        run(Context(spark, options=url_to_options(redis_url), history=history), "snapshot")
        # another registry on the same address and prefix (or this one wiped and restarted)
        client.flushall()
        write_model(client, build_model(), dataset="bbbb")
    finally:
        client.close()
    args = ["snapshot", "--redis-url", redis_url, "--history", str(history), "--no-out", "--log-level", "WARNING"]
    assert cli.main(args) == 1
    captured = capsys.readouterr()
    hostport = redis_url.split("//")[1].split("/")[0]
    assert captured.err.splitlines() == [
        f"error: snapshot: history {history} holds data set aaaa, but redis {hostport} db 0 is data set bbbb: "
        "one history per data set, so give this store its own --history PATH"]
    assert captured.out == ""
    assert [r["dataset"] for r in pq.read_table(history).to_pylist()] == ["aaaa"]
    from service.analytics.source import JobError

    with pytest.raises(JobError, match="holds data set aaaa"):  # the same refusal without the command line
        run(Context(spark, options=url_to_options(redis_url), history=history), "snapshot")
    assert pq.read_table(history).num_rows == 1


def test_a_store_without_a_data_set_id_is_given_one_by_a_run_that_appends_history(spark, redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        write_model(client, build_model(), dataset=None)
        assert client.get(Keys().dataset) is None
        first = run(Context(spark, options=url_to_options(redis_url), history=tmp_path / "h"), "snapshot")
        stamped = client.get(Keys().dataset)
        assert stamped is not None and len(stamped) == 32 and int(stamped, 16) >= 0
        second = run(Context(spark, options=url_to_options(redis_url), history=tmp_path / "h"), "snapshot")
    finally:
        client.close()
    assert first["source"]["dataset"] == second["source"]["dataset"] == stamped
    assert {r["dataset"] for r in pq.read_table(tmp_path / "h").to_pylist()} == {stamped}


def test_a_user_that_may_not_write_the_id_is_refused_in_one_line_unless_no_history(spark, redis_url, tmp_path,
                                                                                   capsys):
    from service.analytics.reader import read_only_acl

    admin = redis.Redis.from_url(redis_url)
    write_model(admin, build_model(), dataset=None)
    admin.execute_command("ACL", "SETUSER", "analytics", "on", ">ro-pass", *read_only_acl().split())
    try:
        url = redis_url.replace("redis://", "redis://analytics:ro-pass@")
        args = ["snapshot", "--redis-url", url, "--no-out", "--log-level", "WARNING"]
        assert cli.main([*args, "--history", str(tmp_path / "h")]) == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "has no data-set id ({rmq}:dataset)" in err[0], err
        assert "may not write one (this user has no permissions to run the 'set' command)" in err[0]
        assert "--no-history" in err[0] and "ro-pass" not in err[0]
        assert not (tmp_path / "h").exists() and admin.get(Keys().dataset) is None
        assert cli.main([*args, "--no-history"]) == 0
        assert json.loads(capsys.readouterr().out)["source"]["dataset"] is None
    finally:
        admin.execute_command("ACL", "DELUSER", "analytics")
        admin.close()


def test_a_history_written_with_two_data_sets_reports_one_and_says_so(spark, redis_url, tmp_path, caplog):
    """A history from before one history held one data set: its rows of two stores are
    reported apart, never as one trend."""
    client = redis.Redis.from_url(redis_url)
    try:
        model = build_model()
        write_model(client, model, dataset="aaaa")
        run(Context(spark, options=url_to_options(redis_url), history=tmp_path / "a"), "snapshot")
        client.flushall()
        write_model(client, model, dataset="bbbb")
        remove_member(client, model, "10.1.1.12:10911")
        run(Context(spark, options=url_to_options(redis_url), history=tmp_path / "b"), "snapshot")
    finally:
        client.close()
    history = tmp_path / "a"
    for part in (tmp_path / "b").rglob("*.parquet"):  # one folder with both stores' rows
        target = history / part.parent.name / part.name
        target.parent.mkdir(exist_ok=True)
        part.rename(target)
    report = run(Context(spark, history=history), "history")
    assert report["dataset"] == "bbbb" and report["runs"] == 1
    assert report["skipped"] == {"rows": 1, "datasets": ["aaaa"]}
    assert report["series"][0]["departedMembers"] is None  # no false departure across registries
    assert "skipped 1 rows of other data sets (aaaa)" in caplog.text
    older = run(Context(spark, history=history, dataset="aaaa"), "history")
    assert older["runs"] == 1 and older["series"][0]["members"] == 18


def test_a_replica_read_gives_the_primary_s_figures_and_leaves_the_primary_alone(spark, tmp_path):
    from tests.redis_server import RedisServer
    from tests.waits import until_sync

    primary = RedisServer(None)
    primary.start()
    replica = RedisServer(None, "--replicaof", "127.0.0.1", str(primary.port))
    replica.start()
    try:
        p = redis.Redis.from_url(primary.url)
        write_model(p, build_model())
        r = redis.Redis.from_url(replica.url)
        until_sync(lambda: r.dbsize() == p.dbsize() and r.info("replication").get("master_link_status") == "up",
                   20, "the replica synced", poll_s=0.1)
        hmget_before = p.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0)
        from_replica = run(Context(spark, options=url_to_options(replica.url), replica=True), "all")
        assert p.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0) == hmget_before
        from_primary = run(Context(spark, options=url_to_options(primary.url)), "all")
        for job in ("snapshot", "topics"):
            assert from_replica[job]["counts"] == from_primary[job]["counts"], job
        assert from_replica["source"]["replica"] is True
        assert from_replica["source"]["port"] == replica.port
        assert from_replica["source"]["dataset"] == from_primary["source"]["dataset"] == DATASET
        # --replica refuses a server that is not one
        from service.analytics.source import JobError

        with pytest.raises(JobError, match="is a master, not a replica"):
            run(Context(spark, options=url_to_options(primary.url), replica=True), "snapshot")
        p.close()
        r.close()
    finally:
        replica.cleanup()
        primary.cleanup()


def test_the_history_folder_holds_only_the_dataset_after_a_history_run(spark, seeded, tmp_path):
    _, _, url = seeded
    out = tmp_path / "out"
    assert cli.main(["snapshot", "--redis-url", url, "--out", str(out), "--no-charts", "--log-level", "WARNING"]) == 0
    assert cli.main(["history", "--out", str(out), "--log-level", "WARNING"]) == 0
    assert (out / "trend" / "trend.parquet").is_file() and (out / "trend" / "trend.png").is_file()
    assert pq.read_table(out / "history").num_rows == 1  # the whole folder reads as one dataset


def test_history_with_the_spark_redis_reader_and_no_jar_succeeds(spark, seeded, tmp_path, capsys):
    _, _, url = seeded
    history = tmp_path / "history"
    assert cli.main(["history", "--history", str(history), "--reader", "spark-redis", "--no-out",
                     "--log-level", "WARNING"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 0
    if spark_redis_available(spark):
        pytest.skip("the spark-redis jar is on the classpath (tests/analytics/conftest.py): no missing jar to refuse")
    # a job that reads Redis still refuses the missing jar
    assert cli.main(["snapshot", "--redis-url", url, "--reader", "spark-redis", "--no-out",
                     "--no-history", "--log-level", "CRITICAL"]) == 1
    assert "class org.apache.spark.sql.redis.DefaultSource is not on the classpath" in capsys.readouterr().err


def test_the_cost_counts_a_worker_s_scripts_and_heartbeats_apart_from_the_job_s_reads(spark, seeded, tmp_path):
    """A registry worker's commands during the run (its scripts, here a heartbeat's EVALSHA
    stand-in and a scan's ZRANGEBYSCORE) are the server's counters too: flagged, not summed."""
    _, _, url = seeded
    ctx = Context(spark, options=url_to_options(url))
    ctx.begin()
    client = redis.Redis.from_url(url)
    try:
        sha = client.script_load("return redis.call('TIME')")
        for _ in range(25):
            client.evalsha(sha, 0)
            client.zrangebyscore("{rmq}:expiry", "-inf", 0)
    finally:
        client.close()
    cost = ctx.cost()
    assert cost["sharedServer"] is True
    assert cost["otherClients"]["byCommand"]["evalsha"]["calls"] == 25
    assert cost["otherClients"]["byCommand"]["zrangebyscore"]["calls"] == 25
    assert "evalsha" not in cost["byCommand"] and "zrangebyscore" not in cost["byCommand"]
