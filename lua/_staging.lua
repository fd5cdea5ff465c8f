-- Prelude part: what readers skip while a first registration is staged (register_stage.lua).
-- uses: keys, basics

-- What one call has read and may need again, to spare Redis calls; never part of its
-- change (that is the object new_change makes, below):
--   any_staged  whether any topic is staged (staging_somewhere); nil until asked
--   staging     brokerName -> whether the group is staged (staging_group, visible_group)
--   split_fps   fingerprint -> its values {r, w, p, f} (lua/_queues.lua, fp_values)
local memo = {any_staged = nil, staging = {}, split_fps = {}}

-- Topics only a staged first registration serves (lua/register_stage.lua): in the topic
-- set and index already, but no reader lists them until it is published. Nearly always
-- empty, so callers ask once per script whether there is anything to skip.
local function staging_somewhere()
  if memo.any_staged == nil then
    memo.any_staged = redis.call('EXISTS', K.staged_topics()) == 1
  end
  return memo.any_staged
end

local function unstage_topics(topics)
  if #topics > 0 and staging_somewhere() then
    variadic('SREM', K.staged_topics(), topics)
  end
end

-- Whether a group is under a staged first registration (its row holds 'staging'): then
-- no reader sees it yet, and every script that reads or adds QueueData for readers skips
-- it (the one place that rule is written). Read once per group and script: a page of
-- topics names the same few hundred groups again and again.
local function staging_group(name)
  local staging = memo.staging[name]
  if staging == nil then
    staging = redis.call('HEXISTS', K.broker(name), 'staging') == 1
    memo.staging[name] = staging
  end
  return staging
end

-- The fields asked for of a group's row in one call, as staging_group's rule has it: nil
-- while the group is staged.
local function visible_group(name, ...)
  local row = redis.call('HMGET', K.broker(name), 'staging', ...)
  memo.staging[name] = row[1] ~= false
  if row[1] then
    return nil
  end
  return {unpack(row, 2)}
end

-- The topics of `names` a reader may list (a slice of the topic index).
local function listed(names)
  if not staging_somewhere() or #names == 0 then
    return names
  end
  local out = {}
  for i = 1, #names, SLICE do
    local last = math.min(i + SLICE - 1, #names)
    local hidden = redis.call('SMISMEMBER', K.staged_topics(), unpack(names, i, last))
    for j = i, last do
      if hidden[j - i + 1] == 0 then
        out[#out + 1] = names[j]
      end
    end
  end
  return out
end
