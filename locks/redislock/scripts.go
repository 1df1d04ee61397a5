package redislock

import "github.com/redis/go-redis/v9"

// The Lua scripts below are the driver's atomic steps. Each touches only the keys of one
// lock (they share the hash tag {<key>}, so they live in one Cluster slot) and reads the
// time from the server (TIME), so every expiry and deadline is on the server's clock.
//
// A lock is one hash that is never deleted: the fence counter, the lease (empty when
// free) and the lock-delay. Fields, in the order luaFields reads them into l:
//
//	tok holder fence acq exp msg frozen closed
//
// and 'handed', "<ticket> <token>" of the last lease a release handed to a waiter (see
// luaWake), which only the leaving of a waiter reads.
//
// A lease is live while tok is set and exp is after now; times are Unix milliseconds.
// Fences and times are written with string.format('%d') since Lua numbers are doubles
// and tostring would print large ones in exponent form.

// luaTime reads the server's clock: now (ms) and nowUS (µs).
const luaTime = `
local t = redis.call('TIME')
local nowUS = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowUS / 1000)
`

// luaFmt defines fmt, which spells a number with every digit.
const luaFmt = `
local fmt = function(n) return string.format('%d', n) end
`

// luaClock is luaTime and luaFmt.
const luaClock = luaTime + luaFmt

// luaFields reads the lock's fields into l, whether its lease is live and its lock-delay.
// It needs now.
const luaFields = `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen', 'closed')
local live = l[1] and l[1] ~= '' and tonumber(l[5] or '0') > now
local closed = tonumber(l[8] or '0')
`

// luaPrelude is the prelude of the scripts that read the whole lock (force release, freeze,
// unfreeze, get): luaClock and luaFields. It defines one Lua function (fmt); lease and
// clear are defined by luaLease, for the scripts that use them.
const luaPrelude = luaClock + luaFields

// luaLease reads the lease fields of l (holder fence acq exp msg frozen) and clears the
// lease.
const luaLease = `
local function lease() return {l[2] or '', l[3] or '', l[4] or '', l[5] or '', l[6] or '', l[7] or ''} end
local function clear() redis.call('HSET', KEYS[1], 'tok', '') end
`

// luaGrant writes a new lease. The fence never goes below the server's clock in
// microseconds, so a Redis that lost the hash (restart without persistence, failover to a
// lagging replica) still hands out a fence above every earlier one.
const luaGrant = `
local function grant(token, holder, msg, ttl, frozen)
  local fence = tonumber(l[3] or '0') + 1
  if nowUS > fence then fence = nowUS end
  local fs, acq, exp = fmt(fence), fmt(now), fmt(now + tonumber(ttl))
  redis.call('HSET', KEYS[1], 'tok', token, 'holder', holder, 'fence', fs,
    'acq', acq, 'exp', exp, 'msg', msg, 'frozen', frozen)
  return {1, fs, acq, exp}
end
`

