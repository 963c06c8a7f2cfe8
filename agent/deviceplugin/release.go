package deviceplugin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// release frees the slots kubelet no longer lists as used by a running Pod, so a slot given out
// through akri.sh/<configuration> returns to akri.sh/<instance> once its Pod is gone (and the
// other way round). Without an answer from kubelet nothing is released: withholding a slot too
// long is safer than giving a device one user too many.
func (p *Plugin) release(ctx context.Context) {
	p.mu.Lock()
	pending := len(p.claims)
	p.mu.Unlock()
	if pending == 0 {
		return
	}
	inUse, err := p.inUse(ctx)
	if err != nil {
		p.opts.Log.Error(err, "cannot ask kubelet which device slots are in use; keeping them withheld", "socket", p.opts.PodResources)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now, freed := p.opts.Now(), false
	for id, c := range p.claims {
		if !inUse[c.resource+"\x00"+c.deviceID] && now.Sub(c.at) >= claimPolls*p.opts.Poll {
			delete(p.claims, id)
			freed = true
		}
	}
	if freed {
		p.broadcast()
	}
}

// inUse lists "<resource>\x00<device id>" for every akri.sh device kubelet has given a Pod.
func (p *Plugin) inUse(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+p.opts.PodResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					out[d.GetResourceName()+"\x00"+id] = true
				}
			}
		}
	}
	return out, nil
}
