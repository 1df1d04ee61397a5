package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deploy-orchestrator/orchestrator/internal/cannedhttp"
)

// validSetPath is what config accepts as a mobile set path (validate_pipeline.go).
var validSetPath = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// The FuzzDecodeFlagsmith* targets feed arbitrary answers (status and body) to the client's
// real decoding path through an http.RoundTripper that answers every request with them, and
// FuzzDecodeFlagsmithChange feeds arbitrary documents and changes to the JSON-document change
// application. Nothing may panic or hang, and every refusal must be a clear error: non-empty,
// an *APIError carrying the status for a non-2xx answer, ErrChange for a change that does
// not apply.
//
// Run one for a while with e.g.
//
//	go test ./mobile/ -run '^$' -fuzz FuzzDecodeFlagsmithChange -fuzztime 30s

var fuzzStatuses = []int{200, 201, 204, 400, 401, 403, 404, 409, 429, 500, 502, 503}

func fuzzClient(sel uint8, body []byte) (*Client, int) {
	status := fuzzStatuses[int(sel)%len(fuzzStatuses)]
	return New("http://flagsmith.invalid", "fuzz-key",
		WithHTTPClient(&http.Client{Transport: cannedhttp.Transport{Status: status, Body: body}}),
		WithRetry(RetryPolicy{MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: time.Millisecond})), status
}

// fuzzCtx is a call's context; a call still running when it ends has hung.
func fuzzCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(func() {
		if ctx.Err() != nil {
			t.Errorf("a call ran until its 5s context ended: it hung")
		}
		cancel()
	})
	return ctx
}

func checkErr(t *testing.T, status int, err error) {
	t.Helper()
	if err == nil {
		if status >= 300 {
			t.Fatalf("status %d answered no error", status)
		}
		return
	}
	if msg := err.Error(); msg == "" || len(msg) > 64<<10 {
		t.Fatalf("unclear error of %d bytes: %.200q", len(msg), msg)
	}
	if status >= 300 {
		var ae *APIError
		if !errors.As(err, &ae) || ae.StatusCode != status {
			t.Fatalf("status %d gave %T %v, want an *APIError with that status", status, err, err)
		}
	}
	if status == http.StatusNotFound && !errors.Is(err, ErrNotFound) {
		t.Fatalf("404 does not match ErrNotFound: %v", err)
	}
}

func FuzzDecodeFlagsmithFeatureState(f *testing.F) {
	f.Add(uint8(0), []byte(`{"count":1,"next":null,"results":[{"id":11,"feature":7,"environment":3,"enabled":true,"feature_state_value":"{\"ios\":{\"latest_version\":\"1.0.0\"}}","updated_at":"2026-01-02T03:04:05.123456Z","feature_segment":null,"identity":null,"environment_feature_version":null}]}`))
	f.Add(uint8(0), []byte(`{"count":2,"results":[{"id":1,"feature":7,"feature_state_value":3},{"id":2,"feature":7,"feature_state_value":true,"feature_segment":4}]}`))
	f.Add(uint8(0), []byte(`{"count":2,"results":[{"id":1,"feature":7},{"id":2,"feature":7,"identity":null}]}`))
	f.Add(uint8(0), []byte(`{"results":[{"id":1,"feature":7,"feature_state_value":1.5}]}`))
	f.Add(uint8(0), []byte(`{"results":null}`))
	f.Add(uint8(4), []byte(`{"detail":"Invalid API Key"}`))
	f.Add(uint8(6), []byte(`{"detail":"Not found."}`))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		c, status := fuzzClient(sel, body)
		fs, err := c.FeatureState(fuzzCtx(t), "env-key", 7)
		checkErr(t, status, err)
		if err == nil && (fs.Feature != 7 || fs.FeatureSegment != nil) {
			t.Fatalf("returned a state that is not feature 7's environment default: %+v", fs)
		}
	})
}

func FuzzDecodeFlagsmithVersion(f *testing.F) {
	f.Add(uint8(0), []byte(`{"count":1,"next":null,"previous":null,"results":[{"uuid":"4b1c","published":true,"is_live":true,"live_from":"2026-01-02T03:04:05Z","created_at":"2026-01-02T03:04:05Z"}]}`))
	f.Add(uint8(0), []byte(`{"results":[{"uuid":"x","is_live":false}]}`))
	f.Add(uint8(0), []byte(`{"results":[{"uuid":"x","is_live":true,"live_from":"yesterday"}]}`))
	f.Add(uint8(3), []byte(`{"detail":"Environment must use v2 feature versioning."}`))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		c, status := fuzzClient(sel, body)
		v, err := c.LiveVersion(fuzzCtx(t), 3, 7)
		checkErr(t, status, err)
		if err == nil && !v.IsLive {
			t.Fatalf("LiveVersion returned a version that is not live: %+v", v)
		}
	})
}

