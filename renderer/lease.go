package renderer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// AnnotationLastPushed on the render daemon's leader Lease is the rendered branch's commit the
// leader pushed last. A leader that starts (a restart, another replica) takes it as the commit
// the branch must descend from (verify.Sources.LastPushed), so an older render pushed back to
// gitbroker/rendered while no renderer held it in memory is still refused.
const AnnotationLastPushed = "gitbroker.dev/last-pushed"

// pushedLease is client-go's LeaseLock that also carries AnnotationLastPushed: the leader
// writes it with each renewal of the Lease, so it costs no request of its own and never makes
// the elector's optimistic update conflict with a write beside it.
type pushedLease struct {
	meta     metav1.ObjectMeta
	client   coordinationv1client.LeasesGetter
	identity string

	mu     sync.Mutex
	lease  *coordinationv1.Lease
	pushed string // what this leader pushed last; "" until it pushes
	found  string // the annotation as the last Get read it
}

var _ resourcelock.Interface = &pushedLease{}

// Pushed records the commit this leader pushed last; the next renewal writes it.
func (l *pushedLease) Pushed(commit string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pushed = commit
}

// Found returns the last pushed commit the Lease held when this process last read it.
func (l *pushedLease) Found() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.found
}

func (l *pushedLease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.Leases(l.meta.Namespace).Get(ctx, l.meta.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	l.lease, l.found = lease, lease.Annotations[AnnotationLastPushed]
	l.mu.Unlock()
	record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*record)
	if err != nil {
		return nil, nil, err
	}
	return record, raw, nil
}

func (l *pushedLease) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.meta.Name, Namespace: l.meta.Namespace},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.annotate(lease)
	created, err := l.client.Leases(l.meta.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = created
	l.mu.Unlock()
	return nil
}

func (l *pushedLease) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	if l.lease == nil {
		l.mu.Unlock()
		return errors.New("lease not initialized, call get or create first")
	}
	lease := l.lease.DeepCopy()
	l.mu.Unlock()
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	l.annotate(lease)
	updated, err := l.client.Leases(l.meta.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.lease = updated
	l.mu.Unlock()
	return nil
}

// annotate writes the last pushed commit when this process holds the Lease and has pushed;
// otherwise the annotation stays as it was, so a new leader keeps its predecessor's.
func (l *pushedLease) annotate(lease *coordinationv1.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pushed == "" || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != l.identity {
		return
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationLastPushed] = l.pushed
}

func (l *pushedLease) RecordEvent(string) {}

func (l *pushedLease) Identity() string { return l.identity }

func (l *pushedLease) Describe() string { return fmt.Sprintf("%s/%s", l.meta.Namespace, l.meta.Name) }
