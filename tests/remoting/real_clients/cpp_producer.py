"""Runs the RocketMQ C++ client's producer (pip rocketmq==0.4.4) once; run as a subprocess.

    python cpp_producer.py <namesrv host:port> <topic> <send timeout ms> [<accessKey> <secretKey>]

Starts a producer on the NameServer address, sends one message to the topic with send_sync,
shuts down, and prints one JSON line: {"sent": true, "status": ...} or {"sent": false, "error": ...}.
HOME should point at a temp dir: the client writes its logs under $HOME/logs/rocketmq-cpp.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from rocketmq.client import Message, Producer

    namesrv, topic, timeout_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = Producer("PID-rmq-registry-test", timeout=timeout_ms)
    producer.set_namesrv_addr(namesrv)
    if len(sys.argv) > 5:  # the client then signs its requests (RocketMQ ACL)
        producer.set_session_credentials(sys.argv[4], sys.argv[5], "ALIYUN")
    producer.start()
    msg = Message(topic)
    msg.set_keys("k1")
    msg.set_body("hello from the C++ client")
    started = time.monotonic()
    try:
        result = producer.send_sync(msg)
        out = {"sent": True, "status": str(result.status), "msg_id": result.msg_id}
    except Exception as e:  # the client raises its own exception types
        out = {"sent": False, "error": f"{type(e).__name__}: {e}"[:500]}
    out["send_s"] = round(time.monotonic() - started, 3)
    print(json.dumps(out), flush=True)
    producer.shutdown()


if __name__ == "__main__":
    main()
