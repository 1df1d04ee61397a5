//go:build race

package sqlitestore_test

// pruneBoundedRuns is TestPruneBounded's run count. Under the race detector the pure-Go
// SQLite is about ten times slower (two minutes for 10 000 runs on a busy 2-core machine),
// and a volume test gains nothing from it: the conformance suite covers the races.
const pruneBoundedRuns = 2_000
