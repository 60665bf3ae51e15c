package plugins

import (
	"context"

	"github.com/tenzro/train/wire"
)

// lruState bounds the compiled code an engine keeps for published plugins:
// the module bytes of loaded (non-built-in) plugins stay under
// Config.CacheBytes, and the least recently used one is closed first. An
// evicted plugin is compiled again from the store (or, in a worker, from the
// bytes the node sends along) the next time a call needs it; a call in
// flight keeps its compiled module until it returns.
type lruState struct {
	clock uint64
	bytes int64
}

// evictable reports whether p counts against the cache: compiled here and
// loadable again after eviction.
func (e *Engine) evictable(p *plugin) bool {
	return !p.info.Builtin && p.compiled != nil && (e.cfg.KV != nil || e.cfg.backstopOff)
}

// insert registers p under h (keeping an existing entry) and evicts least
// recently used plugins beyond the byte bound. It returns the entry kept.
func (e *Engine) insert(h wire.Hash, p *plugin) *plugin {
	e.mu.Lock()
	if q, ok := e.loaded[h]; ok {
		e.mu.Unlock()
		if p != q && p.compiled != nil {
			_ = p.compiled.Close(context.Background())
		}
		return q
	}
	e.lru.clock++
	p.lastUse = e.lru.clock
	e.loaded[h] = p
	var closing []*plugin
	if e.evictable(p) {
		e.lru.bytes += int64(p.info.Size)
		for e.lru.bytes > e.cfg.CacheBytes {
			var victim *plugin
			for _, q := range e.loaded {
				if q != p && e.evictable(q) && (victim == nil || q.lastUse < victim.lastUse) {
					victim = q
				}
			}
			if victim == nil {
				break
			}
			delete(e.loaded, victim.info.Hash)
			e.lru.bytes -= int64(victim.info.Size)
			victim.evicted = true
			if victim.refs == 0 {
				closing = append(closing, victim)
			}
		}
	}
	e.mu.Unlock()
	for _, q := range closing {
		e.log.Debug("plugin evicted from the compiled-module cache", "hash", q.info.Hash.String(), "name", q.info.Name)
		_ = q.compiled.Close(context.Background())
	}
	return p
}

// use marks p as used by a call in flight; it fails if p was evicted
// meanwhile (the caller looks it up again).
func (e *Engine) use(p *plugin) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.evicted {
		return false
	}
	e.lru.clock++
	p.lastUse = e.lru.clock
	p.refs++
	return true
}

// release ends a call's use of p, closing it if it was evicted meanwhile.
func (e *Engine) release(p *plugin) {
	e.mu.Lock()
	p.refs--
	closeIt := p.evicted && p.refs == 0 && p.compiled != nil
	e.mu.Unlock()
	if closeIt {
		_ = p.compiled.Close(context.Background())
	}
}

// cachedBytes is the module bytes counted against Config.CacheBytes.
func (e *Engine) cachedBytes() int64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.lru.bytes
}
