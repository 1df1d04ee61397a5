-- Claim up to a limit of the candidate reports that are due (due score <= now), oldest due
-- first, for an owner: the claim's expiry becomes the owner's field and the due score, so
-- an expired claim is due again by itself. A candidate with nothing pending (or gone) leaves
-- rptdue.
-- KEYS: rptdue, then per candidate its hash and states list
-- ARGV: owner, lease (ms), limit, then the candidates' report keys
-- Returns per claimed report {key, fields, states} (see reportFields).
local exp = now + tonumber(ARGV[2])
local due = {}
for i = 4, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) <= now then
    due[#due + 1] = {tonumber(s), i}
  end
end
table.sort(due, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return ARGV[a[2]] < ARGV[b[2]]
end)
local out = {}
for _, d in ipairs(due) do
  if #out >= tonumber(ARGV[3]) then
    break
  end
  local m, h, l = ARGV[d[2]], KEYS[2 * d[2] - 6], KEYS[2 * d[2] - 5]
  local sent = redis.call('HGET', h, 'sent')
  if not sent or tonumber(sent) >= redis.call('LLEN', l) then
    redis.call('ZREM', KEYS[1], m)
  else
    redis.call('HSET', h, 'own', ARGV[1], 'exp', string.format('%d', exp))
    redis.call('ZADD', KEYS[1], exp, m)
    out[#out + 1] = {m, redis.call('HMGET', h, unpack(reportFields)), redis.call('LRANGE', l, 0, -1)}
  end
end
return out
