package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The audit log (runs.AuditLog):
//
//	P{runs}:audit          sorted set of record JSON, scored by Seq
//	P{runs}:audit:head     the last record's link (runs.AuditLink JSON)
//	P{runs}:audit:anchor   the last pruned record's link
//
// Redis has no SHA-256 in Lua, so an append is optimistic: it reads the head, seals the
// record in Go, and a script writes it only if the head is still the one read (else it
// reads again). Appends from every daemon form one chain.

func (d *driver) auditKey() string       { return d.k + "audit" }
func (d *driver) auditHeadKey() string   { return d.k + "audit:head" }
func (d *driver) auditAnchorKey() string { return d.k + "audit:anchor" }

// auditAppendScript: KEYS audit, head; ARGV the head read (JSON or ""), the record's seq,
// its JSON, the new head's JSON. Returns 1, or 0 when the head changed.
var auditAppendScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[2]) or ''
if cur ~= ARGV[1] then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
return 1`)

// auditPruneScript: KEYS audit, head, anchor; ARGV the head read, the last seq to delete,
// the new anchor's JSON. Returns 1, or 0 when the head changed.
var auditPruneScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[2]) or ''
if cur ~= ARGV[1] then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('SET', KEYS[3], ARGV[3])
return 1`)

// AppendAudit implements runs.AuditLog.
func (s *Store) AppendAudit(ctx context.Context, rec runs.AuditRecord) (runs.AuditRecord, error) {
	if err := runs.CheckAudit(rec); err != nil {
		return runs.AuditRecord{}, err
	}
	const op = "append audit record"
	if err := s.d.open(op); err != nil {
		return runs.AuditRecord{}, err
	}
	keys := []string{s.d.auditKey(), s.d.auditHeadKey()}
	for {
		raw, head, err := s.d.auditLink(ctx, s.d.auditHeadKey())
		if err != nil {
			return runs.AuditRecord{}, runs.Fail(op, err)
		}
		sealed := runs.SealAudit(rec, head, time.Now())
		data, err := json.Marshal(sealed)
		if err != nil {
			return runs.AuditRecord{}, runs.Fail(op, err)
		}
		next, _ := json.Marshal(runs.AuditLink{Seq: sealed.Seq, Hash: sealed.Hash})
		ok, err := auditAppendScript.Run(ctx, s.d.rdb, keys, raw, sealed.Seq, data, next).Int()
		if err != nil {
			return runs.AuditRecord{}, runs.Fail(op, err)
		}
		if ok == 1 {
			return sealed, nil
		}
		if err := ctx.Err(); err != nil { // another daemon appended first: read again
			return runs.AuditRecord{}, runs.Fail(op, err)
		}
	}
}

// AuditRecords implements runs.AuditLog.
func (s *Store) AuditRecords(ctx context.Context, after int64, limit int) ([]runs.AuditRecord, error) {
	const op = "read audit records"
	if err := s.d.open(op); err != nil {
		return nil, err
	}
	by := &redis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf"}
	if limit > 0 {
		by.Count = int64(limit)
	}
	vals, err := s.d.rdb.ZRangeByScore(ctx, s.d.auditKey(), by).Result()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	out := make([]runs.AuditRecord, 0, len(vals))
	for _, v := range vals {
		var rec runs.AuditRecord
		if err := json.Unmarshal([]byte(v), &rec); err != nil {
			return nil, runs.Fail(op, fmt.Errorf("decode audit record: %w", err))
		}
		out = append(out, rec)
	}
	return out, nil
}

// AuditEnds implements runs.AuditLog.
func (s *Store) AuditEnds(ctx context.Context) (anchor, head runs.AuditLink, err error) {
	const op = "read audit ends"
	if err := s.d.open(op); err != nil {
		return anchor, head, err
	}
	if _, anchor, err = s.d.auditLink(ctx, s.d.auditAnchorKey()); err != nil {
		return anchor, head, runs.Fail(op, err)
	}
	if _, head, err = s.d.auditLink(ctx, s.d.auditHeadKey()); err != nil {
		return anchor, head, runs.Fail(op, err)
	}
	if head.Seq == 0 {
		head = anchor
	}
	return anchor, head, nil
}

// auditLink reads the link at key: its raw JSON ("" when unset) and its value.
func (d *driver) auditLink(ctx context.Context, key string) (string, runs.AuditLink, error) {
	var l runs.AuditLink
	raw, err := d.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", l, nil
	}
	if err != nil {
		return "", l, err
	}
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		return "", l, fmt.Errorf("decode %s: %w", key, err)
	}
	return raw, l, nil
}

// pruneAudit deletes the audit records r no longer keeps (runs.AuditPruneUpTo) and makes the
// last of them the anchor; it starts over when an append got in between.
func (d *driver) pruneAudit(ctx context.Context, r runs.Retention) error {
	for {
		raw, head, err := d.auditLink(ctx, d.auditHeadKey())
		if err != nil {
			return err
		}
		old, err := d.newestAuditBefore(ctx, runs.AuditCutoff(r, time.Now()))
		if err != nil {
			return err
		}
		upTo := runs.AuditPruneUpTo(head.Seq, old)
		if upTo == 0 {
			return nil
		}
		s := strconv.FormatInt(upTo, 10)
		vals, err := d.rdb.ZRangeByScore(ctx, d.auditKey(), &redis.ZRangeBy{Min: s, Max: s}).Result()
		if err != nil || len(vals) == 0 {
			return err // nil: already pruned
		}
		var last runs.AuditRecord
		if err := json.Unmarshal([]byte(vals[0]), &last); err != nil {
			return fmt.Errorf("decode audit record %d: %w", upTo, err)
		}
		anchor, _ := json.Marshal(runs.AuditLink{Seq: last.Seq, Hash: last.Hash})
		ok, err := auditPruneScript.Run(ctx, d.rdb, []string{d.auditKey(), d.auditHeadKey(), d.auditAnchorKey()},
			raw, upTo, anchor).Int()
		if err != nil || ok == 1 {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// newestAuditBefore returns the Seq of the newest record older than cutoff (0: none, or a
// zero cutoff). Records are in time order, so it reads from the oldest a page at a time.
func (d *driver) newestAuditBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	if cutoff.IsZero() {
		return 0, nil
	}
	const page = 256
	var newest int64
	for start := int64(0); ; start += page {
		vals, err := d.rdb.ZRange(ctx, d.auditKey(), start, start+page-1).Result()
		if err != nil {
			return 0, err
		}
		for _, v := range vals {
			var rec runs.AuditRecord
			if err := json.Unmarshal([]byte(v), &rec); err != nil {
				return 0, fmt.Errorf("decode audit record: %w", err)
			}
			if !rec.At.Before(cutoff) {
				return newest, nil
			}
			newest = rec.Seq
		}
		if len(vals) < page {
			return newest, nil
		}
	}
}
