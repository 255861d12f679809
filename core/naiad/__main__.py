"""The ``naiad`` command, as the console script and as ``python -m naiad``.

grpc reads ``GRPC_EXPERIMENTS`` once, when it is first imported, so what naiad's gRPC
listener wants of it goes into the environment here, before the CLI imports anything.
"""

from __future__ import annotations

import os
import sys

# grpc's EventEngine listener reads and writes the sockets on threads of its own and hands
# each event over to the thread polling the completion queue; the poller it replaces does
# that I/O on the polling thread itself. On one core that is about 3.5 fewer thread
# switches per unary call: +4-6 % req/s at concurrency 1, +9-14 % at 8, +25 % at 64
# (benchmarks/README.md, "gRPC poller"). A GRPC_EXPERIMENTS the user sets is kept as is.
GRPC_EXPERIMENTS = "-event_engine_listener"


def main() -> int:
    os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
    from naiad.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
