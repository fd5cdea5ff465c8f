-- Unregister a broker on its shutdown (RocketMQ RouteInfoManager.unregisterBroker).
-- KEYS[1] version counter
-- ARGV[1] clusterName (informational: the group's own row says where it is; the departure's)
-- ARGV[2] brokerAddr
-- ARGV[3] brokerName
-- ARGV[4] brokerId (informational: removal is by address, see detach; the departure's)
-- Returns {change, changed, notices} (notices: lua/_lib.lua's NOTIFY_MIN_BROKER_ID_CHANGE, '' none)
local addr = ARGV[2]
local name = ARGV[3]

-- The address's own rows go only if it still belongs to this group: a late unregister
-- must not erase the liveness of an address that has since joined another group.
local owner = redis.call('HGET', K.member(addr), 'brokerName')
if not owner or owner == name then
  forget_address(change, addr, name)
end
if detach(change, name, addr) then
  record_departure(addr, name, ARGV[1], ARGV[4], 'unregistered', now_ms())
end

return {CHANGE, change.visible and 1 or 0, notices_json(change)}
