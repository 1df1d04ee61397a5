package infisical_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/secrets"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

// A run resolves the secrets of all its services through one Resolver: one Infisical list
// call per scope, whatever the number of keys and services.
func Example() {
	fake := infisicaltest.NewHandler(
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "deployer", ClientSecret: "s3cret"}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/api"},
			map[string]string{"DB_PASSWORD": "hunter2", "DATABASE_URL": "postgres://app:${DB_PASSWORD}@db/app"}),
	)
	srv := httptest.NewServer(fake)
	defer srv.Close()

	client, err := infisical.New(srv.URL, "deployer", "s3cret", infisical.WithVersion("1.0.0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	run := secrets.NewResolver(map[string]secrets.Source{
		"vault": client.Source(infisical.Scope{ProjectID: "p1", Environment: "prod", Path: "/api"}),
		"env":   secrets.NewEnv(func(k string) string { return map[string]string{"SENTRY_DSN": "https://sentry"}[k] }, ""),
	})
	defer run.Forget()

	dbURL := secrets.Ref{Source: "vault", Key: "DATABASE_URL"}
	vals, err := run.Resolve(context.Background(), dbURL, secrets.Ref{Source: "env", Key: "SENTRY_DSN"})
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := vals.Get(dbURL)
	fmt.Println(v)
	fmt.Println(vals) // printing never shows a value

	_, err = run.Resolve(context.Background(), secrets.Ref{Source: "vault", Key: "API_KEY"})
	fmt.Println(err)
	fmt.Println("list calls:", fake.Count(http.MethodGet, "/api/v3/secrets/raw"))
	// Output:
	// postgres://app:hunter2@db/app
	// secrets.Resolved{env:SENTRY_DSN: [redacted], vault:DATABASE_URL: [redacted]}
	// source "vault": infisical project "p1" environment "prod" path "/api": key API_KEY not found
	// list calls: 1
}

// BenchmarkResolveRun measures one run's secret resolution: 10 services with 5 Infisical keys
// each, resolved service by service through one Resolver, against the fake on loopback. The
// lists/run metric shows the Resolver's snapshot at work.
func BenchmarkResolveRun(b *testing.B) {
	folder := infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/api"}
	kv := map[string]string{}
	for i := range 50 {
		kv[fmt.Sprintf("KEY_%02d", i)] = fmt.Sprintf("value-%02d", i)
	}
	srv := infisicaltest.NewServer(b,
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: clientID, ClientSecret: clientSecret}),
		infisicaltest.WithSecrets(folder, kv))
	client, err := infisical.New(srv.URL, clientID, clientSecret)
	if err != nil {
		b.Fatal(err)
	}
	src := client.Source(infisical.Scope{ProjectID: "p1", Environment: "prod", Path: "/api"})
	ctx := context.Background()
	if _, err := src.Fetch(ctx, []string{"KEY_00"}); err != nil { // log in outside the timing
		b.Fatal(err)
	}
	srv.ResetRequests()
	b.ResetTimer()
	for b.Loop() {
		run := secrets.NewResolver(map[string]secrets.Source{"vault": src})
		// Phase 1 asks service by service, each for keys of its own.
		for svc := range 10 {
			var refs []secrets.Ref
			for k := range 5 {
				refs = append(refs, secrets.Ref{Source: "vault", Key: fmt.Sprintf("KEY_%02d", svc*5+k)})
			}
			if _, err := run.Resolve(ctx, refs...); err != nil {
				b.Fatal(err)
			}
		}
		run.Forget()
	}
	b.ReportMetric(float64(srv.Count(http.MethodGet, "/api/v3/secrets/raw"))/float64(b.N), "lists/run")
}
