package renderer

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// EndpointSliceManager is the value of an EndpointSlice's managed-by label that the leader
// writes (a label value: no slash, as the EndpointSlice controller's own
// endpointslice-controller.k8s.io).
const EndpointSliceManager = "renderer.gitbroker.dev"

// WebhookEndpoint is where the leader's push notification endpoint is published: a
// selector-less Service's EndpointSlice, which the leader points at its own Pod, so that
// notifications sent to the Service reach the replica that renders (a standby would wake
// nothing).
type WebhookEndpoint struct {
	Namespace, Service string
	// PodName and IP are the leader's Pod and address ($POD_NAME, $POD_IP); Port is the
	// endpoint's.
	PodName, IP string
	Port        int32
}

// slice is the EndpointSlice that names this replica.
func (e *WebhookEndpoint) slice() (*discoveryv1.EndpointSlice, error) {
	ip := net.ParseIP(e.IP)
	if ip == nil {
		return nil, fmt.Errorf("POD_IP %q is not an IP address", e.IP)
	}
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
		return nil, fmt.Errorf("POD_IP %s cannot be an endpoint (loopback, unspecified, link-local or multicast)", ip)
	}
	family := discoveryv1.AddressTypeIPv4
	if ip.To4() == nil {
		family = discoveryv1.AddressTypeIPv6
	}
	ep := discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	if e.PodName != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: e.Namespace, Name: e.PodName}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: e.Service, Namespace: e.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: e.Service,
			discoveryv1.LabelManagedBy:   EndpointSliceManager,
			"app.kubernetes.io/part-of":  "gitbroker",
		}},
		AddressType: family,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(e.Port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, nil
}

// publish points the Service at this replica, and tries again every retry until it has, or
// ctx ends (the leader has lost its Lease).
func (e *WebhookEndpoint) publish(ctx context.Context, client kubernetes.Interface, log logr.Logger, retry time.Duration) {
	if retry <= 0 {
		retry = 5 * time.Second
	}
	want, err := e.slice()
	if err != nil {
		log.Error(err, "the push notification endpoint is not published; notifications to the Service go nowhere until a leader publishes its own")
		return
	}
	for {
		err := e.apply(ctx, client, want)
		if err == nil {
			log.Info("the push notification Service points at this replica", "service", e.Service, "address", e.IP)
			return
		}
		log.Error(err, "pointing the push notification Service at this replica failed; will retry", "service", e.Service)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (e *WebhookEndpoint) apply(ctx context.Context, client kubernetes.Interface, want *discoveryv1.EndpointSlice) error {
	slices := client.DiscoveryV1().EndpointSlices(e.Namespace)
	have, err := slices.Get(ctx, e.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if have.AddressType != want.AddressType {
		// An EndpointSlice's address type cannot change: replace it.
		if err := slices.Delete(ctx, e.Service, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	have.Labels, have.Endpoints, have.Ports = want.Labels, want.Endpoints, want.Ports
	_, err = slices.Update(ctx, have, metav1.UpdateOptions{})
	return err
}
