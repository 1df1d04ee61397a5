-- Drop a scope's latest-report pointer if it still names a report that is gone.
-- KEYS: rptscope, rpt (the hash of the report named)
-- ARGV: scope, report key
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
