package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// errStreamRefused: the daemon answered 503 to an event stream (too many streams open, in
// all or for this client). The run goes on; Follow then polls it instead of failing.
var errStreamRefused = errors.New("event stream refused")

// streamRefusedPoll is how often a run is polled when its event stream was refused.
const streamRefusedPoll = 2 * time.Second

// Follow reads the run's event stream, calling fn with each event, until the run's end
// event, reconnecting with Last-Event-ID when the connection drops. When the daemon refuses
// the stream (503: too many streams), it polls the run until it ends instead; fn then sees
// no events.
func (c *Client) Follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	path := runPath(id) + "/events"
	var last int64
	for attempt := 0; ; attempt++ {
		ended, err := c.stream(ctx, path, &last, fn)
		if ended {
			return nil
		}
		if errors.Is(err, errStreamRefused) {
			return pollRun(ctx, c.Run, id, streamRefusedPoll)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if final(err) {
			return err // 401, 404: reconnecting will not help
		}
		if attempt >= 10 {
			return c.unreachable(http.MethodGet, path, fmt.Errorf("follow run %s: %w", id, err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
}

// final reports whether a stream's err is one reconnecting cannot mend: an answer refusing
// the request (any status but a 5xx, and a 5xx saying the daemon has no token configured or
// no such lock), a malformed URL. Anything else (a dropped connection, a 5xx, a stream cut
// short, an error of fn) is worth another try, from the last event fn took.
func final(err error) bool {
	var (
		ae *APIError
		ue *URLError
	)
	switch {
	case errors.As(err, &ae):
		return ae.StatusCode < 500 || ae.Code == "no_token_configured" || ae.Code == "lock_not_found"
	case errors.As(err, &ue):
		return true
	}
	return false
}

func (c *Client) stream(ctx context.Context, path string, last *int64, fn func(runs.Event) error) (bool, error) {
	req, err := c.request(ctx, http.MethodGet, path, Read, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.http.HTTPClient.Do(req.Request)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return false, fmt.Errorf("%w: %w", errStreamRefused, newAPIError(http.MethodGet, path, Read, resp))
	}
	if resp.StatusCode != http.StatusOK {
		return false, newAPIError(http.MethodGet, path, Read, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "end" {
				return true, nil
			}
			if data.Len() > 0 {
				var e runs.Event
				if err := json.Unmarshal(data.Bytes(), &e); err == nil {
					if err := fn(e); err != nil {
						return false, err
					}
					*last = e.Seq
				}
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, errors.New("event stream closed before the run ended")
}

// pollRun reads run id with get every interval until the run has ended (or ctx ends). A
// failed read is retried, up to 10 in a row.
func pollRun(ctx context.Context, get func(context.Context, string) (*runs.Run, error), id string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	failures := 0
	for {
		r, err := get(ctx, id)
		switch {
		case err == nil && r.Status.Terminal():
			return nil
		case err == nil:
			failures = 0
		default:
			if failures++; failures > 10 {
				return fmt.Errorf("poll run %s: %w", id, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
