-- Prelude part: QueueData, fingerprints, the topic set and index, static topic mappings.
-- uses: keys, basics, changes, staging

-- A QueueData's values as one string, kept per group in broker-topics:<name>: a
-- registration compares 10,000 topics against one HGETALL, not 10,000 reads.
local function fingerprint(r, w, p, f)
  return r .. ',' .. w .. ',' .. p .. ',' .. f
end

-- The group's QueueData fingerprints: topic -> fingerprint.
local function fingerprints(name)
  local flat = redis.call('HGETALL', K.broker_topics(name))
  local known = {}
  for i = 1, #flat, 2 do
    known[flat[i]] = flat[i + 1]
  end
  return known
end

-- The topic list in name order beside the set (K.topic_index); the score a string (a Lua
-- number goes to Redis through sprintf, per topic).
local function index_topics(topics)
  local pairs_ = {}
  for i, topic in ipairs(topics) do
    pairs_[2 * i - 1] = '0'
    pairs_[2 * i] = topic
  end
  variadic('ZADD', K.topic_index(), pairs_)
end

-- Past this many pairs of one group, a change tags those that existed by their group (every
-- route naming it depends on it), not by topic.
local PER_TOPIC_TAGS = 64

-- A fingerprint's values {r, w, p, f}, split once per call: a broker's topics share a few
-- (a match per topic cost a first registration more than the SADD of its topic set).
local function fp_values(fp)
  local parts = memo.split_fps[fp]
  if parts == nil then
    parts = {string.match(fp, '^([^,]*),([^,]*),([^,]*),([^,]*)$')}
    memo.split_fps[fp] = parts
  end
  return parts
end

-- Writes QueueDatas of one group: `flat` is [topic, fingerprint, ...] as a registration sends
-- them, `known` the group's fingerprints before. Per pair its row and, when new, the topic's
-- broker set (bench/script_profile.py measures them); the rest a few variadic calls a slice.
-- `staged` (register_stage.lua): no topic list, no change, the generation stays the stager's.
local function put_queues(change, name, flat, known, staged)
  if #flat == 0 then
    return
  end
  if not staged then
    -- a staging under way is stale now, and an unchanged re-registration takes the full
    -- path (until register.lua marks the queues intact again)
    redis.call('HDEL', K.broker(name), 'topicsGen', 'queuesIntact')
  end
  local few = #flat <= 2 * PER_TOPIC_TAGS
  local new_topics, n_new, seq = {}, 0, nil
  for i = 1, #flat, 2 do
    local topic, v = flat[i], fp_values(flat[i + 1])
    if staged or not known[topic] then
      -- a new row's seq: routes list a topic's groups in the order they came (Java's
      -- HashMap within a bucket; lua/route.lua); a rewritten row keeps its place, as there.
      -- Both HSETs written out: a shared function called per pair cost 1.5 % more
      -- instructions (bench/script_profile.py --callgrind, fleet shape)
      seq = seq or int(redis.call('INCR', K.queue_seq()))  -- a string once, not per pair
      redis.call('HSET', K.queue(topic, name), 'topic', topic, 'brokerName', name,
        'readQueueNums', v[1], 'writeQueueNums', v[2], 'perm', v[3], 'topicSysFlag', v[4], 'seq', seq)
      redis.call('SADD', K.topic(topic), name)
      n_new = n_new + 1
      new_topics[n_new] = topic
      -- a route read before the pair existed does not name this group: tag the topic
      if not staged then touch_topic(change, topic) end
    else
      redis.call('HSET', K.queue(topic, name), 'topic', topic, 'brokerName', name,
        'readQueueNums', v[1], 'writeQueueNums', v[2], 'perm', v[3], 'topicSysFlag', v[4])
      if few then
        touch_topic(change, topic)
      else
        touch_group(change, name)
      end
    end
  end
  -- topics new to the tables alone go into the set and the index (staged ones are listed
  -- once published)
  local _, fresh = by_membership(K.topics(), new_topics)
  variadic('SADD', K.topics(), fresh)
  index_topics(fresh)
  if staged then
    variadic('SADD', K.staged_topics(), fresh)
  else
    unstage_topics(new_topics)  -- served by a group readers see now
  end
  variadic('HSET', K.broker_topics(name), flat)
end

-- A topic's group count fell to `left`: Java's HashMap of its QueueData keeps the table it
-- grew to (route order: lua/route.lua). Kept once the count falls below 0.75 of that
-- table (13 -> 12 groups: 32 bins, 25 -> 24: 64...), the largest; gone with the topic.
local function keep_capacity(topic, left)
  local cap = 16
  while cap * 0.75 < left do
    cap = cap * 2
  end
  if cap * 0.75 == left and 2 * cap > (tonumber(redis.call('HGET', K.topic_capacity(), topic)) or 0) then
    redis.call('HSET', K.topic_capacity(), topic, 2 * cap)
  end
