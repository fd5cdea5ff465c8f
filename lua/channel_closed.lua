-- A broker's remoting connection closed (RocketMQ onChannelDestroy on close): remove the
-- broker, but only if that connection is still the one that last registered or refreshed
-- it. Behind a load balancer the broker may already have reconnected through another
-- worker; that newer connection (or an HTTP refresh) owns it now and it stays.
-- KEYS[1] version counter
-- ARGV[1] brokerAddr
-- ARGV[2] channel id of the closed connection
-- Returns {change, removed, notices} (notices: lua/_lib.lua's NOTIFY_MIN_BROKER_ID_CHANGE, '' none)
local addr = ARGV[1]
local channel = ARGV[2]

if channel == '' or redis.call('HGET', K.live(addr), 'channel') ~= channel then
  return {redis.call('GET', KEYS[1]) or '0', 0}
end
remove_address(change, addr, 'connection closed')
return {CHANGE, 1, notices_json(change)}
