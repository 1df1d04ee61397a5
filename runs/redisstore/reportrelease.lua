-- End every claim of an owner among the candidate reports and make them due now.
-- KEYS: rptdue, then per candidate its hash and states list
-- ARGV: owner, then the candidates' report keys
-- Returns how many claims were released.
local n = 0
for i = 2, #ARGV do
  local h = KEYS[2 * i - 2]
  if redis.call('HGET', h, 'own') == ARGV[1] then
    redis.call('HSET', h, 'own', '', 'exp', '0')
    redis.call('ZADD', KEYS[1], now, ARGV[i])
    n = n + 1
  end
end
return n
