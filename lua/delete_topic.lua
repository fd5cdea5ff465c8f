-- Delete a topic's route, or only its QueueData on one cluster's brokers; with them go
-- the static topic's queue mappings of those groups.
-- uses: keys, changes, queues
-- keys: version, cluster, broker, broker_topics, topics, topic_index, staged_topics, topic, topic_capacity,
--       queue, mapping, mapped, changes, changelog
-- ARGV[1..2] topic, clusterName ('' for every broker)
-- Returns {change, QueueData removed}
local change = new_change()
local topic, cluster = ARGV[1], ARGV[2]
local function in_scope(name)
  return cluster == '' or redis.call('SISMEMBER', K.cluster(cluster), name) == 1
end

local removed = 0
for _, name in ipairs(redis.call('SMEMBERS', K.topic(topic))) do
  if in_scope(name) then
    drop_queues(change, name, {topic})
    removed = removed + 1
  end
end
for _, bname in ipairs(redis.call('HKEYS', K.mapping(topic))) do
  if in_scope(bname) then
    drop_mapping(change, topic, bname)
  end
end
return finish(change, removed)
