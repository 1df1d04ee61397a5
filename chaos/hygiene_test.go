package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

// Sentinel secrets: each is distinctive enough that finding it anywhere is a leak.
const (
	sentinelEnvSource    = "SENTINEL-envsource-7f3a9c41"
	sentinelInfisical    = "SENTINEL-infisical-5d21b8e0"
	sentinelInfClient    = "SENTINEL-infclient-91aed2c7"
	sentinelCoolifyToken = "SENTINEL-cooltoken-c0ffee11"
	sentinelFlagsmithKey = "SENTINEL-flagkey-42424242"
	sentinelNotifyURL    = "SENTINEL-slackhook-5b1ac4e7"
	sentinelNotifyHMAC   = "SENTINEL-notifyhmac-aa11bb22"
)

// TestSecretsHygiene runs a full pipeline whose secrets — the env source, an Infisical
// secret, the Infisical client secret, the Coolify token, the Flagsmith key, a Slack webhook
// URL's token and a notify webhook's HMAC key — hold sentinel values, plus a run that fails
// (and a notification answered 500 once), then searches everything the daemon shows or
// keeps: every log line, every API answer (errors included), the SSE streams, the
// dashboard pages, the metrics and every key in Redis. None may hold a sentinel; the fakes
// must have received the values (so the test proves the secrets were used).
func TestSecretsHygiene(t *testing.T) {
	w := newWorld(t)
	coolifyToken := "9|" + sentinelCoolifyToken
	w.cf.AddToken(coolifyToken, coolifytest.AbilityRead, coolifytest.AbilityWrite, coolifytest.AbilityDeploy, coolifytest.AbilityReadSensitive)
	fs := flagsmithtest.NewServer(t, flagsmithtest.WithAPIKey(sentinelFlagsmithKey))
	if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: flagsmithEnv, Name: "production"}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetValue(flagsmithEnv, "version_state", `{"ios":{"latest_version":"1.0.0"}}`); err != nil {
		t.Fatal(err)
	}
	folder := infisicaltest.Folder{ProjectID: "chaos-project", Environment: "prod", Path: "/"}
	inf := infisicaltest.NewServer(t,
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "chaos-client", ClientSecret: sentinelInfClient}),
		infisicaltest.WithSecrets(folder, map[string]string{"DATABASE_URL": "postgres://app:" + sentinelInfisical + "@db:5432/app"}))

	pipeline := fmt.Sprintf(`coolify: { url: %q, token: "${COOLIFY_TOKEN}" }
secrets:
  vault:
    infisical:
      url: %q
      client_id: chaos-client
      client_secret: "${INFISICAL_CLIENT_SECRET}"
      project_id: chaos-project
      environment: prod
      path: /
services:
  - name: a
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - key: BUILD
        value: "${trigger.build}"
      - key: DB_PASSWORD
        secret: { source: env, key: DB_PASSWORD }
      - key: DATABASE_URL
        secret: { source: vault, key: DATABASE_URL }
locks: { ttl: 30s }
on_failure: rollback
`, w.cf.URL, inf.URL, appA) + mobileYAML(fs, "${FLAGSMITH_API_KEY}")
	rcv := notifytest.NewServer(t)
	rcv.FailNext(notifytest.Fault{Status: http.StatusInternalServerError, Body: "internal_error"})
	pipeline += `notify:
  targets:
    - { name: team, kind: slack, url: "${NOTIFY_SLACK_URL}" }
    - { name: audit, kind: webhook, url: "${NOTIFY_HOOK_URL}", secret: "${NOTIFY_HMAC}" }
`
	dir := pipelineDir(t, map[string]string{"prod": pipeline})
	env := w.env("chaos-hygiene-1", dir)
	env["COOLIFY_TOKEN"] = coolifyToken
	env["INFISICAL_CLIENT_SECRET"] = sentinelInfClient
	env["FLAGSMITH_API_KEY"] = sentinelFlagsmithKey
	env["ORCH_SECRET_DB_PASSWORD"] = sentinelEnvSource
	env["NOTIFY_SLACK_URL"] = rcv.URL + "/services/T0/B0/" + sentinelNotifyURL
	env["NOTIFY_HOOK_URL"] = rcv.URL + "/deploys"
	env["NOTIFY_HMAC"] = sentinelNotifyHMAC
	d := startDaemon(t, "d1", env)

	ok := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", AppVersion: "2.0.0"})
	if got := d.waitEnded(ok.ID, 60*time.Second); got.Status != runs.StatusSucceeded {
		t.Fatalf("run 1: %q (%s), want succeeded", got.Status, got.Reason)
	}
	// A run that fails while writing the secrets, so error strings are searched too.
	w.cf.FailNext(10, coolifytest.Fault{Method: http.MethodPatch, Status: http.StatusUnprocessableEntity,
		Message: "The given data was invalid."})
	bad := d.trigger("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3", AppVersion: "2.1.0"})
	if got := d.waitEnded(bad.ID, 60*time.Second); got.Status != runs.StatusFailed {
		t.Fatalf("run 2: %q (%s), want failed", got.Status, got.Reason)
	}

	// The secrets were used: Coolify received both values.
	var sent strings.Builder
	for _, q := range w.cf.Requests() {
		sent.Write(q.Body)
	}
	for _, s := range []string{sentinelEnvSource, sentinelInfisical} {
		if !strings.Contains(sent.String(), s) {
			t.Fatalf("Coolify never received the secret %s: the test would prove nothing", s)
		}
	}

	// Both runs were announced to both targets (one delivery retried after the 500), with the
	// URL's token and a signature under the HMAC key: the notify secrets were used.
	var slackSeen, signed int
	for range 4 {
		select {
		case m := <-rcv.Received():
			if strings.Contains(m.Path, sentinelNotifyURL) {
				slackSeen++
			}
			if hmacsig.Verify(m.Header.Get(notify.HeaderSignature), []byte(sentinelNotifyHMAC), m.Body) == nil {
				signed++
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("notifications: %d of 4 arrived", len(rcv.Messages()))
		}
	}
	if slackSeen != 2 || signed != 2 {
		t.Fatalf("notifications: %d to the Slack URL, %d signed, want 2 and 2: the test would prove nothing", slackSeen, signed)
	}

	// Everything the daemon shows.
	seen := map[string]string{}
	get := func(path string, want int) {
		code, b := d.do(http.MethodGet, path, nil, nil)
		if code != want {
			t.Errorf("GET %s: %d, want %d: %s", path, code, want, b)
		}
		seen[fmt.Sprintf("GET %s (%d)", path, code)] = string(b)
	}
	for _, p := range []string{"/", "/healthz", "/readyz", "/metrics", "/v1/runs", "/v1/locks", "/v1/locks/audit", "/v1/services",
		"/v1/pipelines", "/v1/pipelines/prod/plan?image_tag=v9&build=9&app_version=3.0.0"} {
		get(p, http.StatusOK)
	}
	get("/v1/runs/nope", http.StatusNotFound)
	get("/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV", http.StatusNotFound)
	for _, id := range []string{ok.ID, bad.ID} {
		get("/v1/runs/"+id, http.StatusOK)
		get("/runs/"+id, http.StatusOK)
		raw, _, err := d.stream(t.Context(), id)
		if err != nil {
			t.Errorf("events of %s: %v", id, err)
		}
		seen["SSE "+id] = raw
	}
	// Answers to bad requests, which echo what they refuse.
	for _, body := range []any{map[string]any{"image_tag": sentinelEnvSource + "!"}, map[string]any{"params": map[string]any{"x": sentinelInfisical}}} {
		code, b := d.do(http.MethodPost, "/v1/pipelines/prod/runs", body, map[string]string{"Authorization": "Bearer " + triggerToken})
		seen[fmt.Sprintf("POST trigger (%d)", code)] = string(b)
	}
	code, b := d.do(http.MethodGet, "/v1/runs", nil, map[string]string{"Authorization": "Bearer " + sentinelCoolifyToken})
	seen[fmt.Sprintf("GET /v1/runs with a wrong token (%d)", code)] = string(b)
	// Dashboard and run store.
	seen["daemon log"] = d.log.String()
	seen["redis"] = dumpRedis(t, w.redis.URL())

	for where, text := range seen {
		for _, s := range []string{sentinelEnvSource, sentinelInfisical, sentinelInfClient, sentinelCoolifyToken, sentinelFlagsmithKey,
			sentinelNotifyURL, sentinelNotifyHMAC, adminToken, triggerToken} {
			// The distinctive tail as well, to catch truncated or reformatted copies.
			if strings.Contains(text, s) || strings.Contains(text, s[len(s)-8:]) {
				t.Errorf("%s contains the secret %s", where, s)
			}
		}
	}
	if len(seen["redis"]) < 100 || !strings.Contains(seen["redis"], ok.ID) {
		t.Errorf("the Redis dump (%d bytes) does not hold the runs: the search would prove nothing", len(seen["redis"]))
	}
}

// dumpRedis returns every key and value of the Redis at url as text.
func dumpRedis(t *testing.T, url string) string {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("redis KEYS: %v", err)
	}
	var b strings.Builder
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = c.Get(ctx, k).Result()
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "list":
			v, err = c.LRange(ctx, k, 0, -1).Result()
		case "set":
			v, err = c.SMembers(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "stream":
			v, err = c.XRange(ctx, k, "-", "+").Result()
		default:
			v = "(type " + typ + ")"
		}
		if err != nil {
			t.Fatalf("redis read %s (%s): %v", k, typ, err)
		}
		fmt.Fprintf(&b, "%s %s %v\n", typ, k, v)
	}
	return b.String()
}
