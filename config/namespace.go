package config

import (
	"fmt"
	"strings"
)

// NamespaceOf returns the registered namespace key lies in, or "" when it lies in none.
// Because CheckNamespaces(Namespaces()) holds, a key lies in at most one.
func NamespaceOf(key string) string {
	for _, ns := range Namespaces() {
		if strings.HasPrefix(key, ns) && len(key) > len(ns) {
			return ns
		}
	}
	return ""
}

// CheckNamespaces reports the first pair of namespaces that overlap: equal, or one a prefix
// of the other, so that a key could lie in both. It also refuses an empty namespace and one
// that does not end in ':'. The error names both namespaces.
func CheckNamespaces(namespaces []string) error {
	for i, a := range namespaces {
		if a == "" || !strings.HasSuffix(a, ":") {
			return fmt.Errorf("lock namespace %q: want a non-empty prefix ending in ':'", a)
		}
		for _, b := range namespaces[:i] {
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return fmt.Errorf("lock namespaces %q and %q overlap: a key could lie in both", b, a)
			}
		}
	}
	return nil
}
