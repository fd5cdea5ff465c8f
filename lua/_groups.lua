-- Prelude part: a group's members and their removal (cascading to its QueueData).
-- uses: keys, basics, changes, queues, members

-- Keeps the set of groups that have members but no master (brokerId 0) true after a
-- change of the group's addresses, so /metrics counts them with one SCARD.
local function note_master(name)
  if redis.call('HEXISTS', K.addrs(name), '0') == 1 or redis.call('EXISTS', K.addrs(name)) == 0 then
    redis.call('SREM', K.masterless(), name)
  else
    redis.call('SADD', K.masterless(), name)
  end
end

-- A group with more QueueData than this leaves at once but its QueueData go later: its row
-- keeps only 'leaving', which readers skip as they skip a staging (lua/_staging.lua), and
-- lua/collect_leaving.lua removes them a slice a script. So a close storm of a fleet (a
-- million pairs) takes its routes away in a few short scripts, as RocketMQ 5's batched
-- unregistration does, instead of a second of Redis time per 100,000 pairs first.
local LEAVE_NOW_MAX = 256

-- The group has no address left: it goes from the cluster and from every topic.
local function remove_group(change, name)
  touch_group(change, name)
  for _, topic in ipairs(redis.call('SMEMBERS', K.mapped(name))) do
    drop_mapping(change, topic, name)
  end
  local leaving = redis.call('HLEN', K.broker_topics(name)) > LEAVE_NOW_MAX
  if not leaving then
    drop_queues(change, name, redis.call('HKEYS', K.broker_topics(name)))
  end
  local cluster = redis.call('HGET', K.broker(name), 'cluster')
  redis.call('DEL', K.broker(name), K.addrs(name))
  redis.call('SREM', K.masterless(), name)
  redis.call('HDEL', K.stagings(), name)
  if cluster then
    leave_cluster(change, cluster, name)
  end
  if leaving then
    redis.call('HSET', K.broker(name), 'leaving', '1')
    redis.call('SADD', K.leaving(), name)
  end
end

-- NOTIFY_MIN_BROKER_ID_CHANGE (RocketMQ 5's notifyMinBrokerIdChanged): a change of a
-- group's smallest brokerId is noted in the change for the caller, which sends the
-- notices to the brokers (scripts cannot); every script that changes a group's members
-- returns notices_json(change) last. `targets`: the addresses to tell.

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

-- The bodies one address may be found by (register.lua): a split registration of 100,000
-- topics in parts of 800 has 125.
local MAX_BODY_DIGESTS = 128

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
  for digest in string.gmatch(redis.call('HGET', K.member(addr), 'bodyDigest') or '', '%S+') do
    redis.call('HDEL', K.body_digests(), digest)
  end
  if redis.call('DEL', K.filter(addr)) == 1 and name then
    touch_group(change, name)
  end
  redis.call('DEL', K.live(addr), K.member(addr))
  redis.call('ZREM', K.expiry(), addr)
end

-- Removes an address found by its identity row (expiry, connection close): its own
-- rows, then its place in its group, cascading as detach does; recorded as a departure
-- for `cause` when it was in its group.
local function remove_address(change, addr, cause)
  local member = redis.call('HMGET', K.member(addr), 'brokerName', 'cluster', 'brokerId')
  local name = member[1]
  forget_address(change, addr, name or nil)
  -- `cause` nil: a removal that is no departure (register.lua's stateVersion rule)
  if name and detach(change, name, addr) and cause then
    record_departure(addr, name, member[2] or '', member[3], cause, now_ms())
  end
end
