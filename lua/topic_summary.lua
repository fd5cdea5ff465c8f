-- Read every topic's QueueDatas (and its order config) in one step (the dashboard's table).
-- Read-only: {rmq}:topics, each {rmq}:topic:<t> set and its {rmq}:queue:<t>:<name> rows.
-- KEYS[1] version counter
-- Returns {version, topics}
--   topics: {{topic, {{brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag}, ...},
--             orderTopicConf or false}, ...} by topic, queues by brokerName
local topics = redis.call('SMEMBERS', K.topics())
table.sort(topics)
local out = {}
for _, topic in ipairs(topics) do
  local names = redis.call('SMEMBERS', K.topic(topic))
  table.sort(names)
  local queues = {}
  for _, name in ipairs(names) do
    local q = redis.call('HMGET', K.queue(topic, name), 'readQueueNums', 'writeQueueNums', 'perm', 'topicSysFlag')
    if q[1] then
      queues[#queues + 1] = {name, q[1], q[2], q[3], q[4]}
    end
  end
  if #queues > 0 then
    out[#out + 1] = {topic, queues, redis.call('HGET', K.kv(ORDER_TOPIC_CONFIG), topic)}
  end
end
return {redis.call('GET', KEYS[1]) or '0', out}
