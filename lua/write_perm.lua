-- Wipe or add the write permission of every QueueData of a broker name.
-- KEYS[1] version counter
-- ARGV[1] brokerName
-- ARGV[2] 'wipe' (perm & ~WRITE) or 'add' (perm = READ|WRITE)
-- Returns {change, topics touched}
local name = ARGV[1]
local wipe = ARGV[2] == 'wipe'
local PERM_WRITE, PERM_READ_WRITE = 2, 6

local count = 0
local writes = {}
local known = fingerprints(name)
for topic, fp in pairs(known) do
  local r, w, p, f = string.match(fp, '^([^,]*),([^,]*),([^,]*),([^,]*)$')
  local perm = tonumber(p)
  local new_perm = PERM_READ_WRITE
  if wipe then
    -- no bit library in every Lua we run on: clear bit 1 arithmetically
    new_perm = perm
    if math.floor(perm / PERM_WRITE) % 2 == 1 then
      new_perm = perm - PERM_WRITE
    end
  end
  if new_perm ~= perm then
    writes[#writes + 1] = {topic, r, w, tostring(new_perm), f}
  end
  count = count + 1
end
-- every topic here is known: only its row and fingerprint change, not its indexes
put_queues(name, writes, known)

return {publish_if_changed(), count}
