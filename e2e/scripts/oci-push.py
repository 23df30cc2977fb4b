#!/usr/bin/env python3
"""Pushes the image of an OCI archive (oci-image.py's output) to a registry over HTTPS.

    oci-push.py --registry HOST:PORT --ca CA.crt --user USER:PASSWORD ARCHIVE REPOSITORY:TAG

The distribution API's three steps, with basic authentication: each blob not yet in the
repository is uploaded (POST for an upload location, PUT with its digest), then the manifest is
PUT under the tag. Prints the manifest's digest. Python's standard library is all it takes, as for
oci-image.py: crane (go-containerregistry) would be a Go build of minutes and a cached binary for
these few requests.
"""
import argparse
import base64
import json
import re
import ssl
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request


class Registry:
    """A registry at https://HOST, with basic authentication and a private CA.

    A registry that answers 401 with a Bearer challenge (distribution's token authentication, as
    ghcr.io does) gets a token from the challenge's realm for its scope, with the same basic
    credentials, and the request is sent again with it.
    """

    def __init__(self, host, ca, user):
        self.base = f"https://{host}"
        self.ctx = ssl.create_default_context(cafile=ca)
        self.basic = self.auth = "Basic " + base64.b64encode(user.encode()).decode()

    def request(self, method, url, data=None, headers=None, retry=True):
        url = url if url.startswith("https://") else self.base + url
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": self.auth, **(headers or {})})
        try:
            with urllib.request.urlopen(req, context=self.ctx) as resp:
                return resp.status, resp.headers
        except urllib.error.HTTPError as e:
            if method == "HEAD" and e.code == 404:
                return 404, e.headers
            challenge = e.headers.get("WWW-Authenticate", "")
            if e.code == 401 and retry and challenge.lower().startswith("bearer "):
                self.auth = "Bearer " + self.token(challenge)
                return self.request(method, url, data, headers, retry=False)
            raise SystemExit(f"oci-push: {method} {url}: {e.code} {e.read()[:300]!r}") from None

    def token(self, challenge):
        """A token from the realm of a `Bearer realm=...,service=...,scope=...` challenge."""
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise SystemExit(f"oci-push: a Bearer challenge without a realm: {challenge}")
        req = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(params)}", headers={"Authorization": self.basic})
        try:
            with urllib.request.urlopen(req, context=self.ctx) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"oci-push: token from {realm}: {e.code} {e.read()[:300]!r}") from None
        return body.get("token") or body["access_token"]

    def put_blob(self, repo, digest, blob):
        if self.request("HEAD", f"/v2/{repo}/blobs/{digest}")[0] == 200:
            return
        _, headers = self.request("POST", f"/v2/{repo}/blobs/uploads/", b"")
        location = urllib.parse.urljoin(self.base + "/", headers["Location"])
        sep = "&" if "?" in location else "?"
        self.request("PUT", f"{location}{sep}digest={urllib.parse.quote(digest)}", blob,
                     {"Content-Type": "application/octet-stream"})


    def put_blobs_of(self, repo, manifest, blob):
        """Pushes the config and layers an image manifest (bytes) names, read by `blob`."""
        parsed = json.loads(manifest)
        for d in [parsed["config"], *parsed["layers"]]:
            self.put_blob(repo, d["digest"], blob(d["digest"]))


def layout(tar, archive, tool):
    """The blob reader of an OCI layout archive (`tar`) and the first entry of its index.json."""
    def blob(digest):
        member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
        if member is None:
            raise SystemExit(f"{tool}: {archive} lacks blob {digest}")
        return member.read()

    index_file = tar.extractfile("index.json")
    if index_file is None:
        raise SystemExit(f"{tool}: {archive} has no index.json")
    return blob, json.load(index_file)["manifests"][0]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--registry", required=True, help="HOST:PORT")
    p.add_argument("--ca", required=True, help="the CA certificate the registry's is signed by")
    p.add_argument("--user", required=True, help="USER:PASSWORD")
    p.add_argument("archive")
    p.add_argument("ref", help="REPOSITORY:TAG in that registry")
    a = p.parse_args()
    repo, tag = a.ref.rsplit(":", 1)
    reg = Registry(a.registry, a.ca, a.user)
    with tarfile.open(a.archive) as tar:
        blob, entry = layout(tar, a.archive, "oci-push")
        manifest = blob(entry["digest"])
        reg.put_blobs_of(repo, manifest, blob)
    reg.request("PUT", f"/v2/{repo}/manifests/{tag}", manifest, {"Content-Type": entry["mediaType"]})
    print(entry["digest"])


if __name__ == "__main__":
    sys.exit(main())
