-- Read a topic's route in one step (no reader sees a queue whose broker was just removed)
-- and encode it here as docs/api.md's JSON, which the HTTP front sends and caches as it is;
-- the RocketMQ front re-encodes it in fastjson's field order and dialect (remoting/bodies.py).
-- uses: keys, basics, javaorder, staging
-- keys: version, broker, addrs, topic, queue, topic_capacity, filter, mapping, kv
-- ARGV[1] topic
-- ARGV[2] '1' to attach orderTopicConf from the KV namespace ORDER_TOPIC_CONFIG
-- ARGV[3] '1' for supportActingMaster: a group with enableActingMaster, no master and unwritable
--         QueueData answers its smallest-id member as id 0 (RocketMQ 5's pickupTopicRouteData)
-- Returns {version, body, names}: body the route as docs/api.md's JSON (queueDatas and
--   brokerDatas in Java's HashMap/HashSet order, brokerAddrs by brokerId; enableActingMaster only when true,
--   zoneName only when set, topicQueueMappingByBroker only for a static topic), or false
--   without a route (TOPIC_NOT_EXIST); names the broker groups it names.
local topic, with_order = ARGV[1], ARGV[2] == '1'
-- RocketMQ leaves the brokers' own member-sync topics as they are
local support_acting = ARGV[3] == '1' and string.sub(topic, 1, 27) ~= 'rmq_sys_SYNC_BROKER_MEMBER_'
local str = cjson.encode  -- a Lua string as a JSON string

local names = redis.call('SMEMBERS', K.topic(topic))
-- the QueueData readers see; each put when its seq says (rows an older release created
-- have none: 0, then by name)
local rows, named, seqs = {}, {}, {}
for _, name in ipairs(names) do
  local q = redis.call('HMGET', K.queue(topic, name), 'readQueueNums', 'writeQueueNums', 'perm', 'topicSysFlag', 'seq')
  local group = q[1] and visible_group(name, 'cluster', 'enableActingMaster', 'zoneName')
  if group then
    named[#named + 1] = name
    rows[name], seqs[name] = {q, group}, tonumber(q[5]) or 0
  end
end
-- Java's order (docs/design.md, "Route order"): queueDatas as the topic's HashMap iterates,
-- brokerDatas as the HashSet copied from its keys does (the same order unless its table is
-- larger: 12, 24, 48... groups)
local grown = tonumber(redis.call('HGET', K.topic_capacity(), topic)) or 0  -- the table it once grew to
local in_map, in_set = math.max(grown_capacity(#named), grown), copied_capacity(#named)
named = java_order(named, in_map, seqs)
local queues, brokers, filters = {}, {}, {}
for i, name in ipairs(named) do
  local q = rows[name][1]
  -- the counts are written only by the scripts, from validated integers
  queues[i] = '{"brokerName":' .. str(name) .. ',"readQueueNums":' .. q[1] .. ',"writeQueueNums":'
    .. q[2] .. ',"perm":' .. q[3] .. ',"topicSysFlag":' .. q[4] .. '}'
end
for _, name in ipairs(in_set == in_map and named or java_order(named, in_set)) do
  local q, group = rows[name][1], rows[name][2]
  if group[1] then
    local ids = sorted_pairs(redis.call('HGETALL', K.addrs(name)), true)  -- {id, addr, number}
    if support_acting and group[2] == '1' and #ids > 0 and ids[1][3] ~= 0 and not has_bit(q[3], PERM_WRITE) then
      ids[1] = {'0', ids[1][2]}  -- the acting master
    end
    local addrs = {}
    for i, id in ipairs(ids) do
      addrs[i] = str(id[1]) .. ':' .. str(id[2])
      local servers = redis.call('LRANGE', K.filter(id[2]), 0, -1)
      if #servers > 0 then
        filters[#filters + 1] = str(id[2]) .. ':' .. cjson.encode(servers)  -- an array of strings
      end
    end
    brokers[#brokers + 1] = '{"cluster":' .. str(group[1]) .. ',"brokerName":' .. str(name)
      .. ',"brokerAddrs":{' .. table.concat(addrs, ',') .. '}'
      .. (group[2] == '1' and ',"enableActingMaster":true' or '')
      .. (group[3] and ',"zoneName":' .. str(group[3]) or '') .. '}'
  end
end
local version = redis.call('GET', KEYS[1]) or '0'
if #queues == 0 or #brokers == 0 then
  return {version, false, named}
end
local order = with_order and redis.call('HGET', K.kv(ORDER_TOPIC_CONFIG), topic)
-- a static topic's mappings by hosting group (stored as the standard JSON of each)
local mapped = {}
for i, m in ipairs(sorted_pairs(redis.call('HGETALL', K.mapping(topic)))) do
  mapped[i] = str(m[1]) .. ':' .. m[2]
end
local body = '{"orderTopicConf":' .. (order and str(order) or 'null')
  .. ',"queueDatas":[' .. table.concat(queues, ',') .. ']'
  .. ',"brokerDatas":[' .. table.concat(brokers, ',') .. ']'
  .. ',"filterServerTable":{' .. table.concat(filters, ',') .. '}'
  .. (#mapped > 0 and ',"topicQueueMappingByBroker":{' .. table.concat(mapped, ',') .. '}' or '') .. '}'
return {version, body, named}
