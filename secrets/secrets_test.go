package secrets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/panics"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

const (
	dbValue  = "s3cr3t-db-password-value"
	apiValue = "s3cr3t-api-key-value"
)

// assertNoSecret fails when text contains any of the test's secret values.
func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, v := range []string{dbValue, apiValue} {
		if strings.Contains(text, v) {
			t.Errorf("%s reveals a secret value: %s", what, text)
		}
	}
}

func TestValuesGetAndPick(t *testing.T) {
	v := secrets.NewValues(map[string]string{"DB": dbValue, "EMPTY": ""})
	if got, ok := v.Get("DB"); !ok || got != dbValue {
		t.Errorf("Get(DB) = %q, %v; want the value, true", got, ok)
	}
	if _, ok := v.Get("EMPTY"); !ok {
		t.Errorf("Get(EMPTY): an empty value that is present must be reported present")
	}
	if _, ok := v.Get("NOPE"); ok {
		t.Errorf("Get(NOPE) reported present")
	}
	picked, missing := v.Pick([]string{"DB", "NOPE", "DB", "OTHER", "NOPE"})
	if picked.Len() != 1 {
		t.Errorf("Pick kept %d keys, want 1", picked.Len())
	}
	if got, want := strings.Join(missing, ","), "NOPE,OTHER"; got != want {
		t.Errorf("Pick missing = %s, want %s", got, want)
	}
	if got, want := strings.Join(v.Keys(), ","), "DB,EMPTY"; got != want {
		t.Errorf("Keys = %s, want %s", got, want)
	}
	var zero secrets.Values
	if zero.Len() != 0 || zero.Keys() != nil {
		t.Errorf("zero Values is not empty")
	}
	if _, ok := zero.Get("DB"); ok {
		t.Errorf("zero Values has a key")
	}
}

func TestNewValuesCopies(t *testing.T) {
	m := map[string]string{"DB": dbValue}
	v := secrets.NewValues(m)
	m["DB"] = "changed"
	if got, _ := v.Get("DB"); got != dbValue {
		t.Errorf("Values changed with the caller's map: got %q", got)
	}
}

// holder has a Values in an unexported field, which fmt prints without calling its methods.
type holder struct {
	name string
	vals secrets.Values
	res  secrets.Resolved
}

func TestValuesNeverPrintValues(t *testing.T) {
	v := secrets.NewValues(map[string]string{"DB": dbValue, "API": apiValue})
	res, err := secrets.NewResolver(map[string]secrets.Source{
		"lit": secrets.NewLiteral(map[string]string{"DB": dbValue}),
	}).Resolve(context.Background(), secrets.Ref{Source: "lit", Key: "DB"})
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		assertNoSecret(t, "Values "+verb, fmt.Sprintf(verb, v))
		assertNoSecret(t, "Resolved "+verb, fmt.Sprintf(verb, res))
		assertNoSecret(t, "*Values "+verb, fmt.Sprintf(verb, &v))
		assertNoSecret(t, "struct field "+verb, fmt.Sprintf(verb, holder{name: "x", vals: v, res: res}))
		assertNoSecret(t, "map element "+verb, fmt.Sprintf(verb, map[string]secrets.Values{"a": v}))
	}
	if got := v.String(); !strings.Contains(got, "API") || !strings.Contains(got, "DB") {
		t.Errorf("String = %s, want the key names", got)
	}

	for _, x := range []any{v, res, map[string]any{"v": v}} {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		assertNoSecret(t, "json", string(b))
	}
	b, _ := json.Marshal(v)
	if got, want := string(b), `{"API":"[redacted]","DB":"[redacted]"}`; got != want {
		t.Errorf("json = %s, want %s", got, want)
	}

	var buf bytes.Buffer
	for _, h := range []slog.Handler{
		slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}),
	} {
		log := slog.New(h)
		log.Info("values", "vals", v, "res", res, "any", any(v), "group", slog.GroupValue(slog.Any("v", v)))
		log.Info("values", slog.Any("holder", holder{vals: v}))
	}
	if buf.Len() == 0 {
		t.Fatal("nothing logged")
	}
	assertNoSecret(t, "slog", buf.String())
}

