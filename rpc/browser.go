package rpc

import (
	"net/http"
	"net/url"
	"strings"
)

// Browser safety (docs/protocol/hardening.md, "Browsers"). The RPC port
// serves JSON-RPC, blobs, the dataset API, the IPFS gateway and the
// dashboard on one origin, so a page a browser loads from anywhere must not
// be able to make state-changing requests to it:
//
//   - JSON-RPC requires Content-Type: application/json, which a browser
//     sends cross-origin only after a CORS preflight this server never
//     approves (a "simple" form or fetch POST is refused with 415);
//   - every request that is not GET/HEAD and carries an Origin header that
//     is not this server's own origin (or one named by --rpc-allow-origin)
//     is refused with 403, and so is one a browser marks Sec-Fetch-Site:
//     cross-site; requests without Origin (curl, the Go and Python clients)
//     are not browser requests and pass;
//   - the gateway's answers carry Content-Security-Policy: sandbox and
//     nosniff (dataset.Routes), so imported HTML runs in an opaque origin.

// originAllowed reports whether a request may change state: it has no
// Origin (not a browser), or its Origin is this server's own or listed.
func originAllowed(r *http.Request, allowed []string) (bool, string) {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" {
		if o := r.Header.Get("Origin"); o == "" || !listed(o, allowed) {
			return false, "cross-site browser request (Sec-Fetch-Site: cross-site)"
		}
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true, ""
	}
	if listed(o, allowed) {
		return true, ""
	}
	u, err := url.Parse(o)
	if err != nil || o == "null" || u.Host == "" {
		return false, "Origin " + quoteTrunc(o) + " is opaque or malformed"
	}
	if strings.EqualFold(u.Host, r.Host) && (u.Scheme == "http" || u.Scheme == "https") {
		return true, ""
	}
	return false, "Origin " + quoteTrunc(o) + " is not this node's origin (" + quoteTrunc(r.Host) + ")"
}

func listed(o string, allowed []string) bool {
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(a, o) {
			return true
		}
	}
	return false
}

func quoteTrunc(s string) string { return "\"" + trunc(s) + "\"" }

// refuseCrossOrigin writes 403 when r is a state-changing cross-origin
// browser request; it reports whether it did.
func refuseCrossOrigin(w http.ResponseWriter, r *http.Request, allowed []string) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
		return false
	}
	ok, why := originAllowed(r, allowed)
	if ok {
		return false
	}
	writeRaw(w, http.StatusForbidden, rawError(nil, newError(CodeInvalidRequest, nil,
		"cross-origin request refused: %s; this port serves browsers only from its own origin (node flag --rpc-allow-origin adds origins)", why)))
	return true
}

// SameOrigin wraps h (a route beside JSON-RPC: the dataset API) so that
// state-changing cross-origin browser requests are refused with 403.
func SameOrigin(h http.Handler, allowed []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuseCrossOrigin(w, r, allowed) {
			return
		}
		h.ServeHTTP(w, r)
	})
}
