package syncer

import "time"

// SetDurableWait sets how long a read of a pending blob waits for its
// durable write (storedBlob) and returns the function that restores it.
func SetDurableWait(d time.Duration) func() {
	old := durableWait
	durableWait = d
	return func() { durableWait = old }
}
