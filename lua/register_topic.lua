-- Register one topic's QueueData for given brokers, atomically (RocketMQ 5.x
-- RouteInfoManager.registerTopic, request REGISTER_TOPIC_IN_NAMESRV).
-- uses: keys, changes, staging, queues
-- keys: version, broker, broker_topics, topics, topic_index, staged_topics, topic, queue, queue_seq, changes, changelog
-- ARGV[1..2] topic, n the number of QueueData
-- ARGV[3 ..] n groups of 5: brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag
-- Returns {change, 1} when applied, {change, 0} when a broker name has no BrokerData (RocketMQ
--   refuses the topic: "Register topic contains illegal broker"); unlike RocketMQ, nothing
--   at all is written then.
local change = new_change()
local topic, n = ARGV[1], tonumber(ARGV[2])

for at = 3, 2 + n * 5, 5 do
  -- unknown, or not there yet for readers (a staged first registration)
  if not redis.call('HGET', K.broker(ARGV[at]), 'cluster') or staging_group(ARGV[at]) then
    return finish(change, 0)
  end
end
for at = 3, 2 + n * 5, 5 do
  local name = ARGV[at]
  local fp = redis.call('HGET', K.broker_topics(name), topic)
  local new_fp = fingerprint(ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4])
  if fp ~= new_fp then
    put_queues(change, name, {topic, new_fp}, {[topic] = fp or nil})
  end
end
return finish(change, 1)
