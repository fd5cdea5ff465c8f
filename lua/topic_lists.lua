-- Read one slice of one of the topic lists RocketMQ's tools ask for. At 100,000 topics a
-- whole list is too much for one call (Redis runs nothing else meanwhile), so the worker
-- asks slice after slice: topics in name order (the topic index) for 'all' and the unit
-- lists, broker groups in name order for 'cluster'. The slices are read one after the
-- other, not in one step: a list read while topics change may miss one added meanwhile or
-- hold one removed meanwhile, as a NameServer's list may by the time it arrives.
-- uses: keys, staging
-- keys: version, clusters, cluster, broker, addrs, broker_topics, topic_index, staged_topics, topic, queue
-- ARGV[1] which: 'all', 'cluster', 'system', 'unit', 'unit-sub', 'unit-sub-without-unit'
-- ARGV[2] clusterName (for 'cluster')
-- ARGV[3] cursor: '' for the first slice, else the last topic (or group, for 'cluster')
--         of the previous slice
-- ARGV[4] slice size: topics (groups, for 'cluster')
-- Returns {version, {name, ...}, brokerAddr or '', next cursor or false}; brokerAddr only
--   for 'system'.
local which, cursor, size = ARGV[1], ARGV[3] or '', tonumber(ARGV[4] or '0')
local FLAG_UNIT, FLAG_UNIT_SUB = 1, 2

local function has_flag(flags, bit)
  return math.floor(flags / bit) % 2 == 1
end

-- up to `size` names after the cursor from a sorted list, and the next cursor
local function slice_of(sorted)
  local out, next_cursor = {}, false
  for _, name in ipairs(sorted) do
    if cursor == '' or name > cursor then
      if #out == size then
        next_cursor = out[#out]
        break
      end
      out[#out + 1] = name
    end
  end
  return out, next_cursor
end

local function topics_slice()
  local min = cursor == '' and '-' or '(' .. cursor
  local names = redis.call('ZRANGEBYLEX', K.topic_index(), min, '+', 'LIMIT', 0, size + 1)
  local next_cursor = false
  if #names > size then
    names[#names] = nil
    next_cursor = names[#names]
  end
  return listed(names), next_cursor
end

local out, broker_addr, next_cursor = {}, '', false
if which == 'all' then
  out, next_cursor = topics_slice()
elseif which == 'cluster' then
  local groups = redis.call('SMEMBERS', K.cluster(ARGV[2]))
  table.sort(groups)
  local names
  names, next_cursor = slice_of(groups)
  for _, name in ipairs(names) do
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
  topics, next_cursor = topics_slice()
  for _, topic in ipairs(topics) do
    -- the flags of the topic's first QueueData, by brokerName so every worker agrees
    local names = redis.call('SMEMBERS', K.topic(topic))
    table.sort(names)
    local first
    for _, n in ipairs(names) do
      -- a staged group's QueueData is not there yet (lua/register_stage.lua): the next one
      if not staging_group(n) then first = n break end
    end
    local flags = tonumber(first and redis.call('HGET', K.queue(topic, first), 'topicSysFlag') or 0) or 0
    local unit, sub = has_flag(flags, FLAG_UNIT), has_flag(flags, FLAG_UNIT_SUB)
    if (which == 'unit' and unit) or (which == 'unit-sub' and sub)
      or (which == 'unit-sub-without-unit' and sub and not unit) then
      out[#out + 1] = topic
    end
  end
end
return {redis.call('GET', KEYS[1]) or '0', out, broker_addr, next_cursor}
