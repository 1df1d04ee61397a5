package coolify

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// throttled tells the 429 of Coolify's throttle from the 429 of a full deploy queue, as the
// fake (after Coolify) answers them, and leaves the body as it was for the error's message.
func TestThrottledTellsTheThrottleFromAFullQueue(t *testing.T) {
	send := func(srv *coolifytest.Server, method, path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+"/api/v1"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	limited := coolifytest.NewServer(t, coolifytest.WithRateLimit(1, time.Hour))
	app := limited.AddApplication(coolifytest.Application{Name: "api"})
	send(limited, "GET", "/applications/"+app.UUID)
	throttle := send(limited, "GET", "/applications/"+app.UUID)

	queued := coolifytest.NewServer(t, coolifytest.WithQueueLimit(1, 30*time.Second),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Hour, RunMin: time.Hour, RunMax: time.Hour}))
	first, second := queued.AddApplication(coolifytest.Application{Name: "a"}), queued.AddApplication(coolifytest.Application{Name: "b"})
	send(queued, "POST", "/deploy?uuid="+first.UUID)
	full := send(queued, "POST", "/deploy?uuid="+second.UUID)

	for _, c := range []struct {
		name string
		resp *http.Response
		want bool
	}{{"throttle", throttle, true}, {"full deploy queue", full, false}} {
		if c.resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d, want 429", c.name, c.resp.StatusCode)
		}
		if got := throttled(c.resp); got != c.want {
			t.Errorf("%s: throttled = %v, want %v", c.name, got, c.want)
		}
		body, _ := io.ReadAll(c.resp.Body)
		if !strings.Contains(string(body), `"message"`) {
			t.Errorf("%s: body after throttled read %q, want the answer's message still there", c.name, body)
		}
	}
}
