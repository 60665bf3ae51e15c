package verdict

import (
	"errors"
	"fmt"
	"testing"
)

func TestRefusalNamesCheck(t *testing.T) {
	var c Checks
	c.Pass("a", "fine %d", 1)
	err := c.Failf("b.c", "bad %s", "thing")
	wrapped := fmt.Errorf("ctx: %w", err)
	if got := FailedCheck(wrapped); got != "b.c" {
		t.Fatalf("FailedCheck = %q", got)
	}
	if FailedCheck(errors.New("x")) != "" {
		t.Fatal("plain error has no check")
	}
	if len(c.List) != 2 || !c.List[0].OK || c.List[1].OK {
		t.Fatalf("checks %+v", c.List)
	}
}
