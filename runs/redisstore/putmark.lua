-- Record a resource's mark unless the recorded one has a higher fence, and with it one
-- pipeline's mark on the resource (field p:<pipeline> of the same hash).
-- KEYS: mark
-- ARGV: data, fence, pipeline field ('' for none), its data ('' deletes the field)
-- Returns {1} when written, {0, current data} when the recorded fence is higher.
local cur = redis.call('HMGET', KEYS[1], 'd', 'f')
if cur[2] and tonumber(cur[2]) > tonumber(ARGV[2]) then
  return {0, cur[1]}
end
-- A mark written before pipeline marks existed stands for its pipeline's until replaced:
-- kept as that pipeline's mark when it has none, so that no pipeline's history is lost.
if cur[1] then
  local ok, old = pcall(cjson.decode, cur[1])
  if ok and type(old) == 'table' and type(old.pipeline) == 'string' and old.pipeline ~= '' then
    redis.call('HSETNX', KEYS[1], 'p:' .. old.pipeline, cur[1])
  end
end
redis.call('HSET', KEYS[1], 'd', ARGV[1], 'f', ARGV[2])
if ARGV[3] ~= '' then
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
  else
    redis.call('HDEL', KEYS[1], ARGV[3])
  end
end
return {1}
