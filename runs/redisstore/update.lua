-- Write a run if its version is still the one read, move it between the status indexes
-- and owner sets, append events and signal followers.
-- KEYS: run, ev, idx:st old, idx:st new, idx:ps old, idx:ps new, owner old, owner new
-- ARGV: expected version, data, new version, status, owner, sort key, id, signal channel,
--       add to new owner set ("1"/"0"), events...
-- Returns the number of events after the append, -1 if the run is gone, -2 on a version clash.
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
  return -1
end
if v ~= ARGV[1] then
  return -2
end
redis.call('HSET', KEYS[1], 'd', ARGV[2], 'v', ARGV[3], 'st', ARGV[4], 'ow', ARGV[5])
if KEYS[3] ~= KEYS[4] then
  redis.call('ZREM', KEYS[3], ARGV[6])
  redis.call('ZADD', KEYS[4], 0, ARGV[6])
  redis.call('ZREM', KEYS[5], ARGV[6])
  redis.call('ZADD', KEYS[6], 0, ARGV[6])
end
redis.call('SREM', KEYS[7], ARGV[7])
if ARGV[9] == '1' then
  redis.call('SADD', KEYS[8], ARGV[7])
end
if #ARGV > 9 then
  local n = redis.call('RPUSH', KEYS[2], unpack(ARGV, 10))
  redis.call('PUBLISH', ARGV[8], n)
  return n
end
return redis.call('LLEN', KEYS[2])
