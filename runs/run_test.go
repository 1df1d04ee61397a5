package runs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func TestNewID(t *testing.T) {
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := runs.NewID(t1.Add(time.Duration(i) * time.Millisecond))
		if len(id) != 26 {
			t.Fatalf("NewID: %q has %d characters, want 26", id, len(id))
		}
		if strings.Trim(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
			t.Fatalf("NewID: %q has characters outside Crockford base32", id)
		}
		if seen[id] {
			t.Fatalf("NewID: %q twice", id)
		}
		seen[id] = true
		if id <= prev {
			t.Fatalf("NewID: %q (ms %d) does not sort after %q", id, i, prev)
		}
		prev = id
	}
	// The time part is the ULID encoding of the milliseconds: 2026-03-01T12:00:00Z is
	// 1772366400000 ms = 0x19CA9450A00, "01KJMMA2G0" in Crockford base32 (computed
	// independently).
	if got, want := runs.NewID(t1)[:10], "01KJMMA2G0"; got != want {
		t.Errorf("NewID time part: %s, want %s", got, want)
	}
}

func TestStatus(t *testing.T) {
	terminal := map[runs.Status]bool{
		runs.StatusSucceeded: true, runs.StatusFailed: true, runs.StatusSuperseded: true,
		runs.StatusCanceled: true, runs.StatusInterrupted: true, runs.StatusExpired: true,
	}
	for _, s := range runs.Statuses {
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v, want %v", s, s.Terminal(), terminal[s])
		}
		ev := runs.EndEvent(s)
		if (ev != "") != s.Terminal() || (ev != "" && !ev.EndsRun()) {
			t.Errorf("EndEvent(%s) = %q; want an ending event exactly for terminal statuses", s, ev)
		}
	}
	if runs.Status("done").Valid() {
		t.Error(`Status("done").Valid() = true`)
	}
	if runs.EventLockReleased.EndsRun() {
		t.Error("lock.released ends a run")
	}
}

func TestSteps(t *testing.T) {
	var r runs.Run
	r.SetStep(runs.Step{Phase: runs.Phase1, Name: "api", Status: runs.StepRunning})
	r.SetStep(runs.Step{Phase: runs.Phase1, Name: "web", Status: runs.StepPending})
	r.SetStep(runs.Step{Phase: runs.Phase2, Name: "api", Status: runs.StepPending})
	r.SetStep(runs.Step{Phase: runs.Phase1, Name: "api", Status: runs.StepSynced, Fence: 3})
	if len(r.Steps) != 3 {
		t.Fatalf("SetStep: %d steps, want 3 (replace by phase and name)", len(r.Steps))
	}
	if s := r.Step(runs.Phase1, "api"); s == nil || s.Status != runs.StepSynced || s.Fence != 3 {
		t.Errorf("Step(phase1, api) = %+v, want the replaced step", s)
	}
	r.Step(runs.Phase2, "api").Status = runs.StepHealthy
	if got := r.StepsOf(runs.Phase2); len(got) != 1 || got[0].Status != runs.StepHealthy {
		t.Errorf("StepsOf(phase2) = %+v, want one healthy step (Step returns a pointer into Steps)", got)
	}
	if r.Step(runs.PhaseMobile, "api") != nil {
		t.Error("Step of a missing phase: not nil")
	}
	for _, st := range []runs.StepStatus{runs.StepPending, runs.StepWaitingLock, runs.StepRunning, runs.StepDeployed} {
		if st.Done() {
			t.Errorf("%s.Done() = true", st)
		}
	}
	for _, st := range []runs.StepStatus{runs.StepSynced, runs.StepHealthy, runs.StepFailed, runs.StepRestored, runs.StepSkipped, runs.StepSuperseded, runs.StepUpdated} {
		if !st.Done() {
			t.Errorf("%s.Done() = false", st)
		}
	}
}

func TestClone(t *testing.T) {
	r := runs.Run{
		Trigger:   orchestrator.Trigger{Params: map[string]string{"a": "1"}},
		HeldLocks: []string{"coolify:phase1"},
		Steps: []runs.Step{{Name: "api", Changes: runs.Changes{
			Env:    []orchestrator.EnvChange{{Key: "K", Action: orchestrator.EnvUpdate, Flags: []orchestrator.FlagChange{{Name: "is_literal", New: true}}, Comment: &orchestrator.CommentChange{New: "c"}}},
			Fields: []string{"f"}, ImageTag: &orchestrator.TagChange{Old: "1", New: "2"},
		}}},
	}
	c := r.Clone()
	c.Trigger.Params["a"] = "2"
	c.HeldLocks[0] = "x"
	c.Steps[0].Name = "web"
	c.Steps[0].Changes.Env[0].Key = "X"
	c.Steps[0].Changes.Env[0].Flags[0].Name = "x"
	c.Steps[0].Changes.Env[0].Comment.New = "x"
	c.Steps[0].Changes.Fields[0] = "x"
	c.Steps[0].Changes.ImageTag.New = "3"
	if r.Trigger.Params["a"] != "1" || r.HeldLocks[0] != "coolify:phase1" || r.Steps[0].Name != "api" ||
		r.Steps[0].Changes.Env[0].Key != "K" || r.Steps[0].Changes.Env[0].Flags[0].Name != "is_literal" ||
		r.Steps[0].Changes.Env[0].Comment.New != "c" || r.Steps[0].Changes.Fields[0] != "f" || r.Steps[0].Changes.ImageTag.New != "2" {
		t.Errorf("changing a clone changed the original: %+v", r)
	}
	if !(runs.Changes{}).Empty() || c.Steps[0].Changes.Empty() {
		t.Error("Changes.Empty is wrong")
	}
}

