#!/usr/bin/env python3
"""A release repository as an internal mirror serves one: a directory over HTTPS with the
server's generated HTML index of each directory (what nginx autoindex, Apache, Artifactory and
Nexus produce too), optionally behind HTTP basic authentication. The tests point
fetchConfig.url at it.

    https-repo.py DIR CERT KEY [USER:PASSWORD]

Listens on 127.0.0.1 on a free port, prints the port on standard output once it accepts
connections, and serves until killed. Every request is logged on standard error."""

import base64
import functools
import http.server
import ssl
import sys


def main() -> None:
    root, cert, key = sys.argv[1:4]
    expected = None
    if len(sys.argv) > 4:
        expected = "Basic " + base64.b64encode(sys.argv[4].encode()).decode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if expected is not None and self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="releases"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=root))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