func TestLiteralSource(t *testing.T) {
	ctx := context.Background()
	lit := secrets.NewLiteral(map[string]string{"DB": dbValue, "API": apiValue})
	got, err := lit.Fetch(ctx, []string{"DB"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Get("DB"); v != dbValue || got.Len() != 1 {
		t.Errorf("Fetch(DB) = %v (DB ok: %v), want only DB", got, v == dbValue)
	}

	_, err = lit.Fetch(ctx, []string{"DB", "MISSING"})
	var me *secrets.MissingError
	if !errors.As(err, &me) || !errors.Is(err, secrets.ErrMissing) {
		t.Fatalf("Fetch missing: err = %v, want a *MissingError matching ErrMissing", err)
	}
	if len(me.Keys) != 1 || me.Keys[0] != "MISSING" {
		t.Errorf("missing keys = %v, want [MISSING]", me.Keys)
	}
	if !strings.Contains(err.Error(), "MISSING") || !strings.Contains(err.Error(), "literal") {
		t.Errorf("error %q does not name the key and the source", err)
	}
	assertNoSecret(t, "error", err.Error())
	assertNoSecret(t, "Literal", fmt.Sprintf("%v %+v %#v", lit, lit, lit))

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lit.Fetch(canceled, []string{"DB"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Fetch on a canceled context: err = %v, want context.Canceled", err)
	}
}

func TestEnvSource(t *testing.T) {
	env := map[string]string{
		"ORCH_SECRET_DB":    dbValue,
		"ORCH_SECRET_EMPTY": "",
		"ADMIN_TOKEN":       apiValue,
	}
	var asked []string
	getenv := func(k string) string { asked = append(asked, k); return env[k] }
	src := secrets.NewEnv(getenv, "ORCH_SECRET_")

	got, err := src.Fetch(context.Background(), []string{"DB"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Get("DB"); v != dbValue {
		t.Errorf("Fetch(DB) did not read ORCH_SECRET_DB")
	}
	if asked[0] != "ORCH_SECRET_DB" {
		t.Errorf("getenv asked %q, want ORCH_SECRET_DB", asked[0])
	}

	// The prefix keeps pipelines away from the daemon's own variables; empty counts as missing.
	_, err = src.Fetch(context.Background(), []string{"ADMIN_TOKEN", "EMPTY", "DB", "EMPTY"})
	var me *secrets.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want *MissingError", err)
	}
	if got, want := strings.Join(me.Keys, ","), "ADMIN_TOKEN,EMPTY"; got != want {
		t.Errorf("missing = %s, want %s", got, want)
	}
	if !strings.Contains(err.Error(), `environment (prefix "ORCH_SECRET_")`) {
		t.Errorf("error %q does not name the source", err)
	}
	assertNoSecret(t, "error", err.Error())

	plain := secrets.NewEnv(func(k string) string { return env[k] }, "")
	if _, err := plain.Fetch(context.Background(), []string{"ADMIN_TOKEN"}); err != nil {
		t.Errorf("no prefix: %v", err)
	}
}

// countingSource is a Source that records every Fetch.
type countingSource struct {
	src   secrets.Source
	mu    sync.Mutex
	calls [][]string
}

func (c *countingSource) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	c.mu.Lock()
	c.calls = append(c.calls, append([]string(nil), keys...))
	c.mu.Unlock()
	return c.src.Fetch(ctx, keys)
}

func (c *countingSource) Calls() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string(nil), c.calls...)
}

func TestResolverBatchesAndCaches(t *testing.T) {
	ctx := context.Background()
	vault := &countingSource{src: secrets.NewLiteral(map[string]string{"DB": dbValue, "API": apiValue, "X": "x"})}
	env := &countingSource{src: secrets.NewEnv(func(k string) string { return map[string]string{"SENTRY": "dsn"}[k] }, "")}
	r := secrets.NewResolver(map[string]secrets.Source{"vault": vault, "env": env})

	// Service one: three refs to vault (one twice) and one to env → one Fetch each.
	res, err := r.Resolve(ctx,
		secrets.Ref{Source: "vault", Key: "DB"}, secrets.Ref{Source: "vault", Key: "API"},
		secrets.Ref{Source: "vault", Key: "DB"}, secrets.Ref{Source: "env", Key: "SENTRY"})
	if err != nil {
		t.Fatal(err)
	}
	if got := vault.Calls(); len(got) != 1 || strings.Join(got[0], ",") != "DB,API" {
		t.Errorf("vault fetches = %v, want one fetch of [DB API]", got)
	}
	if got := len(env.Calls()); got != 1 {
		t.Errorf("env fetches = %d, want 1", got)
	}
	if v, _ := res.Get(secrets.Ref{Source: "vault", Key: "API"}); v != apiValue {
		t.Errorf("vault:API wrong")
	}
	if res.Len() != 3 {
		t.Errorf("resolved %d refs, want 3", res.Len())
	}

	// Service two: DB is cached, X is new → one more fetch with X only; env not asked.
	res, err = r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "DB"}, secrets.Ref{Source: "vault", Key: "X"})
	if err != nil {
		t.Fatal(err)
	}
	if got := vault.Calls(); len(got) != 2 || strings.Join(got[1], ",") != "X" {
		t.Errorf("vault fetches = %v, want a second fetch of [X]", got)
	}
	if len(env.Calls()) != 1 {
		t.Errorf("env fetched again")
	}
	if v, _ := res.Get(secrets.Ref{Source: "vault", Key: "DB"}); v != dbValue {
		t.Errorf("cached vault:DB wrong")
	}
	if _, ok := res.Get(secrets.Ref{Source: "env", Key: "SENTRY"}); ok {
		t.Errorf("Resolved holds a ref that was not asked")
	}

	// Forget drops the values: the next call fetches again.
	r.Forget()
	if _, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "DB"}); err != nil {
		t.Fatal(err)
	}
	if got := vault.Calls(); len(got) != 3 {
		t.Errorf("after Forget: %d fetches, want 3", len(got))
	}
}

