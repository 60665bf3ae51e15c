package dashboard_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/tenzro/train/rpc/dashboard"
)

// The dashboard is an http.Handler over the syncer's read-only views
// (a *syncer.Node is a Source); tenzro-node mounts it on GET of the RPC
// address.
func ExampleHandler() {
	h := dashboard.Handler(fakeSource{}, dashboard.Options{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}
