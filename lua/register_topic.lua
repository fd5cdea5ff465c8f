-- Register one topic's QueueData for given brokers (RocketMQ 5.x
-- RouteInfoManager.registerTopic, request REGISTER_TOPIC_IN_NAMESRV), atomically.
-- uses: keys, changes, staging, queues
-- keys: version, broker, broker_topics, topics, topic_index, staged_topics, topic, queue, changes, changelog
-- ARGV[1] topic
-- ARGV[2] n, number of QueueData
-- ARGV[3 ..] n groups of 5: brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag
-- Returns {change, 1} when applied, {change, 0} when a broker name has no BrokerData
-- (RocketMQ then refuses the topic: "Register topic contains illegal broker"); unlike
-- RocketMQ, nothing at all is written in that case.
local change = new_change()
local topic, n = ARGV[1], tonumber(ARGV[2])

for i = 0, n - 1 do
  local name = ARGV[3 + i * 5]
  -- unknown, or not there yet for readers (a staged first registration)
  if not redis.call('HGET', K.broker(name), 'cluster') or staging_group(name) then
    return finish(change, 0)
  end
end

for i = 0, n - 1 do
  local at = 3 + i * 5
  put_queue(change, topic, ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4])
end

return finish(change, 1)
