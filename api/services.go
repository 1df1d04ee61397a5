package api

import (
	"net/http"

	"github.com/deploy-orchestrator/orchestrator"
)

// servicesResponse is GET /v1/services: every Coolify resource the loaded pipelines deploy,
// with the pipelines that deploy it, its mark and each pipeline's newest build on it.
type servicesResponse struct {
	Services []orchestrator.Service `json:"services"`
}

// handleListServices serves GET /v1/services.
func (s *server) handleListServices() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		list, err := s.engine.Services(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if list == nil {
			list = []orchestrator.Service{}
		}
		encode(w, http.StatusOK, servicesResponse{Services: list})
	}
}
