-- Delete an ended run with its own keys, index entries, owner-set entry and idempotency key.
-- KEYS: idx:all, idx:pl, idx:st, idx:ps, owner, idem (or any key when none), then the run's
--       own keys, its hash first (runKeys)
-- ARGV: status read before (terminal), sort key, id, has idem ("1"/"0")
-- Returns 1 when deleted, 0 when the run is gone or its status is not the one read.
if redis.call('HGET', KEYS[7], 'st') ~= ARGV[1] then
  return 0
end
redis.call('DEL', unpack(KEYS, 7))
for i = 1, 4 do
  redis.call('ZREM', KEYS[i], ARGV[2])
end
redis.call('SREM', KEYS[5], ARGV[3])
if ARGV[4] == '1' and redis.call('GET', KEYS[6]) == ARGV[3] then
  redis.call('DEL', KEYS[6])
end
return 1
