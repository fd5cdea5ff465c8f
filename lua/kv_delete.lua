-- Delete a KV config entry; a missing one is not an error. The namespace stays.
-- KEYS[1] version counter
-- ARGV[1] namespace
-- ARGV[2] key
-- Returns {version}
local namespace, key = ARGV[1], ARGV[2]

if redis.call('HDEL', K.kv(namespace), key) == 1 then
  changed = true
end
return {publish_if_changed()}
