-- Put a KV config entry; creates the namespace.
-- uses: keys, changes
-- keys: version, kv_namespaces, kv, changes, changelog
-- ARGV[1..3] namespace, key, value
-- Returns {change}
local change = new_change()
local namespace, key, value = ARGV[1], ARGV[2], ARGV[3]
redis.call('SADD', K.kv_namespaces(), namespace)
if redis.call('HGET', K.kv(namespace), key) ~= value then
  redis.call('HSET', K.kv(namespace), key, value)
  touch_kv(change, namespace, key)
end
return finish(change)
