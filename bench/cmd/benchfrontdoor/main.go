// Command benchfrontdoor measures what hostile clients without credentials cost the daemon
// (issue 11, item 1). It builds `orchestrator serve`, runs it as a child process with its
// default connection caps and limits, and for -duration keeps up, from -addresses loopback
// addresses (127.0.0.2, …): -stalled clients that send a GitHub webhook's headers (with a
// well-formed, wrong signature) and 1 MiB of a body announced one byte longer, then stall;
// and -idle clients that send half a request line to /healthz and stall. Each reconnects
// when the daemon closes it. Meanwhile, every second, a genuine trigger and a genuine signed
// webhook delivery are sent from 127.0.0.1 and timed. It samples the daemon's RSS, open
// files and threads from /proc, and writes the figures to -out.
//
//	cd bench && go run ./cmd/benchfrontdoor            # ~40 s; writes RESULTS-frontdoor.md
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	triggerToken = "bench-trigger-token-0123456789"
	githubSecret = "bench-github-secret-0123456789"
)

func main() {
	repo := flag.String("repo", "..", "repository root (where cmd/orchestrator is)")
	out := flag.String("out", "RESULTS-frontdoor.md", "results file")
	stalled := flag.Int("stalled", 300, "stalled 1 MiB webhook senders")
	idle := flag.Int("idle", 3000, "idle slow connections")
	addresses := flag.Int("addresses", 8, "attacker loopback addresses (127.0.0.2 …)")
	duration := flag.Duration("duration", 25*time.Second, "attack duration")
	flag.Parse()

	dir, err := os.MkdirTemp("", "benchfrontdoor")
	check(err)
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "orchestrator")
	build := exec.Command("go", "build", "-o", bin, "./cmd/orchestrator")
	build.Dir = *repo
	if b, err := build.CombinedOutput(); err != nil {
		log.Fatalf("go build: %v\n%s", err, b)
	}
	payload, err := os.ReadFile(filepath.Join(*repo, "testdata", "webhooks", "github-workflow-run.json"))
	check(err)

	addr := freePort()
	pipes := filepath.Join(dir, "pipelines")
	check(os.MkdirAll(pipes, 0o755))
	check(os.WriteFile(filepath.Join(pipes, "bench.yaml"), []byte(`coolify: { url: "http://127.0.0.1:9", token: "${COOLIFY_TOKEN}" }
services:
  - name: api
    uuid: bench-api
    image_tag: "${trigger.image_tag}"
`), 0o644))
	cfg := filepath.Join(dir, "orchestrator.yaml")
	check(os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %s
state_dir: %s
pipelines_dir: %s
tokens: { trigger: %q }
rate_limits: { trigger: { per_second: 0 } }
log: { level: warn, format: json }
webhooks:
  github:
    secret: %q
    rules:
      - { event: workflow_run, repository: acme/api, branch: main, pipeline: bench, trigger: { image_tag: "${payload.workflow_run.head_sha}" } }
`, addr, filepath.Join(dir, "state"), pipes, triggerToken, githubSecret)), 0o600))
	logs, err := os.Create(filepath.Join(dir, "daemon.log"))
	check(err)
	daemon := exec.Command(bin, "serve", "--config", cfg)
	daemon.Env = append(os.Environ(), "COOLIFY_TOKEN=bench-coolify-token-0123456789")
	daemon.Stdout, daemon.Stderr = logs, logs
	check(daemon.Start())
	defer daemon.Process.Kill()
	base := "http://" + addr
	waitHealthy(base)
	pid := daemon.Process.Pid
	baseRSS := procKB(pid, "VmRSS")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused, answered atomic.Int64
	fake := "sha256=" + strings.Repeat("ab", 32)
	body := bytes.Repeat([]byte("x"), 1<<20)
	attack := func(local net.IP, stall bool) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 5 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				refused.Add(1)
				sleepOrStop(stop, 200*time.Millisecond)
				continue
			}
			go func() { <-stop; c.Close() }()
			if stall {
				fmt.Fprintf(c, "POST /v1/webhooks/github HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-GitHub-Event: workflow_run\r\nX-Hub-Signature-256: %s\r\nContent-Length: %d\r\n\r\n", addr, fake, len(body)+1)
				_, _ = c.Write(body)
			} else {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0")
			}
			// Hold on until the daemon answers or closes.
			n, _ := io.Copy(io.Discard, c)
			if n > 0 {
				answered.Add(1)
			}
			c.Close()
			sleepOrStop(stop, 100*time.Millisecond)
		}
	}
	for i := range *stalled + *idle {
		ip := net.IPv4(127, 0, 0, byte(2+i%*addresses))
		wg.Add(1)
		go func() { defer wg.Done(); attack(ip, i < *stalled) }()
	}

	var peakRSS, peakFDs, peakThreads int
	var trig, hook []time.Duration
	var trigBad, hookBad int
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}).DialContext}}
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	n := 0
	for time.Since(start) < *duration {
		<-tick.C
		peakRSS = max(peakRSS, procKB(pid, "VmRSS"))
		peakThreads = max(peakThreads, procKB(pid, "Threads"))
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			peakFDs = max(peakFDs, len(fds))
		}
		if time.Since(start) < 3*time.Second || int(time.Since(start)/time.Second) <= n {
			continue // a genuine pair every second, once the attack is under way
		}
		n = int(time.Since(start) / time.Second)
		d, code := timed(client, "POST", base+"/v1/pipelines/bench/runs", []byte(`{"image_tag":"v`+strconv.Itoa(n)+`"}`),
			map[string]string{"Authorization": "Bearer " + triggerToken, "Content-Type": "application/json"})
		trig = append(trig, d)
		if code != 202 {
			trigBad++
		}
		p := bytes.Replace(payload, []byte(`"run_number": 1234`), []byte(`"run_number": `+strconv.Itoa(5000+n)), 1)
		d, code = timed(client, "POST", base+"/v1/webhooks/github", p, map[string]string{
			"Content-Type": "application/json", "X-GitHub-Event": "workflow_run",
			"X-GitHub-Delivery": "bench-" + strconv.Itoa(n), "X-Hub-Signature-256": sign(p)})
		hook = append(hook, d)
		if code != 202 {
			hookBad++
		}
	}
	hwm := procKB(pid, "VmHWM")
	close(stop)
	wg.Wait()

	res := fmt.Sprintf(`# Front door under hostile clients: results

Command: `+"`cd bench && go run ./cmd/benchfrontdoor`"+` (builds the daemon and runs it as a child process with
its default limits: connections.max %d… see README, Guarantees). Machine: %d CPUs, Go %s, shared
with other builds while it ran. Taken %s.

Attack, for %s, from %d loopback addresses: %d clients each sending a GitHub webhook's headers
(well-formed, wrong signature) and 1 MiB of a body announced 1 byte longer, then stalling; %d
clients each sending half a request line to /healthz, then stalling. Each reconnects when
closed (%d connections answered or closed by the daemon, %d dials failed).

| figure | value | goal |
|---|---|---|
| daemon RSS before the attack | %.1f MB | |
| daemon RSS, peak during the attack (sampled every 100 ms) | %.1f MB | < 100 MB |
| daemon VmHWM (peak RSS) at the end of the attack | %.1f MB | < 100 MB |
| open files, peak | %d | |
| OS threads, peak | %d | |
| genuine triggers (every second from 127.0.0.1): slowest / median | %s / %s (%d sent, %d not 202) | < 1 s |
| genuine signed GitHub deliveries: slowest / median | %s / %s (%d sent, %d not 202) | < 1 s |
`, 1024, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		*duration, *addresses, *stalled, *idle, answered.Load(), refused.Load(),
		mb(baseRSS), mb(peakRSS), mb(hwm), peakFDs, peakThreads,
		slowest(trig), median(trig), len(trig), trigBad, slowest(hook), median(hook), len(hook), hookBad)
	check(os.WriteFile(*out, []byte(res), 0o644))
	fmt.Print(res)
}

func timed(c *http.Client, method, url string, body []byte, h map[string]string) (time.Duration, int) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return time.Since(t), 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t), resp.StatusCode
}

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(githubSecret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func procKB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

func mb(kb int) float64 { return float64(kb) / 1024 }

func slowest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2].Round(time.Millisecond)
}

func sleepOrStop(stop chan struct{}, d time.Duration) {
	select {
	case <-stop:
	case <-time.After(d):
	}
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

func waitHealthy(base string) {
	for range 300 {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log.Fatal("daemon not healthy after 30 s")
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
