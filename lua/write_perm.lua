-- Wipe or add the write permission of every QueueData of a broker name.
-- KEYS[1] version counter
-- ARGV[1] brokerName
-- ARGV[2] 'wipe' (perm & ~WRITE) or 'add' (perm = READ|WRITE)
-- Returns {change, topics touched}
local count = set_write_perm(change, ARGV[1], ARGV[2] == 'wipe')
return {CHANGE, count}
