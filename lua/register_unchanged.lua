-- The fast path of a periodic re-registration whose body (found by its digest: the caller
-- need not parse it) is byte for byte one this address registered in full, over RocketMQ's
-- protocol but for its dataVersion. Unless the address's place or the QueueData it wrote
-- changed since (put_queues and drop_queues clear queuesIntact), its tables are as it left
-- them: liveness is refreshed, and the dataVersion (RocketMQ rewrites a topic on a new one
-- only where it differs: none does); and what RocketMQ sets on the group at every
-- registration, whichever member sends it, is set again from what this body carried (its
-- full registration kept it in the live row): the cluster the group is in, its
-- enableActingMaster and zoneName. Else it answers 0 and the caller registers in full.
-- uses: keys, basics, changes, members
-- keys: version, clusters, cluster, broker, addrs, live, expiry, body_digests, kv, changes, changelog
-- ARGV[1] digest of the request body
-- ARGV[2] channel: the remoting connection it came on ('' over HTTP)
-- ARGV[3] the body's dataVersion, canonical ('' when the digest covers it)
-- Returns {change, 0}, or {change, 1, masterFound, masterAddr, masterHaAddr, kvFlat}
local change = new_change()
local digest, channel, data_version = ARGV[1], ARGV[2], ARGV[3] or ''
local addr = redis.call('HGET', K.body_digests(), digest)
-- the live row may have expired (TTL): then the broker must register in full; one an older
-- release wrote holds no enableActingMaster (what the body sent is not known here)
local row = addr and redis.call('HMGET', K.live(addr), 'brokerName', 'brokerId', 'cluster', 'heartbeatTimeoutMillis',
  'enableActingMaster', 'zoneName')
if not (row and row[1] and row[5]) then return finish(change, 0) end
local name, id, cluster, acting = row[1], row[2], row[3], row[5]
local group = redis.call('HMGET', K.broker(name), 'cluster', 'queuesIntact', 'enableActingMaster', 'zoneName')
local held, prime = nil, false
if acting ~= '' and id ~= '0' then  -- a 5.x slave: prime when its id is the group's smallest
  local members = redis.call('HGETALL', K.addrs(name))
  for i = 1, #members, 2 do
    if members[i] == id then held = members[i + 1] end
  end
  prime = min_id(members) == tonumber(id)
else
  held = redis.call('HGET', K.addrs(name), id)
end
-- a master's table, or a 5.x prime slave's (the smallest id of a group without a master,
-- which writes its table as a master would), must be the one in place: a slave that became
-- prime since, or any QueueData changed by another script, registers in full
local intact = id == '0' and group[2] == '1' or prime and group[2] == addr or id ~= '0' and not prime
if held ~= addr or not group[1] or not intact then
  return finish(change, 0)
end

if group[1] ~= cluster then  -- else the group is in its set already (every script keeps both)
  join_cluster(change, name, cluster, group[1])
end
set_group_flags(change, name, group[3], group[4], acting == '1' and '1' or '0', row[6] or '')
touch_live(addr, now_ms(), tonumber(row[4]), channel)
if data_version ~= '' then
  redis.call('HSET', K.live(addr), 'dataVersion', data_version)
end
local master_found, master_addr, master_ha, kv = registration_answer(name, id)
return finish(change, 1, master_found, master_addr, master_ha, kv)
