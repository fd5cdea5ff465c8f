-- The fast path of a periodic re-registration whose body (found by its digest: the caller
-- need not parse it) is byte for byte one this address registered in full, over RocketMQ's
-- protocol but for its dataVersion. Unless the address's place or its group's QueueData
-- changed since (put_queues and drop_queues clear queuesIntact), the tables are as it left
-- them: only liveness is refreshed, and the dataVersion (RocketMQ rewrites a topic on a new
-- one only where it differs: none does). Else it answers 0 and the caller registers in full.
-- uses: keys, basics, changes, members
-- keys: version, broker, addrs, live, expiry, body_digests, kv, changes, changelog
-- ARGV[1] digest of the request body
-- ARGV[2] channel: the remoting connection it came on ('' over HTTP)
-- ARGV[3] the body's dataVersion, canonical ('' when the digest covers it)
-- Returns {change, 0}, or {change, 1, masterFound, masterAddr, masterHaAddr, kvFlat}
local change = new_change()
local digest, channel, data_version = ARGV[1], ARGV[2], ARGV[3] or ''
local addr = redis.call('HGET', K.body_digests(), digest)
-- the live row may have expired (TTL): then the broker must register in full
local row = addr and redis.call('HMGET', K.live(addr), 'brokerName', 'brokerId', 'cluster', 'heartbeatTimeoutMillis')
if not (row and row[1]) then return finish(change, 0) end
local name, id = row[1], row[2]
local group = redis.call('HMGET', K.broker(name), 'cluster', 'queuesIntact')
if redis.call('HGET', K.addrs(name), id) ~= addr or group[1] ~= row[3] or (id == '0' and group[2] ~= '1') then
  return finish(change, 0)
end

touch_live(addr, now_ms(), tonumber(row[4]), channel)
if data_version ~= '' then
  redis.call('HSET', K.live(addr), 'dataVersion', data_version)
end
local master_found, master_addr, master_ha, kv = registration_answer(name, id)
return finish(change, 1, master_found, master_addr, master_ha, kv)
