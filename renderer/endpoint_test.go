package renderer

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
)

// The EndpointSlice names the leader's Pod at its address, with labels the API server accepts
// (the real API server's check is in e2e's TestLoop; a label value with a slash was refused
// there), and a new leader takes it over.
func TestWebhookEndpointFollowsTheLeader(t *testing.T) {
	a := &WebhookEndpoint{Namespace: "gitbroker-system", Service: "gitbroker-renderer-webhook", PodName: "renderer-a", IP: "10.0.0.7", Port: 9292}
	es, err := a.slice()
	require.NoError(t, err)
	for k, v := range es.Labels {
		require.Empty(t, validation.IsQualifiedName(k), k)
		require.Empty(t, validation.IsValidLabelValue(v), "%s=%s", k, v)
	}
	require.Equal(t, discoveryv1.AddressTypeIPv4, es.AddressType)

	client := fake.NewClientset()
	a.publish(context.Background(), client, logr.Discard(), 0)
	b := &WebhookEndpoint{Namespace: "gitbroker-system", Service: "gitbroker-renderer-webhook", PodName: "renderer-b", IP: "fd00::8", Port: 9292}
	b.publish(context.Background(), client, logr.Discard(), 0)
	got, err := client.DiscoveryV1().EndpointSlices("gitbroker-system").Get(context.Background(), "gitbroker-renderer-webhook", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "renderer-b", got.Endpoints[0].TargetRef.Name)
	require.Equal(t, []string{"fd00::8"}, got.Endpoints[0].Addresses)
	require.Equal(t, discoveryv1.AddressTypeIPv6, got.AddressType)
	require.Equal(t, "gitbroker-renderer-webhook", got.Labels[discoveryv1.LabelServiceName])

	_, err = (&WebhookEndpoint{IP: "not-an-ip"}).slice()
	require.ErrorContains(t, err, "not an IP address")
	_, err = (&WebhookEndpoint{IP: "127.0.0.1"}).slice()
	require.ErrorContains(t, err, "cannot be an endpoint", "the API server refuses a loopback endpoint")
}
