//go:build !linux

package plugins

import "errors"

// Staging needs memfd: elsewhere every block is copied into the guest.
type stage struct {
	fd  int
	mem []byte
}

type stagePool struct{ reserve func(int64) }

const (
	stagingAvailable = false
	stageMin         = 1 << 20
)

func (sp *stagePool) get(int64) (*stage, error) {
	return nil, errors.New("plugins: no staging on this system")
}
func (sp *stagePool) put(...*stage) {}
func (sp *stagePool) trim()         {}
func (sp *stagePool) close()        {}
func (s *stage) drop()              {}
