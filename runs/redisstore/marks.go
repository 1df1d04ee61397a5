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

var (
	_ runs.MarkStore  = (*Store)(nil)
	_ runs.Deliveries = (*Store)(nil)
)

func (s *Store) markKey(uuid string) string { return s.k + "mark:" + uuid }

//go:embed putmark.lua
var putMarkLua string

var putMarkScript = redis.NewScript(putMarkLua)

// PutMark implements runs.MarkStore: one script compares the fences and writes.
func (s *Store) PutMark(ctx context.Context, m runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" {
		return runs.Mark{}, fmt.Errorf("put mark: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put mark of %q", m.UUID)
	if err := s.open(op); err != nil {
		return runs.Mark{}, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return runs.Mark{}, fmt.Errorf("%s: encode: %w", op, err)
	}
	res, err := putMarkScript.Run(ctx, s.rdb, []string{s.markKey(m.UUID)}, data, m.Fence).Slice()
	if err != nil {
		return runs.Mark{}, storekit.Fail(op, err)
	}
	if code, _ := res[0].(int64); code == 1 {
		return m, nil
	}
	raw, _ := res[1].(string)
	var cur runs.Mark
	if err := json.Unmarshal([]byte(raw), &cur); err != nil {
		return runs.Mark{}, storekit.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return cur, fmt.Errorf("%s: fence %d < recorded %d (run %s): %w", op, m.Fence, cur.Fence, cur.RunID, runs.ErrFenceBehind)
}

// GetMark implements runs.MarkStore.
func (s *Store) GetMark(ctx context.Context, uuid string) (runs.Mark, error) {
	op := fmt.Sprintf("get mark of %q", uuid)
	if err := s.open(op); err != nil {
		return runs.Mark{}, err
	}
	raw, err := s.rdb.HGet(ctx, s.markKey(uuid), "d").Result()
	if errors.Is(err, redis.Nil) {
		return runs.Mark{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Mark{}, storekit.Fail(op, err)
	}
	var m runs.Mark
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return runs.Mark{}, storekit.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return m, nil
}
