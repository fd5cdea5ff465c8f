-- Prelude part: an address's liveness, a registration's answer, departures.
-- uses: keys, basics

-- Brokers that left, for an operator who comes late (GET /v1/departures, the dashboard), by
-- the script that removes the broker, so exactly when it happened: a ZSET by time (ms, Redis
-- time) of JSON entries, bounded by age and count; readers see the window (departures.lua).
local DEPARTURES_MS = 3600000
local DEPARTURES_RETAIN = 1000

-- `cause`: 'unregistered', 'connection closed' or 'expired'.
local function record_departure(addr, name, cluster, id, cause, now)
  local entry = cjson.encode({brokerAddr = addr, brokerName = name, cluster = cluster,
    brokerId = tonumber(id), cause = cause, at = now})
  redis.call('ZADD', K.departures(), int(now), entry)
  redis.call('ZREMRANGEBYSCORE', K.departures(), '-inf', '(' .. int(now - DEPARTURES_MS))
  redis.call('ZREMRANGEBYRANK', K.departures(), 0, -(DEPARTURES_RETAIN + 1))
end

-- How long a live row outlives its deadline. A broker is expired when a scan finds its
-- deadline passed (RocketMQ's scanNotActiveBroker: lastUpdateTimestamp + timeout < now),
-- not at the deadline itself: until that scan, a heartbeat, a query-data-version or a
-- registration that arrives late (after a stall) finds its row and brings the deadline
-- forward, as in RocketMQ. The key TTL is only a backstop for a store no worker scans.
local LIVE_ROW_MARGIN_MS = 60000

-- Brings a live row's deadline to now + its timeout (the index; the key's TTL a margin
-- later); `channel`: the connection that refreshed it, which owns the address now
-- (lua/remove_batch.lua).
local function touch_live(addr, now, timeout, channel)
  redis.call('HSET', K.live(addr), 'lastUpdateTimestamp', int(now), 'channel', channel)
  redis.call('PEXPIRE', K.live(addr), timeout + LIVE_ROW_MARGIN_MS)
  redis.call('ZADD', K.expiry(), int(now + timeout), addr)
end

-- The answer to a registration: a slave learns its master when the master is alive;
-- every broker gets the ORDER_TOPIC_CONFIG namespace.
local function registration_answer(name, id)
  local master = id ~= '0' and redis.call('HGET', K.addrs(name), '0')
  local master_ha = master and redis.call('HGET', K.live(master), 'haServerAddr')
  local kv = redis.call('HGETALL', K.kv(ORDER_TOPIC_CONFIG))
  if master_ha then
    return 1, master, master_ha, kv
  end
  return 0, '', '', kv
end
