package console

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

const testToken = "correct-horse-battery-staple"

type harness struct {
	t       *testing.T
	srv     *Server
	ts      *httptest.Server
	replica *fakeReplica
	actions *fakeActions
	client  *http.Client
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	tb := seedTable()
	rep, act := newFakeReplica(), &fakeActions{rows: 3}
	db := openFake(rep)
	t.Cleanup(func() { _ = db.Close() })
	cfg.Name = "orders-relay"
	s, err := New(cfg, Deps{Tables: func() []*outbox.Table { return []*outbox.Table{tb} },
		Replica: func() *sql.DB { return db }, Router: func() (*router.Router, error) { return router.New([]*outbox.Table{tb}) },
		Actions: act})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &harness{t: t, srv: s, ts: ts, replica: rep, actions: act, client: c}
}

// get returns the status and body of GET path.
func (h *harness) get(path string) (int, string) {
	h.t.Helper()
	resp, err := h.client.Get(h.ts.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a form from origin ("" sends neither Origin nor Referer).
func (h *harness) post(path, origin string, form url.Values) (int, string, *http.Response) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]*)"`)

// csrf is the CSRF token in a page's forms.
func csrf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// signIn signs in with token and returns the session's CSRF token.
func (h *harness) signIn(token string) (int, string) {
	h.t.Helper()
	_, page := h.get("/ui/signin")
	code, body, _ := h.post("/ui/signin", h.ts.URL, url.Values{"csrf": {csrf(h.t, page)}, "who": {"alice"}, "token": {token}})
	if code != http.StatusSeeOther {
		return code, body
	}
	_, page = h.get("/ui/failures")
	return code, csrf(h.t, page)
}

func (h *harness) groupKey() string {
	return groupKey("failed", "publish: no exchange 'gone'")
}

// Without a token the console only shows: no requeue button, no sign-in,
// and every POST is refused with 403 whatever it carries.
func TestReadOnlyWithoutToken(t *testing.T) {
	h := newHarness(t, Config{})
	code, body := h.get("/ui/failures")
	if code != http.StatusOK || !strings.Contains(body, "no exchange &#39;gone&#39;") {
		t.Fatalf("failures page: %d\n%s", code, body)
	}
	if strings.Contains(body, "Requeue") || strings.Contains(body, `action="/ui/actions/requeue"`) {
		t.Errorf("a read-only console shows a requeue button:\n%s", body)
	}
	if !strings.Contains(body, "read-only") {
		t.Error("the page does not say it is read-only")
	}
	_, group := h.get("/ui/failures/group?table=shop.producer_message&key=" + h.groupKey())
	if !strings.Contains(group, "m-7") || strings.Contains(group, "Requeue") || strings.Contains(group, `type="checkbox"`) {
		t.Errorf("read-only group page:\n%s", group)
	}
	for _, path := range []string{"/ui/actions/requeue", "/ui/actions/replay", "/ui/signin", "/ui/signout"} {
		code, body, _ := h.post(path, h.ts.URL, url.Values{"table": {"shop.producer_message"}, "key": {h.groupKey()}, "step": {"confirm"}, "token": {testToken}})
		if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s on a read-only console: %d\n%s", path, code, body)
		}
	}
	if got := h.actions.done(); len(got) != 0 {
		t.Errorf("a read-only console ran actions: %+v", got)
	}
}

// A wrong token starts no session and shows no action; ten wrong tokens in
// a minute stop even the right one for a while.
func TestWrongTokenRefused(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	code, body := h.signIn("not-the-token-at-all")
	if code != http.StatusForbidden || !strings.Contains(body, "not the console token") {
		t.Fatalf("wrong token: %d\n%s", code, body)
	}
	if _, page := h.get("/ui/failures"); strings.Contains(page, "Requeue") || strings.Contains(page, "signed in") {
		t.Errorf("a wrong token signed in:\n%s", page)
	}
	code, _, _ = h.post("/ui/actions/requeue", h.ts.URL, url.Values{"table": {"shop.producer_message"}, "key": {h.groupKey()}})
	if code != http.StatusForbidden {
		t.Errorf("requeue without a session: %d", code)
	}
	for range failedSignins - 1 {
		h.signIn("wrong-again-and-again")
	}
	if code, body := h.signIn(testToken); code != http.StatusTooManyRequests {
		t.Errorf("after %d wrong tokens the right one: %d\n%s", failedSignins, code, body)
	}
}

