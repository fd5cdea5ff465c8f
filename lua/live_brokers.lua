-- Read every registered broker address with its liveness, in one step (the dashboard).
-- Read-only. Members are found without SCAN: clusters -> broker names -> addrs hashes.
-- KEYS[1] version counter
-- Returns {version, now, rows}, now in ms of Redis time
--   rows: {{brokerAddr, cluster, brokerName, brokerId, haServerAddr, lastUpdateTimestamp,
--           heartbeatTimeoutMillis, dataVersion, deadline}, ...}
--   by cluster, brokerName, brokerId; the live fields are false (nil) once the live row
--   has gone by its TTL, deadline is false when the address has no expiry entry.
local now = now_ms()
local rows = {}
local clusters = redis.call('SMEMBERS', K.clusters())
table.sort(clusters)
for _, cluster in ipairs(clusters) do
  local names = redis.call('SMEMBERS', K.cluster(cluster))
  table.sort(names)
  for _, name in ipairs(names) do
    local flat = redis.call('HGETALL', K.addrs(name))
    local members = {}
    for i = 1, #flat, 2 do
      members[#members + 1] = {tonumber(flat[i]) or 0, flat[i], flat[i + 1]}
    end
    table.sort(members, function(a, b) return a[1] < b[1] end)
    for _, m in ipairs(members) do
      local addr = m[3]
      local row = redis.call('HMGET', K.member(addr), 'cluster', 'brokerName', 'brokerId')
      local live = redis.call('HMGET', K.live(addr), 'haServerAddr', 'lastUpdateTimestamp',
        'heartbeatTimeoutMillis', 'dataVersion')
      local deadline = redis.call('ZSCORE', K.expiry(), addr)
      rows[#rows + 1] = {addr, row[1] or cluster, row[2] or name, row[3] or m[2],
        live[1], live[2], live[3], live[4], deadline}
    end
  end
end
return {redis.call('GET', KEYS[1]) or '0', int(now), rows}
