package webview

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// driver is a headless Chromium driven by chromedriver over its W3C
// WebDriver HTTP API (plain JSON calls: no client library).
type driver struct {
	t       *testing.T
	base    string // http://127.0.0.1:PORT/session/ID
	browser string // chromium's binary
}

// elementKey is the W3C name of an element reference in JSON.
const elementKey = "element-6066-11e4-a52e-4f735466cecf"

// chromium finds the browser and its driver or skips the test (CI
// installs them: scripts/deps.sh).
func chromium(t *testing.T) (browser, chromedriver string) {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	chromedriver, _ = exec.LookPath("chromedriver")
	if browser == "" || chromedriver == "" {
		t.Skip("chromium and chromedriver are not installed (scripts/deps.sh installs them)")
	}
	return browser, chromedriver
}

// chromeArgs run the browser headless; as root it needs --no-sandbox.
func chromeArgs(profile string) []string {
	args := []string{"--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--window-size=1280,900", "--user-data-dir=" + profile}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	return args
}

// startDriver starts chromedriver and one browser session, both ended
// when the test ends.
func startDriver(t *testing.T) *driver {
	return startDriverWith(t, nil)
}

// startDriverWith starts a session with extra capabilities (e.g.
// acceptInsecureCerts for a server with a local CA).
func startDriverWith(t *testing.T, extra map[string]any) *driver {
	t.Helper()
	browser, chromedriver := chromium(t)
	port := harness.FreePort(t)
	cmd := exec.Command(chromedriver, "--port="+strconv.Itoa(port))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("chromedriver log:\n%s", log.String())
		}
	})
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	harness.WaitFor(t, 20*time.Second, "chromedriver to answer /status", func() bool {
		resp, err := http.Get(root + "/status")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	d := &driver{t: t, base: root, browser: browser}
	always := map[string]any{
		"browserName":        "chrome",
		"goog:chromeOptions": map[string]any{"binary": browser, "args": chromeArgs(t.TempDir())},
	}
	for k, v := range extra {
		always[k] = v
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": always}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	d.call(http.MethodPost, "/session", caps, &sess)
	if sess.SessionID == "" {
		t.Fatal("chromedriver started no session")
	}
	d.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { d.call(http.MethodDelete, "", nil, nil) })
	return d
}

// call makes one WebDriver request; out receives its "value". A
// WebDriver error fails the test with the step's path.
func (d *driver) call(method, path string, in, out any) {
	d.t.Helper()
	if err := d.try(method, path, in, out); err != nil {
		d.t.Fatal(err)
	}
}

// try is call that returns the error.
func (d *driver) try(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.base+path, body)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 60 * time.Second} // a step that hangs fails naming itself
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || resp.StatusCode != http.StatusOK {
		if len(raw) > 300 {
			raw = raw[:300]
		}
		return fmt.Errorf("webdriver %s %s: %s %s", method, path, resp.Status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(env.Value, out); err != nil {
			return fmt.Errorf("webdriver %s %s: %v in %s", method, path, err, raw)
		}
	}
	return nil
}

// waitText waits until the element css selects shows a text containing
// want (the page a form posted to has loaded), and returns that text;
// past 30 s the test fails naming step.
func (d *driver) waitText(css, want, step string) string {
	d.t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var els []map[string]string
		if d.try(http.MethodPost, "/elements", map[string]string{"using": "css selector", "value": css}, &els) == nil && len(els) > 0 {
			if d.try(http.MethodGet, "/element/"+els[0][elementKey]+"/text", nil, &last) == nil && strings.Contains(last, want) {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("%s: %s never showed %q within 30s (last: %q)", step, css, want, last)
	return ""
}

func (d *driver) open(url string) {
	d.call(http.MethodPost, "/url", map[string]string{"url": url}, nil)
}

func (d *driver) source() string {
	var s string
	d.call(http.MethodGet, "/source", nil, &s)
	return s
}

func (d *driver) title() string {
	var s string
	d.call(http.MethodGet, "/title", nil, &s)
	return s
}

// find returns the element css selects (the step fails without one).
func (d *driver) find(css string) string {
	var el map[string]string
	d.call(http.MethodPost, "/element", map[string]string{"using": "css selector", "value": css}, &el)
	if el[elementKey] == "" {
		d.t.Fatalf("webdriver: no element %q (%v)", css, el)
	}
	return el[elementKey]
}

func (d *driver) typeInto(css, text string) {
	d.call(http.MethodPost, "/element/"+d.find(css)+"/value", map[string]string{"text": text}, nil)
}

func (d *driver) click(css string) {
	d.call(http.MethodPost, "/element/"+d.find(css)+"/click", map[string]any{}, nil)
}

// screenshot is the page as a PNG.
func (d *driver) screenshot() []byte {
	var s string
	d.call(http.MethodGet, "/screenshot", nil, &s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		d.t.Fatalf("screenshot: %v", err)
	}
	return b
}

// cookie is a browser cookie as WebDriver tells it.
type cookie struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	HTTPOnly bool   `json:"httpOnly"`
	Secure   bool   `json:"secure"`
	SameSite string `json:"sameSite"`
}

func (d *driver) cookies() []cookie {
	var cs []cookie
	d.call(http.MethodGet, "/cookie", nil, &cs)
	return cs
}
