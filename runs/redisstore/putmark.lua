-- Record a resource's mark unless the recorded one has a higher fence.
-- KEYS: mark
-- ARGV: data, fence
-- Returns {1} when written, {0, current data} when the recorded fence is higher.
local f = redis.call('HGET', KEYS[1], 'f')
if f and tonumber(f) > tonumber(ARGV[2]) then
  return {0, redis.call('HGET', KEYS[1], 'd')}
end
redis.call('HSET', KEYS[1], 'd', ARGV[1], 'f', ARGV[2])
return {1}
