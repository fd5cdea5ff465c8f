-- Write a worker's copy of the departures record back after a store reset
-- (service/departure_copy.py): the entries as the store held them, by when, and the
-- returns marked. ZADD of the same member and score is a no-op, so several workers
-- writing back the same hour leave each entry once; trimmed as record_departure trims.
-- uses: keys, basics, changes, members
-- keys: version, changes, changelog, departures, departures_back
-- ARGV[1] n, then n (at, entry) pairs, then (field, back) pairs of departures-back
-- Returns {change, the entries the record holds now}
local change = new_change()  -- invisible: readers' tables are untouched
local n = tonumber(ARGV[1])
local now = now_ms()
for i = 2, 2 * n, 2 do
  if tonumber(ARGV[i]) >= now - DEPARTURES_MS then
    redis.call('ZADD', K.departures(), ARGV[i], ARGV[i + 1])
  end
end
for i = 2 * n + 2, #ARGV, 2 do
  redis.call('HSETNX', K.departures_back(), ARGV[i], ARGV[i + 1])
end
redis.call('ZREMRANGEBYSCORE', K.departures(), '-inf', '(' .. int(now - DEPARTURES_MS))
redis.call('ZREMRANGEBYRANK', K.departures(), 0, -(DEPARTURES_RETAIN + 1))
return finish(change, redis.call('ZCARD', K.departures()))
