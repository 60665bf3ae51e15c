package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tenzro/train/rpc/client"
)

// Errors from the node carry the JSON-RPC code, message and refusal kind.
func ExampleClient_GetRun() {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"run \"t9\" not found","data":{"kind":"not_found"}}}`))
	}))
	defer node.Close()

	c := client.New(node.URL)
	_, err := c.GetRun(context.Background(), "t9")
	var e *client.Error
	if errorsAs(err, &e) {
		fmt.Println(e.Code, e.Kind(), e.Message)
	}
	// Output: -32001 not_found run "t9" not found
}

func errorsAs(err error, target **client.Error) bool {
	e, ok := err.(*client.Error)
	*target = e
	return ok
}
