package runs

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// fullStep is a step with every field, and every field of its changes, set.
func fullStep() Step {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return Step{
		Phase: Phase1, Name: "api", UUID: "u-api", Status: StepSynced,
		StartedAt: t, EndedAt: t.Add(time.Second), LockKey: "coolify:u-api", LockWait: time.Millisecond, Fence: 7,
		Changes: Changes{
			Env: []orchestrator.EnvChange{{Key: "A", Action: orchestrator.EnvUpdate, ValueChanged: true, ValueUnknown: true,
				Flags:   []orchestrator.FlagChange{{Name: "is_literal", Old: true, New: true}},
				Comment: &orchestrator.CommentChange{Old: "a", New: "b"}}},
			ImageTag: &orchestrator.TagChange{Old: "v1", New: "v2"},
			Fields:   []string{"x"},
			Values:   []FieldChange{{Field: "x", Old: `"1"`, New: `"2"`}},
		},
		DeploymentUUID: "d-1", RestoredAt: t.Add(time.Minute), Error: "boom", Note: "stale",
	}
}

// leaves calls fn with a pointer to every leaf value (string, bool, number, time) below v,
// recursing into structs, pointers and slice elements.
func leaves(t *testing.T, path string, v reflect.Value, fn func(path string, leaf reflect.Value)) {
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		fn(path, v)
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			leaves(t, path+"."+v.Type().Field(i).Name, v.Field(i), fn)
		}
	case v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice:
		if v.IsNil() || v.Kind() == reflect.Slice && v.Len() == 0 {
			t.Fatalf("fullStep leaves %s empty: set it so the test covers it", path)
		}
		if v.Kind() == reflect.Pointer {
			leaves(t, path, v.Elem(), fn)
		} else {
			leaves(t, path+"[0]", v.Index(0), fn)
		}
	default:
		fn(path, v)
	}
}

// TestSameStepCoversEveryField changes each leaf of a step in turn (including fields added to
// Step later, found by reflection) and checks sameStep sees the change: a change it
// missed would never be written.
func TestSameStepCoversEveryField(t *testing.T) {
	base := fullStep()
	var n int
	leaves(t, "Step", reflect.ValueOf(base), func(path string, _ reflect.Value) {
		n++
		changed := fullStep()
		var done bool
		leaves(t, "Step", reflect.ValueOf(&changed).Elem(), func(p string, leaf reflect.Value) {
			if p != path {
				return
			}
			done = true
			switch {
			case leaf.Type() == reflect.TypeFor[time.Time]():
				leaf.Set(reflect.ValueOf(leaf.Interface().(time.Time).Add(time.Nanosecond)))
			case leaf.Kind() == reflect.String:
				leaf.SetString(leaf.String() + "'")
			case leaf.Kind() == reflect.Bool:
				leaf.SetBool(!leaf.Bool())
			case leaf.CanInt():
				leaf.SetInt(leaf.Int() + 1)
			default:
				t.Fatalf("%s: no way to change a %s", p, leaf.Type())
			}
		})
		if !done {
			t.Fatalf("%s: not found in the copy", path)
		}
		if sameStep(&base, &changed) {
			t.Errorf("sameStep misses a change of %s", path)
		}
	})
	if n < 20 {
		t.Errorf("only %d leaves visited", n)
	}
	c := fullStep()
	if !sameStep(&base, &c) {
		t.Error("sameStep reports two equal steps as different")
	}
	// nil and empty slices encode differently under omitzero: a change.
	c.Changes = Changes{Env: []orchestrator.EnvChange{}}
	empty := Step{}
	if sameStep(&empty, &c) {
		t.Error("sameStep misses nil → empty Env")
	}
}

func TestChangedSteps(t *testing.T) {
	a, b, c := fullStep(), fullStep(), fullStep()
	b.Name, c.Name = "web", "db"
	cur := []Step{a, b}
	next := []Step{a, b, c}
	next = Run{Steps: next}.Clone().Steps
	next[1].Status = StepFailed
	if got := changedSteps(cur, next); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("changedSteps = %v, want [1 2] (one changed, one added)", got)
	}
	if got := changedSteps(next, next[:1]); len(got) != 0 {
		t.Errorf("changedSteps of a shrink = %v, want none (the backend drops the tail)", got)
	}
}

// TestEncodeUpdateSendsOnlyChangedSteps: a write that changes no step (a status, the held
// locks, a reason) sends the header alone, and one that changes a step sends that step.
func TestEncodeUpdateSendsOnlyChangedSteps(t *testing.T) {
	a, b := fullStep(), fullStep()
	b.Name = "web"
	cur := Run{ID: "r", Pipeline: "p", Status: StatusPhase1, Version: 3, Steps: []Step{a, b}}
	next := cur.Clone()
	next.Status, next.Version = StatusPhase2, 4
	e, err := encodeUpdate(cur, next)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Steps) != 0 {
		t.Errorf("a status-only update sends %d steps, want none", len(e.Steps))
	}
	next.Steps[1].Status = StepFailed
	if e, err = encodeUpdate(cur, next); err != nil {
		t.Fatal(err)
	}
	if len(e.Steps) != 1 || e.Steps[0].Pos != 1 {
		t.Errorf("an update of step 1 sends %+v, want step 1 alone", e.Steps)
	}
}

func TestDecodeRun(t *testing.T) {
	r := Run{ID: "r", Pipeline: "p", Status: StatusPhase1, Version: 3, Steps: []Step{fullStep()}}
	header, err := encodeHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	step, err := encodeStep(r.Steps[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		header []byte
		steps  [][]byte
		legacy bool
	}{{"split", header, [][]byte{step}, false}, {"legacy", whole, nil, true}} {
		got, err := decodeRun("r", tc.header, tc.steps, tc.legacy)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		g, _ := json.Marshal(got)
		if string(g) != string(whole) {
			t.Errorf("%s: decoded\n %s\nwant\n %s", tc.name, g, whole)
		}
	}
	if _, err := decodeRun("r", header, [][]byte{[]byte("{")}, false); err == nil {
		t.Error("a broken step decoded without error")
	}
}
