-- Refresh a registered broker's liveness (heartbeat and query-data-version).
-- uses: keys, basics, changes, members
-- keys: version, live, expiry, changes, changelog
-- ARGV[1] brokerAddr
-- ARGV[2] brokerName
-- ARGV[3] brokerId
-- ARGV[4] channel: the remoting connection that refreshed it ('' over HTTP); the last
--         refresher owns the broker, so only its connection closing can remove it
-- Returns {change, 1, stored dataVersion} when the broker is registered and alive, else {change, 0}.
-- A broker whose live row has expired must register in full: it may already be
-- (or be about to be) removed from the route tables.
local change = new_change()
local addr, name, id, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4] or ''

local row = redis.call('HMGET', K.live(addr), 'brokerName', 'brokerId', 'heartbeatTimeoutMillis', 'dataVersion')
if row[1] ~= name or row[2] ~= id then return finish(change, 0) end
touch_live(addr, now_ms(), tonumber(row[3]), channel)
return finish(change, 1, row[4])
