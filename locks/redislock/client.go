package redislock

import "github.com/redis/go-redis/v9"

// NewClient returns a go-redis client for a redis://, rediss://, unix://, redis+cluster://
// or rediss+cluster:// URL (a master_name query parameter selects Sentinel), the same way
// Open does, so the daemon can share one client between the lock driver and the run store.
// Errors never repeat the URL (it may hold a password).
func NewClient(rawURL string) (redis.UniversalClient, error) { return newClient(rawURL) }
