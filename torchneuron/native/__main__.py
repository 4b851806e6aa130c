"""``python -m torchneuron.native build`` — compile the native device hooks, the C++ fast
kernels and the shared-memory collectives' barrier into the cache."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from . import build, fast, shm, status

    if argv[:1] in ([], ["build"]):
        try:
            for builder in (build, fast.build, shm.build):
                print(builder(force="--force" in argv))
        except RuntimeError as e:
            print(f"torchneuron.native: {e}", file=sys.stderr)
            return 1
        return 0
    if argv[:1] == ["status"]:
        print(status())
        print(fast.status())
        print(shm.status())
        return 0
    print("usage: python -m torchneuron.native [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
