-- Unregister a broker on its shutdown (RocketMQ RouteInfoManager.unregisterBroker).
-- uses: keys, basics, changes, members, groups
-- keys: version, clusters, cluster, broker, addrs, broker_topics, topics, topic_index, staged_topics, stagings,
--       topic, topic_capacity, queue, queue_seq, live, expiry, member, filter, mapping, mapped, body_digests,
--       masterless, changes, changelog, departures, leaving
-- ARGV[1..4] clusterName, brokerAddr, brokerName, brokerId: the cluster and id only for the
--         departure (the group's row says where it is; removal is by address, see detach)
-- Returns {change, changed, notices} (notices: lua/_groups.lua's NOTIFY_MIN_BROKER_ID_CHANGE, '' none)
local change = new_change()
local addr, name = ARGV[2], ARGV[3]
-- The address's own rows go only if it still belongs to this group: a late unregister
-- must not erase the liveness of an address that has since joined another group.
local owner = redis.call('HGET', K.member(addr), 'brokerName')
if not owner or owner == name then
  forget_address(change, addr, name)
end
if detach(change, name, addr) then
  record_departure(addr, name, ARGV[1], ARGV[4], 'unregistered', now_ms())
end
return finish(change, change.visible and 1 or 0, notices_json(change))
