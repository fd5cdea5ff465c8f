-- Builds the name-ordered topic index from the topic list when they differ in size: once,
-- after an upgrade from a version without the index (every change keeps both since).
-- uses: keys, changes, queues
-- keys: version, topics, topic_index, changes, changelog
-- Returns the number of topics indexed (0 when the index was already complete)
local change = new_change()
if redis.call('ZCARD', K.topic_index()) == redis.call('SCARD', K.topics()) then
  return finish(change, 0)
end
redis.call('DEL', K.topic_index())
local topics = redis.call('SMEMBERS', K.topics())
index_topics(topics)
return finish(change, #topics)
