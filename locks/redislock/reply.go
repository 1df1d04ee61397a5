package redislock

import (
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
)

// reply reads the array a script returns: integers, strings, and nil for missing values.
type reply []any

func (r reply) str(i int) string {
	if i >= len(r) {
		return ""
	}
	switch v := r[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func (r reply) int(i int) int64 {
	if i >= len(r) {
		return 0
	}
	switch v := r[i].(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// time reads Unix milliseconds; zero stays the zero time.
func (r reply) time(i int) time.Time { return msTime(r.str(i)) }

func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// lease reads holder, fence, acquired, expires and message starting at i.
func (r reply) lease(key string, i int, frozen bool) locks.Info {
	return locks.Info{
		Key:        key,
		Holder:     r.str(i),
		Fence:      r.int(i + 1),
		AcquiredAt: r.time(i + 2),
		ExpiresAt:  r.time(i + 3),
		Message:    r.str(i + 4),
		Frozen:     frozen,
	}
}
