-- What a scan pass saw of the fleet while a store reset is open (service/store_watch.py):
-- the broker groups registered now, and once they are as many as were lost (at least one,
-- when no scan had counted them), when the fleet was back. Every worker's pass writes it
-- in the one record, so every worker ends the incident at the same moment.
-- uses: keys, basics, changes
-- keys: version, changes, changelog, store_reset
-- ARGV[1] the data-set id the record must be of, [2] broker groups registered now
-- Returns {change, the record's HGETALL ({} when there is none for that data set)}
local change = new_change()  -- invisible: readers' tables are untouched
local record = K.store_reset()
if redis.call('HGET', record, 'dataset') ~= ARGV[1] then
  return finish(change, {})
end
if not redis.call('HGET', record, 'backAt') then
  local groups = tonumber(ARGV[2])
  redis.call('HSET', record, 'groupsNow', ARGV[2])
  if groups >= math.max(tonumber(redis.call('HGET', record, 'lostGroups') or '0'), 1) then
    redis.call('HSET', record, 'backAt', int(now_ms()))
  end
end
return finish(change, redis.call('HGETALL', record))
