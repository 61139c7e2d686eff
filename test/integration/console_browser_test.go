package integration

// The operator's console as a person uses it, in headless Chromium (Debian's
// chromium package, installed by scripts/stack.sh packages) driven by
// chromedp: poison rows show up as a failure group, the tester signs in,
// fixes the cause, requeues the group and sees it empty while the rows
// arrive in a queue. Before signing in there is no requeue button and the
// POST is refused. A screenshot of each page is written to
// $CONSOLE_SCREENSHOTS (else the test's temp dir) and its path logged.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

const consoleToken = "console-test-token-0123456789"

// browser starts headless Chromium with a fresh profile; the context ends
// with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/stack.sh packages installs it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true)}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// run runs steps within d.
func run(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	val(t, ctx, d, what, chromedp.Steps(steps...))
}

// val runs a within d and returns its value.
func val[T any](t *testing.T, ctx context.Context, d time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		c2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel2()
		body, _ := chromedp.Run(c2, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("%s: %v\npage:\n%s", what, err, body)
	}
	return v
}

// screenshot writes the page to dir/name.png and logs the path.
func screenshot(t *testing.T, ctx context.Context, dir, name, shows string) {
	t.Helper()
	png := val(t, ctx, 20*time.Second, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %s", p, shows)
}

func TestConsoleRequeueInBrowser(t *testing.T) {
	testenv.Integration(t)
	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.WaitReplicated(t, 30*time.Second)
	br := testenv.NewBroker(t)
	got := br.Consume(t, br.Queue)
	missing := testenv.UniqueName("console_gone") // not declared yet: every publish to it is refused (404)
	yaml := opsYAML(testenv.UniqueName("console"), relaytest.SeedTable(db.Name), map[string]string{
		"http": fmt.Sprintf(`{addr: "127.0.0.1:0", console: true, console_token: %q}`, consoleToken),
	})
	r := relaytest.StartRelay(t, yaml)
	base := httpAddr(t, r.App)
	ctx := browser(t)

	// Poison rows: one attempt each (max_retry_count 1), so they end FAILED.
	const poison = 5
	for i := range poison {
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, max_retry_count) VALUES (?, ?, 'console.key', ?, 1)",
			fmt.Sprintf("console-%d", i), missing, fmt.Sprintf(`{"n":%d}`, i))
	}
	began := time.Now()
	failedGroup := fmt.Sprintf(`tr.group[data-state="failed"][data-rows="%d"]`, poison)
	run(t, ctx, 30*time.Second, "the poison rows as a failure group (live update)",
		chromedp.Navigate(base+"/ui/failures"),
		chromedp.WaitVisible(chromedp.CSS(failedGroup)))
	t.Logf("the failure group appeared %s after the inserts", time.Since(began).Round(time.Millisecond))
	reason := val(t, ctx, 10*time.Second, "the group's reason", chromedp.Text(chromedp.CSS(failedGroup+" td.reason")))
	if !strings.Contains(reason, missing) {
		t.Errorf("the group's reason %q does not name the exchange %s", reason, missing)
	}
	// Not signed in: no requeue button, and the POST is refused.
	buttons := val(t, ctx, 10*time.Second, "count requeue buttons",
		chromedp.Evaluate[int](`document.querySelectorAll("button.requeue").length`))
	if buttons != 0 {
		t.Errorf("%d requeue buttons before signing in", buttons)
	}
	groupHref := val(t, ctx, 10*time.Second, "the group's link", chromedp.AttributeValue(chromedp.CSS(failedGroup+" a.open"), "href")).Value
	key := strings.TrimPrefix(groupHref[strings.Index(groupHref, "key="):], "key=")
	resp, err := http.PostForm(base+"/ui/actions/requeue", url.Values{"table": {db.Name + ".producer_message"}, "key": {key}, "step": {"confirm"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("requeue POST without signing in: %s, want 403", resp.Status)
	}
	screenshot(t, ctx, shots, "failures", "the failures page: the poison rows as one FAILED group (no exchange), read-only before sign-in")
	run(t, ctx, 15*time.Second, "the group's rows", chromedp.Navigate(base+groupHref), chromedp.WaitVisible(chromedp.CSS("tr.row")))
	screenshot(t, ctx, shots, "group", "a failure group opened: id, message id, route, retries, error of each row; payloads hidden")
	run(t, ctx, 15*time.Second, "the overview", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#card-role")))
	screenshot(t, ctx, shots, "overview", "the overview: leader, source replica and delay, positions, broker, sweeper, the last hour's chart, the last warnings")

	// Sign in, fix the cause, requeue.
	run(t, ctx, 20*time.Second, "sign in",
		chromedp.Navigate(base+"/ui/signin"),
		chromedp.SendKeys(chromedp.CSS("#who"), "tester"),
		chromedp.SendKeys(chromedp.CSS("#token"), consoleToken),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#signout")))
	br.DeclareBoundExchange(t, missing)
	run(t, ctx, 20*time.Second, "requeue: the dry run",
		chromedp.Navigate(base+"/ui/failures"),
		chromedp.WaitVisible(chromedp.CSS(failedGroup+" button.requeue")),
		chromedp.Click(chromedp.CSS(failedGroup+" button.requeue")),
		chromedp.WaitVisible(chromedp.CSS("#dry-run-rows")))
	rows := val(t, ctx, 10*time.Second, "the dry run's count", chromedp.Text(chromedp.CSS("#dry-run-rows")))
	if rows != fmt.Sprint(poison) {
		t.Errorf("the dry run counts %s rows, want %d", rows, poison)
	}
	screenshot(t, ctx, shots, "confirm", "the requeue's confirmation: the dry run's count, counted on the replica")
	run(t, ctx, 20*time.Second, "requeue: confirm",
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#result")))
	result := val(t, ctx, 10*time.Second, "the requeue's result", chromedp.Text(chromedp.CSS("#result")))
	if !strings.Contains(result, fmt.Sprintf("Requeued %d rows", poison)) {
		t.Errorf("result: %q", result)
	}
	// The rows are delivered and the group empties.
	testenv.WaitFor(t, 30*time.Second, "the requeued rows to arrive", func() (bool, string) {
		var mids []string
		for _, d := range got.All() {
			mids = append(mids, d.MessageID)
		}
		for i := range poison {
			if !slices.Contains(mids, fmt.Sprintf("console-%d", i)) {
				return false, fmt.Sprintf("delivered: %v", mids)
			}
		}
		return true, ""
	})
	testenv.WaitFor(t, 30*time.Second, "the group to empty", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := chromedp.Do(c, chromedp.Navigate(base+groupHref), chromedp.WaitReady(chromedp.CSS("body")))
		if err != nil {
			return false, err.Error()
		}
		n, err := chromedp.Run(c, chromedp.Evaluate[int](`document.querySelectorAll("#group-empty").length`))
		return err == nil && n == 1, fmt.Sprint(err)
	})
	screenshot(t, ctx, shots, "group-empty", "the group after the requeue: no rows left")
	run(t, ctx, 15*time.Second, "the failures page, empty", chromedp.Navigate(base+"/ui/failures"),
		chromedp.WaitVisible(chromedp.CSS(`section[data-table$="producer_message"] p.empty`)))
	run(t, ctx, 15*time.Second, "the action log", chromedp.Navigate(base+"/ui/actions"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	audit := val(t, ctx, 10*time.Second, "the action log's text", chromedp.Text(chromedp.CSS("#audit")))
	if !strings.Contains(audit, "tester") || !strings.Contains(audit, "requeue") {
		t.Errorf("the action log does not record the tester's requeue:\n%s", audit)
	}
	screenshot(t, ctx, shots, "actions", "the actions page: requeue groups, the replay form, the action log naming the tester")
	if n := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'"); n != poison {
		t.Errorf("%d rows SENT after the requeue, want %d", n, poison)
	}
}