// acquireScript is TryAcquire: check the lease, the lock-delay and the queue head (dropping
// dead waiters), then grant or queue the ticket.
//
// The uncontended grant (no live lease, no lock-delay, nobody queued) is taken first and
// kept to four calls: TIME, HMGET of the four fields it needs, EXISTS on the queue, HSET.
// It defines no Lua function but fmt and reads the queue only through EXISTS: Redis
// deletes an empty sorted set, so a queue key that does not exist is an empty queue.
// Everything else goes through the full path, which reads every field again.
//
// A newly queued ticket's claim (its handover token, holder, message, TTL and the id of the
// driver that queued it) is kept beside it, so that a release can hand the key straight to
// it (see luaWake); a try that
// finds the key held under its own handover token takes the lease over with its own token.
//
// KEYS: lock queue deadlines claims
// ARGV: token holder message ttl_ms ticket ticket_ttl_ms handover_token driver_id
//
// Returns {1, fence, acquired_ms, expires_ms} on a grant, or
// {0, kind, holder, fence, acquired_ms, expires_ms, message, frozen, closed_until_ms}
// where kind is held, frozen, delay or queue.
var acquireScript = redis.NewScript(luaClock + `
local f = redis.call('HMGET', KEYS[1], 'tok', 'exp', 'closed', 'fence')
if not (f[1] and f[1] ~= '' and tonumber(f[2] or '0') > now) and tonumber(f[3] or '0') <= now
    and redis.call('EXISTS', KEYS[2]) == 0 then
  local fence = tonumber(f[4] or '0') + 1
  if nowUS > fence then fence = nowUS end
  local fs, acq, exp = fmt(fence), fmt(now), fmt(now + tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'holder', ARGV[2], 'fence', fs,
    'acq', acq, 'exp', exp, 'msg', ARGV[3], 'frozen', '0')
  return {1, fs, acq, exp}
end
` + luaFields + luaLease + luaGrant + `
local token, ticket = ARGV[1], ARGV[5]

local function wait(kind, info, closedUntil)
  if ticket ~= '' then
    -- ZADD answers 1 for a new member: a new ticket also takes the next place in line.
    if redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ticket) == 1 then
      local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
      local seq = 1
      if last[2] then seq = tonumber(last[2]) + 1 end
      redis.call('ZADD', KEYS[2], seq, ticket)
      if ARGV[7] ~= '' then
        redis.call('HSET', KEYS[4], ticket, cjson.encode({ARGV[7], ARGV[2], ARGV[3], ARGV[4], ARGV[8]}))
      end
    end
  end
  info = info or {'', '', '', '', '', ''}
  return {0, kind, info[1], info[2], info[3], info[4], info[5], info[6], closedUntil or ''}
end

if live then
  if l[1] == token then
    -- A retried attempt whose first try won (go-redis retried a call whose answer was
    -- lost, or the caller retried with the same token): hand out the same grant, with
    -- its expiry renewed from now, so that a caller timing the lease from before this
    -- call never believes in it past its expiry.
    local exp = fmt(now + tonumber(ARGV[4]))
    redis.call('HSET', KEYS[1], 'exp', exp)
    if ticket ~= '' then
      redis.call('ZREM', KEYS[2], ticket)
      redis.call('ZREM', KEYS[3], ticket)
    end
    return {1, l[3], l[4], exp}
  end
  if ARGV[7] ~= '' and l[1] == ARGV[7] then
    -- A release handed the key to this waiter and this try came before (or instead of)
    -- its signal: the lease is this waiter's, now under this try's token and TTL.
    local exp = fmt(now + tonumber(ARGV[4]))
    redis.call('HSET', KEYS[1], 'tok', token, 'exp', exp)
    if ticket ~= '' then
      redis.call('ZREM', KEYS[2], ticket)
      redis.call('ZREM', KEYS[3], ticket)
      redis.call('HDEL', KEYS[4], ticket)
    end
    return {1, l[3], l[4], exp}
  end
  local kind = 'held'
  if l[7] == '1' then kind = 'frozen' end
  return wait(kind, lease())
end
if closed > now then
  return wait('delay', nil, fmt(closed))
end

local head = redis.call('ZRANGE', KEYS[2], 0, 0)
if head[1] and head[1] ~= ticket then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #dead > 0 then
    for i = 1, #dead do redis.call('ZREM', KEYS[2], dead[i]) end
    redis.call('HDEL', KEYS[4], unpack(dead))
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    head = redis.call('ZRANGE', KEYS[2], 0, 0)
  end
end
if head[1] and head[1] ~= ticket then
  return wait('queue')
end
if head[1] then
  redis.call('ZREM', KEYS[2], ticket)
  redis.call('ZREM', KEYS[3], ticket)
  redis.call('HDEL', KEYS[4], ticket)
end
return grant(token, ARGV[2], ARGV[3], ARGV[4], '0')
`)

// renewScript extends a live lease held under token.
//
// KEYS: lock
// ARGV: token ttl_ms
//
// Returns {1, expires_ms}, or {0} when token does not hold a live lease.
var renewScript = redis.NewScript(luaTime + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'exp')
if l[1] ~= ARGV[1] or tonumber(l[2] or '0') <= now then return {0} end
local exp = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'exp', exp)
return {1, exp}
`)

// luaWake ends a script that has just cleared a lease: it publishes the release and
// returns 1. An empty queue (the uncontended release) is found by EXISTS, the cheapest
// read, and the release is published to everyone; only past it are the functions the
// handover needs (fmt, grant) defined. When the waiter at the head of the queue is live and
// left its claim, the key is handed to it: granted to its handover token, holder and message,
// expiring at its TTL or its ticket's deadline, whichever comes first (so a waiter that
// died just before cannot keep the key longer than its ticket would have blocked the
// queue), with the lock field 'handed' naming the ticket and the token; the payload is
// then "<ticket> <fence> <acquired_ms> <expires_ms>", published on the channel of the
// waiter's driver for the key ("<channel>:<driver id>", from the claim; on the key's
// channel for a claim without an id, left by an older build), and the woken waiter holds
// the lease without another round trip. Otherwise the payload names the head waiter, so
// that only the driver that queued it wakes its subscribers, or is empty (wake everyone)
// when its head has passed its deadline (their attempts drop it).
//
// It needs l (a table, for grant), now and nowUS.
//
// KEYS: lock queue deadlines claims
// ARGV[2]: the key's channel
const luaWake = `
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
` + luaFmt + luaGrant + `
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or ''
local dl = redis.call('ZSCORE', KEYS[3], head)
if not dl or tonumber(dl) <= now then
  head = ''
else
  local claim = redis.call('HGET', KEYS[4], head)
  if claim then
    local c = cjson.decode(claim)
    l[3] = redis.call('HGET', KEYS[1], 'fence')
    local r = grant(c[1], c[2], c[3], math.min(tonumber(c[4]), tonumber(dl) - now), '0')
    redis.call('HSET', KEYS[1], 'handed', head .. ' ' .. c[1])
    redis.call('ZREM', KEYS[2], head)
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
    local to = ARGV[2]
    if c[5] and c[5] ~= '' then to = ARGV[2] .. ':' .. c[5] end
    redis.call('PUBLISH', to, head .. ' ' .. r[2] .. ' ' .. r[3] .. ' ' .. r[4])
    return 1
  end
