// Package chaos holds the fault suite of the orchestrator (issue 7): end-to-end tests that
// build the daemon, start it as real OS processes on a private redis-server, point it at the
// fake Coolify, Flagsmith and Infisical servers of this repository, and then break things —
// kill -9 and SIGTERM of the daemon, Redis paused past the lease TTL or restarted empty,
// Coolify answering 5xx/429 in bursts or hanging a deployment, a concurrent Flagsmith
// writer — and check what the promises in docs/guarantees.md say must hold.
//
// The ground truth of what happened to "Coolify" is the fake's own history
// (coolifytest.Fake.History: every request with the application it acted on and its run and
// fence headers, every deployment's span and the config it ran); the ground truth of what the
// daemon claims is its API (GET /v1/runs/{id}, its SSE events, GET /v1/locks). After every
// scenario the world checks the history against the promises (coolifytest.Checks, in
// coolify/coolifytest/checks.go). The package
// The campaign (campaign_test.go, `make campaign`) plays seeded, randomized schedules of those
// faults over three daemons and judges each from the fakes' records (judges_test.go). The package
// has no non-test code: run it with `go test ./chaos/` or `make chaos`.
package chaos
