"""Where a bridged call's time goes: the bridge under `wrk` load, profiled by pyinstrument.

`python bench/profile.py [CONNECTIONS] [SECONDS]` (defaults 16 and 10) starts
`bench/bridge_server.py` under pyinstrument on CPU 0 (the stub homes and wrk on CPU 1), sends
`status` calls for SECONDS, stops the bridge through its stdin lifeline so the profile is
written, and leaves `bench/results/<date>-bridge-profile.html` (the flame view) and
`<date>-bridge-profile.txt` (the call tree). Run by `make bench-profile`.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from run import MODERN_BODY, MODERN_HEADERS, files_for, free_port, pin, wrk  # noqa: E402

PYINSTRUMENT = Path(sys.executable).with_name("pyinstrument")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("connections", nargs="?", type=int, default=16, help="wrk connections (16)")
    p.add_argument("seconds", nargs="?", type=int, default=10, help="load time, s (10)")
    args = p.parse_args()
    conns, seconds = args.connections, args.seconds
    out = BENCH / "results" / f"{datetime.date.today()}-bridge-profile"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        tokens = tmp / "bridge.tokens"
        session = tmp / "bridge.pyisession"
        argv = [*pin(0), str(PYINSTRUMENT), "-r", "pyisession", "-o", str(session)]
        argv += [str(BENCH / "bridge_server.py"), "--port", str(port), "--homes", "32"]
        argv += ["--agents", "4", "--tokens", str(tokens), "--stub-cpu", "1"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"ready":
                raise SystemExit("the bridge did not get ready")
            files = files_for(tmp, "bridge", MODERN_BODY, MODERN_HEADERS, None, tokens)
            r = wrk(f"http://127.0.0.1:{port}/mcp", conns, seconds, files)
            rps = r["requests"] / (r["duration_us"] / 1e6)
            print(f"{conns} connections, {seconds} s under the profiler: {rps:.0f} req/s")
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the lifeline: the bridge stops and pyinstrument writes
            proc.wait(60)
        for renderer, suffix in (("html", ".html"), ("text", ".txt")):
            subprocess.run(
                [str(PYINSTRUMENT), "--load", str(session), "-r", renderer, "-o", f"{out}{suffix}"],
                check=True,
            )
    html = Path(f"{out}.html")
    with html.open("rb") as raw, gzip.open(f"{html}.gz", "wb", compresslevel=9) as packed:
        shutil.copyfileobj(raw, packed)  # about 20 MB as HTML, 1.5 MB packed
    html.unlink()
    print(f"written {out}.html.gz and {out}.txt")


if __name__ == "__main__":
    main()