end
redis.call('PUBLISH', ARGV[2], head)
return 1
`

// luaRelease is the prelude of the release scripts: luaTime for luaWake, and the lease's
// token and expiry in l[1] and l[2]. It defines no Lua function.
const luaRelease = luaTime + `
local l = redis.call('HMGET', KEYS[1], 'tok', 'exp')
`

// releaseScript clears the lease only if token holds it, and wakes the next waiter or
// hands it the key. A lease past its expiry is not held: releasing it changes nothing.
//
// KEYS: lock queue deadlines claims
// ARGV: token channel
//
// Returns 1 when released, 0 when token does not hold a live lease.
var releaseScript = redis.NewScript(luaRelease + `
if l[1] ~= ARGV[1] or tonumber(l[2] or '0') <= now then return 0 end
redis.call('HSET', KEYS[1], 'tok', '')
` + luaWake)

// unsafeReleaseScript is the bug the fault-injection test must catch: clear the lease
// whoever holds it now, as a DEL by name would. Only tests enable it.
var unsafeReleaseScript = redis.NewScript(luaRelease + `
redis.call('HSET', KEYS[1], 'tok', '')
` + luaWake)

// leaveScript takes a waiter's ticket out of the queue. If a release handed the key to
// the ticket and the lease is still live under the token it was handed under, the waiter
// gave up before it took it: the lease is released and the next waiter woken or handed
// the key.
//
// KEYS: lock queue deadlines claims
// ARGV: ticket channel
var leaveScript = redis.NewScript(luaRelease + `
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if not (l[1] and l[1] ~= '' and tonumber(l[2] or '0') > now and redis.call('HGET', KEYS[1], 'handed') == ARGV[1] .. ' ' .. l[1]) then
  return 1
end
redis.call('HSET', KEYS[1], 'tok', '')
` + luaWake)

// forceReleaseScript is an operator's forced release.
//
// KEYS: lock
// ARGV: fence holder delay_ms channel
//
// Returns {0} when the key is free, {2, lease...} when the fence or holder does not match,
// {1, lease...} when the lease was evicted; lease is holder fence acq exp msg frozen.
var forceReleaseScript = redis.NewScript(luaPrelude + luaLease + `
if not live then return {0} end
local info = lease()
if (ARGV[1] ~= '0' and l[3] ~= ARGV[1]) or (ARGV[2] ~= '' and l[2] ~= ARGV[2]) then
  return {2, info[1], info[2], info[3], info[4], info[5], info[6]}
end
clear()
local delay = tonumber(ARGV[3])
if delay > 0 then redis.call('HSET', KEYS[1], 'closed', fmt(now + delay)) end
redis.call('PUBLISH', ARGV[4], '') -- everyone: the holder's watch and the waiters
return {1, info[1], info[2], info[3], info[4], info[5], info[6]}
`)

// freezeScript puts an operator lease on a free key.
//
// KEYS: lock
// ARGV: token holder message ttl_ms
//
// Returns {1, fence, acq, exp}, or {0, kind, lease...} when held; kind is held or frozen.
var freezeScript = redis.NewScript(luaPrelude + luaLease + luaGrant + `
if live then
  local kind = 'held'
  if l[7] == '1' then kind = 'frozen' end
  local info = lease()
  return {0, kind, info[1], info[2], info[3], info[4], info[5], info[6]}
end
return grant(ARGV[1], ARGV[2], ARGV[3], ARGV[4], '1')
`)

// unfreezeScript lifts a freeze and wakes the waiters.
//
// KEYS: lock
// ARGV: channel
//
// Returns {1, lease...} when lifted (lease is holder fence acq exp msg frozen), {0} when
// the key is not frozen.
var unfreezeScript = redis.NewScript(luaPrelude + luaLease + `
if not live or l[7] ~= '1' then return {0} end
local info = lease()
clear()
redis.call('PUBLISH', ARGV[1], '')
return {1, info[1], info[2], info[3], info[4], info[5], info[6]}
`)

// getScript reads a live lease, its live waiters and its lock-delay. It writes nothing.
//
// KEYS: lock deadlines
//
// Returns {found, holder, fence, acq, exp, msg, frozen, waiters, closed_until_ms}.
var getScript = redis.NewScript(luaPrelude + luaLease + `
local waiters = redis.call('ZCOUNT', KEYS[2], '(' .. fmt(now), '+inf')
local closedUntil = ''
if closed > now then closedUntil = fmt(closed) end
local found, info = 0, {'', '', '', '', '', ''}
if live then found, info = 1, lease() end
return {found, info[1], info[2], info[3], info[4], info[5], info[6], waiters, closedUntil}
`)
