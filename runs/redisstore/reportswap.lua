-- Record a report key as the latest of a scope and answer the one it replaces.
-- KEYS: rptscope
-- ARGV: scope, report key
-- Returns the key replaced: '' when there was none, or when it was the same key.
local prev = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if not prev or prev == ARGV[2] then
  return ''
end
return prev
