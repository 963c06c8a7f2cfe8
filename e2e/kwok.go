//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// LabelFail on a Pod makes kwok end its containers with exit code 1 instead of completing them
// (podFailStage outweighs kwok's pod-complete stage).
const LabelFail = "e2e.gitbroker.dev/fail"

const podFailStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-fail
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  weight: 1
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.labels["` + LabelFail + `"]'
      operator: 'In'
      values: ['true']
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 1
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
`

// SetContainerLog makes lines what every container's log says, written as a container runtime
// writes it (CRI format, one stdout line each).
func (c *Cluster) SetContainerLog(lines ...string) error {
	var b strings.Builder
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", at.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), l)
	}
	return os.WriteFile(c.ContainerLog, []byte(b.String()), 0o644)
}

// AddNode registers a node that kwok manages as if a kubelet ran it.
func (c *Cluster) AddNode(ctx context.Context, name string) error {
	resources := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
		},
		Status: corev1.NodeStatus{Allocatable: resources, Capacity: resources},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		// The not-ready taint is lifted by the node lifecycle controller.
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				ready = false
			}
		}
		return ready, nil
	})
}
