-- One slice of a staged first registration: the QueueData of a master whose group has none
-- yet (new, or only its slave registered), a slice a script so none runs long, published
-- whole by the master's registration (register.lua). Until then readers skip the group and
-- its new topics, and no change record goes out: a reader sees all of it or none
-- (docs/design.md, "A group's state").
-- uses: keys, changes, queues
-- keys: version, broker, broker_topics, topics, topic_index, staged_topics, stagings, topic, topic_capacity,
--       queue, queue_seq, topics_gen, changes, changelog
-- ARGV[1] brokerName
-- ARGV[2] the generation this staging was given by its first slice ('' for the first)
-- ARGV[3] a slice of the topic configs, as register.lua's ARGV[10]
-- Returns {change, 'staged', generation}; {change, 'published'}: the group is visible (the
--   registration goes in one script); {change, 'stale'}: another staging of it took over (the
--   caller gives up staging); {change, 'cleaning', left}: up to CLEAN pairs of an earlier,
--   never published staging removed: call again.
local change = new_change()
local name, generation = ARGV[1], ARGV[2]
local CLEAN = 1000  -- pairs removed per call: each is a few keys
local row = redis.call('HMGET', K.broker(name), 'cluster', 'staging', 'topicsGen', 'leaving')

if generation == '' then
  -- a visible group is staged only while it has no QueueData (its slave registered first):
  -- readers skipping it then see what they saw before, a group without queues; a group
  -- whose QueueData from before its last member left are still there (lua/_groups.lua
  -- remove_group) is compared against them in one script, which writes what changed
  if (row[1] or row[4]) and not row[2] and redis.call('EXISTS', K.broker_topics(name)) == 1 then
    return finish(change, 'published')
  end
  local left = redis.call('HKEYS', K.broker_topics(name))
  if #left > 0 then
    local slice = {unpack(left, 1, math.min(#left, CLEAN))}
    drop_queues(change, name, slice)
    return finish(change, 'cleaning', #left - #slice)
  end
  generation = tostring(redis.call('INCR', K.topics_gen()))
  redis.call('HSET', K.broker(name), 'staging', generation, 'topicsGen', generation)
  -- register.lua publishes in O(1) when this is the only staging and its count is right
  redis.call('HSET', K.stagings(), name, 0)
  -- A staged group holds STAGE_MIN (500) topics or more: its fingerprints would be a
  -- listpack until hash-max-listpack-entries (512 by default), each field found by a scan of
  -- the others (a quarter of a first registration's time in Redis 7.0). A value past
  -- hash-max-listpack-value makes the new hash a hash table, which it stays without it.
  redis.call('HSET', K.broker_topics(name), ' ', string.rep('-', 1024))
elseif row[2] ~= generation or row[3] ~= generation then
  return finish(change, 'stale')
end

local before = redis.call('SCARD', K.staged_topics())
put_queues(change, name, cjson.decode(ARGV[3]), {}, true)
redis.call('HDEL', K.broker_topics(name), ' ')  -- the first slice's placeholder (above)
redis.call('HINCRBY', K.stagings(), name, redis.call('SCARD', K.staged_topics()) - before)
return finish(change, 'staged', generation)
