package redislock

import "github.com/redis/go-redis/v9"

// The Lua scripts below are the driver's atomic steps. Each touches only the keys of one
// lock (they share the hash tag {<key>}, so they live in one Cluster slot) and reads the
// time from the server (TIME), so every expiry and deadline is on the server's clock.
//
// Lease hash fields, in the order every script reads them with HMGET:
//
//	tok holder fence acq exp msg frozen
//
// Times are Unix milliseconds; fences and times are written with string.format('%d') since
// Lua numbers are doubles and tostring would print large ones in exponent form.

// luaPrelude is shared by the scripts that need the time: now (ms) and nowUS (µs).
const luaPrelude = `
local t = redis.call('TIME')
local nowUS = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowUS / 1000)
local function fmt(n) return string.format('%d', n) end
`

// acquireScript is TryAcquire: prune dead waiters, check the lease, the lock-delay and the
// queue head, then grant (new fence, lease metadata, TTL) or queue the ticket.
//
// KEYS: lease fence queue deadlines delay
// ARGV: token holder message ttl_ms ticket ticket_ttl_ms
//
// Returns {1, fence, acquired_ms, expires_ms} on a grant, or
// {0, kind, holder, fence, acquired_ms, expires_ms, message, closed_until_ms} where kind is
// held, frozen, delay or queue.
var acquireScript = redis.NewScript(luaPrelude + `
local token, ticket = ARGV[1], ARGV[5]

local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
if #dead > 0 then
  for i = 1, #dead do redis.call('ZREM', KEYS[3], dead[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end

local function leave()
  if ticket ~= '' then
    redis.call('ZREM', KEYS[3], ticket)
    redis.call('ZREM', KEYS[4], ticket)
  end
end

local function wait(kind, holder, fence, acq, exp, msg, closed)
  if ticket ~= '' then
    if not redis.call('ZSCORE', KEYS[3], ticket) then
      local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
      local seq = 1
      if last[2] then seq = tonumber(last[2]) + 1 end
      redis.call('ZADD', KEYS[3], seq, ticket)
    end
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ticket)
    -- The queue lives as long as its longest-lived waiter, so abandoned tickets vanish.
    local newest = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    local ttl = tonumber(newest[2]) - now + 1
    redis.call('PEXPIRE', KEYS[3], ttl)
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  return {0, kind, holder or '', fence or '', acq or '', exp or '', msg or '', closed or ''}
end

local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen')
if l[1] then
  if l[1] == token then
    -- A retried attempt whose first try won: hand out the same grant again.
    leave()
    return {1, l[3], l[4], l[5]}
  end
  local kind = 'held'
  if l[7] == '1' then kind = 'frozen' end
  return wait(kind, l[2], l[3], l[4], l[5], l[6], '')
end

local closed = redis.call('PTTL', KEYS[5])
if closed > 0 then
  return wait('delay', '', '', '', '', '', fmt(now + closed))
end

local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] and head[1] ~= ticket then
  return wait('queue')
end

-- The fence never goes below the server's clock in microseconds, so a Redis that lost the
-- counter (restart without persistence, failover to a lagging replica) still hands out a
-- fence above every earlier one.
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if nowUS > fence then fence = nowUS end
local fs, acq, exp = fmt(fence), fmt(now), fmt(now + tonumber(ARGV[4]))
redis.call('SET', KEYS[2], fs)
redis.call('HSET', KEYS[1], 'tok', token, 'holder', ARGV[2], 'fence', fs,
  'acq', acq, 'exp', exp, 'msg', ARGV[3], 'frozen', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
leave()
return {1, fs, acq, exp}
`)

// renewScript extends a lease held under token.
//
// KEYS: lease
// ARGV: token ttl_ms
//
// Returns {1, expires_ms}, or {0} when token does not hold the lease.
var renewScript = redis.NewScript(luaPrelude + `
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return {0} end
local exp = fmt(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, exp}
`)

// releaseScript deletes the lease only if token holds it, and wakes the waiters.
//
// KEYS: lease
// ARGV: token channel
//
// Returns 1 when released, 0 when token does not hold the lease.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`)

