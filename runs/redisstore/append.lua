-- Append events to a run's log and signal followers.
-- KEYS: run, ev
-- ARGV: signal channel, events...
-- Returns the number of events after the append, or -1 if the run does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if #ARGV < 2 then
  return redis.call('LLEN', KEYS[2])
end
local n = redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))
redis.call('PUBLISH', ARGV[1], n)
return n
