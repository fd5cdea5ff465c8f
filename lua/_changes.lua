-- Prelude part: change records. Every script that may change the tables begins with
-- `local change = new_change()` and returns through finish(change, ...), which publishes it.
-- uses: keys

-- The change one call makes that a reader could see, accumulated in one object, so every
-- writing helper takes it as its first argument and nothing about a change lives anywhere
-- else:
--   visible    whether anything a reader could see changed (then the version moves)
--   tags       its dependency tags (service/changes.py reads them): 't:<topic>' for a
--              topic's QueueData or order config, 'g:<brokerName>' for a group's members,
--              addresses, cluster or filter servers (every route naming the group)
--   tag_count  how many; past TAG_CAP the record is a flush ('*'): it stays small, and
--              such changes (a first registration of thousands of topics) are rare
--   notices    NOTIFY_MIN_BROKER_ID_CHANGE notices for the caller to send (note_min_change)
local TAG_CAP = 1000
-- Change records kept for workers that missed some on the channel (~100 s at 10 a second).
local CHANGELOG_RETAIN = 1000

local function new_change()
  return {visible = false, tags = {}, tag_count = 0, notices = {}}
end

-- Something visible changed that no tag names more narrowly than the version (a KV
-- namespace other than the order configs).
local function touch_version(change)
  change.visible = true
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

-- Past the cap: the record is a flush.
local function touch_all(change)
  change.visible = true
  change.tag_count = TAG_CAP + 1
end

-- Every topic of `topics`: past the cap the record is a flush anyway, so a first
-- registration of 10,000 topics builds no tag for each.
local function touch_topics(change, topics)
  if #topics == 0 then
    return
  end
  if change.tag_count + #topics > TAG_CAP then
    touch_all(change)
    return
  end
  for _, topic in ipairs(topics) do
    touch_topic(change, topic)
  end
end

-- When something visible changed: bumps the version and publishes the change record
-- {seq, time, tag...} on the channel and in the capped changelog, in the same script as
-- the change, so no reader can see one without the other. Returns the record, or the
-- bare version when nothing changed (an unchanged re-registration flushes no cache).
local function publish_change(change)
  if not change.visible then
    return redis.call('GET', KEYS[1]) or '0'
  end
  local v = redis.call('INCR', KEYS[1])
  -- Redis time makes each record unique, so a worker can tell a history rolled back and
  -- rewritten (restore, failover) from the one it followed
  local t = redis.call('TIME')
  local record = {tostring(v), t[1] .. t[2]}
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

-- A writing script's one way out: {change record (or the bare version), its own values...}
-- (service/scripts.py reads them in that order).
local function finish(change, ...)
  return {publish_change(change), ...}
end
