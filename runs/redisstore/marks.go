package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

func (d *driver) markKey(uuid string) string { return d.k + "mark:" + uuid }

//go:embed putmark.lua
var putMarkLua string

var putMarkScript = redis.NewScript(putMarkLua)

// PutMark implements runs.MarkStore: one script compares the fences and writes.
func (s *Store) PutMark(ctx context.Context, m runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" {
		return runs.Mark{}, fmt.Errorf("put mark: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put mark of %q", m.UUID)
	if err := s.d.open(op); err != nil {
		return runs.Mark{}, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return runs.Mark{}, fmt.Errorf("%s: encode: %w", op, err)
	}
	res, err := putMarkScript.Run(ctx, s.d.rdb, []string{s.d.markKey(m.UUID)}, data, m.Fence).Slice()
	if err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	if code, _ := res[0].(int64); code == 1 {
		return m, nil
	}
	raw, _ := res[1].(string)
	var cur runs.Mark
	if err := json.Unmarshal([]byte(raw), &cur); err != nil {
		return runs.Mark{}, runs.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return cur, fmt.Errorf("%s: fence %d < recorded %d (run %s): %w", op, m.Fence, cur.Fence, cur.RunID, runs.ErrFenceBehind)
}

// GetMark implements runs.MarkStore.
func (s *Store) GetMark(ctx context.Context, uuid string) (runs.Mark, error) {
	op := fmt.Sprintf("get mark of %q", uuid)
	if err := s.d.open(op); err != nil {
		return runs.Mark{}, err
	}
	raw, err := s.d.rdb.HGet(ctx, s.d.markKey(uuid), "d").Result()
	if errors.Is(err, redis.Nil) {
		return runs.Mark{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	var m runs.Mark
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return runs.Mark{}, runs.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return m, nil
}
