"""``python -m torchneuron.native build`` — compile the native device hooks into the cache."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from . import build, status

    if argv[:1] in ([], ["build"]):
        try:
            path = build(force="--force" in argv)
        except RuntimeError as e:
            print(f"torchneuron.native: {e}", file=sys.stderr)
            return 1
        print(path)
        return 0
    if argv[:1] == ["status"]:
        print(status())
        return 0
    print("usage: python -m torchneuron.native [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
