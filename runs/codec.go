package runs

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/deploy-orchestrator/orchestrator"
)

// Backends store a run in two parts, so that a write costs what changed rather than the
// whole run (a 100-service run is about 60 KB of JSON, and the engine writes it several
// times per service):
//
//   - the header: the run without its steps, as JSON (encodeHeader), small and rewritten on
//     every Update;
//   - the steps: one JSON document per position in Run.Steps (encodeStep), of which an
//     Update writes only those changedSteps reports, and drops those past the new length.
//
// Reading joins them back (decodeRun). A run stored whole by an older build (its steps
// inside the header JSON) still decodes: decodeRun takes the steps from the header when the
// backend says the run is in that legacy form (Record.Legacy).

// encodeHeader returns the JSON of r without its steps.
func encodeHeader(r Run) ([]byte, error) {
	r.Steps = nil
	return json.Marshal(r)
}

// encodeStep returns the JSON of one step.
func encodeStep(s Step) ([]byte, error) { return json.Marshal(s) }

// decodeRun joins a header and its steps (in position order) into the run. With legacy
// true, header is a whole run as older builds stored it and steps must be empty.
func decodeRun(id string, header []byte, steps [][]byte, legacy bool) (Run, error) {
	var r Run
	if err := json.Unmarshal(header, &r); err != nil {
		return Run{}, fmt.Errorf("decode run %q: %w", id, err)
	}
	if legacy {
		return r, nil
	}
	r.Steps = nil
	if len(steps) > 0 {
		r.Steps = make([]Step, len(steps))
		for i, b := range steps {
			if err := json.Unmarshal(b, &r.Steps[i]); err != nil {
				return Run{}, fmt.Errorf("decode run %q: step %d: %w", id, i, err)
			}
		}
	}
	return r, nil
}

// changedSteps returns the positions of next's steps that must be written over cur's: those
// that differ from cur's step at the same position, and those past cur's end. Steps past
// next's end (a shrink) are for the backend to drop.
func changedSteps(cur, next []Step) []int {
	var out []int
	for i := range next {
		if i >= len(cur) || !sameStep(&cur[i], &next[i]) {
			out = append(out, i)
		}
	}
	return out
}

// encodeSteps encodes the steps of r at positions idx.
func encodeSteps(r Run, idx []int) ([]StepData, error) {
	out := make([]StepData, len(idx))
	for j, i := range idx {
		b, err := encodeStep(r.Steps[i])
		if err != nil {
			return nil, fmt.Errorf("encode step %d: %w", i, err)
		}
		out[j] = StepData{Pos: i, Data: b}
	}
	return out, nil
}

// EncodeRun encodes r whole, as Driver.Insert receives it: its sort key, header and every
// step. A driver migrating runs stored whole by an older build uses it too.
func EncodeRun(r Run) (Encoded, error) {
	header, err := encodeHeader(r)
	if err != nil {
		return Encoded{}, fmt.Errorf("encode run %q: %w", r.ID, err)
	}
	all := make([]int, len(r.Steps))
	for i := range all {
		all[i] = i
	}
	steps, err := encodeSteps(r, all)
	if err != nil {
		return Encoded{}, fmt.Errorf("encode run %q: %w", r.ID, err)
	}
	return Encoded{SortKey: SortKey(r.CreatedAt, r.ID), Header: header, Steps: steps}, nil
}

// sameStep reports whether a and b encode the same. It compares every field (time values
// with ==, so the same instant in another location counts as a change, as its JSON does),
// and is what keeps an Update from rewriting the steps it did not touch: it must never
// report two different steps as the same. TestSameStepCoversEveryField guards it against
// fields added to Step later.
func sameStep(a, b *Step) bool {
	return a.Phase == b.Phase && a.Name == b.Name && a.UUID == b.UUID && a.Wave == b.Wave && a.Status == b.Status &&
		a.StartedAt == b.StartedAt && a.EndedAt == b.EndedAt &&
		a.LockKey == b.LockKey && a.LockWait == b.LockWait && a.Fence == b.Fence &&
		a.DeploymentUUID == b.DeploymentUUID && a.DeploymentURL == b.DeploymentURL && a.RestoredAt == b.RestoredAt &&
		a.DeployRequestedAt == b.DeployRequestedAt && a.Error == b.Error && a.Note == b.Note &&
		sameChanges(&a.Changes, &b.Changes)
}

func sameChanges(a, b *Changes) bool {
	if (a.ImageTag == nil) != (b.ImageTag == nil) || a.ImageTag != nil && *a.ImageTag != *b.ImageTag {
		return false
	}
	if (a.Fields == nil) != (b.Fields == nil) || !slices.Equal(a.Fields, b.Fields) {
		return false
	}
	if (a.Values == nil) != (b.Values == nil) || !slices.Equal(a.Values, b.Values) {
		return false
	}
	return (a.Env == nil) == (b.Env == nil) && slices.EqualFunc(a.Env, b.Env, sameEnvChange)
}

func sameEnvChange(a, b orchestrator.EnvChange) bool {
	if a.Key != b.Key || a.Action != b.Action || a.ValueChanged != b.ValueChanged || a.ValueUnknown != b.ValueUnknown {
		return false
	}
	if (a.Comment == nil) != (b.Comment == nil) || a.Comment != nil && *a.Comment != *b.Comment {
		return false
	}
	return (a.Flags == nil) == (b.Flags == nil) && slices.Equal(a.Flags, b.Flags)
}
