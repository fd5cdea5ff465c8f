-- The brokers that left in the last hour (lua/_members.lua record_departure), newest first,
-- with when each came back (lua/departures_back.lua).
-- Read-only: entries past the window that no departure has trimmed yet are left out here.
-- uses: keys, basics, members
-- keys: departures, departures_back
-- Returns {{entry, ...}, {back, ...}}: each entry the JSON {brokerAddr, brokerName, cluster,
-- brokerId, cause, at}, each back the ms its broker was found registered again, or ''
local entries = redis.call('ZREVRANGEBYSCORE', K.departures(), '+inf', int(now_ms() - DEPARTURES_MS),
  'LIMIT', 0, DEPARTURES_RETAIN)
local backs = {}
for i, entry in ipairs(entries) do
  local d = cjson.decode(entry)
  backs[i] = redis.call('HGET', K.departures_back(), d.brokerAddr .. '|' .. int(d.at)) or ''
end
return {entries, backs}
