"""Frontend processes: HTTP served by several processes for one engine (``--frontend-processes``).

The engine process (``naiad serve``) holds every model, scheduler and statistic; frontend
processes accept the HTTP connections on the socket the engine bound and do the HTTP work.
Each request crosses to the engine as a frame on a Unix socket and runs there in the same
ASGI application a single-process server runs (docs/design.md, "Processes"):

- ``frames``: the frame format and the protocol both ends read it with;
- ``engine``: the engine's end, which runs each forwarded request in the application;
- ``frontend``: the ASGI application of a frontend process, which forwards each request;
- ``processes``: starting, watching and stopping the frontend processes from the engine;
- ``frontend_main``: the program a frontend process runs.
"""
