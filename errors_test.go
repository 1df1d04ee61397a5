package orchestrator_test

import (
	"errors"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

func TestUnknownPipelineNamesTheKnownOnes(t *testing.T) {
	err := orchestrator.UnknownPipeline("prd", []string{"demo", "prod"})
	if !errors.Is(err, orchestrator.ErrUnknownPipeline) || err.Error() != `pipeline "prd": unknown pipeline (known: demo, prod)` {
		t.Errorf("got %v, want it to match ErrUnknownPipeline and list demo, prod", err)
	}
	if err := orchestrator.UnknownPipeline("x", nil); err.Error() != `pipeline "x": unknown pipeline (none is loaded)` {
		t.Errorf("with none loaded: %v", err)
	}
}
