-- Delete a topic's route, or only its QueueData on one cluster's brokers.
-- KEYS[1] version counter
-- ARGV[1] topic
-- ARGV[2] clusterName, or '' for every broker
-- Returns {change, QueueData removed}
local topic = ARGV[1]
local cluster = ARGV[2]

local removed = 0
for _, name in ipairs(redis.call('SMEMBERS', K.topic(topic))) do
  if cluster == '' or redis.call('SISMEMBER', K.cluster(cluster), name) == 1 then
    drop_queue(topic, name)
    removed = removed + 1
  end
end

return {publish_if_changed(), removed}
