// Command handler is an Akri-style discovery handler for the e2e suite's real node, written as
// Akri's handler containers are: it runs as root, serves Akri's DiscoveryHandler service on a unix
// socket it creates in $DISCOVERY_HANDLERS_DIRECTORY (mode 0755, as root's umask leaves it),
// registers that endpoint with the agent's registration socket there, and reports one device
// whose node is the host path in $DEVICE_NODE, re-registering whenever the agent goes away. Its
// PLC_AUTH property says whether the discovery property PASSWORD was $EXPECT_PASSWORD.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gitbroker/gitbroker/agent/akripb"
)

type handler struct {
	akripb.UnimplementedDiscoveryHandlerServer
	name, node string
}

func (h *handler) Discover(req *akripb.DiscoverRequest, stream grpc.ServerStreamingServer[akripb.DiscoverResponse]) error {
	fmt.Printf("handler: discover %q (%d properties)\n", req.GetDiscoveryDetails(), len(req.GetDiscoveryProperties()))
	// As an authenticated handler would, it checks the credential it was given (never echoing it).
	auth := "denied"
	if want := os.Getenv("EXPECT_PASSWORD"); want != "" && string(req.GetDiscoveryProperties()["PASSWORD"].GetVec()) == want {
		auth = "ok"
	}
	dev := &akripb.Device{
		Id:          h.name + "-" + filepath.Base(h.node),
		Properties:  map[string]string{"PLC_NODE": h.node, "PLC_AUTH": auth},
		DeviceSpecs: []*akripb.DeviceSpec{{ContainerPath: h.node, HostPath: h.node, Permissions: "rw"}},
	}
	if err := stream.Send(&akripb.DiscoverResponse{Devices: []*akripb.Device{dev}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func main() {
	dir := os.Getenv("DISCOVERY_HANDLERS_DIRECTORY")
	h := &handler{name: os.Getenv("HANDLER_NAME"), node: os.Getenv("DEVICE_NODE")}
	sock := filepath.Join(dir, h.name+".sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("handler:", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	akripb.RegisterDiscoveryHandlerServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// As Akri's handlers do, register once per agent: again only when the agent's socket is new.
	agent := filepath.Join(dir, "agent-registration.sock")
	var registered uint64
	for ctx.Err() == nil {
		if id := inode(agent); id != 0 && id != registered {
			if err := register(ctx, agent, h.name, sock); err != nil {
				fmt.Println("handler: registering:", err)
			} else {
				registered = id
				fmt.Println("handler: registered", h.name, "at", sock)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	srv.Stop()
}

func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func register(ctx context.Context, agent, name, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+agent, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = akripb.NewRegistrationClient(conn).RegisterDiscoveryHandler(ctx, &akripb.RegisterDiscoveryHandlerRequest{
		Name: name, Endpoint: endpoint, EndpointType: akripb.RegisterDiscoveryHandlerRequest_UDS, Shared: false,
	})
	return err
}
