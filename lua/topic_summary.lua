-- One page of the topics in name order, each with its QueueDatas and order config (the
-- dashboard's table). Read-only; its cost follows the page, not the table.
-- uses: keys, javaorder, staging
-- keys: version, broker, topic_index, staged_topics, topic, queue, topic_capacity, kv
-- ARGV[1] cursor: the last topic of the previous page ('' for the first page)
-- ARGV[2] limit: topics in this page
-- ARGV[3] prefix the topics start with ('' for all)
-- ARGV[4] '1' for order topics only (those with an ORDER_TOPIC_CONFIG entry)
-- Returns {version, topics, next cursor or false, total topics, order topics}
--   topics: {{topic, {{brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag}, ...},
--             orderTopicConf or false}, ...} by topic, queues in the route's order (Java's:
--             docs/design.md, "Route order")
local cursor, limit, prefix, order_only = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'

local names = {}
if order_only then
  -- order topics are few: their KV namespace, sorted and sliced here
  local all = redis.call('HKEYS', K.kv(ORDER_TOPIC_CONFIG))
  table.sort(all)
  for _, topic in ipairs(all) do
    if topic > cursor and string.sub(topic, 1, #prefix) == prefix and redis.call('EXISTS', K.topic(topic)) == 1 then
      names[#names + 1] = topic
      if #names > limit then break end
    end
  end
else
  -- the candidates after the cursor that start with the prefix, one more than the page
  local min = prefix ~= '' and '[' .. prefix or '-'
  if cursor ~= '' and (prefix == '' or cursor >= prefix) then min = '(' .. cursor end
  local max = prefix ~= '' and ('[' .. prefix .. '\255') or '+'
  names = redis.call('ZRANGEBYLEX', K.topic_index(), min, max, 'LIMIT', 0, limit + 1)  -- filtered below
end

local next_cursor = #names > limit and names[limit]
names[limit + 1] = nil
local out = {}
-- all but topics of staged first registrations (pages may come out shorter)
for _, topic in ipairs(listed(names)) do
  local rows, named, seqs = {}, {}, {}
  for _, name in ipairs(redis.call('SMEMBERS', K.topic(topic))) do
    local q = redis.call('HMGET', K.queue(topic, name), 'readQueueNums', 'writeQueueNums', 'perm', 'topicSysFlag', 'seq')
    if q[1] and not staging_group(name) then  -- not a staged group's
      named[#named + 1] = name
      rows[name], seqs[name] = q, tonumber(q[5]) or 0
    end
  end
  local grown = tonumber(redis.call('HGET', K.topic_capacity(), topic)) or 0
  local queues = {}
  for i, name in ipairs(java_order(named, math.max(grown_capacity(#named), grown), seqs)) do
    local q = rows[name]
    queues[i] = {name, q[1], q[2], q[3], q[4]}
  end
  out[#out + 1] = {topic, queues, redis.call('HGET', K.kv(ORDER_TOPIC_CONFIG), topic)}
end
local total = redis.call('ZCARD', K.topic_index()) - redis.call('SCARD', K.staged_topics())
return {redis.call('GET', KEYS[1]) or '0', out, next_cursor, total,
  redis.call('HLEN', K.kv(ORDER_TOPIC_CONFIG))}
