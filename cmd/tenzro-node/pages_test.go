package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPagesWithoutDashboard: with the dashboard off, GET / explains itself
// (405, POST is JSON-RPC) and /metrics still serves the node's series.
func TestPagesWithoutDashboard(t *testing.T) {
	reg, _, err := newMetricsRegistry()
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaults()
	cfg.Dashboard = "off"
	h := pages(cfg, reg, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/", http.StatusMethodNotAllowed, "dashboard is off"},
		{"/metrics", http.StatusOK, "tenzro_rounds_committed_total 0"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("GET %s: %d %q, want %d containing %q", c.path, rec.Code, rec.Body.String(), c.code, c.want)
		}
	}
}
