//go:build !race

package sqlitestore_test

// pruneBoundedRuns is TestPruneBounded's run count (see race_test.go).
const pruneBoundedRuns = 10_000
