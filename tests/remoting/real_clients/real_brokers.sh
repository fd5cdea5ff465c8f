#!/usr/bin/env bash
# real_brokers.sh: the registry (with its own redis-server), a Java 5.3.3 NameServer and real
# 5.3.3 brokers side by side, inside a network namespace of their own, on loopback only.
# Not a test and not run in CI: docs/compatibility.md records what was run with it. Run as root
# (ip netns), from anywhere; RocketMQ 5.3.3's binary distribution (bin/ lib/ conf/), unpacked, in $RMQ.
#
#   real_brokers.sh base              redis-server :6392, the registry :9876 (HTTP :8080), Java NameServer :9877
#   real_brokers.sh broker NAME PORT ZONE [key=value ...]
#                                     a master (brokerName NAME, brokerId 0) registering with both
#                                     NameServers; ZONE "-" for none, else -Drocketmq.zone=ZONE;
#                                     key=value lines are appended to its broker.conf (the last wins)
#   real_brokers.sh controller        a 5.3.3 DLedger controller on :9878
#   real_brokers.sh sample SECONDS    every SECONDS, one line: CPU ticks (utime+stime, /proc/PID/stat) of
#                                     the registry's worker, its redis-server and the Java NameServer, the
#                                     load average and the registry's register/register_unchanged counts
#   real_brokers.sh client ARGS...    tests/remoting/real_clients/java/ZoneClient.java ARGS in the namespace
#                                     (JAVA_OPTS for -Drocketmq.zone.mode=true -Drocketmq.zone=...)
#   real_brokers.sh admin ARGS...     5.3.3's mqadmin in the namespace
#   real_brokers.sh in CMD...         any command in the namespace (rmq-registry compare ...)
#   real_brokers.sh stop NAME         kill -9 one process (redis, registry, namesrv, controller, a broker)
#   real_brokers.sh down              kill -9 every process started here, remove the namespace
# Settings: NS (namespace, rbk), RUN (state, logs and stores: /tmp/real_brokers), RMQ (5.3.3 distribution,
# /work/java/rmq5), PY (python with this repository's dependencies, .venv/bin/python).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../../.." && pwd)
NS=${NS:-rbk}
RUN=${RUN:-/tmp/real_brokers}
RMQ=${RMQ:-/work/java/rmq5}
PY=${PY:-$SRC/.venv/bin/python}
mkdir -p "$RUN"

inns() { ip netns exec "$NS" "$@"; }
# the process itself is recorded (ip netns exec and setsid exec it), so stop/sample find it
start() { local name=$1; shift; ip netns exec "$NS" setsid "$@" >"$RUN/$name.out" 2>&1 & echo $! >"$RUN/$name.pid"; }
waitport() {
  for _ in $(seq 1 240); do inns bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null && return 0; sleep 0.5; done
  echo "port $1 never listened: see $RUN/*.out" >&2; return 1
}
ticks() { awk '{print $14+$15}' "/proc/$(cat "$RUN/$1.pid")/stat"; }

case ${1:-} in
base)
  ip netns add "$NS" && inns ip link set lo up
  start redis redis-server --port 6392 --bind 127.0.0.1 --save '' --appendonly no
  waitport 6392
  (cd "$SRC" && start registry env REDIS_URL=redis://127.0.0.1:6392/0 RMQ_REMOTING_HOST=127.0.0.1 RMQ_REMOTING_PORT=9876 \
      RMQ_SRC="$SRC" PYTHONPATH="$SRC" "$PY" -m service serve --host 127.0.0.1 --port 8080)
  mkdir -p "$RUN/namesrv"
  printf 'listenPort=9877\n' >"$RUN/namesrv/namesrv.conf"
  start namesrv env JAVA_OPTS="-Xms256m -Xmx256m -Duser.home=$RUN/namesrv" "$RMQ/bin/mqnamesrv" -c "$RUN/namesrv/namesrv.conf"
  waitport 9876; waitport 9877; echo "registry 127.0.0.1:9876, Java NameServer 127.0.0.1:9877 in namespace $NS" ;;
broker)
  name=$2 port=$3 zone=$4; shift 4
  d="$RUN/$name"; mkdir -p "$d/store"
  cat >"$d/broker.conf" <<CONF
brokerClusterName=DefaultCluster
brokerName=$name
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=127.0.0.1:9877;127.0.0.1:9876
listenPort=$port
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
storePathRootDir=$d/store
storePathCommitLog=$d/store/commitlog
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
CONF
  for kv in "$@"; do echo "$kv" >>"$d/broker.conf"; done
  zopt=""; [ "$zone" = "-" ] || zopt="-Drocketmq.zone=$zone"
  start "$name" env JAVA_OPTS="-Xms256m -Xmx256m -Duser.home=$d $zopt" "$RMQ/bin/mqbroker" -c "$d/broker.conf"
  waitport "$port"; echo "$name on 127.0.0.1:$port" ;;
controller)
  d="$RUN/controller"; mkdir -p "$d"
  printf 'controllerDLegerGroup=group1\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\ncontrollerStorePath=%s/store\n' "$d" >"$d/controller.conf"
  start controller env JAVA_OPTS="-Xms256m -Xmx256m -Duser.home=$d -Dlogback.configurationFile=$RMQ/conf/rmq.namesrv.logback.xml" \
      "$RMQ/bin/java-main" org.apache.rocketmq.controller.ControllerStartup -c "$d/controller.conf"
  waitport 9878; echo "controller on 127.0.0.1:9878" ;;
sample)
  while true; do
    m=$(inns curl -s 127.0.0.1:8080/metrics | awk '/^rmq_table_changes_total\{script="register(_unchanged)?"\}/{sub(/rmq_table_changes_total\{script="/, ""); sub(/"\}/, ""); printf "%s=%d ", $1, $2}')
    echo "$(date -u +%T) registry=$(ticks registry) redis=$(ticks redis) java=$(ticks namesrv) load=$(cut -d' ' -f1 /proc/loadavg) $m"
    sleep "$2"
  done ;;
client)
  shift; mkdir -p "$RUN/client"
  inns env JAVA_OPTS="-Xmx128m -Duser.home=$RUN/client ${JAVA_OPTS:-}" "$RMQ/bin/java-main" "$HERE/java/ZoneClient.java" "$@" ;;
admin)
  shift; mkdir -p "$RUN/admin"
  inns env JAVA_OPTS="-Xmx128m -Duser.home=$RUN/admin" "$RMQ/bin/mqadmin" "$@" ;;
in)
  shift; (cd "$SRC" && inns "$@") ;;
stop)
  kill -9 "$(cat "$RUN/$2.pid")"; rm -f "$RUN/$2.pid" ;;
down)
  for f in "$RUN"/*.pid; do [ -e "$f" ] && { kill -9 "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; }; done
  ip netns del "$NS" 2>/dev/null || true ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
