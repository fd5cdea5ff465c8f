-- Read one of the topic lists RocketMQ's tools ask for.
-- KEYS[1] version counter
-- ARGV[1] which: 'all', 'cluster', 'system', 'unit', 'unit-sub', 'unit-sub-without-unit'
-- ARGV[2] clusterName (for 'cluster')
-- Returns {version, {name, ...}, brokerAddr or ''}; brokerAddr only for 'system'.
local which = ARGV[1]
local FLAG_UNIT, FLAG_UNIT_SUB = 1, 2

local function has_flag(flags, bit)
  return math.floor(flags / bit) % 2 == 1
end

local out, broker_addr = {}, ''
if which == 'all' then
  out = redis.call('SMEMBERS', K.topics())
elseif which == 'cluster' then
  local seen = {}
  for _, name in ipairs(redis.call('SMEMBERS', K.cluster(ARGV[2]))) do
    for _, topic in ipairs(redis.call('HKEYS', K.broker_topics(name))) do
      if not seen[topic] then
        seen[topic] = true
        out[#out + 1] = topic
      end
    end
  end
elseif which == 'system' then
  -- RocketMQ reports every cluster name and broker name as a "system topic",
  -- with one broker address to reach them through
  for _, cluster in ipairs(redis.call('SMEMBERS', K.clusters())) do
    out[#out + 1] = cluster
    for _, name in ipairs(redis.call('SMEMBERS', K.cluster(cluster))) do
      out[#out + 1] = name
      if broker_addr == '' then
        local addrs = redis.call('HVALS', K.addrs(name))
        table.sort(addrs)
        broker_addr = addrs[1] or ''
      end
    end
  end
else
  for _, topic in ipairs(redis.call('SMEMBERS', K.topics())) do
    -- the flags of the topic's first QueueData, by brokerName so every worker agrees
    local names = redis.call('SMEMBERS', K.topic(topic))
    table.sort(names)
    local flags = tonumber(names[1] and redis.call('HGET', K.queue(topic, names[1]), 'topicSysFlag') or 0) or 0
    local unit, sub = has_flag(flags, FLAG_UNIT), has_flag(flags, FLAG_UNIT_SUB)
    if (which == 'unit' and unit) or (which == 'unit-sub' and sub)
      or (which == 'unit-sub-without-unit' and sub and not unit) then
      out[#out + 1] = topic
    end
  end
end
return {redis.call('GET', KEYS[1]) or '0', out, broker_addr}
