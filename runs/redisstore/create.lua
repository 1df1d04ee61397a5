-- Create a run unless its idempotency key or its ID is taken.
-- KEYS: run, idem, idx:all, idx:pl, idx:st, idx:ps, owner
-- ARGV: header, status, owner, sort key, id, has idem ("1"/"0"), step count, steps...
-- Returns {1} when created, {0, id} when the key names an existing run, {-1} for a taken ID.
-- hset writes the field/value list f in slices, under Lua's unpack limit.
local function hset(key, f)
  for i = 1, #f, 1000 do
    redis.call('HSET', key, unpack(f, i, math.min(i + 999, #f)))
  end
end
if ARGV[6] == '1' then
  local existing = redis.call('GET', KEYS[2])
  if existing then
    return {0, existing}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1}
end
local f = {'h', ARGV[1], 'v', '1', 'st', ARGV[2], 'ow', ARGV[3], 'sk', ARGV[4], 'n', ARGV[7]}
for i = 0, tonumber(ARGV[7]) - 1 do
  f[#f + 1] = 's:' .. i
  f[#f + 1] = ARGV[8 + i]
end
hset(KEYS[1], f)
if ARGV[6] == '1' then
  redis.call('SET', KEYS[2], ARGV[5])
end
for i = 3, 6 do
  redis.call('ZADD', KEYS[i], 0, ARGV[4])
end
if ARGV[3] ~= '' then
  redis.call('SADD', KEYS[7], ARGV[5])
end
return {1}
