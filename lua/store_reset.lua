-- Record a store reset (service/store_watch.py): a worker that knew data in the store found
-- its stamps gone or replaced. Stamps the store anew when a stamp is missing and writes the
-- reset record every worker reads, one per data set: the first worker to notice creates
-- it (Redis time), the others add what they knew (the most each count), so a worker
-- started after the reset, which remembers nothing, finds it too. The record lives its
-- hour (SHOWN_MS), or until another wipe takes it with the rest.
-- uses: keys, basics, changes
-- keys: version, changes, changelog, dataset, schema, store_reset
-- ARGV[1] a fresh data-set id (written when none is there), [2] the key schema version,
-- [3..6] the broker groups, topics, brokers and change records the calling worker knew,
-- [7] which stamp told it, in words, [8] the record's lifetime (ms)
-- Returns {change, data-set id now, 1 when this call created the record else 0}
local change = new_change()  -- invisible: readers' tables are untouched
local dataset = redis.call('GET', K.dataset())
if not dataset then
  dataset = ARGV[1]
  redis.call('SET', K.dataset(), dataset)
end
redis.call('SET', K.schema(), ARGV[2], 'NX')
local record = K.store_reset()
local created = 0
if redis.call('HGET', record, 'dataset') ~= dataset then
  redis.call('DEL', record)
  redis.call('HSET', record, 'dataset', dataset, 'at', int(now_ms()), 'gone', ARGV[7], 'groupsNow', 0)
  redis.call('PEXPIRE', record, ARGV[8])
  created = 1
end
for i, field in ipairs({'lostGroups', 'lostTopics', 'lostBrokers', 'lostChanges'}) do
  local known = tonumber(redis.call('HGET', record, field) or '0')
  if tonumber(ARGV[2 + i]) > known then
    redis.call('HSET', record, field, ARGV[2 + i])
  end
end
return finish(change, dataset, created)
