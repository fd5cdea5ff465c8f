-- Every key under the tag and its full content (timestamps and scores included), in one
-- atomic, read-only step. ARGV[1] the key tag, e.g. '{rmq}'.
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. ':*')) do
  local t = redis.call('TYPE', k)['ok']
  local v = {}
  if t == 'set' then
    v = redis.call('SMEMBERS', k)
    table.sort(v)
  elseif t == 'hash' then
    v = redis.call('HGETALL', k)
  elseif t == 'list' then
    v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then
    v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'string' then
    v = {redis.call('GET', k)}
  end
  out[#out + 1] = {k, t, v}
end
return out
