-- Read reports, each its hash's fields and its states in one step.
-- KEYS: per report its hash and states list
-- Returns per report {fields, states} (see reportFields); a report that is gone has nil
-- fields.
local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = {redis.call('HMGET', KEYS[i], unpack(reportFields)), redis.call('LRANGE', KEYS[i + 1], 0, -1)}
end
return out
