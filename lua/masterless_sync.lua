-- Rebuilds the set of groups without master from the groups themselves, at a worker's
-- start: tables written before the set existed get it (every change keeps it since).
-- O(broker groups), a few thousand reads at most, once per start.
-- KEYS[1] version counter
-- Returns the number of groups without master
redis.call('DEL', K.masterless())
for _, cluster in ipairs(redis.call('SMEMBERS', K.clusters())) do
  for _, name in ipairs(redis.call('SMEMBERS', K.cluster(cluster))) do
    note_master(name)
  end
end
return redis.call('SCARD', K.masterless())
