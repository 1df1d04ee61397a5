package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

//go:embed prune.lua
var pruneLua string

// pruneScript: KEYS all, pl, st, ps, owner, idem, then runKeys; ARGV status, sort key, id,
// has idem ("1"/"0"). Returns 1 when it deleted the run.
var pruneScript = redis.NewScript(pruneLua)

// runKeys are the keys that belong to one run alone, its hash first: Prune deletes them with
// the run. A new per-run key belongs here.
func (d *driver) runKeys(id string) []string { return []string{d.runKey(id), d.evKey(id)} }

// Prune implements runs.Pruner. It walks the all-runs index from the oldest entry below the
// cutoff, reads each batch of runs, and deletes the ended ones with one script call each
// (sent in one pipeline), which checks that the run is still there in the status read; then
// the reports of runs that are gone (pruneReports). Delivery markers need nothing: they
// expire by their own TTL.
func (s *Store) Prune(ctx context.Context, r runs.Retention) (int, error) {
	const op = "prune runs"
	if err := s.d.open(op); err != nil {
		return 0, err
	}
	var nth string
	if r.MaxRuns > 0 {
		sks, err := s.d.rdb.ZRevRange(ctx, s.d.allKey(), int64(r.MaxRuns-1), int64(r.MaxRuns-1)).Result()
		if err != nil {
			return 0, runs.Fail(op, err)
		}
		if len(sks) > 0 {
			nth = sks[0]
		}
	}
	before, err := runs.PruneBefore(r, time.Now(), nth)
	if err != nil {
		return 0, err
	}
	deleted, err := s.d.pruneRuns(ctx, before)
	if err == nil {
		err = s.d.pruneReports(ctx)
	}
	if err == nil {
		err = s.d.pruneAudit(ctx, r)
	}
	if err != nil {
		return deleted, runs.Fail(op, err)
	}
	return deleted, nil
}

// pruneRuns deletes the ended runs whose sort key is below before ("": none), a batch at a
// time, and returns how many it deleted.
func (d *driver) pruneRuns(ctx context.Context, before string) (int, error) {
	if before == "" {
		return 0, nil
	}
	if err := pruneScript.Load(ctx, d.rdb).Err(); err != nil {
		return 0, err
	}
	deleted, min := 0, "-"
	for {
		sks, err := d.rdb.ZRangeByLex(ctx, d.allKey(), &redis.ZRangeBy{Min: min, Max: "(" + before, Count: runs.PruneBatch}).Result()
		if err != nil {
			return deleted, err
		}
		n, err := d.pruneBatch(ctx, sks)
		deleted += n
		if err != nil {
			return deleted, err
		}
		if len(sks) < runs.PruneBatch {
			return deleted, nil
		}
		min = "(" + sks[len(sks)-1]
	}
}

// pruneBatch deletes the ended runs among the index entries sks and returns how many it deleted.
func (d *driver) pruneBatch(ctx context.Context, sks []string) (int, error) {
	if len(sks) == 0 {
		return 0, nil
	}
	pipe := d.rdb.Pipeline()
	reads := make([]*redis.SliceCmd, len(sks))
	for i, sk := range sks {
		_, id, err := runs.SplitSortKey(sk)
		if err != nil {
			return 0, fmt.Errorf("index entry %q: %w", sk, err)
		}
		reads[i] = pipe.HMGet(ctx, d.runKey(id), "h", "d") // its header, or the whole run an older build wrote
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	pipe = d.rdb.Pipeline()
	var dels []*redis.Cmd
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
		hasIdem, idem := "0", d.idemKey(run.Pipeline, "")
		if k := run.Trigger.IdempotencyKey; k != "" {
			hasIdem, idem = "1", d.idemKey(run.Pipeline, k)
		}
		keys := append([]string{d.allKey(), d.plKey(run.Pipeline), d.stKey(run.Status),
			d.psKey(run.Status, run.Pipeline), d.ownerKey(run.Instance), idem}, d.runKeys(run.ID)...)
		dels = append(dels, pruneScript.EvalSha(ctx, pipe, keys, string(run.Status), sks[i], run.ID, hasIdem))
	}
	if len(dels) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, del := range dels {
		if v, _ := del.Int64(); v == 1 {
			n++
		}
	}
	return n, nil
}