end

-- Removes QueueDatas of one group, and each topic no broker serves any more. The group's
-- next unchanged registration must then take the full path and bring them back.
local function drop_queues(change, name, topics)
  if #topics == 0 then
    return
  end
  redis.call('HDEL', K.broker(name), 'queuesIntact', 'topicsGen')
  -- every removed pair existed, so each route it changes names the group
  if #topics <= PER_TOPIC_TAGS then
    for _, topic in ipairs(topics) do
      touch_topic(change, topic)
    end
  else
    touch_group(change, name)
  end
  local rows, orphans = {}, {}
  for i, topic in ipairs(topics) do
    rows[i] = K.queue(topic, name)
    -- an emptied set is deleted by Redis, so SREM then SCARD tells whether it was the last
    local gone = redis.call('SREM', K.topic(topic), name)
    local left = redis.call('SCARD', K.topic(topic))
    if left == 0 then
      orphans[#orphans + 1] = topic
    elseif gone == 1 then
      keep_capacity(topic, left)
    end
  end
  each_slice(rows, function(...) redis.call('DEL', ...) end)
  variadic('HDEL', K.broker_topics(name), topics)
  variadic('HDEL', K.topic_capacity(), orphans)
  variadic('SREM', K.topics(), orphans)
  variadic('ZREM', K.topic_index(), orphans)
  unstage_topics(orphans)
end

-- Wipes (perm & ~WRITE) or adds (perm = READ|WRITE) a group's write bits; how many QueueData.
local function set_write_perm(change, name, wipe)
  local count, writes, known = 0, {}, fingerprints(name)
  for topic, fp in pairs(known) do
    local v = fp_values(fp)
    local new_perm = wipe and without_write(v[3]) or 6
    if new_perm ~= tonumber(v[3]) then
      writes[#writes + 1] = topic
      writes[#writes + 1] = fingerprint(v[1], v[2], tostring(new_perm), v[4])
    end
    count = count + 1
  end
  -- every topic here is known: only its row and fingerprint change, not its indexes
  put_queues(change, name, writes, known)
  return count
end

-- Static topics' queue mappings by hosting group (RocketMQ 5's topicQueueMappingInfoTable):
-- `mappings` a flat list [topic, bname, info JSON, ...].
local function put_mappings(change, mappings)
  for i = 1, #mappings, 3 do
    local topic, bname, info = mappings[i], mappings[i + 1], mappings[i + 2]
    if redis.call('HGET', K.mapping(topic), bname) ~= info then
      redis.call('HSET', K.mapping(topic), bname, info)
      redis.call('SADD', K.mapped(bname), topic)
      touch_topic(change, topic)
    end
  end
end

local function drop_mapping(change, topic, bname)
  if redis.call('HDEL', K.mapping(topic), bname) == 1 then
    touch_topic(change, topic)
  end
  redis.call('SREM', K.mapped(bname), topic)
end

-- A staged first registration (register_stage.lua), published by its master's registration
-- (register.lua): readers and caches see its pairs and topics from now on.
local function publish_staged(change, name)
  -- Alone: the only group counted as staging, and staged-topics holds what its slices
  -- added. An older release's worker stages without counting, and a topic leaves the set
  -- once a visible group serves it: either makes the counts differ (then topic by topic).
  local counts = redis.call('HGETALL', K.stagings())  -- a few fields: the stagings under way
  local added = #counts == 2 and counts[1] == name and tonumber(counts[2])
  redis.call('HDEL', K.stagings(), name)
  if added and added == redis.call('SCARD', K.staged_topics()) then
    -- every staged topic is this group's: the set goes whole in O(1) (UNLINK frees it in
    -- the background); the group's topics it does not hold are the shared ones
    local shared = redis.call('HLEN', K.broker_topics(name)) - added
    if shared == 0 or shared > TAG_CAP then
      if redis.call('UNLINK', K.staged_topics()) == 1 then
        touch_new_topics(change)
      end
      memo.any_staged = false  -- the set is gone
      if shared > 0 then
        touch_all(change)  -- as many tags as touch_topics would give up on
      end
      touch_group(change, name)
      return
    end
  end
  -- other stagings under way, or a few shared topics to tag: topic by topic
  local topics = redis.call('HKEYS', K.broker_topics(name))
  -- topics new to the tables had no route, so only their TOPIC_NOT_EXIST answers go
  -- (one tag); those another group serves already are tagged one by one
  local new, shared = {}, topics
  if staging_somewhere() then
    new, shared = by_membership(K.staged_topics(), topics)
  end
  unstage_topics(new)
  if #new > 0 then
    touch_new_topics(change)
  end
  touch_topics(change, shared)
  touch_group(change, name)
end