func FuzzDecodeFlagsmithError(f *testing.F) {
	f.Add(uint8(3), []byte(`{"detail":"This environment uses v2 feature versioning. Use the environment feature version endpoint instead.","code":"direct_feature_state_write_not_allowed"}`))
	f.Add(uint8(3), []byte(`{"feature_state_value":["A valid string is required."],"non_field_errors":["x"]}`))
	f.Add(uint8(3), []byte(`["plain list"]`))
	f.Add(uint8(8), []byte(`{"detail":"Request was throttled. Expected available in 3 seconds."}`))
	f.Add(uint8(9), []byte(`<h1>Server Error (500)</h1>`))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		sel = 3 + sel%uint8(len(fuzzStatuses)-3) // errors only
		c, status := fuzzClient(sel, body)
		_, err := c.UpdateFeatureState(fuzzCtx(t), "env-key", 11, 7, StringValue("{}"), true)
		checkErr(t, status, err)
		_ = errors.Is(err, ErrLegacyWrite)
	})
}

// FuzzDecodeFlagsmithChange applies a field change to an arbitrary feature value. A change
// that applies yields a JSON object holding the new value at its path, and applying it
// again changes nothing (or, with never_downgrade, is refused with ErrChange when the value
// is no version); one that does not apply is refused with ErrChange.
func FuzzDecodeFlagsmithChange(f *testing.F) {
	f.Add(`{"ios":{"latest_version":"1.3.0","min_version":"1.0.0"},"android":{"latest_version":"1.3.0"}}`, "ios.latest_version", "1.4.0", true)
	f.Add(`{"ios":{"latest_version":"1.3.0"}}`, "ios.latest_version", "1.2.9", true)
	f.Add(`{"ios":"not an object"}`, "ios.latest_version", "2.0.0", false)
	f.Add(`{"a":1e999,"b":[1,{"c":null}],"d":"\u00e9"}`, "d.e.f", "x", false)
	f.Add(`[1,2]`, "a", "1", false)
	f.Add(`{"a":1} trailing`, "a", "1", false)
	f.Add(``, "ios.latest_version", "v1.0.0+build.5", true)
	f.Add(`{"v":"1.0.0-rc.1"}`, "v", "1.0.0", true)
	f.Add(`{"a":{"b":1}}`, "a..b", "1", false)
	f.Fuzz(func(t *testing.T, doc, path, value string, never bool) {
		if !validSetPath.MatchString(path) {
			return // config refuses such a path before a run can send it here
		}
		ch := []Change{{Path: path, Value: value, NeverDowngrade: never}}
		next, skipped, _, err := apply(StringValue(doc), ch)
		if err != nil {
			if !errors.Is(err, ErrChange) || err.Error() == "" {
				t.Fatalf("refusal %v does not wrap ErrChange", err)
			}
			return
		}
		if next.Kind != KindString {
			t.Fatalf("applying to a document gave a %s", next.Kind)
		}
		o, err := parseDocument(next.Str)
		if err != nil {
			t.Fatalf("result %q is not a JSON object: %v", next.Str, err)
		}
		if len(skipped) == 0 && utf8.ValidString(value) {
			var m map[string]any
			if err := json.Unmarshal([]byte(next.Str), &m); err == nil {
				cur := any(m)
				for _, seg := range strings.Split(path, ".") {
					mm, ok := cur.(map[string]any)
					if !ok {
						cur = nil
						break
					}
					cur = mm[seg]
				}
				if cur != value {
					t.Fatalf("after setting %s=%q the document %q holds %v there", path, value, next.Str, cur)
				}
			}
		}
		again, _, changed, err := apply(next, ch)
		if never && errors.Is(err, ErrChange) {
			return // never_downgrade compares the value now in place, which may be no version
		}
		if err != nil || changed || again != next {
			t.Fatalf("applying %s again: changed=%v err=%v (%q → %q)", path, changed, err, next.Str, again.Str)
		}
		_ = o
	})
}
