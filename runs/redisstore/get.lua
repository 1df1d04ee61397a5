-- Read runs, each unless the caller already holds its stored version: a page of the API's
-- list is one call, not one per run.
-- KEYS: the runs
-- ARGV: for each run, the version the caller holds ('' for none)
-- Returns one entry per run, in order: nil when the run does not exist, its version (a
-- string) when it is the one the caller holds, else the whole hash as HGETALL gives it.
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('HGET', key, 'v')
  if not v then
    out[i] = false
  elseif v == ARGV[i] then
    out[i] = v
  else
    out[i] = redis.call('HGETALL', key)
  end
end
return out
