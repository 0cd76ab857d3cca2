"""The container's health check: exit 0 when the bridge's admin listener says `/readyz` ready.

    python healthcheck.py [URL]     (default http://127.0.0.1:8781/readyz, or $FTWBRIDGE_READYZ)

Not ready (503, with why), no answer within 3 s, or no listener: one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

DEFAULT = os.environ.get("FTWBRIDGE_READYZ", "http://127.0.0.1:8781/readyz")


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("url", nargs="?", default=DEFAULT)
    url = p.parse_args().url
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            print(answer.read().decode().strip())
            return 0
    except urllib.error.HTTPError as exc:
        print(exc.read().decode().strip() or f"HTTP {exc.code}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        print(f"{url} does not answer: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
