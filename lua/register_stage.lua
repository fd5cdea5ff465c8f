-- One slice of a staged first registration: the QueueData of a master whose group has none
-- yet (a new group, or one only its slave registered), written a slice at a time so that no script runs long, and published
-- whole by the master's registration (register.lua), which finds them in place.
--
-- A group is staging while broker:<name> holds 'staging': route readers skip it (as if it
-- had no QueueData at all), its topics enter the topic list only when published, and no
-- change record is sent before then. So a reader sees the tables as they were before the
-- registration, or with all of it: never a part.
-- KEYS[1] version counter
-- ARGV[1] brokerName
-- ARGV[2] the generation this staging was given by its first slice ('' for the first)
-- ARGV[3] a slice of the topic configs, a flat JSON array [topic, fingerprint, ...] as
--         register.lua takes them
-- Returns {change, status, ...}: {change, 'staged', generation}; {change, 'published'} when the group is visible already (the
-- registration then goes in one script); {change, 'stale'} when another staging of the group took
-- over (the caller gives up staging); {change, 'cleaning', left}: the first slice found pairs of an
-- earlier staging that never published and removed up to CLEAN of them: call again.
local name, generation = ARGV[1], ARGV[2]
local CLEAN = 1000  -- pairs removed per call: each is a few keys
local row = redis.call('HMGET', K.broker(name), 'cluster', 'staging', 'topicsGen')

if generation == '' then
  -- a visible group is staged only while it has no QueueData (its slave registered first):
  -- readers skipping it then see what they saw before, a group without queues
  if row[1] and not row[2] and redis.call('EXISTS', K.broker_topics(name)) == 1 then
    return {CHANGE, 'published'}
  end
  local left = redis.call('HKEYS', K.broker_topics(name))
  if #left > 0 then
    local slice = {unpack(left, 1, math.min(#left, CLEAN))}
    drop_queues(change, name, slice)
    return {CHANGE, 'cleaning', #left - #slice}
  end
  generation = tostring(redis.call('INCR', K.topics_gen()))
  redis.call('HSET', K.broker(name), 'staging', generation, 'topicsGen', generation)
  -- register.lua publishes in O(1) when this is the only staging and its count is right
  redis.call('HSET', K.stagings(), name, 0)
elseif row[2] ~= generation or row[3] ~= generation then
  return {CHANGE, 'stale'}
end

local flat = cjson.decode(ARGV[3])
local entries = {}
for i = 1, #flat, 2 do
  entries[#entries + 1] = split_fp({flat[i], flat[i + 1]})
end
local before = redis.call('SCARD', K.staged_topics())
put_queues(change, name, entries, {}, true)
redis.call('HINCRBY', K.stagings(), name, redis.call('SCARD', K.staged_topics()) - before)
return {CHANGE, 'staged', generation}
