package console

// Who may act: the token, sessions, CSRF and same-origin checks.
//
// One shared token (http.console_token) signs a person in; the console then
// keeps a session for them, named by a random id in an HttpOnly,
// SameSite=Strict cookie and holding the name they gave (for the action
// log) and a CSRF token every form carries. A POST must come from a page of
// the console itself: its Origin (or, without one, its Referer) must name
// the host it was sent to. Before sign-in a random cookie stands in for the
// session, so the sign-in form has a CSRF token too (double submit).

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
)

const (
	sessionCookie = "binlog_relay_console"
	preCookie     = "binlog_relay_console_pre"
	// sessionTTL is how long a session lasts after its last request.
	sessionTTL = 8 * time.Hour
	// maxSessions bounds the sessions kept; the oldest goes first.
	maxSessions = 256
	// failedSignins bounds wrong tokens per minute, from anyone: the token
	// cannot be guessed at network speed.
	failedSignins = 10
)

type session struct {
	id, csrf string
	who      string
	remote   string
	seen     time.Time
}

type auth struct {
	token [32]byte // sha256 of the token: compared in constant time whatever its length
	on    bool

	mu       sync.Mutex
	sessions map[string]*session
	failures []time.Time // wrong tokens in the last minute
	now      func() time.Time
}

func newAuth(token string) *auth {
	a := &auth{sessions: map[string]*session{}, now: time.Now}
	if token != "" {
		a.on, a.token = true, sha256.Sum256([]byte(token))
	}
	return a
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// check reports whether token is the configured one, in constant time.
func (a *auth) check(token string) bool {
	if !a.on {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
}

// throttled reports whether too many wrong tokens came in the last minute.
func (a *auth) throttled() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	cut := a.now().Add(-time.Minute)
	for len(a.failures) > 0 && a.failures[0].Before(cut) {
		a.failures = a.failures[1:]
	}
	return len(a.failures) >= failedSignins
}

func (a *auth) failed() {
	a.mu.Lock()
	a.failures = append(a.failures, a.now())
	a.mu.Unlock()
}

// start makes a session for who.
func (a *auth) start(who, remote string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sessions) >= maxSessions {
		var oldest *session
		for _, s := range a.sessions {
			if oldest == nil || s.seen.Before(oldest.seen) {
				oldest = s
			}
		}
		delete(a.sessions, oldest.id)
	}
	s := &session{id: randomID(), csrf: randomID(), who: who, remote: remote, seen: a.now()}
	a.sessions[s.id] = s
	return s
}

// session is the request's live session, or nil.
func (a *auth) session(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !a.on {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[c.Value]
	if s == nil {
		return nil
	}
	if a.now().Sub(s.seen) > sessionTTL {
		delete(a.sessions, s.id)
		return nil
	}
	s.seen = a.now()
	cp := *s
	return &cp
}

func (a *auth) end(id string) {
	a.mu.Lock()
	delete(a.sessions, id)
	a.mu.Unlock()
}

// secure says whether cookies may be marked Secure: the request came over
// TLS (to the relay, or to a proxy in front that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// csrfFor is the CSRF token forms on this page carry: the session's, or
// before sign-in the pre-session cookie's (set here when missing).
func (a *auth) csrfFor(w http.ResponseWriter, r *http.Request, s *session) string {
	if s != nil {
		return s.csrf
	}
	if !a.on {
		return ""
	}
	if c, err := r.Cookie(preCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	v := randomID()
	setCookie(w, r, preCookie, v, int(sessionTTL/time.Second))
	return v
}

// sameOrigin reports whether r comes from a page of this host: its Origin
// header, or without one its Referer, names the host r was sent to. The
// scheme is not compared: a proxy in front may end TLS, and another site
// cannot name this host.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return false
	}
	u, err := url.Parse(src)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func equal(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// post wraps a POST handler with the checks every POST passes: actions on
// (a token set), same origin, and the CSRF token of the session (signedIn)
// or of the pre-session cookie (the sign-in form). A refusal is 403 with
// the reason; nothing was done.
func (s *Server) post(h func(http.ResponseWriter, *http.Request, *session), signedIn bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		switch {
		case s.ReadOnly():
			s.refuse(w, r, http.StatusForbidden, "the console is read-only: set http.console_token (or http.console_token_file) to enable actions")
			return
		case !sameOrigin(r):
			s.refuse(w, r, http.StatusForbidden, "refused: the request does not come from a page of this console (Origin/Referer)")
			return
		}
		if err := r.ParseForm(); err != nil {
			s.refuse(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		sent := r.PostForm.Get("csrf")
		if !signedIn {
			c, err := r.Cookie(preCookie)
			if err != nil || !equal(c.Value, sent) {
				s.refuse(w, r, http.StatusForbidden, "refused: the form's CSRF token is missing or stale; reload the page")
				return
			}
			h(w, r, nil)
			return
		}
		sess := s.auth.session(r)
		switch {
		case sess == nil:
			s.refuse(w, r, http.StatusForbidden, "sign in first: actions need the console token")
		case !equal(sess.csrf, sent):
			s.refuse(w, r, http.StatusForbidden, "refused: the form's CSRF token is missing or does not match this session; reload the page")
		default:
			h(w, r, sess)
		}
	}
}

// cleanName keeps a name given at sign-in printable and short: it goes into
// the action log.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(s))
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64])
	}
	return s
}

// signinPage shows the sign-in form.
func (s *Server) signinPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "signin", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// signin checks the token and starts a session.
func (s *Server) signin(w http.ResponseWriter, r *http.Request, _ *session) {
	if s.auth.throttled() {
		s.refuse(w, r, http.StatusTooManyRequests, "too many wrong tokens in the last minute; wait and try again")
		return
	}
	who := cleanName(r.PostForm.Get("who"))
	if !s.auth.check(r.PostForm.Get("token")) {
		s.auth.failed()
		s.log.Warn("console sign-in refused: wrong token", remoteField(r))
		s.render(w, r, http.StatusForbidden, "signin", map[string]any{"Error": "That is not the console token.", "Next": safeNext(r.PostForm.Get("next"))})
		return
	}
	if who == "" {
		s.render(w, r, http.StatusBadRequest, "signin", map[string]any{"Error": "Give your name: the action log records who acted.", "Next": safeNext(r.PostForm.Get("next"))})
		return
	}
	sess := s.auth.start(who, remote(r))
	setCookie(w, r, sessionCookie, sess.id, int(sessionTTL/time.Second))
	setCookie(w, r, preCookie, "", -1)
	s.log.Info("console sign-in", zapWho(who), remoteField(r))
	http.Redirect(w, r, cmpOr(safeNext(r.PostForm.Get("next")), Prefix+"/failures"), http.StatusSeeOther)
}

func (s *Server) signout(w http.ResponseWriter, r *http.Request, sess *session) {
	s.auth.end(sess.id)
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

// safeNext keeps a redirect inside the console.
func safeNext(next string) string {
	if strings.HasPrefix(next, Prefix+"/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
