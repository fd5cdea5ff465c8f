-- Register a broker (RocketMQ RouteInfoManager.registerBroker), atomically.
-- uses: keys, basics, changes, queues, members, groups
-- keys: version, clusters, cluster, broker, addrs, broker_topics, topics, topic_index, staged_topics, stagings,
--       topic, topic_capacity, queue, queue_seq, live, expiry, member, filter, mapping, mapped, body_digests,
--       masterless, kv, changes, changelog, departures, leaving
-- ARGV[1..6] clusterName, brokerAddr, brokerName, brokerId ('0' master), haServerAddr, heartbeatTimeoutMillis
-- ARGV[7..9] dataVersion (canonical JSON, compared as a string); filter mode: 'keep' (list
--          absent) or 'set'; '1' to remove this broker's QueueData for topics absent from it
-- ARGV[10] topic configs, a flat JSON array [topic, fingerprint, ...], the fingerprint
--          "readQueueNums,writeQueueNums,perm,topicSysFlag" (10,000 topics as 20,000 arguments
--          cost more to send): the body's whole table (with split registration, one part)
-- ARGV[11..13] filter server addresses (a JSON array of strings); channel: the remoting
--          connection it came on ('' over HTTP); the body's digest ('' unknown), for register_unchanged
-- ARGV[14] enableActingMaster as the broker sent it: '1', '0', or '' when its header has
--          none (a broker before 5.0): RocketMQ 5's prime-slave rule is for 5.x brokers only
-- ARGV[15..16] zoneName ('' when none); the body's static topics' queue mappings, a flat JSON
--          array [topic, bname, TopicQueueMappingInfo JSON, ...]
-- ARGV[17] the generation of the staging (register_stage.lua) the caller wrote of ARGV[10]
--          ('' none): published untouched, the table is in place as sent, not compared again
-- ARGV[18] how many topic configs the registration's body holds (apache/rocketmq#4522's rule)
-- ARGV[19] its dataVersion's stateVersion, digits ('0' before 5.0)
-- Returns {change, changed, masterFound, masterAddr, masterHaAddr, kvFlat, status, notices}:
--   status 'ok', or a RocketMQ 5.3 refusal, which applies nothing else: 'conflict' (another
--   address holds the id with a higher stateVersion: this address leaves the tables) or
--   'refused' (one topic from an id the group lacks); notices lua/_groups.lua's JSON ('' none).
local change = new_change()
local cluster, addr, name, id, ha_addr = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local timeout, data_version, filter_mode, delete_absent = tonumber(ARGV[6]), ARGV[7], ARGV[8], ARGV[9] == '1'
local filter_servers, channel, body_digest = cjson.decode(ARGV[11]), ARGV[12] or '', ARGV[13] or ''
local acting, zone, mappings = ARGV[14] or '', ARGV[15] or '', cjson.decode(ARGV[16] or '[]')
local own_staging, topic_count, state_version = ARGV[17] or '', tonumber(ARGV[18] or ''), ARGV[19] or '0'

-- RocketMQ 5.3's two refusals (RouteInfoManager.registerBroker), before anything is written.
local held = redis.call('HGET', K.addrs(name), id)
if held and held ~= addr then
  -- another address, alive with a higher stateVersion, holds the id (a controller made it
  -- master since): this one is ignored and leaves the live table, here every table (no row
  -- of it may outlive its live one)
  local row = redis.call('HMGET', K.live(held), 'cluster', 'dataVersion')
  if row[1] == cluster and digits_above(string.match(row[2] or '', '"stateVersion":(%d+)') or '0', state_version) then
    remove_address(change, addr, nil)  -- not a departure of the three kinds recorded
    local _, _, _, kv = registration_answer(name, '0')  -- RocketMQ answers its empty result
    return finish(change, change.visible and 1 or 0, 0, '', '', kv, 'conflict', notices_json(change))
  end
elseif not held and acting ~= '' and topic_count == 1 then
  -- apache/rocketmq#4522: a 5.x broker's registration of one topic (registerSingleTopicAll
  -- before its full registration reached this NameServer) from an id the group lacks
  return finish(change, 0, 0, '', '', {}, 'refused', '')
end

