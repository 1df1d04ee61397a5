package phases_test

import (
	"context"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// priorities is a limiter that lets every call through and notes the priority it was asked
// with.
type priorities struct {
	mu   sync.Mutex
	seen map[outbound.Priority]int
}

func (p *priorities) Wait(_ context.Context, pr outbound.Priority) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[pr]++
	return nil
}

func (p *priorities) take() map[outbound.Priority]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := p.seen
	p.seen = map[outbound.Priority]int{}
	return seen
}

// A plan, from the API or the CLI, waits for Coolify's shared budget with the lowest
// priority only, so it never takes what a run's calls are waiting for; a run's calls do not.
func TestPlanCallsTakeTheLowestPriority(t *testing.T) {
	h := newHarness(t)
	lim := &priorities{seen: map[outbound.Priority]int{}}
	h.limiter = lim
	h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
	if _, err := h.engine.Plan(context.Background(), "prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}); err != nil {
		t.Fatal(err)
	}
	if seen := lim.take(); len(seen) != 1 || seen[outbound.PriorityLow] == 0 {
		t.Errorf("the plan's calls waited with priorities %v, want only PriorityLow", seen)
	}
	h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if seen := lim.take(); seen[outbound.PriorityLow] != 0 || len(seen) == 0 {
		t.Errorf("the run's calls waited with priorities %v, want none PriorityLow", seen)
	}
}
