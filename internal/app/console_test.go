package app

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
)

// No page of the console, signed in or not, shows a password of the
// config or the console token: every page is read, a dry run of each action
// is asked (they fail: no server answers, and their errors are shown), and
// the first live update is read.
func TestConsoleShowsNoSecret(t *testing.T) {
	secrets := map[string]string{"source": "SrcPw-7d1e", "primary": "PriPw-93ab", "broker": "AmqpPw-51fc",
		"redis": "RedisPw-c02e", "token": "ConsoleToken-4f0a-9b7d-e1"}
	raw := `name: secrets-relay
source: {host: 127.0.0.1, port: 1, user: relay, password: "` + secrets["source"] + `"}
primary: {host: 127.0.0.1, port: 2, user: relay, password: "` + secrets["primary"] + `"}
broker: {url: "amqp://relay:` + secrets["broker"] + `@127.0.0.1:3/"}
redis: {addr: "127.0.0.1:4", password: "` + secrets["redis"] + `"}
http: {addr: "127.0.0.1:0", console: true, console_token: "` + secrets["token"] + `", console_payloads: true}
tables:
  - {preset: producer-message, schema: shop}
`
	cfg, err := config.Parse([]byte(raw), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A warning that names the servers, as the relay logs them.
	a.Log.Warn("connecting failed", zap.String("addr", a.Source.Addr()))
	ui, err := a.newConsole()
	if err != nil || ui == nil {
		t.Fatalf("console: %v", err)
	}
	ts := httptest.NewServer(ui)
	defer ts.Close()
	defer ui.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	var pages []string
	read := func(resp *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		pages = append(pages, resp.Request.URL.Path+"\n"+string(b))
		return string(b)
	}
	post := func(path string, form url.Values) string {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", ts.URL)
		return read(c.Do(req))
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`)
	for _, p := range []string{"/ui/", "/ui/failures", "/ui/actions", "/ui/failures/group?table=shop.producer_message&key=failed-x"} {
		read(c.Get(ts.URL + p))
	}
	signin := read(c.Get(ts.URL + "/ui/signin"))
	post("/ui/signin", url.Values{"csrf": {csrf.FindStringSubmatch(signin)[1]}, "who": {"ops"}, "token": {"wrong-" + secrets["token"]}})
	signin = read(c.Get(ts.URL + "/ui/signin"))
	post("/ui/signin", url.Values{"csrf": {csrf.FindStringSubmatch(signin)[1]}, "who": {"ops"}, "token": {secrets["token"]}})
	page := read(c.Get(ts.URL + "/ui/actions"))
	m := csrf.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "signed in as") {
		t.Fatalf("not signed in:\n%s", page)
	}
	post("/ui/actions/requeue", url.Values{"csrf": {m[1]}, "table": {"shop.producer_message"}, "id": {"7"}})
	post("/ui/actions/replay", url.Values{"csrf": {m[1]}, "table": {"shop.producer_message"}, "since": {"1h"}})
	for _, p := range []string{"/ui/", "/ui/failures"} {
		read(c.Get(ts.URL + p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/ui/events?page=overview", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var ev strings.Builder
	for sc.Scan() && !strings.Contains(ev.String(), "as of") {
		ev.WriteString(sc.Text() + "\n")
	}
	resp.Body.Close()
	pages = append(pages, "/ui/events\n"+ev.String())
	var all strings.Builder
	for _, p := range pages {
		all.WriteString(p)
		for what, s := range secrets {
			if strings.Contains(p, s) {
				t.Errorf("the %s secret is on %s", what, p)
			}
		}
	}
	// The pages did show what they read: the servers by address, the errors.
	if !strings.Contains(all.String(), "127.0.0.1:1") || !strings.Contains(all.String(), "connecting failed") {
		t.Errorf("the pages do not show the source's address and the last warning:\n%s", all.String())
	}
}
