package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

func cmdTrigger(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("trigger", "PIPELINE --url URL [--image-tag T] [--build B] [--set K=V]…",
		"Asks a running daemon for a run of PIPELINE (the CI side), then follows its events until it\n"+
			"ends. The exit code is 0 only when the run succeeds. The request carries an\n"+
			"Idempotency-Key, so a retried trigger never starts a second run.")
	base := fs.String("url", c.getenv("ORCH_URL"), "daemon URL, e.g. https://orchestrator.internal (env ORCH_URL)")
	token := fs.String("token", "", "trigger token (default: env ORCH_TRIGGER_TOKEN)")
	key := fs.String("idempotency-key", "", "idempotency key (default: random; set it to make CI retries safe across jobs)")
	noFollow := fs.Bool("no-follow", false, "return once the run is queued")
	tf := addTriggerFlags(fs)
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("trigger: want one PIPELINE argument (see --help)")
	}
	if *base == "" {
		return usageError("trigger: --url (or ORCH_URL) is required")
	}
	tok := orDefault(*token, c.getenv("ORCH_TRIGGER_TOKEN"))
	t, err := tf.trigger("")
	if err != nil {
		return err
	}
	if *key == "" {
		*key = randomKey()
	}
	cl := &apiClient{base: strings.TrimRight(*base, "/"), token: tok, http: retryablehttp.NewClient()}
	cl.http.Logger = nil
	cl.http.RetryMax = 4
	r, err := cl.trigger(ctx, fs.Arg(0), t, *key)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "run %s of %s queued: %s/runs/%s\n", r.ID, r.Pipeline, cl.base, r.ID)
	if *noFollow {
		return nil
	}
	p := newProgress(c.stdout)
	if err := cl.follow(ctx, r.ID, p.event); err != nil {
		return err
	}
	final, err := cl.run(ctx, r.ID)
	if err != nil {
		return err
	}
	return p.summary(*final)
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// apiClient is the small client of the daemon's API that trigger uses.
type apiClient struct {
	base  string
	token string
	http  *retryablehttp.Client
}

func (a *apiClient) request(ctx context.Context, method, path string, body []byte) (*retryablehttp.Request, error) {
	var rd any
	if body != nil {
		rd = body
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	req.Header.Set("User-Agent", "orchestrator/"+version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// apiFailure turns an error answer into an error naming the server's message.
func apiFailure(method, path string, resp *http.Response) error {
	var e struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
		if e.Error.Field != "" {
			msg = e.Error.Field + ": " + msg
		}
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		hint = " (check --token / ORCH_TRIGGER_TOKEN)"
	case http.StatusNotFound:
		hint = " (check the pipeline name and --url)"
	}
	return fmt.Errorf("%s %s: %s: %s%s", method, path, resp.Status, msg, hint)
}

func (a *apiClient) trigger(ctx context.Context, pipeline string, t runs.Trigger, key string) (*runs.Run, error) {
	body, _ := json.Marshal(map[string]any{"build": t.Build, "image_tag": t.ImageTag, "commit": t.Commit,
		"app_version": t.AppVersion, "params": t.Params, "rollback": t.Rollback, "reason": t.Reason})
	path := "/v1/pipelines/" + url.PathEscape(pipeline) + "/runs"
	req, err := a.request(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w (is the daemon at --url running?)", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return nil, apiFailure(http.MethodPost, path, resp)
	}
	var out struct {
		Run *runs.Run `json:"run"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Run == nil {
		return nil, fmt.Errorf("POST %s: unreadable answer: %v", path, err)
	}
	return out.Run, nil
}

func (a *apiClient) run(ctx context.Context, id string) (*runs.Run, error) {
	path := "/v1/runs/" + url.PathEscape(id)
	req, err := a.request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, apiFailure(http.MethodGet, path, resp)
	}
	var r runs.Run
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("GET %s: unreadable answer: %w", path, err)
	}
	return &r, nil
}

// follow reads the run's event stream until its end event, reconnecting with Last-Event-ID
// when the connection drops.
func (a *apiClient) follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	path := "/v1/runs/" + url.PathEscape(id) + "/events"
	var last int64
	for attempt := 0; ; attempt++ {
		ended, err := a.stream(ctx, path, &last, fn)
		if ended {
			return nil
		}
		if errors.Is(err, errStreamRefused) {
			return pollRun(ctx, a.run, id, streamRefusedPoll)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt >= 10 {
			return fmt.Errorf("follow run %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
}

func (a *apiClient) stream(ctx context.Context, path string, last *int64, fn func(runs.Event) error) (bool, error) {
	req, err := a.request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := a.http.HTTPClient.Do(req.Request)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return false, fmt.Errorf("%w: %w", errStreamRefused, apiFailure(http.MethodGet, path, resp))
	}
	if resp.StatusCode != http.StatusOK {
		return false, apiFailure(http.MethodGet, path, resp)
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