// unsafeReleaseScript is the bug the fault-injection test must catch: delete by name,
// whoever holds the key now. Only tests enable it.
var unsafeReleaseScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`)

// luaAudit appends one audit entry (strings only, so cjson keeps every digit) and caps
// the key's audit list.
const luaAudit = `
local function audit(list, cap, action, key, by, reason, l)
  local e = {at = fmt(now), action = action, key = key, by = by, reason = reason}
  if l then
    e.evicted = {holder = l[2], fence = l[3], acq = l[4], exp = l[5], msg = l[6], frozen = l[7]}
  end
  redis.call('LPUSH', list, cjson.encode(e))
  redis.call('LTRIM', list, 0, tonumber(cap) - 1)
end
`

// forceReleaseScript is an operator's forced release.
//
// KEYS: lease delay audit
// ARGV: fence holder reason by delay_ms key audit_cap channel
//
// Returns {0} when the key is free, {2, lease...} when the fence or holder does not match,
// {1, lease...} when the lease was evicted; lease is holder fence acq exp msg frozen.
var forceReleaseScript = redis.NewScript(luaPrelude + luaAudit + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen')
if not l[1] then return {0} end
if (ARGV[1] ~= '0' and l[3] ~= ARGV[1]) or (ARGV[2] ~= '' and l[2] ~= ARGV[2]) then
  return {2, l[2], l[3], l[4], l[5], l[6], l[7]}
end
redis.call('DEL', KEYS[1])
local delay = tonumber(ARGV[5])
if delay > 0 then
  redis.call('SET', KEYS[2], fmt(now + delay), 'PX', delay)
end
audit(KEYS[3], ARGV[7], 'force_release', ARGV[6], ARGV[4], ARGV[3], l)
redis.call('PUBLISH', ARGV[8], 'released')
return {1, l[2], l[3], l[4], l[5], l[6], l[7]}
`)

// freezeScript puts an operator lease on a free key.
//
// KEYS: lease fence audit
// ARGV: token holder message ttl_ms key audit_cap by
//
// Returns {1, fence, acq, exp}, or {0, kind, holder, fence, acq, exp, msg} when held.
var freezeScript = redis.NewScript(luaPrelude + luaAudit + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen')
if l[1] then
  local kind = 'held'
  if l[7] == '1' then kind = 'frozen' end
  return {0, kind, l[2], l[3], l[4], l[5], l[6]}
end
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if nowUS > fence then fence = nowUS end
local fs, acq, exp = fmt(fence), fmt(now), fmt(now + tonumber(ARGV[4]))
redis.call('SET', KEYS[2], fs)
redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'holder', ARGV[2], 'fence', fs,
  'acq', acq, 'exp', exp, 'msg', ARGV[3], 'frozen', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
audit(KEYS[3], ARGV[6], 'freeze', ARGV[5], ARGV[7], ARGV[3], nil)
return {1, fs, acq, exp}
`)

// unfreezeScript lifts a freeze and wakes the waiters.
//
// KEYS: lease audit
// ARGV: by reason key audit_cap channel
//
// Returns 1 when lifted, 0 when the key is not frozen.
var unfreezeScript = redis.NewScript(luaPrelude + luaAudit + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen')
if not l[1] or l[7] ~= '1' then return 0 end
redis.call('DEL', KEYS[1])
audit(KEYS[2], ARGV[4], 'unfreeze', ARGV[3], ARGV[1], ARGV[2], l)
redis.call('PUBLISH', ARGV[5], 'released')
return 1
`)

// getScript reads a lease, its live waiters and its lock-delay. It writes nothing.
//
// KEYS: lease deadlines delay
//
// Returns {found, holder, fence, acq, exp, msg, frozen, waiters, closed_until_ms}.
var getScript = redis.NewScript(luaPrelude + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen')
local waiters = redis.call('ZCOUNT', KEYS[2], '(' .. fmt(now), '+inf')
local closed = redis.call('PTTL', KEYS[3])
local closedUntil = ''
if closed > 0 then closedUntil = fmt(now + closed) end
local found = 0
if l[1] then found = 1 end
return {found, l[2] or '', l[3] or '', l[4] or '', l[5] or '', l[6] or '', l[7] or '', waiters, closedUntil}
`)
