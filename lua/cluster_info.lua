-- Read ClusterInfo (brokerAddrTable and clusterAddrTable) in one step.
-- uses: keys
-- keys: version, clusters, cluster, broker, addrs
-- Returns {version, clusters, brokers}
--   clusters: {{clusterName, {brokerName, ...}}, ...}
--   brokers:  {{brokerName, cluster, {brokerId, brokerAddr, ...}, enableActingMaster, zoneName}, ...}
local clusters, brokers = {}, {}
for _, cluster in ipairs(redis.call('SMEMBERS', K.clusters())) do
  local names = redis.call('SMEMBERS', K.cluster(cluster))
  clusters[#clusters + 1] = {cluster, names}
  for _, name in ipairs(names) do
    local row = redis.call('HMGET', K.broker(name), 'cluster', 'enableActingMaster', 'zoneName')
    if row[1] then
      brokers[#brokers + 1] = {name, row[1], redis.call('HGETALL', K.addrs(name)), row[2] or '', row[3] or ''}
    end
  end
end
return {redis.call('GET', KEYS[1]) or '0', clusters, brokers}
