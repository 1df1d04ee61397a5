package config

import (
	"testing"
	"time"
)

func TestLoadDaemonRetention(t *testing.T) {
	d, err := LoadDaemon("", testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if want := (Retention{MaxAge: DefaultRetentionMaxAge, MaxRuns: DefaultRetentionMaxRuns, Interval: DefaultRetentionInterval}); d.Retention != want {
		t.Errorf("default retention: got %+v, want %+v", d.Retention, want)
	}

	path := write(t, t.TempDir(), "d.yaml", "retention: { max_age: 720h, max_runs: 0, interval: 10m }\n")
	d, err = LoadDaemon(path, testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if want := (Retention{MaxAge: 720 * time.Hour, MaxRuns: 0, Interval: 10 * time.Minute}); d.Retention != want {
		t.Errorf("retention from the file: got %+v, want %+v", d.Retention, want)
	}

	for yaml, field := range map[string]string{
		"retention: { max_age: -1h }\n":  "retention.max_age",
		"retention: { max_runs: -5 }\n":  "retention.max_runs",
		"retention: { interval: 0s }\n":  "retention.interval",
		"retention: { keep: 3 }\n":       "retention.keep",
		"retention: { max_age: soon }\n": "retention.max_age",
	} {
		_, err := LoadDaemon(write(t, t.TempDir(), "d.yaml", yaml), testEnv(), nil)
		if _, ok := findProblem(mustProblems(t, err), field, ""); !ok {
			t.Errorf("%q: no problem naming %s; got %v", yaml, field, err)
		}
	}
}
