// Package demopipelines holds the pipelines `orchestrator demo` runs, embedded in the binary
// so the demo works from any directory and in the container image. testdata/pipelines holds
// copies of these files, so they are validated with the other samples (a link would lead out
// of that pipelines directory, which the loader refuses); config's
// TestSampleDemoPipelinesAreTheDemos keeps the copies equal.
package demopipelines

import "embed"

// Files are demo.yaml and demo-web.yaml.
//
//go:embed demo.yaml demo-web.yaml
var Files embed.FS

// Names are the demo's pipeline files, in the order the demo triggers them.
var Names = []string{"demo.yaml", "demo-web.yaml"}
