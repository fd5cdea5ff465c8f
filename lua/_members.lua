-- Prelude part: an address's liveness, what every registration sets on its group, a
-- registration's answer, departures.
-- uses: keys, basics, changes

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

local function leave_cluster(change, cluster, name)
  touch_group(change, name)
  redis.call('SREM', K.cluster(cluster), name)
  if redis.call('SCARD', K.cluster(cluster)) == 0 then
    redis.call('SREM', K.clusters(), cluster)
  end
end

-- The group in the cluster a registration names, and in no other (RocketMQ adds it to every
-- cluster its members name; here a group is in one, its last registration's). `old`: the
-- cluster its row holds (nil: a new group, whose row the caller writes).
local function join_cluster(change, name, cluster, old)
  if redis.call('SADD', K.cluster(cluster), name) == 1 then
    touch_group(change, name)
  end
  redis.call('SADD', K.clusters(), cluster)
  if old and old ~= cluster then
    leave_cluster(change, old, name)
    redis.call('HSET', K.broker(name), 'cluster', cluster)
  end
end

-- BrokerData's enableActingMaster and zoneName, which RocketMQ sets from every registration,
-- whichever member sends it and whatever its dataVersion (RouteInfoManager.registerBroker:
-- setEnableActingMaster, setZoneName, a null zone too): the last one wins, so the unchanged
-- re-registration sets them as the full one does. `was_acting`, `was_zone`: the row's (false
-- when absent); `acting` '1'/'0'; `zone` '' for none (no field).
local function set_group_flags(change, name, was_acting, was_zone, acting, zone)
  if (was_acting or '0') == acting and (was_zone or '') == zone then
    return
  end
  redis.call('HSET', K.broker(name), 'enableActingMaster', acting, 'zoneName', zone)
  if zone == '' then
    redis.call('HDEL', K.broker(name), 'zoneName')
  end
  touch_group(change, name)
end

-- The smallest id of a HGETALL of addrs (flat), its address; nil when empty.
local function min_id(flat)
  local min, addr = nil, nil
  for i = 1, #flat, 2 do
    local id = tonumber(flat[i])
    if id and (min == nil or id < min) then
      min, addr = id, flat[i + 1]
    end
  end
  return min, addr
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
