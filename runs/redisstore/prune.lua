-- Delete an ended run with its events, index entries, owner-set entry and idempotency key.
-- KEYS: run, ev, idx:all, idx:pl, idx:st, idx:ps, owner, idem (or any key when none)
-- ARGV: status read before (terminal), sort key, id, has idem ("1"/"0")
-- Returns 1 when deleted, 0 when the run is gone or its status is not the one read.
if redis.call('HGET', KEYS[1], 'st') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
for i = 3, 6 do
  redis.call('ZREM', KEYS[i], ARGV[2])
end
redis.call('SREM', KEYS[7], ARGV[3])
if ARGV[4] == '1' and redis.call('GET', KEYS[8]) == ARGV[3] then
  redis.call('DEL', KEYS[8])
end
return 1
