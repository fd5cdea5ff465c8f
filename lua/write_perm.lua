-- Wipe or add the write permission of every QueueData of a broker name.
-- uses: changes, queues
-- keys: version, broker, broker_topics, topics, topic_index, staged_topics, topic, queue, queue_seq, changes, changelog
-- ARGV[1] brokerName
-- ARGV[2] 'wipe' (perm & ~WRITE) or 'add' (perm = READ|WRITE)
-- Returns {change, topics touched}
local change = new_change()
return finish(change, set_write_perm(change, ARGV[1], ARGV[2] == 'wipe'))
