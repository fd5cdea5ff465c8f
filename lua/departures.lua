-- The brokers that left in the last hour (lua/_members.lua record_departure), newest first.
-- Read-only: entries past the window that no departure has trimmed yet are left out here.
-- uses: keys, basics, members
-- keys: departures
-- Returns {entry, ...}: each the JSON {brokerAddr, brokerName, cluster, brokerId, cause, at}
return redis.call('ZREVRANGEBYSCORE', K.departures(), '+inf', int(now_ms() - DEPARTURES_MS),
  'LIMIT', 0, DEPARTURES_RETAIN)
