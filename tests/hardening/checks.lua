-- The invariants of tests/tables.py violations(), checked in one atomic, read-only step.
-- EVAL'd directly by the hardening tests (not through the service's script loader), so a
-- checker running while brokers register and expire sees one consistent state of the tables.
-- ARGV[1] the key tag, e.g. '{rmq}'
-- Returns a list of violations (empty when the tables are consistent).
local T = ARGV[1]
-- Names in keys are encoded as lua/_keys.lua's enc does (service/keys.py encode_name);
-- this script runs without that prelude, so it carries its own copy and the inverse.
local function enc(name)
  return (string.gsub(name, '[^a-zA-Z0-9_.%%|%-]', function(c) return string.format('~%02X', string.byte(c)) end))
end
local function dec(part)
  return (string.gsub(part, '~(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end
local bad = {}
local function add(s) bad[#bad + 1] = s end
local function set_of(key)
  local s = {}
  for _, m in ipairs(redis.call('SMEMBERS', key)) do s[m] = true end
  return s
end
local function suffix(key, kind) return string.sub(key, #T + #kind + 3) end
local function name_in(key, kind) return dec(suffix(key, kind)) end

local clusters = set_of(T .. ':clusters')
for c in pairs(clusters) do
  if redis.call('EXISTS', T .. ':cluster:' .. enc(c)) == 0 then add('cluster ' .. c .. ' listed with no brokers') end
end
for _, key in ipairs(redis.call('KEYS', T .. ':cluster:*')) do
  local c = name_in(key, 'cluster')
  if not clusters[c] then add('cluster set ' .. c .. ' not in the cluster list') end
  for _, name in ipairs(redis.call('SMEMBERS', key)) do
    local row = redis.call('HGET', T .. ':broker:' .. enc(name), 'cluster')
    if not row then
      add('broker ' .. name .. ' in cluster ' .. c .. ' has no BrokerData')
    elseif row ~= c then
      add('broker ' .. name .. ' in cluster set ' .. c .. ' but its BrokerData says ' .. row)
    end
  end
end

local owner = {}
for _, key in ipairs(redis.call('KEYS', T .. ':broker:*')) do
  local name = name_in(key, 'broker')
  local c = redis.call('HGET', key, 'cluster')
  local marked = redis.call('HEXISTS', key, 'leaving') == 1
  if marked and redis.call('SISMEMBER', T .. ':leaving', name) == 0 then
    add('broker ' .. name .. ' marked leaving but not in the leaving set')
  end
  -- the bare mark of a group whose last member left, its QueueData being collected
  local bare_mark = not c and marked and redis.call('HLEN', key) == 1
  if not bare_mark and (not c or redis.call('SISMEMBER', T .. ':cluster:' .. enc(c), name) == 0) then
    add('BrokerData ' .. name .. ' missing from its cluster set ' .. tostring(c))
  end
  local flat = redis.call('HGETALL', T .. ':addrs:' .. enc(name))
  if #flat == 0 and not bare_mark then add('broker ' .. name .. ' has no addresses') end
  local seen = {}
  for i = 1, #flat, 2 do
    local bid, addr = flat[i], flat[i + 1]
    if seen[addr] then add('broker ' .. name .. ' has address ' .. addr .. ' under two ids') end
    seen[addr] = true
    if owner[addr] then add('address ' .. addr .. ' in two groups: ' .. owner[addr] .. ' and ' .. name) end
    owner[addr] = name
    local m = redis.call('HMGET', T .. ':member:' .. addr, 'brokerName', 'brokerId')
    if m[1] ~= name or m[2] ~= bid then
      add('address ' .. addr .. ' (' .. name .. '/' .. bid .. ') has identity row ' .. tostring(m[1]) .. '/' .. tostring(m[2]))
    end
    if not redis.call('ZSCORE', T .. ':expiry', addr) then add('address ' .. addr .. ' (' .. name .. ') has no deadline') end
  end
end
for _, key in ipairs(redis.call('KEYS', T .. ':addrs:*')) do
  local name = name_in(key, 'addrs')
  if redis.call('EXISTS', T .. ':broker:' .. enc(name)) == 0 then add('addresses of ' .. name .. ' without BrokerData') end
  local listed = redis.call('SISMEMBER', T .. ':masterless', name) == 1
  if listed == (redis.call('HEXISTS', key, '0') == 1) then
    add('group ' .. name .. (listed and ' has a master but is' or ' has no master but is not') .. ' listed without master')
  end
end
for _, name in ipairs(redis.call('SMEMBERS', T .. ':masterless')) do
  if redis.call('EXISTS', T .. ':addrs:' .. enc(name)) == 0 then add('group ' .. name .. ' listed without master is gone') end
end

local topics = set_of(T .. ':topics')
for _, key in ipairs(redis.call('KEYS', T .. ':queue:*')) do
  local rest = suffix(key, 'queue')
  local at = string.find(rest, ':', 1, true)
  local topic, name = dec(string.sub(rest, 1, at - 1)), dec(string.sub(rest, at + 1))
  if redis.call('EXISTS', T .. ':broker:' .. enc(name)) == 0 then
    add('QueueData ' .. topic .. '/' .. name .. ' names a broker that is gone')
  end
  local fp = redis.call('HGET', T .. ':broker-topics:' .. enc(name), topic)
  if not topics[topic] or redis.call('SISMEMBER', T .. ':topic:' .. enc(topic), name) == 0 or not fp then
    add('QueueData ' .. topic .. '/' .. name .. ' not indexed')
  else
    local q = redis.call('HMGET', key, 'readQueueNums', 'writeQueueNums', 'perm', 'topicSysFlag')
    local row = table.concat({q[1] or '', q[2] or '', q[3] or '', q[4] or ''}, ',')
    if row ~= fp then
      add('QueueData ' .. topic .. '/' .. name .. ' differs from its fingerprint ' .. fp)
    end
  end
end
for topic in pairs(topics) do
  local names = redis.call('SMEMBERS', T .. ':topic:' .. enc(topic))
  if #names == 0 then add('topic ' .. topic .. ' without QueueData') end
  for _, name in ipairs(names) do
    if redis.call('EXISTS', T .. ':queue:' .. enc(topic) .. ':' .. enc(name)) == 0 then
      add('topic ' .. topic .. ' lists ' .. name .. ' without its QueueData')
    end
  end
end
for _, key in ipairs(redis.call('KEYS', T .. ':topic:*')) do
  if not topics[name_in(key, 'topic')] then add('topic set ' .. key .. ' not in the topic list') end
end
local indexed = 0
for _, topic in ipairs(redis.call('ZRANGE', T .. ':topic-index', 0, -1)) do
  indexed = indexed + 1
  if not topics[topic] then add('topic ' .. topic .. ' indexed but not in the topic list') end
end
if indexed ~= redis.call('SCARD', T .. ':topics') then add('topic index and topic list differ in size') end
for _, key in ipairs(redis.call('KEYS', T .. ':broker-topics:*')) do
  local name = name_in(key, 'broker-topics')
  for _, topic in ipairs(redis.call('HKEYS', key)) do
    if redis.call('EXISTS', T .. ':queue:' .. enc(topic) .. ':' .. enc(name)) == 0 then
      add('broker ' .. name .. ' indexes topic ' .. topic .. ' without QueueData')
    end
  end
end
for _, kind in ipairs({'live', 'member', 'filter'}) do
  for _, key in ipairs(redis.call('KEYS', T .. ':' .. kind .. ':*')) do
    local addr = suffix(key, kind)
    if not owner[addr] then add(kind .. ' row of ' .. addr .. ', an address in no BrokerData') end
  end
end
for _, addr in ipairs(redis.call('ZRANGE', T .. ':expiry', 0, -1)) do
  if not owner[addr] then add('deadline for ' .. addr .. ', an address in no BrokerData') end
end
return bad
