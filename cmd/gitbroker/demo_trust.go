package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync"
	"github.com/gitbroker/gitbroker/render"
	"github.com/gitbroker/gitbroker/renderer"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

// trustStep runs the demo's last step on a real repository in a temporary folder (git's own
// file transport, no network): every writer signs, allowed_signers enrolls a person, the
// renderer and edge-a; an unenrolled node and a forgery with edge-a's key are refused.
func (d *demo) trustStep(ctx context.Context) error {
	d.step++
	fmt.Fprintf(d.w, "\n== Step %d: Trust: every writer signs; an enrolled node renders, an unenrolled one and a forgery with edge-a's key do not\n\n", d.step)
	dir, err := os.MkdirTemp("", "gitbroker-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bare := filepath.Join(dir, "fleet.git")
	if _, err := git.PlainInit(bare, true); err != nil {
		return fmt.Errorf("demo: creating %s: %w", bare, err)
	}
	url := "file://" + bare
	keys := map[string]*trust.Signer{}
	allowed := ""
	for _, p := range []string{"alice@example.com", "renderer", "node:edge-a", "node:edge-b"} {
		k, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, "keys", strings.ReplaceAll(p, ":", "-")), p)
		if err != nil {
			return err
		}
		keys[p] = k
		allowed += k.AllowedSignersLine(p) + "\n"
	}
	stranger, _, err := trust.LoadOrCreateSigner(filepath.Join(dir, "keys", "node-edge-x"), "node:edge-x")
	if err != nil {
		return err
	}
	write := func(signer *trust.Signer, branch, who string, files map[string][]byte, owned ...string) error {
		r, err := gitsync.New(url, branch, gitsync.WithSigner(signer), gitsync.WithCreateBranch(), gitsync.WithFailFast())
		if err != nil {
			return err
		}
		_, err = r.Update(ctx, func(context.Context, gitsync.Snapshot) (*gitsync.Change, error) {
			return &gitsync.Change{Owned: owned, Files: files, Message: who,
				Author: gitsync.Signature{Name: who, Email: "demo@gitbroker.dev", When: time.Now()}}, nil
		})
		return err
	}

	// alice's signed commit: the Configurations, and who may sign what.
	source := map[string][]byte{verify.AllowedSignersPath: []byte(allowed)}
	for p, b := range d.repo {
		if p == api.SettingsPath || api.IsConfigurationPath(p) {
			source[p] = b
		}
	}
	if err := write(keys["alice@example.com"], "main", "alice", source, api.SettingsPath, api.ConfigurationsDir+"/", ".gitbroker/"); err != nil {
		return err
	}
	d.say("(alice commits the Configurations and .gitbroker/allowed_signers on main, signed; it enrolls alice, renderer, node:edge-a and node:edge-b)")
	inv := func(node string) []byte { return d.repo[api.InventoryPath(node)] }
	if err := write(keys["node:edge-a"], verify.InventoryBranch("edge-a"), "agent edge-a", map[string][]byte{api.InventoryPath("edge-a"): inv("edge-a")}, api.InventoryPath("edge-a")); err != nil {
		return err
	}
	d.say("(the agent on edge-a commits inventory/edge-a.yaml to gitbroker/inventory/edge-a, signed as node:edge-a)")
	edgeX := []byte(strings.ReplaceAll(string(inv("edge-b")), "edge-b", "edge-x"))
	if err := write(stranger, verify.InventoryBranch("edge-x"), "agent edge-x", map[string][]byte{api.InventoryPath("edge-x"): edgeX}, api.InventoryPath("edge-x")); err != nil {
		return err
	}
	d.say("(an agent on edge-x, whose key nobody enrolled, commits to gitbroker/inventory/edge-x)")
	forged := []byte(strings.ReplaceAll(string(inv("edge-b")), "foo0", "forged0"))
	if err := write(keys["node:edge-a"], verify.InventoryBranch("edge-b"), "mallory", map[string][]byte{api.InventoryPath("edge-b"): forged}, api.InventoryPath("edge-b")); err != nil {
		return err
	}
	d.say("(someone holding edge-a's key and git credential commits a device to gitbroker/inventory/edge-b)")
	fmt.Fprintln(d.w)

	main, err := gitsync.New(url, "main", gitsync.WithFailFast())
	if err != nil {
		return err
	}
	store, err := gitsync.New(url, verify.RenderedBranch, gitsync.WithSigner(keys["renderer"]), gitsync.WithCreateBranch(), gitsync.WithFailFast())
	if err != nil {
		return err
	}
	r := &renderer.Renderer{Store: store, Branch: "main", Engine: render.New(), Now: time.Now,
		Sources: verify.Sources{Main: main, SourceBranch: "main", Renderer: keys["renderer"], FirstRender: true},
		Author:  gitsync.Signature{Name: "gitbroker-renderer", Email: "renderer@gitbroker.dev"}}
	out, err := r.Once(ctx)
	if out.Result != nil {
		out.Result.Plan.WriteText(d.w)
	}
	if err != nil {
		return fmt.Errorf("demo: the verified render: %w", err)
	}
	d.say("\nThe renderer signed %s on gitbroker/rendered; `git verify-commit` checks it with .gitbroker/allowed_signers as gpg.ssh.allowedSignersFile.", out.Commit[:12])
	return nil
}
