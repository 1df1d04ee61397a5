-- Read a run unless the caller already holds its stored version.
-- KEYS: run
-- ARGV: the version the caller holds ('' for none)
-- Returns nil when the run does not exist, its version (a string) when it is the one the
-- caller holds, else the whole hash as HGETALL gives it.
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
  return false
end
if v == ARGV[1] then
  return v
end
return redis.call('HGETALL', KEYS[1])
