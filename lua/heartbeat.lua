-- Refresh a registered broker's liveness (heartbeat and query-data-version).
-- KEYS[1] version counter
-- ARGV[1] brokerAddr
-- ARGV[2] brokerName
-- ARGV[3] brokerId
-- ARGV[4] channel: the remoting connection that refreshed it ('' over HTTP); the last
--         refresher owns the broker, so only its connection closing can remove it
-- Returns {1, stored dataVersion} when the broker is registered and alive, else {0}.
-- A broker whose live row has expired must register in full: it may already be
-- (or be about to be) removed from the route tables.
local addr = ARGV[1]
local name = ARGV[2]
local id = ARGV[3]
local channel = ARGV[4] or ''

local row = redis.call('HMGET', K.live(addr), 'brokerName', 'brokerId', 'heartbeatTimeoutMillis', 'dataVersion')
if row[1] ~= name or row[2] ~= id then
  return {0}
end
touch_live(addr, now_ms(), tonumber(row[3]))
redis.call('HSET', K.live(addr), 'channel', channel)
return {1, row[4]}
