-- Delete the reports of a run that is gone which have nothing pending, and forget the run
-- once it has no report left.
-- KEYS: rptruns, rptrun, rptdue, run (hash), then per report its hash and states list
-- ARGV: run id, then the report keys
-- Returns how many reports it deleted.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return 0
end
local n = 0
for i = 2, #ARGV do
  local h, l = KEYS[2 * i + 1], KEYS[2 * i + 2]
  local f = redis.call('HMGET', h, 'own', 'sent')
  if not f[2] then
    redis.call('SREM', KEYS[2], ARGV[i])
  elseif f[1] == '' and tonumber(f[2]) >= redis.call('LLEN', l) then
    redis.call('DEL', h, l)
    redis.call('SREM', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    n = n + 1
  end
end
if redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[1], ARGV[1])
end
return n
