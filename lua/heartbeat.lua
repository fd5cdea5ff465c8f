-- Refresh a registered broker's liveness (heartbeat and query-data-version).
-- uses: keys, basics, changes, members
-- keys: version, live, expiry, changes, changelog
-- ARGV[1..3] brokerAddr, brokerName, brokerId
-- ARGV[4] channel: the remoting connection that refreshed it ('' over HTTP), its owner now (touch_live)
-- Returns {change, 1, stored dataVersion} when the broker is registered and not yet removed
--   (also past its deadline: no scan removed it yet, and RocketMQ refreshes it then too), else
--   {change, 0}: the broker registers in full.
local change = new_change()
local addr, name, id, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4] or ''
local row = redis.call('HMGET', K.live(addr), 'brokerName', 'brokerId', 'heartbeatTimeoutMillis', 'dataVersion')
if row[1] ~= name or row[2] ~= id then return finish(change, 0) end
touch_live(addr, now_ms(), tonumber(row[3]), channel)
return finish(change, 1, row[4])
