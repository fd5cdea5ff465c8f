-- Rebuilds the set of groups without master from the groups, at a worker's start (O(groups)):
-- tables written before the set existed get it (every change keeps it since).
-- uses: keys, changes, groups
-- keys: version, clusters, cluster, addrs, masterless, changes, changelog
-- Returns the number of groups without master
local change = new_change()
redis.call('DEL', K.masterless())
for _, cluster in ipairs(redis.call('SMEMBERS', K.clusters())) do
  for _, name in ipairs(redis.call('SMEMBERS', K.cluster(cluster))) do
    note_master(name)
  end
end
return finish(change, redis.call('SCARD', K.masterless()))
