// Command csi-node-driver-registrar registers a CSI driver with the
// kubelet, as kubernetes-csi/node-driver-registrar does (that sidecar is
// not on the Go module proxy; hack/e2e-images.sh builds this program under
// its image name for upstream's CSI specs). It takes that sidecar's flags:
// it asks the driver at --csi-address its name (GetPluginInfo), serves the
// kubelet plugin registration API v1 on <--plugin-registration-path>/
// <name>-reg.sock naming --kubelet-registration-path as the driver's
// socket, exits when the kubelet refuses it (so that its container is
// restarted, as upstream's does), and answers /healthz on --http-endpoint
// while its socket is there.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"rkubelet.local/k8s/internal/csiplugin"
)

func main() {
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the CSI driver's socket, in this container")
	kubeletPath := flag.String("kubelet-registration-path", "", "the CSI driver's socket, on the node (required)")
	registrationDir := flag.String("plugin-registration-path", "/registration", "the kubelet's plugin registration directory, in this container")
	httpEndpoint := flag.String("http-endpoint", "", "HOST:PORT for /healthz (default: none)")
	timeout := flag.Duration("timeout", time.Second, "the limit of each call to the driver")
	flag.Int("v", 0, "accepted; this registrar logs what it does")
	flag.Parse()
	if *kubeletPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	if os.Getenv("KUBE_NODE_NAME") == "" {
		log.Fatal("node name is empty: set KUBE_NODE_NAME")
	}

	conn, err := grpc.NewClient("unix://"+csiplugin.SocketPath(*csiAddress), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	var name string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			name = info.GetName()
			break
		}
		log.Printf("asking %s its driver name: %v (retrying)", *csiAddress, err)
		time.Sleep(time.Second)
	}
	_ = conn.Close()

	socket, stop := csiplugin.ServeRegistrar(*registrationDir, &csiplugin.Registrar{
		Name:     name,
		Endpoint: *kubeletPath,
		Done: func(registered bool, reason string) {
			if !registered {
				log.Fatalf("Registration process failed with error: %s, restarting registration container.", reason)
			}
		},
	})
	log.Printf("serving the registration of %s on %s", name, socket)
	if *httpEndpoint != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if _, err := os.Stat(socket); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		server := &http.Server{Addr: *httpEndpoint, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { log.Fatal(server.ListenAndServe()) }()
	}
	csiplugin.WaitForSignal()
	stop()
}
