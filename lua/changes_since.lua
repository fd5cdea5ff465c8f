-- The change records a worker has not seen, read in one step with the version they lead to.
-- uses: keys, changes
-- keys: version, changelog
-- ARGV[1] the last sequence number the worker applied (0: none)
-- Returns {version, records}, records newest first from `version` down to ARGV[1] itself (the
--   worker checks it is the one it applied: a history rolled back and rewritten differs
--   there), or {version, false} when the changelog no longer reaches back that far or the
--   version went backwards.
local version, since = tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1])
if version < since or version - since >= CHANGELOG_RETAIN then
  return {tostring(version), false}
end
return {tostring(version), redis.call('LRANGE', K.changelog(), 0, version - since)}
