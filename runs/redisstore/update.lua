-- Write a run if its version is still the one read: its header and the steps that changed,
-- dropping steps past its new end; move it between the status indexes and owner sets,
-- append events and signal followers.
-- KEYS: run, ev, idx:st old, idx:st new, idx:ps old, idx:ps new, owner old, owner new
-- ARGV: expected version, header, new version, status, owner, sort key, id, signal channel,
--       add to new owner set ("1"/"0"), step count, all steps sent ("1"/"0"),
--       number of steps sent k, then k pairs (position, step), then events...
-- Returns the number of events after the append, -1 if the run is gone, -2 on a version
-- clash, -3 when the run is still stored whole by an older build (field d) and not every
-- step was sent.
-- hset writes the field/value list f in slices, under Lua's unpack limit.
local function hset(key, f)
  for i = 1, #f, 1000 do
    redis.call('HSET', key, unpack(f, i, math.min(i + 999, #f)))
  end
end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
  return -1
end
if v ~= ARGV[1] then
  return -2
end
local legacy = redis.call('HEXISTS', KEYS[1], 'd') == 1
if legacy and ARGV[11] ~= '1' then
  return -3
end
local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local n = tonumber(ARGV[10])
local k = tonumber(ARGV[12])
local f = {'h', ARGV[2], 'v', ARGV[3], 'st', ARGV[4], 'ow', ARGV[5], 'n', ARGV[10]}
for j = 0, k - 1 do
  f[#f + 1] = 's:' .. ARGV[13 + 2 * j]
  f[#f + 1] = ARGV[14 + 2 * j]
end
hset(KEYS[1], f)
if legacy then
  redis.call('HDEL', KEYS[1], 'd')
end
if old > n then
  for i = n, old - 1 do
    redis.call('HDEL', KEYS[1], 's:' .. i)
  end
end
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
local e = 13 + 2 * k
if #ARGV >= e then
  local c = redis.call('RPUSH', KEYS[2], unpack(ARGV, e))
  redis.call('PUBLISH', ARGV[8], c)
  return c
end
return redis.call('LLEN', KEYS[2])
