package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

type problemsAnswer struct {
	Error struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Field    string `json:"field"`
		Problems []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"problems"`
	} `json:"error"`
}

// Issue 10, item 10: a trigger is checked in full when it arrives, and every field problem
// is named in one answer (not only the first); an app_version the mobile step could not
// compare ("<b>1</b>") is refused at submit.
func TestTriggerReportsEveryProblemAtOnce(t *testing.T) {
	f := newFixture(t)
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]any{
		"build": "4/2", "image_tag": "-x", "commit": "ok123", "app_version": "<b>1</b>",
		"params": map[string]string{"bad-key": "v", "ok": "line\nbreak"},
	})
	wantError(t, rec, 400, "")
	var a problemsAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer: %v", err)
	}
	var fields []string
	for _, p := range a.Error.Problems {
		fields = append(fields, p.Field)
		if p.Message == "" {
			t.Errorf("problem %s without a message", p.Field)
		}
	}
	for _, want := range []string{"build", "image_tag", "app_version", "params.bad-key", "params.ok"} {
		if !slices.Contains(fields, want) {
			t.Errorf("problems name %v, want %s among them: %s", fields, want, rec.Body)
		}
		if !strings.Contains(a.Error.Message, want) {
			t.Errorf("message %q does not name %s", a.Error.Message, want)
		}
	}
	if slices.Contains(fields, "commit") {
		t.Errorf("a valid commit was named: %v", fields)
	}
	if strings.Contains(rec.Body.String(), "<b>") {
		t.Errorf("the answer echoes the value: %s", rec.Body)
	}

	// One problem alone is still named in field.
	wantError(t, f.do("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]any{"app_version": "<b>1</b>"}), 400, "app_version")
	// A webhook that would start a run with such a trigger is refused too, naming it.
	rec = f.serve(delivery("generic", "", "v-1", []byte(`{"event":"build.succeeded","repository":"acme/x","app_version":"<b>1</b>"}`), genericSecret))
	wantError(t, rec, 422, "webhooks rules[0].trigger.app_version")
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

// problemFields returns the fields an answer's error.problems names, and fails when a field
// is named twice.
func problemFields(t *testing.T, body []byte) (problemsAnswer, []string) {
	t.Helper()
	var a problemsAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer: %v: %s", err, body)
	}
	var fields []string
	for _, p := range a.Error.Problems {
		if slices.Contains(fields, p.Field) {
			t.Errorf("problems name %s twice: %s", p.Field, body)
		}
		fields = append(fields, p.Field)
	}
	return a, fields
}

// TestTriggerBodyNamesEveryWrongField: a body with several fields of the wrong type, an unknown
// field and an invalid value is one 400 naming each of them once, in error.problems (the JSON
// decoder alone stopped at the first), and nothing starts.
func TestTriggerBodyNamesEveryWrongField(t *testing.T) {
	f := newFixture(t)
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken,
		`{"build":1004.5,"image_tag":5,"commit":"not a commit","params":{"a":1,"ok":"v"},"rollback":"yes","bogus":true}`)
	wantError(t, rec, 400, "build")
	a, fields := problemFields(t, rec.Body.Bytes())
	want := []string{"build", "image_tag", "params.a", "rollback", "bogus", "commit"}
	if !slices.Equal(fields, want) {
		t.Errorf("problems name %v, want %v: %s", fields, want, rec.Body)
	}
	for _, p := range a.Error.Problems {
		if p.Field == "image_tag" && p.Message != "got a JSON number, want a string" {
			t.Errorf("image_tag: %q", p.Message)
		}
	}
	// The newcomer's body: build as a number is fine, the other two are named.
	rec = f.do("POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":1004,"image_tag":5,"params":"x"}`)
	wantError(t, rec, 400, "image_tag")
	if _, fields := problemFields(t, rec.Body.Bytes()); !slices.Equal(fields, []string{"image_tag", "params"}) {
		t.Errorf("problems name %v, want [image_tag params]: %s", fields, rec.Body)
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

// TestTriggerAcceptsANumericBuild: CI tools send build numbers as JSON numbers; a whole
// number is taken as its decimal text, in the API and the generic webhook, and gives the same
// Idempotency-Key digest as the same build sent as a string.
func TestTriggerAcceptsANumericBuild(t *testing.T) {
	f := newFixture(t)
	req := request("POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":1004,"image_tag":"v1"}`)
	req.Header.Set("Idempotency-Key", "ci-job-77")
	rec := f.serve(req)
	if rec.Code != 202 {
		t.Fatalf("numeric build: got %d: %s", rec.Code, rec.Body)
	}
	run := decodeJSON[struct{ Run *runs.Run }](t, rec).Run
	if run.Trigger.Build != "1004" {
		t.Errorf("build %q, want 1004", run.Trigger.Build)
	}
	req = request("POST", "/v1/pipelines/demo/runs", triggerToken, `{"image_tag":"v1","build":"1004"}`)
	req.Header.Set("Idempotency-Key", "ci-job-77")
	if rec := f.serve(req); rec.Code != 202 || !decodeJSON[struct{ Existing bool }](t, rec).Existing {
		t.Errorf("the same build as a string under the same key: got %d %s, want the same run", rec.Code, rec.Body)
	}
	for _, bad := range []string{`1e3`, `10.5`, `true`} {
		rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":`+bad+`,"image_tag":"v1"}`)
		if e := wantError(t, rec, 400, "build"); !strings.Contains(e.Error.Message, "want a string or a whole number") {
			t.Errorf("build %s: %s", bad, e.Error.Message)
		}
	}

	rec = f.serve(delivery("generic", "", "n-1", []byte(`{"event":"build.succeeded","repository":"acme/x","build":2001,"image_tag":"v2"}`), genericSecret))
	if rec.Code != 202 || decodeJSON[hookAnswer](t, rec).Run.Trigger.Build != "2001" {
		t.Errorf("generic webhook with a numeric build: got %d %s", rec.Code, rec.Body)
	}
	rec = f.serve(delivery("generic", "", "n-2", []byte(`{"event":"build.succeeded","repository":"acme/x","build":1.5,"image_tag":5,"params":"x"}`), genericSecret))
	wantError(t, rec, 400, "build")
	if _, fields := problemFields(t, rec.Body.Bytes()); !slices.Equal(fields, []string{"build", "image_tag", "params"}) {
		t.Errorf("generic webhook problems name %v, want [build image_tag params]: %s", fields, rec.Body)
	}
}
