package config

import "strings"

// Order says how the builds of a pipeline are ordered: which run is "newer". The stale-build
// guard keeps an older build from writing or deploying over a newer one, and the supersede
// policy keeps the newest of the pending runs.
type Order string

// Build orders.
const (
	// OrderBuild compares the triggers' builds as whole numbers: build 10 is newer than
	// build 9. A run of such a pipeline needs a numeric build.
	OrderBuild Order = "build"
	// OrderCreated compares when the runs were submitted.
	OrderCreated Order = "created"
	// OrderNone orders nothing: the last run to enter Phase 1 wins, and no run is stale.
	OrderNone Order = "none"
)

// Effective returns the order that applies to a run whose trigger has build: o when the
// pipeline names one; when it names none (""), OrderBuild for a numeric build and OrderNone
// for any other (or none).
func (o Order) Effective(build string) Order {
	if o != "" {
		return o
	}
	if IsBuildNumber(build) {
		return OrderBuild
	}
	return OrderNone
}

// IsBuildNumber reports whether build is a whole number in decimal digits ("0042" counts, as
// 42).
func IsBuildNumber(build string) bool {
	if build == "" {
		return false
	}
	for _, c := range build {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// CompareBuilds compares two numeric builds (IsBuildNumber) as numbers, of any length: -1
// when a < b, 0 when equal, +1 when a > b.
func CompareBuilds(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