func TestResolverReportsEveryMissingKey(t *testing.T) {
	r := secrets.NewResolver(map[string]secrets.Source{
		"vault": secrets.NewLiteral(map[string]string{"DB": dbValue}),
		"env":   secrets.NewEnv(func(string) string { return "" }, ""),
	})
	_, err := r.Resolve(context.Background(),
		secrets.Ref{Source: "vault", Key: "DB"}, secrets.Ref{Source: "vault", Key: "NOPE"},
		secrets.Ref{Source: "env", Key: "GONE"}, secrets.Ref{Source: "nowhere", Key: "K"})
	if err == nil {
		t.Fatal("Resolve succeeded with missing keys")
	}
	if !errors.Is(err, secrets.ErrMissing) || !errors.Is(err, secrets.ErrUnknownSource) {
		t.Errorf("err = %v, want ErrMissing and ErrUnknownSource", err)
	}
	for _, want := range []string{`source "vault"`, "NOPE", `source "env"`, "GONE", `"nowhere"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	assertNoSecret(t, "error", err.Error())
}

// blockingSource blocks in Fetch until ctx ends, signalling when it started.
type blockingSource struct {
	started chan struct{}
	n       atomic.Int32
}

func (b *blockingSource) Fetch(ctx context.Context, _ []string) (secrets.Values, error) {
	if b.n.Add(1) == 1 {
		close(b.started)
	}
	<-ctx.Done()
	return secrets.Values{}, ctx.Err()
}

func TestResolverCancellation(t *testing.T) {
	src := &blockingSource{started: make(chan struct{})}
	r := secrets.NewResolver(map[string]secrets.Source{"slow": src})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := r.Resolve(ctx, secrets.Ref{Source: "slow", Key: "K"})
		first <- err
	}()
	<-src.started

	// A second caller waits for its turn; its own cancellation frees it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := r.Resolve(ctx2, secrets.Ref{Source: "slow", Key: "K"}); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting caller: err = %v, want context.Canceled", err)
	}

	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("fetching caller: err = %v, want context.Canceled", err)
	}
}

func TestResolverConcurrent(t *testing.T) {
	src := &countingSource{src: secrets.NewLiteral(map[string]string{"A": "1", "B": "2"})}
	r := secrets.NewResolver(map[string]secrets.Source{"s": src})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			res, err := r.Resolve(context.Background(), secrets.Ref{Source: "s", Key: "A"}, secrets.Ref{Source: "s", Key: "B"})
			if err != nil {
				t.Error(err)
				return
			}
			if v, _ := res.Get(secrets.Ref{Source: "s", Key: "B"}); v != "2" {
				t.Errorf("B = %q, want 2", v)
			}
		})
	}
	wg.Wait()
	if got := len(src.Calls()); got != 1 {
		t.Errorf("%d fetches, want 1 (later callers served from the run's cache)", got)
	}
}

// snapshotSource is a Snapshotter over a Literal that counts snapshots and can fail them.
type snapshotSource struct {
	countingSource
	snapshots atomic.Int32
	fail      atomic.Bool
}

func (s *snapshotSource) Snapshot(ctx context.Context) (secrets.Source, error) {
	s.snapshots.Add(1)
	if s.fail.Load() {
		return nil, errors.New("listing failed")
	}
	return s.src, nil
}

func TestResolverSnapshotsOncePerRun(t *testing.T) {
	ctx := context.Background()
	src := &snapshotSource{countingSource: countingSource{src: secrets.NewLiteral(map[string]string{"A": "1", "B": "2", "C": "3"})}}
	r := secrets.NewResolver(map[string]secrets.Source{"vault": src})

	src.fail.Store(true)
	if _, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "A"}); err == nil || !strings.Contains(err.Error(), "listing failed") {
		t.Fatalf("err = %v, want the snapshot's error", err)
	}
	src.fail.Store(false) // a failed snapshot is not kept: the next call takes one

	// Service by service, each with keys of its own, and one key that does not exist.
	for _, key := range []string{"A", "B", "C"} {
		res, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := res.Get(secrets.Ref{Source: "vault", Key: key}); v == "" {
			t.Errorf("%s not resolved", key)
		}
	}
	if _, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "NOPE"}); !errors.Is(err, secrets.ErrMissing) {
		t.Errorf("err = %v, want ErrMissing from the snapshot", err)
	}
	if got := src.snapshots.Load(); got != 2 {
		t.Errorf("%d snapshots, want 2 (one failed, one served the whole run)", got)
	}
	if got := len(src.Calls()); got != 0 {
		t.Errorf("the source itself was fetched %d times, want 0 (the snapshot serves)", got)
	}

	r.Forget()
	if _, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "A"}); err != nil {
		t.Fatal(err)
	}
	if got := src.snapshots.Load(); got != 3 {
		t.Errorf("after Forget: %d snapshots, want 3", got)
	}
}

// panicSource panics in Fetch, as a buggy source would.
type panicSource struct{}

func (panicSource) Fetch(context.Context, []string) (secrets.Values, error) {
	var m map[string]string
	//lint:ignore SA5000 the runtime's own panic, as a buggy source would raise, is the point
	m["boom"] = "x" // assignment to a nil map
	return secrets.Values{}, nil
}

// A panic in a source's goroutine fails the Resolve call with the panic and its stack, and
// the other sources are still resolved and cached.
func TestResolverTurnsSourcePanicIntoError(t *testing.T) {
	ok := &countingSource{src: secrets.NewLiteral(map[string]string{"A": "1"})}
	r := secrets.NewResolver(map[string]secrets.Source{"bad": panicSource{}, "good": ok})
	_, err := r.Resolve(context.Background(), secrets.Ref{Source: "bad", Key: "K"}, secrets.Ref{Source: "good", Key: "A"})
	var pe *panics.Error
	if !errors.As(err, &pe) || !errors.Is(err, secrets.ErrSource) || !strings.Contains(err.Error(), `source "bad": panic:`) {
		t.Fatalf("got %v, want the panic of source bad as an error", err)
	}
	if len(pe.Stack) == 0 {
		t.Errorf("the recovered panic has no stack")
	}
	if _, err := r.Resolve(context.Background(), secrets.Ref{Source: "good", Key: "A"}); err != nil {
		t.Fatal(err)
	}
	if got := len(ok.Calls()); got != 1 {
		t.Errorf("good source fetched %d times, want 1 (kept from the failed call)", got)
	}
}
