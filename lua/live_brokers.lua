-- One page of the registered broker addresses with their liveness (the dashboard), broker
-- groups in (cluster, brokerName) order. Read-only. Members are found without SCAN:
-- clusters -> broker names -> addrs hashes; the page's cost follows its size.
-- uses: keys, basics
-- keys: version, clusters, cluster, broker, addrs, live, expiry, member
-- ARGV[1] cursor: '' for the first page, else the previous page's last group, JSON [cluster, brokerName]
-- ARGV[2] limit: broker groups in this page
-- Returns {version, now (ms, Redis time), rows, next cursor {cluster, brokerName} or false}
--   rows: {{brokerAddr, cluster, brokerName, brokerId, haServerAddr, lastUpdateTimestamp,
--           heartbeatTimeoutMillis, dataVersion, deadline, enableActingMaster, zoneName}, ...}
--   by cluster, brokerName, brokerId; the last two the group's ('' when not set); the live
--   fields false (nil) once the live row has gone by its TTL, deadline without expiry entry.
local after, limit, now = ARGV[1] ~= '' and cjson.decode(ARGV[1]) or nil, tonumber(ARGV[2]), now_ms()

local rows, groups, last, next_group = {}, 0, nil, false
local clusters = redis.call('SMEMBERS', K.clusters())
table.sort(clusters)
for _, cluster in ipairs(clusters) do
  if after == nil or cluster >= after[1] then
    local names = redis.call('SMEMBERS', K.cluster(cluster))
    table.sort(names)
    for _, name in ipairs(names) do
      if after == nil or cluster > after[1] or name > after[2] then
        if groups == limit then
          next_group = last
          break
        end
        groups, last = groups + 1, {cluster, name}
        local group = redis.call('HMGET', K.broker(name), 'enableActingMaster', 'zoneName')
        for _, m in ipairs(sorted_pairs(redis.call('HGETALL', K.addrs(name)), true)) do
          local addr = m[2]
          local row = redis.call('HMGET', K.member(addr), 'cluster', 'brokerName', 'brokerId')
          local live = redis.call('HMGET', K.live(addr), 'haServerAddr', 'lastUpdateTimestamp',
            'heartbeatTimeoutMillis', 'dataVersion')
          rows[#rows + 1] = {addr, row[1] or cluster, row[2] or name, row[3] or m[1], live[1], live[2],
            live[3], live[4], redis.call('ZSCORE', K.expiry(), addr), group[1] or '', group[2] or ''}
        end
      end
    end
    if next_group then break end
  end
end
return {redis.call('GET', KEYS[1]) or '0', int(now), rows, next_group}
