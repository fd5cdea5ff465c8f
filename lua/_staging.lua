-- Prelude part: what readers skip: a staged first registration (register_stage.lua), a
-- departed group whose QueueData are being collected (collect_leaving.lua).
-- uses: keys, basics

-- What one call has read and may need again, to spare Redis calls; never part of its
-- change (that is the object new_change makes, below):
--   any_staged  whether any topic is staged (staging_somewhere); nil until asked
--   staging     brokerName -> whether readers skip the group (staging_group, visible_group)
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

-- The fields asked for of a group's row in one call, nil while readers skip its QueueData:
-- while a staged first registration writes them (its row holds 'staging': no reader sees
-- them yet) or after its last member left with more than one script should remove (its row
-- holds 'leaving': lua/_groups.lua remove_group). Every script that reads or adds
-- QueueData for readers skips such a group (the one place that rule is written).
local function visible_group(name, ...)
  local row = redis.call('HMGET', K.broker(name), 'staging', 'leaving', ...)
  memo.staging[name] = row[1] ~= false or row[2] ~= false
  if memo.staging[name] then
    return nil
  end
  return {unpack(row, 3)}
end

-- Whether readers skip the group (visible_group's rule), read once per group and script:
-- a page of topics names the same few hundred groups again and again.
local function staging_group(name)
  if memo.staging[name] == nil then
    visible_group(name)
  end
  return memo.staging[name]
end

-- The topics of `names` a reader may list (a slice of the topic index).
local function listed(names)
  if not staging_somewhere() or #names == 0 then
    return names
  end
  local _, shown = by_membership(K.staged_topics(), names)
  return shown
end
