"""FakeGcsServer: a TEST DOUBLE of the Cloud Storage JSON API, for what gcp-storage-emulator
does not do (it returns every object in one page, checks no credentials and ignores the
generation a download asks for).

It serves only what google-cloud-storage calls for naiad-source-gcs and its tests: create a
bucket, insert an object (multipart upload), list objects with pagination (``maxResults``,
``pageToken``), get an object's media (a ``generation`` that is no longer the live one is
404, as in a bucket without versioning), and an OAuth token endpoint (``/token``) for
service account key files whose ``token_uri`` points here: it checks the signed JWT against
the public keys registered with :meth:`FakeGcsServer.register_key` and answers Google's
``invalid_grant`` otherwise (a deleted key). With ``require_auth`` every storage call needs
``Authorization: Bearer TOKEN``: no or an unknown token is 401, a granted token that is not a
reader is 403, as Cloud Storage answers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import google_crc32c
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from naiad.testing.server import free_port

DEFAULT_PAGE_SIZE = 1000


@dataclass
class StoredObject:
    data: bytes
    generation: int


@dataclass
class FakeGcsState:
    buckets: dict[str, dict[str, StoredObject]] = field(default_factory=dict)
    next_generation: int = 1000
    #: service account email -> (its public key, the access token granted to it)
    keys: dict[str, tuple[rsa.RSAPublicKey, str]] = field(default_factory=dict)
    #: access tokens allowed to read (with require_auth)
    readers: set[str] = field(default_factory=set)
    require_auth: bool = False
    #: (method, path, query) of every storage request, in order
    requests: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeGcsServer:
    """The test double on a free loopback port, served from a thread of the test process."""

    def __init__(self, *, require_auth: bool = False) -> None:
        self.state = FakeGcsState(require_auth=require_auth)
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self.state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fake-gcs", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeGcsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def register_key(self, email: str, public_key: rsa.RSAPublicKey, access_token: str, *,
                     reader: bool = True) -> None:
        """Let the token endpoint grant ``access_token`` to a JWT ``email`` signs with the
        private half of ``public_key``."""
        with self.state.lock:
            self.state.keys[email] = (public_key, access_token)
            if reader:
                self.state.readers.add(access_token)

    def list_requests(self, bucket: str) -> list[dict[str, list[str]]]:
        """The query of every listing of ``bucket`` so far."""
        with self.state.lock:
            return [query for method, path, query in self.state.requests
                    if method == "GET" and path == f"/storage/v1/b/{bucket}/o"]


def _handler(state: FakeGcsState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the tests read their own assertions, not an access log

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if method == "POST" and url.path == "/token":
                self._token(body)
                return
            with state.lock:
                state.requests.append((method, url.path, query))
            if not self._authorized():
                return
            parts = url.path.split("/")
            # /storage/v1/b, /storage/v1/b/B/o, /storage/v1/b/B/o/NAME,
            # /download/storage/v1/b/B/o/NAME, /upload/storage/v1/b/B/o
            if method == "POST" and url.path == "/storage/v1/b":
                self._create_bucket(json.loads(body))
            elif method == "POST" and parts[1:4] == ["upload", "storage", "v1"] \
                    and len(parts) == 7 and parts[6] == "o":
                self._insert(parts[5], body)
            elif method == "GET" and parts[1:4] == ["storage", "v1", "b"] and len(parts) == 6 \
                    and parts[5] == "o":
                self._list(parts[4], query)
            elif method == "GET" and len(parts) >= 7 and (
                    (parts[1:4] == ["download", "storage", "v1"] and parts[6] == "o"
                     and len(parts) == 8)
                    or (parts[1:4] == ["storage", "v1", "b"] and parts[5] == "o"
                        and query.get("alt") == ["media"])):
                bucket = parts[5] if parts[1] == "download" else parts[4]
                self._media(bucket, unquote(parts[-1]), query)
            else:
                self._error(HTTPStatus.NOT_FOUND, f"the fake has no {method} {url.path}")

        def _authorized(self) -> bool:
            if not state.require_auth:
                return True
            header = self.headers.get("Authorization", "")
            token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else None
            with state.lock:
                holder = next((email for email, (_, granted) in state.keys.items()
                               if token is not None and token == granted), None)
                reader = token in state.readers
            if holder is None:
                self._error(HTTPStatus.UNAUTHORIZED, "Anonymous caller does not have "
                            "storage.objects.list access to the Google Cloud Storage bucket.")
                return False
            if not reader:
                self._error(HTTPStatus.FORBIDDEN, f"{holder} does not have storage.objects.list "
                            f"access to the Google Cloud Storage bucket.")
                return False
            return True

        def _token(self, body: bytes) -> None:
            """Google's token endpoint for a service account: a JWT (RS256) signed by a
            registered key buys that account's access token."""
            assertion = parse_qs(body.decode()).get("assertion", [""])[0]
            access = None
            try:
                header, payload, signature = assertion.split(".")
                email = json.loads(_unb64(payload))["iss"]
                with state.lock:
                    public_key, granted = state.keys[email]
                public_key.verify(_unb64(signature), f"{header}.{payload}".encode(),
                                  padding.PKCS1v15(), hashes.SHA256())
                access = granted
            except (ValueError, KeyError, InvalidSignature):
                pass
            if access is None:
                self._json(HTTPStatus.BAD_REQUEST, {
                    "error": "invalid_grant", "error_description": "Invalid JWT Signature."})
                return
            self._json(HTTPStatus.OK, {"access_token": access, "expires_in": 3600,
                                       "token_type": "Bearer"})

        def _create_bucket(self, resource: dict[str, str]) -> None:
            name = resource["name"]
            with state.lock:
                if name in state.buckets:
                    self._error(HTTPStatus.CONFLICT, f"bucket {name} exists")
                    return
                state.buckets[name] = {}
            self._json(HTTPStatus.OK, {"kind": "storage#bucket", "name": name, "id": name})

        def _insert(self, bucket: str, body: bytes) -> None:
            # multipart/related: a JSON part (the object's resource), then the content
            boundary = self.headers["Content-Type"].split("boundary=", 1)[1].strip('"')
            parts = body.split(b"--" + boundary.encode())
            metadata, data = (part.split(b"\r\n\r\n", 1)[1][:-2] for part in parts[1:3])
            name = json.loads(metadata)["name"]
            with state.lock:
                objects = state.buckets.get(bucket)
                if objects is None:
                    self._error(HTTPStatus.NOT_FOUND, "The specified bucket does not exist.")
                    return
                state.next_generation += 1
                objects[name] = StoredObject(data, state.next_generation)
                resource = _resource(bucket, name, objects[name])
            self._json(HTTPStatus.OK, resource)

        def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
            prefix = query.get("prefix", [""])[0]
            size = int(query.get("maxResults", [DEFAULT_PAGE_SIZE])[0])
            after = query.get("pageToken", [""])[0]
            with state.lock:
                objects = state.buckets.get(bucket)
                if objects is None:
                    self._error(HTTPStatus.NOT_FOUND, "The specified bucket does not exist.")
                    return
                names = sorted(name for name in objects
                               if name.startswith(prefix) and (not after or name > after))
                page = names[:size]
                items = [_resource(bucket, name, objects[name]) for name in page]
            answer: dict[str, object] = {"kind": "storage#objects", "items": items}
            if len(names) > size:
                answer["nextPageToken"] = page[-1]
            self._json(HTTPStatus.OK, answer)

        def _media(self, bucket: str, name: str, query: dict[str, list[str]]) -> None:
            with state.lock:
                stored = state.buckets.get(bucket, {}).get(name)
            wanted = query.get("generation", [None])[0]
            if stored is None or (wanted is not None and int(wanted) != stored.generation):
                self._error(HTTPStatus.NOT_FOUND, f"No such object: {bucket}/{name}")
                return
            crc, md5 = _hashes(stored.data)
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(stored.data)))
            self.send_header("x-goog-generation", str(stored.generation))
            self.send_header("x-goog-hash", f"crc32c={crc},md5={md5}")
            self.end_headers()
            self.wfile.write(stored.data)

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._json(status, {"error": {"code": int(status), "message": message,
                                          "errors": [{"message": message}]}})

        def _json(self, status: HTTPStatus, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _hashes(data: bytes) -> tuple[str, str]:
    crc = base64.b64encode(google_crc32c.Checksum(data).digest()).decode()
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    return crc, md5


def _resource(bucket: str, name: str, stored: StoredObject) -> dict[str, str]:
    crc, md5 = _hashes(stored.data)
    return {"kind": "storage#object", "bucket": bucket, "name": name,
            "size": str(len(stored.data)), "generation": str(stored.generation),
            "metageneration": "1", "md5Hash": md5, "crc32c": crc,
            "etag": f"{md5}-{stored.generation}"}
