-- Shared prelude, prepended to every script by service/store.py.
-- KEYS[1] of every script is the version counter `{<prefix>}:version`; its tag names
-- every other key, so all keys of a call live in one Redis Cluster slot.
-- Key names mirror service/keys.py: change both together.

local TAG = string.sub(KEYS[1], 1, #KEYS[1] - #':version')

-- A name as it stands in a key: service/keys.py encode_name, byte for byte (the
-- docstring there says why). A registration builds keys for 10,000 topics, nearly all
-- plain and most twice (queue row, topic set): each name is checked once per call, then
-- found in `encoded`, so the encoding costs a full registration a few percent.
local KEPT_ONLY = '^[a-zA-Z0-9_.%%|%-]*$'
local UNKEPT = '[^a-zA-Z0-9_.%%|%-]'
local encoded = {}
local function escape_byte(c) return string.format('~%02X', string.byte(c)) end
local function enc(name)
  local e = encoded[name]
  if e == nil then
    e = string.find(name, KEPT_ONLY) and name or (string.gsub(name, UNKEPT, escape_byte))
    encoded[name] = e
  end
  return e
end

-- What one call has read and may need again, to spare Redis calls; never part of its
-- change (that is the object new_change makes, below):
--   any_staged  whether any topic is staged (staging_somewhere); nil until asked
--   staging     brokerName -> whether the group is staged (staging_group, visible_group)
local memo = {any_staged = nil, staging = {}}

-- Addresses stand last in their keys and go in as they are.
local K = {}
function K.clusters() return TAG .. ':clusters' end
function K.cluster(c) return TAG .. ':cluster:' .. enc(c) end
function K.broker(n) return TAG .. ':broker:' .. enc(n) end
function K.addrs(n) return TAG .. ':addrs:' .. enc(n) end
function K.broker_topics(n) return TAG .. ':broker-topics:' .. enc(n) end
function K.topics() return TAG .. ':topics' end
function K.topic_index() return TAG .. ':topic-index' end
function K.staged_topics() return TAG .. ':staged-topics' end
function K.stagings() return TAG .. ':stagings' end
function K.topic(t) return TAG .. ':topic:' .. enc(t) end
function K.queue(t, n) return TAG .. ':queue:' .. enc(t) .. ':' .. enc(n) end
function K.live(a) return TAG .. ':live:' .. a end
function K.expiry() return TAG .. ':expiry' end
function K.member(a) return TAG .. ':member:' .. a end
function K.filter(a) return TAG .. ':filter:' .. a end
function K.mapping(t) return TAG .. ':mapping:' .. enc(t) end
function K.mapped(n) return TAG .. ':mapped:' .. enc(n) end
function K.body_digests() return TAG .. ':body-digests' end
function K.masterless() return TAG .. ':masterless' end
function K.topics_gen() return TAG .. ':topics-gen' end
function K.kv_namespaces() return TAG .. ':kv-namespaces' end
function K.kv(ns) return TAG .. ':kv:' .. enc(ns) end
function K.changes() return TAG .. ':changes' end
function K.changelog() return TAG .. ':changelog' end
local ORDER_TOPIC_CONFIG = 'ORDER_TOPIC_CONFIG'

-- Redis time, not a worker's clock: workers with skewed clocks agree on who expired.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as plain digits (Lua 5.1 would print large ones in exponent form).
local function int(x)
  return string.format('%.0f', x)
end

-- The change one call makes that a reader could see, accumulated in one object the
-- publishing wrapper creates (service/store.py: the script body gets it as `change` and
-- finish publishes it), so every writing helper below takes it as its first argument
-- and nothing about a change lives anywhere else:
--   visible    whether anything a reader could see changed (then the version moves)
--   tags       its dependency tags (service/changes.py reads them): 't:<topic>' for a
--              topic's QueueData or order config, 'g:<brokerName>' for a group's members,
--              addresses, cluster or filter servers (every route naming the group)
--   tag_count  how many; past TAG_CAP the record is a flush ('*'): it stays small, and
--              such changes (a first registration of thousands of topics) are rare
--   notices    NOTIFY_MIN_BROKER_ID_CHANGE notices for the caller to send (note_min_change)
local TAG_CAP = 1000
-- Change records kept for workers that missed some on the channel (~100 s at 10 a second).
local CHANGELOG_RETAIN = 1000

local function new_change()
  return {visible = false, tags = {}, tag_count = 0, notices = {}}
end

-- Something visible changed that no tag names more narrowly than the version (a KV
-- namespace other than the order configs).
local function touch_version(change)
  change.visible = true
end

local function touch(change, tag)
  change.visible = true
  if change.tag_count <= TAG_CAP and not change.tags[tag] then
    change.tags[tag] = true
    change.tag_count = change.tag_count + 1
  end
end

local function touch_topic(change, topic)
  if change.tag_count > TAG_CAP then
    change.visible = true  -- already a flush: no tag string to build
  else
    touch(change, 't:' .. topic)
  end
end
local function touch_group(change, name) touch(change, 'g:' .. name) end
-- topics new to the tables got routes: only TOPIC_NOT_EXIST answers can be wrong now
local function touch_new_topics(change) touch(change, '-') end

-- Past the cap: the record is a flush.
local function touch_all(change)
  change.visible = true
  change.tag_count = TAG_CAP + 1
end

-- Every topic of `topics`: past the cap the record is a flush anyway, so a first
-- registration of 10,000 topics builds no tag for each.
local function touch_topics(change, topics)
  if #topics == 0 then
    return
  end
  if change.tag_count + #topics > TAG_CAP then
    touch_all(change)
    return
  end
  for _, topic in ipairs(topics) do
    touch_topic(change, topic)
  end
end

-- When something visible changed: bumps the version and publishes the change record
-- {seq, time, tag...} on the channel and in the capped changelog, in the same script as
-- the change, so no reader can see one without the other. Returns the record, or the
-- bare version when nothing changed (an unchanged re-registration flushes no cache).
-- Only finish calls it.
local function publish_change(change)
  if not change.visible then
    return redis.call('GET', KEYS[1]) or '0'
  end
  local v = redis.call('INCR', KEYS[1])
  -- Redis time makes each record unique, so a worker can tell a history rolled back and
  -- rewritten (restore, failover) from the one it followed
  local t = redis.call('TIME')
  local record = {tostring(v), t[1] .. t[2]}
  if change.tag_count > TAG_CAP then
    record[3] = '*'
  else
    for tag in pairs(change.tags) do
      record[#record + 1] = tag
    end
  end
  local encoded = cjson.encode(record)
  redis.call('PUBLISH', K.changes(), encoded)
  redis.call('LPUSH', K.changelog(), encoded)
  redis.call('LTRIM', K.changelog(), 0, CHANGELOG_RETAIN - 1)
  return encoded
end

local function leave_cluster(change, cluster, name)
  touch_group(change, name)
  redis.call('SREM', K.cluster(cluster), name)
  if redis.call('SCARD', K.cluster(cluster)) == 0 then
    redis.call('SREM', K.clusters(), cluster)
  end
end

-- Lua's unpack takes at most a few thousand values: variadic calls go in slices.
local SLICE = 4000
local function each_slice(values, call)
  for i = 1, #values, SLICE do
    call(unpack(values, i, math.min(i + SLICE - 1, #values)))
  end
end

local function variadic(cmd, key, values)
  each_slice(values, function(...) redis.call(cmd, key, ...) end)
end

local function delete_keys(keys)
  each_slice(keys, function(...) redis.call('DEL', ...) end)
end

-- A QueueData's values as one string, kept per group in broker-topics:<name>, so that
-- a registration compares 10,000 topics against one HGETALL instead of 10,000 reads.
local function fingerprint(r, w, p, f)
  return r .. ',' .. w .. ',' .. p .. ',' .. f
end

-- The group's QueueData fingerprints: topic -> fingerprint.
local function fingerprints(name)
  local flat = redis.call('HGETALL', K.broker_topics(name))
  local known = {}
  for i = 1, #flat, 2 do
    known[flat[i]] = flat[i + 1]
  end
  return known
end

-- Writes QueueDatas of one group, each {topic, r, w, p, f}; `known` is the group's
-- fingerprints before. Per pair only its row (and the topic's broker set when the pair
-- is new); the topic list and the fingerprints take one variadic call per slice.
-- The topic list in name order beside the set (K.topic_index): ZADD takes score, member.
local function index_topics(topics)
  local pairs_ = {}
  for _, topic in ipairs(topics) do
    pairs_[#pairs_ + 1] = 0
    pairs_[#pairs_ + 1] = topic
  end
  variadic('ZADD', K.topic_index(), pairs_)
end

-- Topics only a staged first registration serves (lua/register_stage.lua): in the topic
-- set and index already, but no reader lists them until it is published. Nearly always
-- empty, so callers ask once per script whether there is anything to skip.
local function staging_somewhere()
  if memo.any_staged == nil then
    memo.any_staged = redis.call('EXISTS', K.staged_topics()) == 1
  end
  return memo.any_staged
end

local function unstage_topics(topics)
  if #topics > 0 and staging_somewhere() then
    variadic('SREM', K.staged_topics(), topics)
  end
end

-- Whether a group is under a staged first registration (its row holds 'staging'): then
-- no reader sees it yet, and every script that reads or adds QueueData for readers skips
-- it (the one place that rule is written). Read once per group and script: a page of
-- topics names the same few hundred groups again and again.
local function staging_group(name)
  local staging = memo.staging[name]
  if staging == nil then
    staging = redis.call('HEXISTS', K.broker(name), 'staging') == 1
    memo.staging[name] = staging
  end
  return staging
end

-- The fields asked for of a group's row in one call, as staging_group's rule has it: nil
-- while the group is staged.
local function visible_group(name, ...)
  local row = redis.call('HMGET', K.broker(name), 'staging', ...)
  memo.staging[name] = row[1] ~= false
  if row[1] then
    return nil
  end
  return {unpack(row, 2)}
end

-- The topics of `names` a reader may list (a slice of the topic index).
local function listed(names)
  if not staging_somewhere() or #names == 0 then
    return names
  end
  local out = {}
  for i = 1, #names, SLICE do
    local last = math.min(i + SLICE - 1, #names)
    local hidden = redis.call('SMISMEMBER', K.staged_topics(), unpack(names, i, last))
    for j = i, last do
      if hidden[j - i + 1] == 0 then
        out[#out + 1] = names[j]
      end
    end
  end
  return out
end

-- How many pairs of one group a change tags by topic; past it, the pairs that existed
-- before are tagged by their group instead (every route naming the group depends on it).
local PER_TOPIC_TAGS = 64

-- `staged`: the pairs of a group under a staged first registration (register_stage.lua),
-- which no reader sees until its master's registration publishes them: no topic list, no
-- change record, and the generation is the stager's.
local function put_queues(change, name, entries, known, staged)
  if #entries == 0 then
    return
  end
  if not staged then
    -- a worker's copy of the fingerprints no longer matches (register.lua may set a new one)
    redis.call('HDEL', K.broker(name), 'topicsGen')
  end
  local few = #entries <= PER_TOPIC_TAGS
  local new_topics, fps = {}, {}
  for _, e in ipairs(entries) do
    local topic = e[1]
    redis.call('HSET', K.queue(topic, name), 'topic', topic, 'brokerName', name,
      'readQueueNums', e[2], 'writeQueueNums', e[3], 'perm', e[4], 'topicSysFlag', e[5])
    if staged then
      redis.call('SADD', K.topic(topic), name)
      if redis.call('SADD', K.topics(), topic) == 1 then
        new_topics[#new_topics + 1] = topic  -- new to the tables: listed once published
      end
    elseif not known[topic] then
      redis.call('SADD', K.topic(topic), name)
      new_topics[#new_topics + 1] = topic
      -- a route read before the pair existed does not name this group: tag the topic
      touch_topic(change, topic)
    elseif few then
      touch_topic(change, topic)
    else
      touch_group(change, name)
    end
    fps[#fps + 1] = topic
    fps[#fps + 1] = fingerprint(e[2], e[3], e[4], e[5])
  end
  if staged then
    variadic('SADD', K.staged_topics(), new_topics)
  else
    variadic('SADD', K.topics(), new_topics)
    unstage_topics(new_topics)  -- served by a group readers see now
  end
  index_topics(new_topics)
  variadic('HSET', K.broker_topics(name), fps)
end

-- Creates or replaces one QueueData; true when it changed.
local function put_queue(change, topic, name, r, w, p, f)
  local fp = redis.call('HGET', K.broker_topics(name), topic)
  if fp == fingerprint(r, w, p, f) then
    return false
  end
  put_queues(change, name, {{topic, r, w, p, f}}, {[topic] = fp or nil})
  return true
end

-- A topic list and fingerprints from a registration: a JSON array [topic, fingerprint, ...]
-- (flat: cjson decodes it in a quarter of the time an array of arrays takes).
local function decode_pairs(json)
  local flat = cjson.decode(json)
  local entries = {}
  for i = 1, #flat, 2 do
    entries[#entries + 1] = {flat[i], flat[i + 1]}
  end
  return entries
end

-- {topic, fp} -> {topic, r, w, p, f}, what put_queues writes
local function split_fp(e)
  local r, w, p, f = string.match(e[2], '^(%d+),(%d+),(%d+),(%d+)$')
  return {e[1], r, w, p, f}
end

-- Removes QueueDatas of one group, and each topic no broker serves any more.
-- The group's queues are then no longer all its master registered, so its next
-- unchanged registration must take the full path and bring them back.
local function drop_queues(change, name, topics)
  if #topics == 0 then
    return
  end
  redis.call('HDEL', K.broker(name), 'queuesIntact', 'topicsGen')
  -- every removed pair existed, so each route it changes names the group
  if #topics <= PER_TOPIC_TAGS then
    for _, topic in ipairs(topics) do
      touch_topic(change, topic)
    end
  else
    touch_group(change, name)
  end
  local rows, orphans = {}, {}
  for i, topic in ipairs(topics) do
    rows[i] = K.queue(topic, name)
    -- an emptied set is deleted by Redis, so SREM then EXISTS tells whether it was the last
    redis.call('SREM', K.topic(topic), name)
    if redis.call('EXISTS', K.topic(topic)) == 0 then
      orphans[#orphans + 1] = topic
    end
  end
  delete_keys(rows)
  variadic('HDEL', K.broker_topics(name), topics)
  variadic('SREM', K.topics(), orphans)
  variadic('ZREM', K.topic_index(), orphans)
  unstage_topics(orphans)
end

local function drop_queue(change, topic, name)
  drop_queues(change, name, {topic})
end

-- Keeps the set of groups that have members but no master (brokerId 0) true after a
-- change of the group's addresses, so /metrics counts them with one SCARD.
local function note_master(name)
  if redis.call('HEXISTS', K.addrs(name), '0') == 1 or redis.call('EXISTS', K.addrs(name)) == 0 then
    redis.call('SREM', K.masterless(), name)
  else
    redis.call('SADD', K.masterless(), name)
  end
end

-- Whether a perm has its write bit, and the perm with it cleared (no bit library in
-- every Lua we run on).
local PERM_WRITE = 2
local function writable(perm)
  return math.floor(tonumber(perm) / PERM_WRITE) % 2 == 1
end
local function without_write(perm)
  perm = tonumber(perm)
  if writable(perm) then
    return perm - PERM_WRITE
  end
  return perm
end

-- Wipes (perm & ~WRITE) or adds (perm = READ|WRITE) the write permission of every
-- QueueData of a group; how many QueueData it has.
local function set_write_perm(change, name, wipe)
  local count, writes = 0, {}
  local known = fingerprints(name)
  for topic, fp in pairs(known) do
    local r, w, p, f = string.match(fp, '^([^,]*),([^,]*),([^,]*),([^,]*)$')
    local new_perm = wipe and without_write(p) or 6
    if new_perm ~= tonumber(p) then
      writes[#writes + 1] = {topic, r, w, tostring(new_perm), f}
    end
    count = count + 1
  end
  -- every topic here is known: only its row and fingerprint change, not its indexes
  put_queues(change, name, writes, known)
  return count
end


-- A static topic's queue mappings by the group that hosts them (RocketMQ 5's
-- topicQueueMappingInfoTable): `mappings` a flat list [topic, bname, info JSON, ...].
local function put_mappings(change, mappings)
  for i = 1, #mappings, 3 do
    local topic, bname, info = mappings[i], mappings[i + 1], mappings[i + 2]
    if redis.call('HGET', K.mapping(topic), bname) ~= info then
      redis.call('HSET', K.mapping(topic), bname, info)
      redis.call('SADD', K.mapped(bname), topic)
      touch_topic(change, topic)
    end
  end
end

-- Removes one group's mapping of a topic.
local function drop_mapping(change, topic, bname)
  if redis.call('HDEL', K.mapping(topic), bname) == 1 then
    touch_topic(change, topic)
  end
  redis.call('SREM', K.mapped(bname), topic)
end

-- The group has no address left: it goes from the cluster and from every topic.
local function remove_group(change, name)
  touch_group(change, name)
  for _, topic in ipairs(redis.call('SMEMBERS', K.mapped(name))) do
    drop_mapping(change, topic, name)
  end
  drop_queues(change, name, redis.call('HKEYS', K.broker_topics(name)))
  local cluster = redis.call('HGET', K.broker(name), 'cluster')
  redis.call('DEL', K.broker(name), K.addrs(name), K.broker_topics(name))
  redis.call('SREM', K.masterless(), name)
  redis.call('HDEL', K.stagings(), name)
  if cluster then
    leave_cluster(change, cluster, name)
  end
end

-- NOTIFY_MIN_BROKER_ID_CHANGE (RocketMQ 5's notifyMinBrokerIdChanged): a change of a
-- group's smallest brokerId is noted in the change for the caller, which sends the
-- notices to the brokers (scripts cannot); every script that changes a group's members
-- returns notices_json(change) last. `targets`: the addresses to tell.

-- The smallest id of a HGETALL of addrs (flat), its address; nil when empty.
local function min_id(flat)
  local min, addr = nil, nil
  for i = 1, #flat, 2 do
    local id = tonumber(flat[i])
    if id and (min == nil or id < min) then
      min, addr = id, flat[i + 1]
    end
  end
  return min, addr
end

-- `offline`: the address that left (its group's members are all told), or nil when a
-- new smaller id registered (the others are told), as RouteInfoManager chooses.
local function note_min_change(change, name, offline, ha)
  local flat = redis.call('HGETALL', K.addrs(name))
  local min, min_addr = min_id(flat)
  if min == nil then
    return
  end
  local targets = {}
  for i = 1, #flat, 2 do
    if offline or #flat == 2 or tonumber(flat[i]) ~= min then
      targets[#targets + 1] = flat[i + 1]
    end
  end
  change.notices[#change.notices + 1] = {brokerName = name, minBrokerId = min, minBrokerAddr = min_addr,
    offlineBrokerAddr = offline, haBrokerAddr = ha, targets = targets}
end

local function notices_json(change)
  if #change.notices == 0 then
    return ''
  end
  return cjson.encode(change.notices)
end

-- Removes addr from the group by value, not by id: a late removal must not take out a
-- new member that has since taken the same id. Cascades when the group is left empty.
local function detach(change, name, addr)
  local flat = redis.call('HGETALL', K.addrs(name))
  local before_min = min_id(flat)
  local removed, was_min = false, false
  for i = 1, #flat, 2 do
    if flat[i + 1] == addr then
      redis.call('HDEL', K.addrs(name), flat[i])
      removed = true
      was_min = was_min or tonumber(flat[i]) == before_min
    end
  end
  if removed then
    touch_group(change, name)
  end
  if removed and redis.call('HLEN', K.addrs(name)) == 0 then
    remove_group(change, name)
  elseif removed then
    note_master(name)
    -- a group whose brokers run with enableActingMaster, left by a member: without a
    -- master it serves reads only, so its QueueData lose the write bit (RocketMQ 5's
    -- cleanTopicByUnRegisterRequests), and its brokers hear of a new smallest id
    if redis.call('HGET', K.broker(name), 'enableActingMaster') == '1' then
      if redis.call('HEXISTS', K.addrs(name), '0') == 0 then
        set_write_perm(change, name, true)
      end
      if was_min then
        note_min_change(change, name, addr, nil)
      end
    end
  end
  return removed
end

-- Forgets the per-address rows: live, deadline, identity, filter servers. `name`: the
-- group whose routes show the address's filter servers (nil when it is in none).
local function forget_address(change, addr, name)
  local digest = redis.call('HGET', K.member(addr), 'bodyDigest')
  if digest then
    redis.call('HDEL', K.body_digests(), digest)
  end
  if redis.call('DEL', K.filter(addr)) == 1 and name then
    touch_group(change, name)
  end
  redis.call('DEL', K.live(addr), K.member(addr))
  redis.call('ZREM', K.expiry(), addr)
end

-- Removes an address found by its identity row (expiry, connection close): its own
-- rows, then its place in its group, cascading as detach does. `cause`: why it goes
-- ('connection closed', 'expired', 'unregistered'), for a record of departures.
local function remove_address(change, addr, cause)
  local name = redis.call('HGET', K.member(addr), 'brokerName')
  forget_address(change, addr, name or nil)
  if name then
    detach(change, name, addr)
  end
end

-- Brings a live row's deadline to now + its timeout (key TTL and index together).
local function touch_live(addr, now, timeout)
  redis.call('HSET', K.live(addr), 'lastUpdateTimestamp', int(now))
  redis.call('PEXPIRE', K.live(addr), timeout)
  redis.call('ZADD', K.expiry(), int(now + timeout), addr)
end

-- The answer to a registration: a slave learns its master when the master is alive;
-- every broker gets the ORDER_TOPIC_CONFIG namespace.
local function registration_answer(name, id)
  local master_found, master_addr, master_ha = 0, '', ''
  if id ~= '0' then
    local m = redis.call('HGET', K.addrs(name), '0')
    if m then
      local m_ha = redis.call('HGET', K.live(m), 'haServerAddr')
      if m_ha then
        master_found, master_addr, master_ha = 1, m, m_ha
      end
    end
  end
  return master_found, master_addr, master_ha, redis.call('HGETALL', K.kv(ORDER_TOPIC_CONFIG))
end

-- Every script that may change the tables runs inside finish (service/store.py wraps its
-- body): the body is handed a new change, and finish publishes it whatever way the body
-- returns, so a body cannot forget. Such a body returns CHANGE first where its caller
-- reads the change record (or the bare version when nothing changed).
local CHANGE = {}
local function finish(change, result)
  local record = publish_change(change)
  if type(result) == 'table' and result[1] == CHANGE then
    result[1] = record
  end
  return result
end

-- ---------------------------------------------------------------- script body follows
