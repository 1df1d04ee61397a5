-- Append a state to a report, creating the report when there is none, and make it due now
-- unless it is claimed (a claimed one keeps its claim's expiry as its due score).
-- KEYS: rpt (hash), rpts (states), rptdue, rptrun (the run's report keys), rptruns
-- ARGV: report key, the report's fixed JSON, the state's JSON, run id
-- Returns 1 when the report was created, 0 when it was there.
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'j', ARGV[2], 'crt', nowNS, 'hid', '', 'sent', '0', 'att', '0',
    'nb', '', 'err', '', 'own', '', 'exp', '0')
  redis.call('SADD', KEYS[4], ARGV[1])
  redis.call('SADD', KEYS[5], ARGV[4])
  created = 1
end
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'upd', nowNS)
if redis.call('HGET', KEYS[1], 'own') == '' then
  local due = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not due or tonumber(due) > now then
    redis.call('ZADD', KEYS[3], now, ARGV[1])
  end
end
return created
