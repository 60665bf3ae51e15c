package rpc_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
)

// A node serves its syncer.Service (here a test fake) over HTTP; the typed
// client calls it.
func Example() {
	srv, err := rpc.New(&fakeService{}, rpc.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv) // a node uses srv.Serve(ctx, listener)
	defer ts.Close()

	c := client.New(ts.URL)
	info, err := c.Info(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Role, info.Dev)

	_, err = c.GetRun(context.Background(), "missing")
	fmt.Println(client.CodeOf(err) == rpc.CodeNotFound, err)
	// Output:
	// syncer true
	// true rpc error -32001: run "missing" not found
}
