package config

import (
	"fmt"
	"net/url"
	"strings"
)

// A health check's URL may take trigger references (${trigger.…}), and a trigger is what a
// caller with the trigger token, or a webhook's payload, chooses. So that no trigger ever
// chooses which host the daemon requests (an internal address, a cloud metadata endpoint, a
// port scan read back through the run's reason), a reference is allowed only after the
// URL's authority (in its path, query or fragment), the file is refused at load when one
// could reach the scheme, host or port, and each value is escaped for the part it lands in.

// urlPart is the part of a URL a reference lands in.
type urlPart int

const (
	partAuthority urlPart = iota // the scheme, the user, the host or the port
	partPath
	partQuery
	partFragment
)

func (p urlPart) String() string {
	return [...]string{"the scheme, host or port", "the path", "the query", "the fragment"}[p]
}

// urlPartAfter returns the part of a URL whose text up to a position is before. Only the
// file's own text decides it: the values before are escaped, so they never hold a '/', '?'
// or '#' that could move a later value into another part.
func urlPartAfter(before string) urlPart {
	_, rest, ok := strings.Cut(before, "://")
	switch {
	case !ok:
		return partAuthority
	case strings.Contains(rest, "#"):
		return partFragment
	case strings.Contains(rest, "?"):
		return partQuery
	case strings.Contains(rest, "/"):
		return partPath
	}
	return partAuthority
}

// escapeForURLPart escapes a value for the part of a URL it lands in: it stays one path
// segment, one query value, or fragment text.
func escapeForURLPart(part urlPart, v string) string {
	switch part {
	case partQuery:
		return url.QueryEscape(v)
	default:
		return url.PathEscape(v)
	}
}

// checkURLRefs reports the first trigger reference of a URL template that could reach its
// scheme, host or port; nil when every reference lands in its path, query or fragment.
func checkURLRefs(tmpl string) error {
	var bad string
	_, err := expandRefsAfter(tmpl, false, func(before, ref string) (string, error) {
		if bad == "" && strings.HasPrefix(ref, triggerRef) && urlPartAfter(before) == partAuthority {
			bad = ref
		}
		return "x", nil
	})
	if err != nil {
		return err
	}
	if bad != "" {
		return fmt.Errorf("trigger reference %s could choose the scheme, host or port; a trigger may fill the path, "+
			"the query or the fragment only: write the scheme and host (and port) out, then a / before the first reference", showRef(bad))
	}
	return nil
}

// sameOrigin reports whether two absolute URLs have one scheme, host and port.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		ua.User == nil && ub.User == nil
}
