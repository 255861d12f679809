"""Control requests a web page must not be able to send: the content type of POSTs to the
repository, shared-memory, logging and trace APIs.

A browser sends a cross-site POST without asking the server first (no CORS preflight) only
when its Content-Type is ``text/plain``, ``application/x-www-form-urlencoded`` or
``multipart/form-data``, or when it has none (a fetch of a Blob or ArrayBuffer); any other
type needs a preflight, which naiad never grants (it answers ``OPTIONS`` with 405 and no
``Access-Control-Allow-*`` header). So a control POST is accepted with:

- ``application/json`` (any parameters, such as a charset): what the API speaks;
- ``application/octet-stream``: what ``tritonclient.http.aio`` (aiohttp) labels its JSON;
- any type, or none, from a client that is not a browser. A browser's cross-site POST always
  carries ``Origin``; other clients label control bodies as they please: ``tritonclient.http``
  sends none, Triton's own ``perf_analyzer`` (libcurl) ``application/x-www-form-urlencoded``.
  Refusing those would refuse Triton's tools and protect nothing: a program that is not a
  browser can send any type it likes.

With an Origin, anything else is refused with 415 before the body is read. Inference
requests (``infer``, ``generate``) are not control requests and are not checked.
"""

from __future__ import annotations

from collections.abc import Iterable

UNSUPPORTED_MEDIA_TYPE = 415
ACCEPTED_MEDIA_TYPES = frozenset({b"application/json", b"application/octet-stream"})


def content_type_refusal(headers: Iterable[tuple[bytes, bytes]], path: str) -> str | None:
    """Why a control POST with these (lowercase-named) headers is refused, or None."""
    content_type = None
    from_browser = False
    for name, value in headers:
        if name == b"content-type":
            content_type = value
        elif name == b"origin":
            from_browser = True
    if not from_browser:
        return None
    if content_type is None:
        return (f"POST {path} from a web page (the request has an Origin header) must be sent "
                f"with Content-Type: application/json")
    media_type = content_type.partition(b";")[0].strip().lower()
    if media_type in ACCEPTED_MEDIA_TYPES:
        return None
    shown = media_type.decode("latin-1")[:60]
    return (f"POST {path} must be sent with Content-Type: application/json, not "
            f"'{shown}'")
