package deviceplugin

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Run serves the resources until ctx ends: it starts and registers a server for each wanted
// resource, re-registers after kubelet restarts, stops resources no longer wanted, and releases
// slots kubelet no longer uses.
func (p *Plugin) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.Poll)
	defer t.Stop()
	defer p.stopAll()
	var lastRelease time.Time
	for {
		p.reconcile(ctx)
		if now := p.opts.Now(); p.opts.PodResources != "" && now.Sub(lastRelease) >= 10*p.opts.Poll {
			lastRelease = now
			p.release(ctx)
		}
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
		}
	}
}

// kubeletID identifies the kubelet socket, so a restarted kubelet (a new socket) is noticed.
func (p *Plugin) kubeletID() (uint64, bool) {
	fi, err := os.Stat(filepath.Join(p.opts.Dir, "kubelet.sock"))
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, true
	}
	return st.Ino, true
}

func (p *Plugin) reconcile(ctx context.Context) {
	// kubelet makes its folder; without it there is no kubelet to serve (yet).
	if _, err := os.Stat(p.opts.Dir); err != nil {
		if !p.waiting {
			p.waiting = true
			p.opts.Log.Info("waiting for kubelet's device-plugin folder", "dir", p.opts.Dir, "reason", err.Error())
		}
		return
	}
	p.waiting = false
	p.startAndStop()
	p.reregister(ctx)
}

// startAndStop serves every wanted resource, and stops one that has been unwanted (serving no
// slots) for removeAfter.
func (p *Plugin) startAndStop() {
	p.mu.Lock()
	wanted := p.wanted()
	now := p.opts.Now()
	var start, stop []string
	for r := range wanted {
		if s := p.servers[r]; s != nil {
			s.emptySince = time.Time{}
		} else {
			start = append(start, r)
		}
	}
	for r, s := range p.servers {
		switch {
		case wanted[r]:
		case s.emptySince.IsZero():
			s.emptySince = now
		case now.Sub(s.emptySince) >= removeAfter:
			stop = append(stop, r)
		}
	}
	p.mu.Unlock()
	for _, r := range stop {
		p.mu.Lock()
		s := p.servers[r]
		delete(p.servers, r)
		p.mu.Unlock()
		s.stop()
		p.opts.Log.Info("device plugin resource no longer served", "resource", r)
	}
	for _, r := range slices.Sorted(slices.Values(start)) {
		s, err := p.start(r)
		if err != nil {
			p.opts.Log.Error(err, "cannot serve device plugin resource; will retry", "resource", r)
			continue
		}
		p.mu.Lock()
		p.servers[r] = s
		p.mu.Unlock()
	}
}

// reregister serves anew every resource whose socket kubelet removed (it clears its folder when
// it starts), and registers every resource kubelet has not seen: new ones, and all of them after
// kubelet's own socket changed.
func (p *Plugin) reregister(ctx context.Context) {
	kubelet, up := p.kubeletID()
	p.mu.Lock()
	servers := slices.Collect(maps.Values(p.servers))
	p.mu.Unlock()
	for _, s := range servers {
		if _, err := os.Stat(s.socket); errors.Is(err, fs.ErrNotExist) {
			s.stop()
			ns, err := p.start(s.resource)
			if err != nil {
				p.opts.Log.Error(err, "cannot serve device plugin resource again; will retry", "resource", s.resource)
				continue
			}
			p.mu.Lock()
			if p.servers[s.resource] == s {
				ns.emptySince = s.emptySince
				p.servers[s.resource] = ns
			}
			p.mu.Unlock()
			s = ns
		}
		if up && (!s.registered || s.kubelet != kubelet) {
			if err := s.register(ctx, kubelet); err != nil && s.reported != err.Error() {
				s.reported = err.Error()
				p.opts.Log.Error(err, "cannot register with kubelet; will retry", "resource", s.resource)
			}
		}
	}
}

func (p *Plugin) stopAll() {
	p.mu.Lock()
	servers := p.servers
	p.servers = map[string]*server{}
	p.mu.Unlock()
	for _, s := range servers {
		s.stop()
	}
}
