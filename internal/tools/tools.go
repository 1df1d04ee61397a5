//go:build tools

// Package tools pins dependencies the packages below are being built against;
// it is removed once every one is imported by real code.
package tools
import (
 _ "github.com/redis/go-redis/v9"
 _ "github.com/go-chi/chi/v5"
 _ "github.com/hashicorp/go-retryablehttp"
 _ "github.com/knadh/koanf/v2"
 _ "github.com/knadh/koanf/parsers/yaml"
 _ "github.com/knadh/koanf/providers/file"
 _ "github.com/knadh/koanf/providers/env/v2"
 _ "github.com/knadh/koanf/providers/rawbytes"
 _ "github.com/knadh/koanf/providers/confmap"
 _ "github.com/knadh/koanf/providers/posflag"
 _ "modernc.org/sqlite"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/chromedp/chromedp"
 _ "github.com/anishathalye/porcupine"
 _ "github.com/getkin/kin-openapi/openapi3filter"
 _ "github.com/getkin/kin-openapi/routers/gorillamux"
 _ "go.uber.org/goleak"
 _ "golang.org/x/term"
 _ "golang.org/x/time/rate"
)
