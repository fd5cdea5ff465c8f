-- Read one slice of a topic list RocketMQ's tools ask for: at 100,000 topics a whole list is
-- too much for one call (Redis runs nothing else meanwhile). Slices go in name order, of
-- topics (the topic index) for 'all' and the unit lists, of broker groups for 'cluster'; read
-- while topics change, a list may miss or hold one changed meanwhile, as RocketMQ's may.
-- uses: keys, basics, staging
-- keys: version, clusters, cluster, broker, addrs, broker_topics, topic_index, staged_topics, topic, queue
-- ARGV[1] which: 'all', 'cluster', 'system', 'unit', 'unit-sub', 'unit-sub-without-unit'
-- ARGV[2] clusterName (for 'cluster')
-- ARGV[3] cursor: '' for the first slice, else the previous slice's last topic (group)
-- ARGV[4] slice size: topics (groups, for 'cluster')
-- Returns {version, {name, ...}, brokerAddr ('' but for 'system'), next cursor or false}
local which, cursor, size = ARGV[1], ARGV[3] or '', tonumber(ARGV[4] or '0')
local FLAG_UNIT, FLAG_UNIT_SUB = 1, 2

-- up to `size` of `names` (the names after the cursor, in order), and the next cursor
local function page(names)
  if #names <= size then
    return names, false
  end
  -- cut in place: a slice holds more names than Lua's unpack takes (~8,000)
  for i = #names, size + 1, -1 do
    names[i] = nil
  end
  return names, names[size]
end

local function topics_page()
  local min = cursor == '' and '-' or '(' .. cursor
  local names, next_cursor = page(redis.call('ZRANGEBYLEX', K.topic_index(), min, '+', 'LIMIT', 0, size + 1))
  return listed(names), next_cursor
end

local out, broker_addr, next_cursor = {}, '', false
if which == 'all' then
  out, next_cursor = topics_page()
elseif which == 'cluster' then
  local groups = {}
  for _, name in ipairs(redis.call('SMEMBERS', K.cluster(ARGV[2]))) do
    if name > cursor then groups[#groups + 1] = name end
  end
  table.sort(groups)
  groups, next_cursor = page(groups)
  for _, name in ipairs(groups) do
    for _, topic in ipairs(redis.call('HKEYS', K.broker_topics(name))) do
      out[#out + 1] = topic  -- the worker removes the duplicates across groups
    end
  end
elseif which == 'system' then
  -- RocketMQ reports every cluster name and broker name as a "system topic",
  -- with one broker address to reach them through (a few hundred names: one call)
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
  local topics
  topics, next_cursor = topics_page()
  for _, topic in ipairs(topics) do
    -- the flags of the topic's first QueueData by brokerName (so every worker agrees), but
    -- not a staged group's, which is not there yet (lua/register_stage.lua)
    local names = redis.call('SMEMBERS', K.topic(topic))
    table.sort(names)
    local first
    for _, n in ipairs(names) do
      if not staging_group(n) then first = n break end
    end
    local flags = tonumber(first and redis.call('HGET', K.queue(topic, first), 'topicSysFlag') or 0) or 0
    local unit, sub = has_bit(flags, FLAG_UNIT), has_bit(flags, FLAG_UNIT_SUB)
    if (which == 'unit' and unit) or (which == 'unit-sub' and sub)
      or (which == 'unit-sub-without-unit' and sub and not unit) then
      out[#out + 1] = topic
    end
  end
end
return {redis.call('GET', KEYS[1]) or '0', out, broker_addr, next_cursor}
