-- One page of the registered broker addresses with their liveness (the dashboard), broker
-- groups in (cluster, brokerName) order. Read-only. Members are found without SCAN:
-- clusters -> broker names -> addrs hashes; the page's cost follows its size.
-- uses: keys, basics
-- keys: version, clusters, cluster, broker, addrs, live, expiry, member
-- ARGV[1] cursor: '' for the first page, else the JSON [cluster, brokerName] of the last
--         group of the previous page
-- ARGV[2] limit: broker groups in this page
-- Returns {version, now, rows, next cursor group {cluster, brokerName} or false}, now in ms
--   of Redis time
--   rows: {{brokerAddr, cluster, brokerName, brokerId, haServerAddr, lastUpdateTimestamp,
--           heartbeatTimeoutMillis, dataVersion, deadline, enableActingMaster, zoneName}, ...}
--   (the last two the group's, '' when not set)
--   by cluster, brokerName, brokerId; the live fields are false (nil) once the live row
--   has gone by its TTL, deadline is false when the address has no expiry entry.
local after = ARGV[1] ~= '' and cjson.decode(ARGV[1]) or nil
local limit = tonumber(ARGV[2])
local now = now_ms()

local function past_cursor(cluster, name)
  return after == nil or cluster > after[1] or (cluster == after[1] and name > after[2])
end

local rows, groups, next_group = {}, 0, false
local last_cluster, last_name
local clusters = redis.call('SMEMBERS', K.clusters())
table.sort(clusters)
for _, cluster in ipairs(clusters) do
  if after == nil or cluster >= after[1] then
    local names = redis.call('SMEMBERS', K.cluster(cluster))
    table.sort(names)
    for _, name in ipairs(names) do
      if past_cursor(cluster, name) then
        if groups == limit then
          next_group = {last_cluster, last_name}
          break
        end
        groups = groups + 1
        last_cluster, last_name = cluster, name
        local group = redis.call('HMGET', K.broker(name), 'enableActingMaster', 'zoneName')
        for _, m in ipairs(sorted_pairs(redis.call('HGETALL', K.addrs(name)), true)) do
          local addr = m[2]
          local row = redis.call('HMGET', K.member(addr), 'cluster', 'brokerName', 'brokerId')
          local live = redis.call('HMGET', K.live(addr), 'haServerAddr', 'lastUpdateTimestamp',
            'heartbeatTimeoutMillis', 'dataVersion')
          local deadline = redis.call('ZSCORE', K.expiry(), addr)
          rows[#rows + 1] = {addr, row[1] or cluster, row[2] or name, row[3] or m[1],
            live[1], live[2], live[3], live[4], deadline, group[1] or '', group[2] or ''}
        end
      end
    end
    if next_group then break end
  end
end
return {redis.call('GET', KEYS[1]) or '0', int(now), rows, next_group}
