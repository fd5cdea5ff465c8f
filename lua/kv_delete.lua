-- Delete a KV config entry; a missing one is not an error. The namespace stays.
-- uses: keys, changes
-- keys: version, kv, changes, changelog
-- ARGV[1..2] namespace, key
-- Returns {change}
local change = new_change()
local namespace, key = ARGV[1], ARGV[2]
if redis.call('HDEL', K.kv(namespace), key) == 1 then
  touch_kv(change, namespace, key)
end
return finish(change)