// Every POST of a signed-in person needs the session's CSRF token: none, a
// wrong one, or the pre-sign-in one is refused and nothing is done.
func TestCSRFMissingOrMismatched(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	_, pre := h.get("/ui/signin")
	preToken := csrf(t, pre)
	code, token := h.signIn(testToken)
	if code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", code, token)
	}
	base := url.Values{"table": {"shop.producer_message"}, "key": {h.groupKey()}, "step": {"confirm"}}
	for name, v := range map[string]string{"missing": "", "another": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "pre-sign-in": preToken} {
		form := url.Values{}
		for k, vs := range base {
			form[k] = vs
		}
		if v != "" {
			form.Set("csrf", v)
		}
		code, body, _ := h.post("/ui/actions/requeue", h.ts.URL, form)
		if code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("CSRF %s: %d\n%s", name, code, body)
		}
	}
	// The sign-in form needs its own token too.
	if code, _, _ := h.post("/ui/signin", h.ts.URL, url.Values{"who": {"mallory"}, "token": {testToken}}); code != http.StatusForbidden {
		t.Errorf("sign-in without a CSRF token: %d", code)
	}
	if got := h.actions.done(); len(got) != 0 {
		t.Fatalf("refused requests ran actions: %+v", got)
	}
	// With it: the dry run, then the requeue, logged with who asked.
	base.Set("csrf", token)
	base.Set("step", "preview")
	code, body, _ := h.post("/ui/actions/requeue", h.ts.URL, base)
	if code != http.StatusOK || !strings.Contains(body, `id="dry-run-rows">3<`) {
		t.Fatalf("preview: %d\n%s", code, body)
	}
	base.Set("step", "confirm")
	if code, body, _ := h.post("/ui/actions/requeue", h.ts.URL, base); code != http.StatusOK || !strings.Contains(body, "Requeued 3 rows") {
		t.Fatalf("confirm: %d\n%s", code, body)
	}
	got := h.actions.done()
	if len(got) != 2 || !got[0].DryRun || got[1].DryRun || got[1].Error == nil || *got[1].Error != "publish: no exchange 'gone'" || got[1].Table != "shop.producer_message" {
		t.Errorf("actions run: %+v", got)
	}
	if _, page := h.get("/ui/actions"); !strings.Contains(page, "<td>alice</td>") {
		t.Errorf("the action log does not name who acted:\n%s", page)
	}
}

// A POST from another site, or with neither Origin nor Referer, is
// refused even with a valid session and CSRF token.
func TestCrossOriginRefused(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	_, token := h.signIn(testToken)
	form := url.Values{"csrf": {token}, "table": {"shop.producer_message"}, "key": {h.groupKey()}}
	for _, origin := range []string{"https://evil.example", "null", ""} {
		code, body, _ := h.post("/ui/actions/requeue", origin, form)
		if code != http.StatusForbidden || !strings.Contains(body, "Origin") {
			t.Errorf("origin %q: %d\n%s", origin, code, body)
		}
	}
	if got := h.actions.done(); len(got) != 0 {
		t.Errorf("cross-origin requests ran actions: %+v", got)
	}
	if code, _, _ := h.post("/ui/actions/requeue", h.ts.URL, form); code != http.StatusOK {
		t.Errorf("same origin: %d", code)
	}
}

// The session cookie is HttpOnly and SameSite=Strict; pages carry a CSP
// without inline scripts and cannot be framed.
func TestCookieAndHeaders(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	_, page := h.get("/ui/signin")
	_, _, resp := h.post("/ui/signin", h.ts.URL, url.Values{"csrf": {csrf(t, page)}, "who": {"alice"}, "token": {testToken}})
	var found bool
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie && c.Value != "" {
			found = true
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != Prefix {
				t.Errorf("session cookie %+v", c)
			}
		}
	}
	if !found {
		t.Fatal("no session cookie after sign-in")
	}
	r, err := h.client.Get(h.ts.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if r.Header.Get("X-Frame-Options") != "DENY" {
		t.Error("pages can be framed")
	}
}

