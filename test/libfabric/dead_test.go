package libfabric

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestDeadDaemon: the daemon of a running fi_pingpong client is killed
// (SIGKILL); the client's next libfabric call fails with FI_ENODEV ("No
// such device") and the program exits on its own, promptly, instead of
// hanging or crashing.
func TestDeadDaemon(t *testing.T) {
	needProvider(t)
	for _, ep := range []string{"rdm", "dgram"} {
		t.Run(ep, func(t *testing.T) {
			da := daemon(t, "a", daemontest.Options{})
			db := daemon(t, "b", daemontest.Options{})
			port := fmt.Sprint(ctrlPort())
			ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(60*time.Second))
			defer cancel()
			args := []string{"-p", "iwarpd", "-e", ep, "-v", "-I", "100000000", "-S", "1024"}
			srv := command(ctx, nil, 0, "fi_pingpong", append(args, "-B", port)...)
			srv.Env = fiEnv(da, native...)
			srvOut := &daemontest.Buffer{}
			srv.Stdout, srv.Stderr = srvOut, srvOut
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { srv.Process.Kill(); srv.Wait() }()
			var cli *exec.Cmd
			cliOut := &daemontest.Buffer{}
			for attempt := 0; attempt < 50; attempt++ {
				cli = command(ctx, nil, 1, "fi_pingpong", append(args, "-P", port, "127.0.0.1")...)
				cli.Env = fiEnv(db, native...)
				cliOut = &daemontest.Buffer{}
				cli.Stdout, cli.Stderr = cliOut, cliOut
				if err := cli.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() {
					for i := 0; i < 500 && !strings.Contains(cliOut.String(), "failed to connect") &&
						!strings.Contains(cliOut.String(), "Fabric Initialized"); i++ {
						time.Sleep(20 * time.Millisecond)
					}
					close(done)
				}()
				<-done
				if !strings.Contains(cliOut.String(), "failed to connect") {
					break
				}
				cli.Wait()
				time.Sleep(100 * time.Millisecond)
			}
			daemontest.Eventually(t, "the client to start its ping-pong", 20*time.Second, func() bool {
				return strings.Contains(cliOut.String(), "Fabric Initialized")
			})
			time.Sleep(200 * time.Millisecond) // inside the ping-pong loop
			if err := syscall.Kill(db.PID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			db.Stop() // reaps it; marks the death as intended
			exited := make(chan error, 1)
			go func() { exited <- cli.Wait() }()
			select {
			case err := <-exited:
				if err == nil {
					t.Fatalf("the client exited 0 after its daemon died:\n%s", cliOut)
				}
				if !strings.Contains(cliOut.String(), "No such device") {
					t.Errorf("the client's error does not say the device is gone:\n%s", cliOut)
				}
				if strings.Contains(cliOut.String(), "Sanitizer") || strings.Contains(cliOut.String(), "SIGSEGV") {
					t.Errorf("the client crashed:\n%s", cliOut)
				}
			case <-time.After(daemontest.Scaled(10 * time.Second)):
				cli.Process.Kill()
				<-exited
				t.Fatalf("the client did not notice its daemon's death within %v:\n%s",
					daemontest.Scaled(10*time.Second), cliOut)
			}
		})
	}
}
