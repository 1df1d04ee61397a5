-- Write a claimed report's delivery progress and end the claim, if the owner still holds
-- it; the report is due again at NotBefore (or now, when that is later) while pending.
-- KEYS: rpt, rpts, rptdue
-- ARGV: report key, owner, host id, sent, attempts, not before (Unix ns, '' for none),
--       not before (ms), last error
-- Returns {1} when written, {-1} when there is no report, {-2, owner} when the owner does
-- not hold it, {-3, sent, states} when sent is below the recorded or above the states.
local own = redis.call('HGET', KEYS[1], 'own')
if not own then
  return {-1}
end
if own ~= ARGV[2] then
  return {-2, own}
end
local was = tonumber(redis.call('HGET', KEYS[1], 'sent'))
local n = redis.call('LLEN', KEYS[2])
local sent = tonumber(ARGV[4])
if sent < was or sent > n then
  return {-3, was, n}
end
redis.call('HSET', KEYS[1], 'hid', ARGV[3], 'sent', ARGV[4], 'att', ARGV[5], 'nb', ARGV[6],
  'err', ARGV[8], 'own', '', 'exp', '0', 'upd', nowNS)
if sent < n then
  redis.call('ZADD', KEYS[3], math.max(tonumber(ARGV[7]), now), ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return {1}
