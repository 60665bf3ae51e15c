package chain

import (
	"reflect"
	"unsafe"

	"github.com/cometbft/cometbft/node"
)

// waitAddrBook waits until the PEX reactor's address book has finished the
// save it makes when it stops. CometBFT's addrBook writes
// config/addrbook.json from its own goroutine once its quit channel
// closes, and neither Node.Stop nor Node.Wait waits for that goroutine: a
// home removed right after Close (a test's temporary directory, an
// operator's `rm -rf` after a clean stop) could meet a file written after
// it was listed. The book's Wait method does wait, but the reactor keeps the
// book in an unexported field, so it is reached by reflection; the answer
// says whether it was found (TestCloseWaitsForAddrBook fails if a CometBFT
// upgrade moves it). A node without PEX has no book running: nothing to wait
// for.
func waitAddrBook(n *node.Node) bool {
	pr := n.PEXReactor()
	if pr == nil {
		return true
	}
	v := reflect.ValueOf(pr)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("book")
	if !f.IsValid() || f.Kind() != reflect.Interface || !f.CanAddr() {
		return false
	}
	book := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
	w, ok := book.(interface{ Wait() })
	if !ok {
		return false
	}
	w.Wait()
	return true
}
