-- Prelude part: change records. Every script that may change the tables begins with
-- `local change = new_change()` and returns through finish(change, ...), which publishes it.
-- uses: keys

-- What one call changes that a reader could see, in one object every writing helper takes
-- first, so nothing about a change lives anywhere else:
--   visible    whether a reader could see anything changed (then the version moves)
--   tags       dependency tags (service/changes.py): 't:<topic>' for a topic's QueueData or
--              order config, 'g:<brokerName>' for a group's members, addresses, cluster or
--              filter servers (every route naming it)
--   tag_count  how many; past TAG_CAP the record is a flush ('*'), small: such changes (a
--              first registration of thousands of topics) are rare
--   notices    NOTIFY_MIN_BROKER_ID_CHANGE notices for the caller to send (note_min_change)
local TAG_CAP = 1000
-- Change records kept for workers that missed some on the channel (~100 s at 10 a second).
local CHANGELOG_RETAIN = 1000

local function new_change()
  return {visible = false, tags = {}, tag_count = 0, notices = {}}
end

local function touch(change, tag)
  change.visible = true
  if change.tag_count <= TAG_CAP and not change.tags[tag] then
    change.tags[tag] = true
    change.tag_count = change.tag_count + 1
  end
end

local function touch_topic(change, topic)
  if change.tag_count > TAG_CAP then
    change.visible = true  -- already a flush: no tag string to build
  else
    touch(change, 't:' .. topic)
  end
end
local function touch_group(change, name) touch(change, 'g:' .. name) end
-- topics new to the tables got routes: only TOPIC_NOT_EXIST answers can be wrong now
local function touch_new_topics(change) touch(change, '-') end

-- A KV entry changed: an ORDER_TOPIC_CONFIG one is its topic's orderTopicConf; no tag
-- names another namespace's more narrowly than the version.
local function touch_kv(change, namespace, key)
  if namespace == ORDER_TOPIC_CONFIG then
    touch_topic(change, key)
  else
    change.visible = true
  end
end

local function touch_all(change)
  change.visible = true
  change.tag_count = TAG_CAP + 1
end

-- Every topic of `topics`: past the cap a flush, no tag built for each (already one if none).
local function touch_topics(change, topics)
  if change.tag_count + #topics > TAG_CAP then
    return touch_all(change)
  end
  for _, topic in ipairs(topics) do
    touch_topic(change, topic)
  end
end

-- A group readers skipped ('leaving') is seen again with QueueData it kept (register.lua: a
-- master or prime slave back before they were collected): no answer cached meanwhile names
-- it, so its group's tag reaches none of them. Each of `topics` (the kept QueueData it still
-- serves) is tagged, which drops that topic's TOPIC_NOT_EXIST answers as well as its routes.
-- Past the cap, the topics no other group serves had no route at all (TOPIC_NOT_EXIST): one
-- '-' drops those answers; only the shared ones are tagged one by one (a flush past the cap,
-- as touch_topics), so a big group of its own topics coming back flushes no cache.
local function touch_reappeared(change, topics)
  if change.tag_count + #topics <= TAG_CAP then
    return touch_topics(change, topics)
  end
  local shared = {}
  for _, topic in ipairs(topics) do
    if redis.call('SCARD', K.topic(topic)) > 1 then
      shared[#shared + 1] = topic
      if change.tag_count + #shared > TAG_CAP then
        return touch_all(change)  -- a flush: the rest need not be read
      end
    end
  end
  if #shared < #topics then
    touch_new_topics(change)
  end
  touch_topics(change, shared)
end

-- When something visible changed: bumps the version and publishes the record {seq, time,
-- tag...} on the channel and in the capped changelog, in the change's own script (no reader
-- sees one without the other). Else the bare version: a no-op flushes no cache.
local function publish_change(change)
  if not change.visible then
    return redis.call('GET', KEYS[1]) or '0'
  end
  -- Redis time makes each record unique, so a worker can tell a history rolled back and
  -- rewritten (restore, failover) from the one it followed
  local t = redis.call('TIME')
  local record = {tostring(redis.call('INCR', KEYS[1])), t[1] .. t[2]}
  if change.tag_count > TAG_CAP then
    record[3] = '*'
  else
    for tag in pairs(change.tags) do
      record[#record + 1] = tag
    end
  end
  local encoded = cjson.encode(record)
  redis.call('PUBLISH', K.changes(), encoded)
  redis.call('LPUSH', K.changelog(), encoded)
  redis.call('LTRIM', K.changelog(), 0, CHANGELOG_RETAIN - 1)
  return encoded
end

-- A writing script's one way out: {change record or bare version, its values...} (service/scripts.py).
local function finish(change, ...)
  return {publish_change(change), ...}
end
