package orchestrator

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// identPattern is a pre-release or build identifier (semver: [0-9A-Za-z-], not empty).
var identPattern = regexp.MustCompile(`^[0-9A-Za-z-]+$`)

// Version is an app version a pipeline writes to Flagsmith: "2.4.0", "v2.10",
// "2.4.0-beta.1+build.7". ParseVersion is the one rule for what a version is, used where a
// trigger's app_version is checked (Trigger.Validate, config's never_downgrade values) and
// where the mobile step compares versions (mobile's never-downgrade), so a value accepted
// at submit never fails the step later.
//
// Versions are compared numerically segment by segment ("2.10.0" > "2.9.1"; "2.4" ==
// "2.4.0"); a leading "v" and build metadata are ignored; a pre-release is lower than its
// release, and pre-release identifiers compare as semver says.
//
// A Version is a parsed semver-ish version: numeric core segments and an optional
// dot-separated pre-release.
type Version struct {
	core []int64
	pre  []string
}

// ParseVersion reads a version: numeric core segments ("2.4.0", any number of them), an optional
// leading "v", an optional pre-release ("-beta.1") and build metadata ("+build.7") of
// dot-separated identifiers of letters, digits and '-'. Surrounding spaces are ignored.
func ParseVersion(s string) (Version, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "v"), "V")
	if i := strings.IndexByte(t, '+'); i >= 0 {
		if !validIdents(t[i+1:]) {
			return Version{}, fmt.Errorf("version %q: build metadata must be dot-separated letters, digits and '-'", s)
		}
		t = t[:i]
	}
	var v Version
	if i := strings.IndexByte(t, '-'); i >= 0 {
		if t[i+1:] == "" {
			return Version{}, fmt.Errorf("version %q: empty pre-release", s)
		}
		if !validIdents(t[i+1:]) {
			return Version{}, fmt.Errorf("version %q: a pre-release must be dot-separated letters, digits and '-'", s)
		}
		v.pre = strings.Split(t[i+1:], ".")
		t = t[:i]
	}
	if t == "" {
		return Version{}, fmt.Errorf("%q is not a version", s)
	}
	for _, seg := range strings.Split(t, ".") {
		n, err := strconv.ParseInt(seg, 10, 64)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("%q is not a version (segment %q is not a number)", s, seg)
		}
		v.core = append(v.core, n)
	}
	return v, nil
}

// CompareVersions returns -1, 0 or +1 as a is lower, equal or higher than b, or the error of the
// first that is not a version.
func CompareVersions(a, b string) (int, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := 0; i < max(len(va.core), len(vb.core)); i++ {
		var x, y int64
		if i < len(va.core) {
			x = va.core[i]
		}
		if i < len(vb.core) {
			y = vb.core[i]
		}
		if x != y {
			return cmpInt(x, y), nil
		}
	}
	switch {
	case len(va.pre) == 0 && len(vb.pre) == 0:
		return 0, nil
	case len(va.pre) == 0:
		return 1, nil
	case len(vb.pre) == 0:
		return -1, nil
	}
	for i := 0; i < min(len(va.pre), len(vb.pre)); i++ {
		x, y := va.pre[i], vb.pre[i]
		nx, errx := strconv.ParseInt(x, 10, 64)
		ny, erry := strconv.ParseInt(y, 10, 64)
		switch {
		case errx == nil && erry == nil:
			if nx != ny {
				return cmpInt(nx, ny), nil
			}
		case errx == nil:
			return -1, nil // numeric identifiers are lower than alphanumeric ones
		case erry == nil:
			return 1, nil
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c, nil
			}
		}
	}
	return cmpInt(int64(len(va.pre)), int64(len(vb.pre))), nil
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func validIdents(s string) bool {
	for id := range strings.SplitSeq(s, ".") {
		if !identPattern.MatchString(id) {
			return false
		}
	}
	return true
}