-- 1. clusterAddrTable (a group that moved cluster leaves the one it was in)
local old_cluster = redis.call('HGET', K.broker(name), 'cluster')
join_cluster(change, name, cluster, old_cluster)

-- 2. brokerAddrTable
local register_first = not old_cluster or not held
if not old_cluster then
  touch_group(change, name)
  redis.call('HSET', K.broker(name), 'cluster', cluster, 'brokerName', name)
end

-- an address belongs to one group: if it served another one, it leaves that one
local previous = redis.call('HGET', K.member(addr), 'brokerName')
if previous and previous ~= name then
  detach(change, previous, addr)
end

-- "the same IP:PORT must only have one record": a promoted slave drops its old id
local flat = redis.call('HGETALL', K.addrs(name))
local prev_min = min_id(flat)
for i = 1, #flat, 2 do
  if flat[i + 1] == addr and flat[i] ~= id then
    redis.call('HDEL', K.addrs(name), flat[i])
    touch_group(change, name)
  end
end
if held ~= addr then  -- `held`, read above: nothing since changed this id's entry
  redis.call('HSET', K.addrs(name), id, addr)
  touch_group(change, name)
  -- the id moved from another address: that one is in no group any more, so its rows go
  local owner = held and redis.call('HMGET', K.member(held), 'brokerName', 'brokerId')
  if owner and owner[1] == name and owner[2] == id then
    forget_address(change, held, name)
  end
end
note_master(name)
if prev_min ~= nil and tonumber(id) < prev_min then
  note_min_change(change, name, nil, ha_addr)  -- a smaller id than any before joined
end

-- BrokerData's enableActingMaster and zoneName: the last registration's, as in RocketMQ
local acting_flag = acting == '1' and '1' or '0'
local flags = redis.call('HMGET', K.broker(name), 'enableActingMaster', 'zoneName')
set_group_flags(change, name, flags[1], flags[2], acting_flag, zone)

-- RocketMQ 5's prime slave: a 5.x slave with the smallest id of a masterless group writes its
-- QueueData as a master would, without the write bit under enableActingMaster.
local prime = acting ~= '' and id ~= '0' and min_id(redis.call('HGETALL', K.addrs(name))) == tonumber(id)
-- queuesIntact as this registration leaves it: '1' for a master's table (as every release
-- writes it), the address for a prime slave's (its unchanged re-registration checks that it
-- is its own table that is in place, not a departed master's)
local intact_mark = id == '0' and '1' or addr

-- 3. topicQueueTable, from the master (or the prime slave) only. A QueueData is written when
-- new, or when it differs on a first registration or a new dataVersion: one an operator
-- deleted comes back, and an unchanged one costs a table lookup, not a call.
local live_key = K.live(addr)
local was = redis.call('HMGET', live_key, 'dataVersion', 'haServerAddr', 'heartbeatTimeoutMillis', 'brokerName',
  'brokerId', 'cluster', 'enableActingMaster', 'zoneName')
-- whether the address's other bodies (a split registration's other parts) still hold: it
-- is the address's as before, queues intact, and (step 6) changed nothing a reader sees; its
-- dataVersion may move (a split broker moves it at every part: body digests leave it out)
local alike = not register_first and was[2] == ha_addr and was[3] == int(timeout) and was[4] == name and was[5] == id
  and was[6] == cluster and was[7] == acting and was[8] == zone
  and (id ~= '0' and not prime or redis.call('HGET', K.broker(name), 'queuesIntact') == intact_mark)
