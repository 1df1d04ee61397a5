package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
