-- Builds the name-ordered topic index from the topic list when they differ in size: once,
-- after an upgrade from a version without the index (every change keeps both since).
-- KEYS[1] version counter
-- Returns the number of topics indexed (0 when the index was already complete)
if redis.call('ZCARD', K.topic_index()) == redis.call('SCARD', K.topics()) then
  return 0
end
redis.call('DEL', K.topic_index())
local topics = redis.call('SMEMBERS', K.topics())
index_topics(topics)
return #topics