local rewrite = register_first or was[1] ~= data_version
if id == '0' or prime then
  -- a staged first registration (register_stage.lua) is published by this one: the
  -- master's, or a prime slave's, which writes its table as a master would (RocketMQ 5
  -- shows it at once: a master that died mid-staging must not hide its slave's routes)
  local staged = redis.call('HGET', K.broker(name), 'staging')
  -- the caller's own staging, which no other change to the group's QueueData touched since
  -- (any would have removed topicsGen): every config sent is stored as sent
  local in_place = staged and staged == own_staging and redis.call('HGET', K.broker(name), 'topicsGen') == staged
  -- a group back while its QueueData from before its last member left are still being
  -- collected (lua/_groups.lua remove_group): what it sends now replaces them whole
  local returning = redis.call('HDEL', K.broker(name), 'leaving') == 1
  if returning then
    redis.call('SREM', K.leaving(), name)
  end
  if staged then
    redis.call('HDEL', K.broker(name), 'staging')
    publish_staged(change, name)
  end
  local topic_configs = in_place and {} or cjson.decode(ARGV[10])
  local known = in_place and {} or fingerprints(name)
  local writes, seen, wipe_write = {}, {}, prime and acting_flag == '1'
  for i = 1, #topic_configs, 2 do
    local topic, fp = topic_configs[i], topic_configs[i + 1]
    if wipe_write then
      local r, w, p, f = string.match(fp, '^(%d+),(%d+),(%d+),(%d+)$')
      fp = fingerprint(r, w, without_write(p), f)
    end
    seen[topic] = true
    if not known[topic] or (rewrite and known[topic] ~= fp) then
      writes[#writes + 1] = topic
      writes[#writes + 1] = fp
    end
  end
  put_queues(change, name, writes, known)
  if returning then
    -- the QueueData kept while it was away are seen again, changed or not: the answers read
    -- meanwhile (no route, or one without the group) do not name it (lua/_changes.lua)
    local kept = {}
    for topic in pairs(known) do
      if seen[topic] then
        kept[#kept + 1] = topic
      end
    end
    touch_reappeared(change, kept)
  end
  if (delete_absent or returning) and rewrite then
    local absent = {}
    for topic in pairs(known) do
      if not seen[topic] then
        absent[#absent + 1] = topic
      end
    end
    drop_queues(change, name, absent)
  end
  put_mappings(change, mappings)
  redis.call('HSET', K.broker(name), 'queuesIntact', intact_mark)  -- every QueueData of its config is in place
end

-- 4. brokerLiveTable, with the key TTL and the deadline index; and what the address sent that
-- RocketMQ sets on its group at every registration, which register_unchanged.lua sets again
redis.call('HSET', live_key, 'brokerAddr', addr, 'cluster', cluster, 'brokerName', name, 'brokerId', id,
  'haServerAddr', ha_addr, 'heartbeatTimeoutMillis', int(timeout), 'dataVersion', data_version,
  'enableActingMaster', acting, 'zoneName', zone)
touch_live(addr, now_ms(), timeout, channel)
redis.call('HSET', K.member(addr), 'brokerAddr', addr, 'cluster', cluster, 'brokerName', name, 'brokerId', id)

-- 5. filterServerTable: absent leaves it, empty removes it, non-empty replaces it (the lists
-- compared as JSON arrays of strings, both '{}' when empty)
local filters = filter_mode == 'set' and cjson.encode(filter_servers)
if filters and filters ~= cjson.encode(redis.call('LRANGE', K.filter(addr), 0, -1)) then
  redis.call('DEL', K.filter(addr))
  if #filter_servers > 0 then
    variadic('RPUSH', K.filter(addr), filter_servers)
  end
  touch_group(change, name)
end

-- 6. the bodies register_unchanged.lua finds this address by (member's bodyDigest): this
-- one's, and the earlier ones (a split registration's parts) if it left the address alike.
local kept = {}
for other in string.gmatch(redis.call('HGET', K.member(addr), 'bodyDigest') or '', '%S+') do
  if alike and not change.visible and other ~= body_digest then
    kept[#kept + 1] = other
  elseif other ~= body_digest then
    redis.call('HDEL', K.body_digests(), other)
  end
end
-- Full, the newest is the one left out: a split broker sends its parts in a fixed cycle,
-- and dropping the oldest would drop the part due next, every part missing every round.
while #kept > MAX_BODY_DIGESTS do
  redis.call('HDEL', K.body_digests(), table.remove(kept))
end
if body_digest ~= '' and #kept < MAX_BODY_DIGESTS then
  kept[#kept + 1] = body_digest
  redis.call('HSET', K.body_digests(), body_digest, addr)
end
redis.call('HSET', K.member(addr), 'bodyDigest', table.concat(kept, ' '))

-- 7. the answer
local master_found, master_addr, master_ha, kv = registration_answer(name, id)
return finish(change, change.visible and 1 or 0, master_found, master_addr, master_ha, kv, 'ok', notices_json(change))
