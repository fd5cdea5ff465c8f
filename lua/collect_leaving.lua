-- Removes the QueueData of groups whose last member left with more than one script should
-- remove at once (lua/_groups.lua remove_group: readers skip a 'leaving' group already), at
-- most `budget` pairs a script, so a read waits behind one short script at most. A group
-- back meanwhile (its registration cleared 'leaving') keeps what it registered.
-- uses: keys, changes, queues
-- keys: version, leaving, broker, addrs, broker_topics, topics, topic_index, staged_topics, topic,
--       topic_capacity, queue, changes, changelog
-- ARGV[1] budget: the (topic, group) pairs one script may remove
-- Returns {change, left}: how many groups are still leaving.
local change = new_change()
local budget = tonumber(ARGV[1])
for _, name in ipairs(redis.call('SRANDMEMBER', K.leaving(), 16)) do
  if budget <= 0 then
    break
  end
  -- not when a master registered since through an older release's worker, which left the
  -- mark (docs/upgrade.md): the group is back, its QueueData its own
  local marked = redis.call('HGET', K.broker(name), 'leaving') == '1'
    and redis.call('HEXISTS', K.addrs(name), '0') == 0
  if marked then
    -- exactly min(budget, pairs) distinct topics, whatever deletions did to the hash's layout
    local topics = redis.call('HRANDFIELD', K.broker_topics(name), budget)
    drop_queues(change, name, topics)
    budget = budget - #topics
  end
  local done = redis.call('EXISTS', K.broker_topics(name)) == 0
  if done or not marked then
    -- Redis deletes the row with its last field; a row a member registered since stays
    if redis.call('HDEL', K.broker(name), 'leaving') == 1 and not marked then
      -- readers see its QueueData again: what was cached meanwhile of its topics goes
      touch_group(change, name)
      touch_reappeared(change, redis.call('HKEYS', K.broker_topics(name)))
    end
    redis.call('SREM', K.leaving(), name)
  end
end
return finish(change, redis.call('SCARD', K.leaving()))