// TestCloneSteps: Clone copies the changes of all steps into shared backing arrays; each
// step's slices must still be its own (appending to one never writes into the next) and the
// copy must encode exactly as the original, nil and empty slices included.
func TestCloneSteps(t *testing.T) {
	env := func(k string) []orchestrator.EnvChange {
		return []orchestrator.EnvChange{{Key: k, Action: orchestrator.EnvCreate, Flags: []orchestrator.FlagChange{{Name: "is_literal"}}, Comment: &orchestrator.CommentChange{New: k}}}
	}
	r := runs.Run{Steps: []runs.Step{
		{Name: "a", Changes: runs.Changes{Env: env("A"), Fields: []string{"x"}, ImageTag: &orchestrator.TagChange{New: "1"}}},
		{Name: "b", Changes: runs.Changes{Env: env("B"), Fields: []string{"y"}, ImageTag: &orchestrator.TagChange{New: "2"}}},
		{Name: "empty", Changes: runs.Changes{Env: []orchestrator.EnvChange{}, Fields: []string{}}},
		{Name: "none"},
	}}
	c := r.Clone()
	want, _ := json.Marshal(r)
	if got, _ := json.Marshal(c); string(got) != string(want) {
		t.Fatalf("clone encodes as\n %s\nwant\n %s", got, want)
	}
	if c.Steps[2].Changes.Env == nil || c.Steps[2].Changes.Fields == nil || c.Steps[3].Changes.Env != nil {
		t.Error("Clone changed a nil slice into an empty one or back")
	}
	c.Steps[0].Changes.Env = append(c.Steps[0].Changes.Env, orchestrator.EnvChange{Key: "NEW"})
	c.Steps[0].Changes.Env[0].Flags = append(c.Steps[0].Changes.Env[0].Flags, orchestrator.FlagChange{Name: "new"})
	c.Steps[0].Changes.Fields = append(c.Steps[0].Changes.Fields, "new")
	c.Steps[2].Changes.Env = append(c.Steps[2].Changes.Env, orchestrator.EnvChange{Key: "NEW"})
	if c.Steps[1].Changes.Env[0].Key != "B" || len(c.Steps[1].Changes.Env[0].Flags) != 1 || c.Steps[1].Changes.Env[0].Flags[0].Name != "is_literal" ||
		c.Steps[1].Changes.Fields[0] != "y" {
		t.Errorf("appending to step a's changes in the clone changed step b's: %+v", c.Steps[1].Changes)
	}
	if got, _ := json.Marshal(r); string(got) != string(want) {
		t.Errorf("changing the clone changed the original:\n %s", got)
	}
}

func TestChangesString(t *testing.T) {
	c := runs.Changes{
		ImageTag: &orchestrator.TagChange{Old: "", New: "v2"},
		Env: []orchestrator.EnvChange{
			{Key: "A", Action: orchestrator.EnvCreate, Flags: []orchestrator.FlagChange{{Name: "is_buildtime", Old: true, New: false}}},
			{Key: "B", Action: orchestrator.EnvUpdate, ValueChanged: true,
				Flags:   []orchestrator.FlagChange{{Name: "is_literal", Old: true, New: false}},
				Comment: &orchestrator.CommentChange{Old: "set by ops", New: ""}},
			{Key: "C", Action: orchestrator.EnvUpdate, ValueUnknown: true},
		},
		Fields: []string{"ios.min"},
	}
	want := `tag (none) → v2; env: A created (is_buildtime false), B (value, is_literal true → false, comment "set by ops" → ""), C (value (current one hidden)); fields: ios.min`
	if got := c.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (runs.Changes{}).String(); got != "" {
		t.Errorf("empty changes: got %q", got)
	}
}

func TestWaitSaysWhatARunWaitsOn(t *testing.T) {
	at := time.Date(2026, 12, 24, 17, 0, 0, 0, time.UTC)
	r := runs.Run{Waiting: []runs.Wait{
		{LockKey: "coolify:phase2", Frozen: true, Holder: "operator:alice", Until: at.Add(time.Hour), Message: "release freeze"},
		{LockKey: "coolify:app-1", Holder: "prod#12/api", HolderRun: "R1", HeldSince: at},
		{LockKey: "coolify:phase1", Holder: "test#0/blocker", Message: "migration", HeldSince: at},
		{LockKey: "mobile:flagsmith:x"},
	}}
	want := "waiting for coolify:phase2, frozen by operator:alice until 2026-12-24T18:00:00Z: release freeze; " +
		"waiting for coolify:app-1, held by run R1 (prod#12/api) since 2026-12-24T17:00:00Z; " +
		"waiting for coolify:phase1, held by test#0/blocker (migration) since 2026-12-24T17:00:00Z; " +
		"waiting for mobile:flagsmith:x"
	if got := r.WaitingFor(); got != want {
		t.Errorf("WaitingFor() =\n%q\nwant\n%q", got, want)
	}
	c := r.Clone()
	c.Waiting[0].LockKey = "changed"
	if r.Waiting[0].LockKey != "coolify:phase2" {
		t.Error("Clone shares Waiting with the original")
	}
}

func TestWaitJSONCarriesItsText(t *testing.T) {
	w := runs.Wait{LockKey: "coolify:phase1", Holder: "prod#1/phase1", HolderRun: "R1"}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"text":"waiting for coolify:phase1, held by run R1 (prod#1/phase1)"`) {
		t.Errorf("wait JSON %s, want its text", b)
	}
	var back runs.Wait
	if err := json.Unmarshal(b, &back); err != nil || back != w {
		t.Errorf("decoded %+v (%v), want %+v", back, err, w)
	}
}
