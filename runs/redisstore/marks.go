package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A resource's marks are one hash, so that a script writes them together (and on a Cluster
// they share the store's slot anyway): d and f are the resource's mark and its fence, and
// p:<pipeline> each pipeline's mark on it.
func (d *driver) markKey(uuid string) string { return d.k + "mark:" + uuid }

const pipelineField = "p:"

//go:embed putmark.lua
var putMarkLua string

var putMarkScript = redis.NewScript(putMarkLua)

// PutMark implements runs.MarkStore: one script compares the fences and writes the mark and
// the pipeline's mark.
func (s *Store) PutMark(ctx context.Context, m runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" {
		return runs.Mark{}, fmt.Errorf("put mark: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put mark of %q", m.UUID)
	data, err := json.Marshal(m)
	if err != nil {
		return runs.Mark{}, fmt.Errorf("%s: encode: %w", op, err)
	}
	field, own := "", ""
	if m.Pipeline != "" {
		field, own = pipelineField+m.Pipeline, string(data)
	}
	return s.putMark(ctx, op, m, data, field, own)
}

// RestoreMark implements runs.MarkStore: PutMark's script, with pipeline's mark set to prev
// or deleted.
func (s *Store) RestoreMark(ctx context.Context, m runs.Mark, pipeline string, prev *runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" || pipeline == "" {
		return runs.Mark{}, fmt.Errorf("restore mark: empty uuid, run id or pipeline: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("restore mark of %q for pipeline %q", m.UUID, pipeline)
	data, err := json.Marshal(m)
	if err != nil {
		return runs.Mark{}, fmt.Errorf("%s: encode: %w", op, err)
	}
	own := ""
	if prev != nil {
		b, err := json.Marshal(prev)
		if err != nil {
			return runs.Mark{}, fmt.Errorf("%s: encode the pipeline's mark: %w", op, err)
		}
		own = string(b)
	}
	return s.putMark(ctx, op, m, data, pipelineField+pipeline, own)
}

// putMark runs putmark.lua: m (encoded as data) as the resource's mark, and field set to own
// ("" deletes it) unless field is "".
func (s *Store) putMark(ctx context.Context, op string, m runs.Mark, data []byte, field, own string) (runs.Mark, error) {
	if err := s.d.open(op); err != nil {
		return runs.Mark{}, err
	}
	var res []any
	err := s.d.retryMark(ctx, func() (err error) {
		res, err = s.d.runWrite(ctx, putMarkScript, []string{s.d.markKey(m.UUID)}, data, m.Fence, field, own).Slice()
		return err
	})
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

// markRetryFor bounds retryMark, as the engine bounds the retries of a run's record.
const markRetryFor = 15 * time.Second

// retryMark runs write, a mark write that may run twice (the same mark under the same
// fence), again while the replicas do not confirm it or the master refuses it for want of
// replicas (a failover under way), for up to markRetryFor or until ctx ends; other errors
// return at once.
func (d *driver) retryMark(ctx context.Context, write func() error) error {
	deadline := time.Now().Add(markRetryFor)
	pause := 50 * time.Millisecond
	for {
		err := write()
		if err == nil || !(errors.Is(err, redisack.ErrUnconfirmed) || redis.HasErrorPrefix(err, "NOREPLICAS")) ||
			time.Now().Add(pause).After(deadline) {
			return err
		}
		if ctxtime.Sleep(ctx, pause) != nil {
			return err
		}
		pause = min(2*pause, time.Second)
	}
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
	return decodeMark(op, raw)
}

// PipelineMark implements runs.MarkStore: the pipeline's field and the resource's mark, in
// one read.
func (s *Store) PipelineMark(ctx context.Context, uuid, pipeline string) (runs.Mark, error) {
	op := fmt.Sprintf("get mark of pipeline %q on %q", pipeline, uuid)
	if err := s.d.open(op); err != nil {
		return runs.Mark{}, err
	}
	vals, err := s.d.rdb.HMGet(ctx, s.d.markKey(uuid), pipelineField+pipeline, "d").Result()
	if err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	if own, ok := vals[0].(string); ok {
		return decodeMark(op, own)
	}
	if raw, ok := vals[1].(string); ok {
		m, err := decodeMark(op, raw)
		if err != nil || m.Pipeline == pipeline {
			return m, err
		}
	}
	return runs.Mark{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
}

// PipelineMarks implements runs.MarkStore: the resource's hash in one read.
func (s *Store) PipelineMarks(ctx context.Context, uuid string) ([]runs.Mark, error) {
	op := fmt.Sprintf("get pipeline marks of %q", uuid)
	if err := s.d.open(op); err != nil {
		return nil, err
	}
	h, err := s.d.rdb.HGetAll(ctx, s.d.markKey(uuid)).Result()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	var out []runs.Mark
	seen := map[string]bool{}
	for f, raw := range h {
		p, ok := strings.CutPrefix(f, pipelineField)
		if !ok {
			continue
		}
		m, err := decodeMark(op, raw)
		if err != nil {
			return nil, err
		}
		seen[p] = true
		m.Pipeline = cmp.Or(m.Pipeline, p)
		out = append(out, m)
	}
	if raw, ok := h["d"]; ok {
		m, err := decodeMark(op, raw)
		if err != nil {
			return nil, err
		}
		if m.Pipeline != "" && !seen[m.Pipeline] {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b runs.Mark) int { return strings.Compare(a.Pipeline, b.Pipeline) })
	return out, nil
}

func decodeMark(op, raw string) (runs.Mark, error) {
	var m runs.Mark
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return runs.Mark{}, runs.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return m, nil
}

// runningField is the field of a resource's marks hash that holds what it runs.
const runningField = "run"

// PutRunning implements runs.MarkStore.
func (s *Store) PutRunning(ctx context.Context, r runs.Running) error {
	if r.UUID == "" || r.RunID == "" {
		return fmt.Errorf("put running: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put what %q runs", r.UUID)
	if err := s.d.open(op); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", op, err)
	}
	key := s.d.markKey(r.UUID)
	err = s.d.retryMark(ctx, func() error {
		return s.d.ack.Write(ctx, s.d.rdb, key, func(c redis.Cmdable) error {
			return c.HSet(ctx, key, runningField, data).Err()
		})
	})
	if err != nil {
		return runs.Fail(op, err)
	}
	return nil
}

// GetRunning implements runs.MarkStore.
func (s *Store) GetRunning(ctx context.Context, uuid string) (runs.Running, error) {
	op := fmt.Sprintf("get what %q runs", uuid)
	if err := s.d.open(op); err != nil {
		return runs.Running{}, err
	}
	raw, err := s.d.rdb.HGet(ctx, s.d.markKey(uuid), runningField).Result()
	if errors.Is(err, redis.Nil) {
		return runs.Running{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Running{}, runs.Fail(op, err)
	}
	var r runs.Running
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return runs.Running{}, runs.Fail(op, fmt.Errorf("decode: %w", err))
	}
	return r, nil
}
