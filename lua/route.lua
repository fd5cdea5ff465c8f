-- Read a topic's route in one step, so no reader sees a queue whose broker was just removed.
-- KEYS[1] version counter
-- ARGV[1] topic
-- ARGV[2] '1' to attach orderTopicConf from the KV namespace ORDER_TOPIC_CONFIG
-- Returns {version, queues, brokers, filters, orderTopicConf or false}
--   queues:  {{brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag}, ...} by brokerName
--   brokers: {{brokerName, cluster, {brokerId, brokerAddr, ...}}, ...} by brokerName
--   filters: {{brokerAddr, {filterServer, ...}}, ...}
local topic = ARGV[1]
local with_order = ARGV[2] == '1'

local names = redis.call('SMEMBERS', K.topic(topic))
table.sort(names)
local queues, brokers, filters = {}, {}, {}
for _, name in ipairs(names) do
  local q = redis.call('HMGET', K.queue(topic, name), 'readQueueNums', 'writeQueueNums', 'perm', 'topicSysFlag')
  if q[1] then
    queues[#queues + 1] = {name, q[1], q[2], q[3], q[4]}
    local cluster = redis.call('HGET', K.broker(name), 'cluster')
    if cluster then
      local addrs = redis.call('HGETALL', K.addrs(name))
      brokers[#brokers + 1] = {name, cluster, addrs}
      for i = 2, #addrs, 2 do
        local servers = redis.call('LRANGE', K.filter(addrs[i]), 0, -1)
        if #servers > 0 then
          filters[#filters + 1] = {addrs[i], servers}
        end
      end
    end
  end
end
local order = false
if with_order then
  order = redis.call('HGET', K.kv(ORDER_TOPIC_CONFIG), topic)
end
return {redis.call('GET', KEYS[1]) or '0', queues, brokers, filters, order}