// Payloads are neither read nor shown unless http.console_payloads is on.
func TestPayloadHiddenUnlessEnabled(t *testing.T) {
	h := newHarness(t, Config{})
	_, body := h.get("/ui/failures/group?table=shop.producer_message&key=" + h.groupKey())
	if strings.Contains(body, "SECRET-PAYLOAD") || !strings.Contains(body, "Payloads are hidden") {
		t.Errorf("payload shown while http.console_payloads is off:\n%s", body)
	}
	for _, q := range h.replica.asked() {
		if strings.Contains(q, "`content`") {
			t.Errorf("the payload column was read: %s", q)
		}
	}
	if !strings.Contains(body, "gone / k") {
		t.Errorf("the row's route is not shown:\n%s", body)
	}
	on := newHarness(t, Config{Payloads: true})
	if _, body := on.get("/ui/failures/group?table=shop.producer_message&key=" + on.groupKey()); !strings.Contains(body, "4111-SECRET-PAYLOAD") {
		t.Errorf("payload not shown with http.console_payloads on:\n%s", body)
	}
}

// Pages read the replica once per CacheFor, however many ask.
func TestQueriesCached(t *testing.T) {
	h := newHarness(t, Config{})
	for range 5 {
		h.get("/ui/failures")
		h.get("/ui/actions")
	}
	n := 0
	for _, q := range h.replica.asked() {
		if strings.HasPrefix(q, "SELECT g.st") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d group queries for 10 pages within the cache time, want 1", n)
	}
}

// A slow query is asked again only after ten times its duration.
func TestSlowQueriesKeptLonger(t *testing.T) {
	c := newQueryCache(time.Second)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	runs := 0
	fetch := func(context.Context) (any, error) { runs++; return runs, nil }
	get := func() {
		if _, _, err := c.get(context.Background(), "groups", "k", time.Second, fetch); err != nil {
			t.Fatal(err)
		}
	}
	get()
	c.mu.Lock()
	c.kinds["k"].took = 2 * time.Second // as if the query took 2 s
	c.mu.Unlock()
	now = now.Add(5 * time.Second) // past the TTL, within 10 x 2 s
	get()
	if runs != 1 {
		t.Fatalf("a 2 s query ran again after 5 s (%d runs)", runs)
	}
	now = now.Add(16 * time.Second)
	get()
	if runs != 2 {
		t.Errorf("not asked again after 21 s (%d runs)", runs)
	}
}

// A replay: a range is required, the dry run counts, the confirmation
// starts it in the background and the action log records its start and
// end with who asked.
func TestReplayDryRunThenConfirm(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	_, token := h.signIn(testToken)
	form := url.Values{"csrf": {token}, "table": {"shop.producer_message"}}
	if code, body, _ := h.post("/ui/actions/replay", h.ts.URL, form); code != http.StatusBadRequest || !strings.Contains(body, "give a range") {
		t.Errorf("replay without a range: %d\n%s", code, body)
	}
	form.Set("ids", "1-100")
	form.Set("exchange", "audit")
	code, body, _ := h.post("/ui/actions/replay", h.ts.URL, form)
	if code != http.StatusOK || !strings.Contains(body, `id="dry-run-rows">3<`) || !strings.Contains(body, `name="ids" value="1-100"`) {
		t.Fatalf("replay dry run: %d\n%s", code, body)
	}
	form.Set("step", "confirm")
	if code, _, resp := h.post("/ui/actions/replay", h.ts.URL, form); code != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/actions" {
		t.Fatalf("replay confirm: %d", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, page := h.get("/ui/actions")
		if strings.Contains(page, "replay ended") && strings.Contains(page, "replay started") && strings.Contains(page, "<td>alice</td>") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the action log does not show the replay:\n%s", page)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
