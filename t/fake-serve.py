#!/usr/bin/env python3
"""A stand-in for gem-serve's read-only routes, for the tests of clients facing a server that is
not gem-serve: GET /v1/health (version 0, no workers, not stopping, and no long polls: it
answers at once), /v1/run and, when given, /v1/params, from files; anything else is 404.

fake-serve.py [--polls FILE] RUN_JSON [PARAMS]: prints its port on stdout, then serves until
killed; --polls writes the count of GET /v1/health so far into FILE.
"""
import argparse
import http.server

ap = argparse.ArgumentParser()
ap.add_argument("--polls")
ap.add_argument("run")
ap.add_argument("params", nargs="?")
a = ap.parse_args()
routes = {
    "/v1/health": (b'{"ok":true,"version":0,"workers":0,"stopping":false}', "application/json"),
    "/v1/run": (open(a.run, "rb").read(), "application/json"),
}
if a.params:
    routes["/v1/params"] = (open(a.params, "rb").read(), "application/x-gem-message")
polls = 0


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        global polls
        p = self.path.split("?")[0]
        if p == "/v1/health" and a.polls:
            polls += 1
            with open(a.polls, "w") as f:
                f.write(str(polls))
        if p not in routes:
            self.send_error(404)
            return
        body, ctype = routes[p]
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
