"""naiad-cache-local: a response cache in the server's memory, least recently used entries
evicted to stay within a byte budget (``--cache-config local,size=BYTES``)."""

from naiad_cache_local.lru import LocalCache

__all__ = ["LocalCache"]
