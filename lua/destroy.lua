-- Remove an expired broker (RocketMQ onChannelDestroy), found by address.
-- Run by every worker's scanner; safe to run twice, and a heartbeat that arrived
-- after the scan picked the address wins because the deadline is checked here again.
-- KEYS[1] version counter
-- ARGV[1] brokerAddr
-- Returns {change, removed, notices} (notices: lua/_lib.lua's NOTIFY_MIN_BROKER_ID_CHANGE, '' none)
local addr = ARGV[1]

local deadline = redis.call('ZSCORE', K.expiry(), addr)
if not deadline or tonumber(deadline) > now_ms() then
  return {redis.call('GET', KEYS[1]) or '0', 0}
end

-- The live row may already be gone (key TTL); the identity row outlives it for this.
remove_address(change, addr, 'expired')

return {CHANGE, 1, notices_json(change)}
