-- The brokers that left in the last hour (lua/_lib.lua record_departure), newest first.
-- Read-only: entries past the window that no departure has trimmed yet are left out here.
-- KEYS[1] version counter
-- Returns {entry, ...}: each the JSON {brokerAddr, brokerName, cluster, brokerId, cause, at}
return redis.call('ZREVRANGEBYSCORE', K.departures(), '+inf', int(now_ms() - DEPARTURES_MS),
  'LIMIT', 0, DEPARTURES_RETAIN)
