//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// kwokSlots is how many slots of each akri.sh resource a kwok node advertises.
const kwokSlots = "1000"

// advertiseDevices stands in, on kwok's nodes, for what the agent's device plugin does on a real
// one: kwok nodes have no kubelet, so nothing would advertise the akri.sh/<instance> resources
// the rendered brokers request, and they would stay Pending. Every akri.sh resource a Pod asks
// for is added to the status of the kwok nodes it is pinned to (kwok keeps a node's capacity as
// it finds it). Real nodes are left alone: their agents serve the resources
// (TestRealNodeDevices). It runs until ctx ends.
func (c *Cluster) advertiseDevices(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(c.Client, 0)
	var mu sync.Mutex
	want := map[string]map[string]bool{} // node -> resources
	dirty := map[string]bool{}
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		res := akriResources(pod)
		if len(res) == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, node := range pinnedNodes(pod) {
			if want[node] == nil {
				want[node] = map[string]bool{}
			}
			for _, r := range res {
				if !want[node][r] {
					want[node][r] = true
					dirty[node] = true
				}
			}
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
	})
	factory.Start(ctx.Done())
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return
		case <-t.C:
		}
		mu.Lock()
		nodes := map[string][]string{}
		for n := range dirty {
			for r := range want[n] {
				nodes[n] = append(nodes[n], r)
			}
		}
		dirty = map[string]bool{}
		mu.Unlock()
		for n, res := range nodes {
			if !c.advertise(ctx, n, res) {
				mu.Lock()
				dirty[n] = true // the node is not there yet, or the patch failed: again next tick
				mu.Unlock()
			}
		}
	}
}

// advertise adds resources to a kwok node's capacity and allocatable; it reports false when it
// should be tried again.
func (c *Cluster) advertise(ctx context.Context, name string, resources []string) bool {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ctx.Err() != nil
	}
	if node.Annotations["kwok.x-k8s.io/node"] != "fake" {
		return true
	}
	list := map[string]string{}
	for _, r := range resources {
		if _, ok := node.Status.Allocatable[corev1.ResourceName(r)]; !ok {
			list[r] = kwokSlots
		}
	}
	if len(list) == 0 {
		return true
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": list, "allocatable": list}})
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err == nil || ctx.Err() != nil
}

// akriResources are the akri.sh resources a Pod's containers and init containers ask for.
func akriResources(pod *corev1.Pod) []string {
	var out []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for r := range l {
					if strings.HasPrefix(string(r), "akri.sh/") && !slices.Contains(out, string(r)) {
						out = append(out, string(r))
					}
				}
			}
		}
	}
	return out
}

// pinnedNodes are the nodes a Pod is bound or pinned to by node affinity on metadata.name.
func pinnedNodes(pod *corev1.Pod) []string {
	var out []string
	if pod.Spec.NodeName != "" {
		out = append(out, pod.Spec.NodeName)
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return out
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
				out = append(out, f.Values...)
			}
		}
	}
	return out
}
