//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/gitsync/gitsynctest"
)

// brokersHeal shows on the real node that a broker needs no person and no controller of
// gitbroker's to come back: its Pod deleted, then evicted (as a drain does), is replaced by the
// Deployment's ReplicaSet and opens the device again. Then a change of the Configuration rolls
// the broker out: the old Pod has ended before the new one exists, so the device never has two
// brokers, and the new Pod has the change. It returns the broker Pod running at the end.
func brokersHeal(t *testing.T, n *Node, srv *gitsynctest.Server, configuration, device, pod string) string {
	t.Helper()
	ctx := context.Background()
	pods := cluster.Client.CoreV1().Pods(deviceNamespace)
	selector := api.LabelConfiguration + "=" + configuration

	start := time.Now()
	require.NoError(t, pods.Delete(ctx, pod, metav1.DeleteOptions{}))
	healed := waitOpenedBy(t, n, selector, device, pod)
	t.Logf("a deleted broker Pod is replaced and holds its device again after %s", time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	require.NoError(t, pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: healed, Namespace: deviceNamespace}}))
	healed = waitOpenedBy(t, n, selector, device, healed)
	t.Logf("an evicted broker Pod is replaced and holds its device again after %s", time.Since(start).Round(100*time.Millisecond))

	// A change rolls out: watch every Pod of the broker while it does.
	stop := make(chan struct{})
	var mu sync.Mutex
	var most int
	var seen []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				continue
			}
			// A Pod that ended (Succeeded, Failed) holds no device: kubelet has stopped its
			// containers and freed its devices. Every other one runs or is about to.
			live := 0
			var all []string
			for _, p := range list.Items {
				if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					live++
				}
				all = append(all, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
			}
			mu.Lock()
			if live > most {
				most, seen = live, all
			}
			mu.Unlock()
		}
	}()
	cfg, ok := srv.On("main").File("configurations/" + configuration + ".yaml")
	require.True(t, ok)
	changed := strings.Replace(cfg, "  brokerSpec:\n", "  brokerProperties:\n    ROLLOUT: \"2\"\n  brokerSpec:\n", 1)
	require.NotEqual(t, cfg, changed)
	start = time.Now()
	srv.On("main").Commit(map[string]string{"configurations/" + configuration + ".yaml": changed}, nil, "roll out "+configuration)
	var rolled string
	eventually(t, 4*time.Minute, "the changed broker to hold "+device, func() (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) != 1 {
			return false, fmt.Sprint(len(list.Items), " Pods ", err)
		}
		p := list.Items[0]
		if envOf(p.Spec.Containers[0], "ROLLOUT") != "2" || p.Status.Phase != corev1.PodRunning {
			return false, p.Name + " " + string(p.Status.Phase)
		}
		if !strings.Contains(n.Logs(t, deviceNamespace, p.Name, "broker"), "opened "+device) {
			return false, p.Name + " has not opened " + device
		}
		rolled = p.Name
		return true, ""
	})
	close(stop)
	wg.Wait()
	t.Logf("a changed Configuration rolled its broker out in %s, never more than %d Pod of it running or starting at once", time.Since(start).Round(100*time.Millisecond), most)
	require.Equal(t, 1, most, "two Pods of one broker ran or started at once during the rollout: %v", seen)
	return rolled
}
