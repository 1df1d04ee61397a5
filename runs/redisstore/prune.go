package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/internal/storekit"
)

var _ runs.Pruner = (*Store)(nil)

//go:embed prune.lua
var pruneLua string

// pruneScript: KEYS all, pl, st, ps, owner, idem, then runKeys; ARGV status, sort key, id,
// has idem ("1"/"0"). Returns 1 when it deleted the run.
var pruneScript = redis.NewScript(pruneLua)

// runKeys are the keys that belong to one run alone, its hash first: Prune deletes them with
// the run. A new per-run key belongs here.
func (s *Store) runKeys(id string) []string { return []string{s.runKey(id), s.evKey(id)} }

// Prune implements runs.Pruner. It walks the all-runs index from the oldest entry below the
// cutoff, reads each batch of runs, and deletes the ended ones with one script call each
// (sent in one pipeline), which checks that the run is still there in the status read.
// Delivery markers need nothing: they expire by their own TTL.
func (s *Store) Prune(ctx context.Context, r runs.Retention) (int, error) {
	const op = "prune runs"
	if err := s.open(op); err != nil {
		return 0, err
	}
	var nth string
	if r.MaxRuns > 0 {
		sks, err := s.rdb.ZRevRange(ctx, s.allKey(), int64(r.MaxRuns-1), int64(r.MaxRuns-1)).Result()
		if err != nil {
			return 0, storekit.Fail(op, err)
		}
		if len(sks) > 0 {
			nth = sks[0]
		}
	}
	before, err := storekit.PruneBefore(r, s.now(), nth)
	if err != nil || before == "" {
		return 0, err
	}
	if err := pruneScript.Load(ctx, s.rdb).Err(); err != nil {
		return 0, storekit.Fail(op, err)
	}
	deleted, min := 0, "-"
	for {
		sks, err := s.rdb.ZRangeByLex(ctx, s.allKey(), &redis.ZRangeBy{Min: min, Max: "(" + before, Count: storekit.PruneBatch}).Result()
		if err != nil {
			return deleted, storekit.Fail(op, err)
		}
		n, err := s.pruneBatch(ctx, sks)
		deleted += n
		if err != nil {
			return deleted, storekit.Fail(op, err)
		}
		if len(sks) < storekit.PruneBatch {
			return deleted, nil
		}
		min = "(" + sks[len(sks)-1]
	}
}

// pruneBatch deletes the ended runs among the index entries sks and returns how many it deleted.
func (s *Store) pruneBatch(ctx context.Context, sks []string) (int, error) {
	if len(sks) == 0 {
		return 0, nil
	}
	pipe := s.rdb.Pipeline()
	reads := make([]*redis.SliceCmd, len(sks))
	for i, sk := range sks {
		_, id, err := storekit.SplitSortKey(sk)
		if err != nil {
			return 0, fmt.Errorf("index entry %q: %w", sk, err)
		}
		reads[i] = pipe.HMGet(ctx, s.runKey(id), "h", "d") // its header, or the whole run an older build wrote
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	pipe = s.rdb.Pipeline()
	var (
		dels []*redis.Cmd
		ids  []string
	)
	for i, c := range reads {
		data, ok := c.Val()[0].(string)
		if !ok {
			data, ok = c.Val()[1].(string)
		}
		if !ok {
			continue // gone already
		}
		var run runs.Run
		if err := json.Unmarshal([]byte(data), &run); err != nil {
			return 0, fmt.Errorf("decode run at %q: %w", sks[i], err)
		}
		if !run.Status.Terminal() {
			continue
		}
		hasIdem, idem := "0", s.idemKey(run.Pipeline, "")
		if k := run.Trigger.IdempotencyKey; k != "" {
			hasIdem, idem = "1", s.idemKey(run.Pipeline, k)
		}
		keys := append([]string{s.allKey(), s.plKey(run.Pipeline), s.stKey(run.Status),
			s.psKey(run.Status, run.Pipeline), s.ownerKey(run.Instance), idem}, s.runKeys(run.ID)...)
		dels = append(dels, pruneScript.EvalSha(ctx, pipe, keys, string(run.Status), sks[i], run.ID, hasIdem))
		ids = append(ids, run.ID)
	}
	if len(dels) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for i, d := range dels {
		if v, _ := d.Int64(); v == 1 {
			s.cache.Drop(ids[i])
			n++
		}
	}
	return n, nil
}
