//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
	"github.com/gitbroker/gitbroker/verify"
)

// waveConfiguration is a Pod broker for the node's gitbroker-e2e-w* devices whose changes roll
// out in waves of at most 3 brokers; release names what its brokers run.
func waveConfiguration(release string) string {
	return `apiVersion: gitbroker.dev/v1alpha1
kind: Configuration
metadata:
  name: wave
spec:
  discoveryHandler:
    name: udev
    discoveryDetails: |
      udevRules:
      - 'KERNEL=="gitbroker-e2e-w[0-9]*"'
  rollout:
    maxChanged: 3
  brokerProperties:
    RELEASE: ` + release + `
  brokerSpec:
    brokerPodSpec:
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
        supplementalGroups: [` + strconv.Itoa(deviceGroup) + `]
      containers:
      - name: broker
        image: ` + brokerImage + `
        args: [UDEV_DEVNODE]
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
        resources:
          limits:
            "{{PLACEHOLDER}}": "1"
`
}

// stagedRollout shows a staged rollout on the real node: ten brokers, each holding its device,
// take a change in four waves of at most three (3, 6, 9, 10 brokers changed), each wave
// rendered only once the recorder has recorded the one before Available, and never more than
// three brokers running the new release without being Available.
func stagedRollout(t *testing.T, n *Node, srv *gitsynctest.Server, sysRoot string) {
	t.Helper()
	ctx := context.Background()
	const brokers = 10
	for i := range brokers {
		deviceNode(t, n, sysRoot, fmt.Sprintf("gitbroker-e2e-w%d", i))
	}
	srv.On("main").Commit(map[string]string{"configurations/wave.yaml": waveConfiguration("r1")}, nil, "wave brokers")
	selector := api.LabelConfiguration + "=wave"
	for i := range brokers {
		waitOpened(t, n, selector, fmt.Sprintf("/dev/gitbroker-e2e-w%d", i))
	}
	deployments := cluster.Client.AppsV1().Deployments(deviceNamespace)
	eventually(t, 2*time.Minute, "every wave broker recorded Available", func() (bool, string) {
		list, err := deployments.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) != brokers {
			return false, fmt.Sprint(len(list.Items), " Deployments ", err)
		}
		for _, d := range list.Items {
			rec, ok := srv.On(verify.StatusBranch).File(api.RolloutPath(deviceNamespace, d.Name))
			if !ok || !strings.Contains(rec, "available: true") {
				return false, d.Name + ": " + rec
			}
		}
		return true, ""
	})

	// Watch the cluster while the change rolls: Deployments running r2 that are not Available.
	stop := make(chan struct{})
	var mu sync.Mutex
	most := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			list, err := deployments.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				continue
			}
			unavailable := 0
			for _, d := range list.Items {
				if releaseOf(d) == "r2" && (d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < 1 || d.Status.AvailableReplicas < 1 || d.Status.Replicas > d.Status.UpdatedReplicas) {
					unavailable++
				}
			}
			mu.Lock()
			most = max(most, unavailable)
			mu.Unlock()
		}
	}()
	rendered := srv.On(verify.RenderedBranch)
	before := rendered.Head()
	start := time.Now()
	srv.On("main").Commit(map[string]string{"configurations/wave.yaml": waveConfiguration("r2")}, nil, "wave brokers: release r2")
	eventually(t, 5*time.Minute, "every wave broker to run r2 and hold its device", func() (bool, string) {
		list, err := deployments.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, d := range list.Items {
			if releaseOf(d) == "r2" && d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas == 1 && d.Status.Replicas == 1 {
				done++
			}
		}
		return done == brokers, fmt.Sprintf("%d of %d", done, brokers)
	})
	close(stop)
	wg.Wait()
	for i := range brokers {
		waitOpened(t, n, selector+",akri.sh/instance="+instance("wave", fmt.Sprintf("/devices/virtual/misc/gitbroker-e2e-w%d", i), realNode), fmt.Sprintf("/dev/gitbroker-e2e-w%d", i))
	}

	// The waves, from the renderer's commits since the change: how many brokers run r2 in each.
	var waves []int
	for _, c := range rendered.Log() {
		if c.Hash == before {
			break
		}
		// git grep exits 1 when nothing matches: a render before the first wave.
		out, _ := exec.Command("git", "-C", srv.Bare(), "grep", "-l", "-F", "value: r2", c.Hash, "--", "rendered/"+deviceNamespace+"/wave/").Output()
		count := len(strings.Fields(string(out)))
		if count > 0 && (len(waves) == 0 || waves[0] != count) {
			waves = append([]int{count}, waves...)
		}
	}
	t.Logf("a change of 10 brokers rolled out in waves %v (at most 3 per wave) in %s; at most %d brokers ran r2 without being Available",
		waves, time.Since(start).Round(100*time.Millisecond), most)
	require.Equal(t, []int{3, 6, 9, 10}, waves)
	require.LessOrEqual(t, most, 3, "more brokers than a wave took the change before the last wave was Available")
}

// releaseOf is the RELEASE a wave broker Deployment's Pods get.
func releaseOf(d appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if v := envOf(c, "RELEASE"); v != "" {
			return v
		}
	}
	return ""
}
