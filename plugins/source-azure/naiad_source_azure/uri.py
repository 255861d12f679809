"""``as://account/container/path`` as Triton reads it, checked before anything is dialled."""

from __future__ import annotations

import re
from dataclasses import dataclass

from naiad.errors import invalid_arg

SCHEME = "as"
EXPECTED_FORM = "as://ACCOUNT/CONTAINER[/PATH/TO/REPOSITORY]"
# Triton accepts the account's host name in place of its name and dials the same account.
PUBLIC_HOST_SUFFIX = ".blob.core.windows.net"
# Azure's naming rules: an account is 3-24 lowercase letters and digits; a container 3-63
# lowercase letters, digits and single hyphens, starting and ending with a letter or digit
# ($root and $web are the two special containers).
ACCOUNT_NAME = re.compile(r"[a-z0-9]{3,24}")
CONTAINER_NAME = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]|\$root|\$web")


@dataclass(frozen=True, slots=True)
class AzureUri:
    """A parsed ``as://`` repository URI."""

    #: the whole URI, as the user wrote it (every message names it)
    uri: str
    #: the storage account, lowercase, without the ``.blob.core.windows.net`` suffix
    account: str
    container: str
    #: the blob name prefix of the repository's root: "" or "path/to/repo/"
    root: str


def parse_uri(uri: str) -> AzureUri:
    """Split ``uri`` into account, container and root prefix; :func:`invalid_arg` naming the
    URI, the expected form and what is wrong when it is malformed."""

    def bad(why: str) -> Exception:
        return invalid_arg(f"malformed Azure Storage repository URI '{uri}': {why} "
                           f"(expected {EXPECTED_FORM})")

    head, sep, rest = uri.partition("://")
    if not sep or head != SCHEME:
        raise bad(f"the scheme must be '{SCHEME}://'")
    if "?" in rest or "#" in rest:
        # Triton drops a query silently; naiad refuses it rather than ignore what it says.
        raise bad("a query or fragment is not read (credentials come from the environment)")
    account, _, rest = rest.partition("/")
    container, _, path = rest.partition("/")
    account = account.lower()
    if account.endswith(PUBLIC_HOST_SUFFIX):
        account = account[: -len(PUBLIC_HOST_SUFFIX)]
    if not account:
        raise bad("the account is missing")
    if not ACCOUNT_NAME.fullmatch(account):
        raise bad(f"'{account}' is not a storage account name (3-24 lowercase letters "
                  f"and digits)")
    if not container:
        raise bad("the container is missing")
    if not CONTAINER_NAME.fullmatch(container):
        raise bad(f"'{container}' is not a container name (3-63 lowercase letters, digits "
                  f"and single hyphens, starting and ending with a letter or digit)")
    segments = path.strip("/").split("/") if path.strip("/") else []
    for segment in segments:
        if segment in ("", ".", ".."):
            raise bad(f"the path '{path}' has an empty, '.' or '..' segment")
    root = "".join(f"{segment}/" for segment in segments)
    return AzureUri(uri=uri, account=account, container=container, root=root)
