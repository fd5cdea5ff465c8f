-- Removes departed brokers in one script, as RocketMQ 5's BatchUnregistrationService
-- does (service/removals.py queues them per worker: connection closes, unregistrations
-- that could not reach Redis, expiries). Each entry is checked as it stands now:
--   'connection closed', 'unregistered': removed only while that connection still owns
--     the address (the last registration or refresh came on it; a broker that came back
--     through another connection, another worker or HTTP stays);
--   'expired': removed only once its deadline has passed (a heartbeat that landed after
--     the scanner read it wins).
-- Whole addresses are removed (lua/_groups.lua remove_address) until about `budget` pairs
-- have been spent, so a script's time in Redis stays bounded: at least one address a
-- script; a big group's last member costs one pair, its QueueData are collected later
-- (lua/collect_leaving.lua). The entries not reached are left for the next script.
-- Running an entry twice, or after another worker removed it, settles it without
-- changing anything.
-- uses: keys, basics, changes, groups
-- keys: version, clusters, cluster, broker, addrs, broker_topics, topics, topic_index, staged_topics, stagings,
--       topic, topic_capacity, queue, queue_seq, live, expiry, member, filter, mapping, mapped, body_digests,
--       masterless, changes, changelog, departures, leaving
-- ARGV[1] budget: the (topic, group) pairs one script may remove or rewrite
-- ARGV[2..] three values per entry: brokerAddr, channel id ('' for an expiry), cause
-- Returns {change, statuses, members, notices}: per entry, in order, 'removed', 'not
-- due', 'not owned', 'gone' (the last three settled: nothing to do) or '' (not reached:
-- send it again); members: per entry, a removed one's {cluster, brokerName, brokerId} as
-- its identity row held them ({} otherwise); notices: lua/_groups.lua's
-- NOTIFY_MIN_BROKER_ID_CHANGE, '' none.
local change = new_change()
local budget = tonumber(ARGV[1])

-- What removing `addr` may cost in pairs: the group's pairs when it is the last member
-- and the group is small enough to lose them now (a bigger one is only marked leaving:
-- lua/_groups.lua remove_group), or when the group runs with enableActingMaster (its pairs
-- may lose the write bit); else one.
local function cost(addr)
  local name = redis.call('HGET', K.member(addr), 'brokerName')
  local last = name and redis.call('HLEN', K.addrs(name)) <= 1
  if name and (last or redis.call('HGET', K.broker(name), 'enableActingMaster') == '1') then
    local pairs_ = redis.call('HLEN', K.broker_topics(name))
    return 1 + ((last and pairs_ > LEAVE_NOW_MAX) and 0 or pairs_)
  end
  return 1
end

local now = nil
local function settled_as(addr, channel, cause)
  if cause == 'expired' then
    local deadline = redis.call('ZSCORE', K.expiry(), addr)
    -- gone already (another worker, or its group's unregistration): nothing left to do
    if not deadline then
      return 'gone'
    end
    now = now or now_ms()
    if tonumber(deadline) > now then
      return 'not due'
    end
    return nil
  end
  if channel == '' or redis.call('HGET', K.live(addr), 'channel') ~= channel then
    return 'not owned'
  end
  return nil
end

local statuses, members = {}, {}
local spent = 0
for i = 2, #ARGV, 3 do
  local addr, channel, cause = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local status, member = '', {}
  if spent < budget then
    status = settled_as(addr, channel, cause)
    if status then
      spent = spent + 1
    else
      local price = cost(addr)
      if price > budget - spent and spent > 0 then
        -- it waits for the next script, and the rest with it, in their order
        status = ''
        spent = budget
      else
        spent = spent + price
        local row = redis.call('HMGET', K.member(addr), 'cluster', 'brokerName', 'brokerId')
        member = {row[1] or '', row[2] or '', row[3] or ''}
        remove_address(change, addr, cause)
        status = 'removed'
      end
    end
  end
  statuses[#statuses + 1] = status
  members[#members + 1] = member
end
return finish(change, statuses, members, notices_json(change))
