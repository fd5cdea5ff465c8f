-- Wipe or add the write permission of every QueueData of a broker name.
-- KEYS[1] version counter
-- ARGV[1] brokerName
-- ARGV[2] 'wipe' (perm & ~WRITE) or 'add' (perm = READ|WRITE)
-- Returns {version, topics touched}
local name = ARGV[1]
local wipe = ARGV[2] == 'wipe'
local PERM_WRITE, PERM_READ_WRITE = 2, 6

local count = 0
for _, topic in ipairs(redis.call('SMEMBERS', K.broker_topics(name))) do
  local queue_key = K.queue(topic, name)
  local perm = tonumber(redis.call('HGET', queue_key, 'perm'))
  if perm then
    local new_perm = PERM_READ_WRITE
    if wipe then
      -- no bit library in every Lua we run on: clear bit 1 arithmetically
      new_perm = perm
      if math.floor(perm / PERM_WRITE) % 2 == 1 then
        new_perm = perm - PERM_WRITE
      end
    end
    if new_perm ~= perm then
      redis.call('HSET', queue_key, 'perm', new_perm)
      changed = true
    end
    count = count + 1
  end
end

return {publish_if_changed(), count}
