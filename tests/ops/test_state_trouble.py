"""State that goes wrong is said as it is: a second `serve` on a folder another one serves is
refused; a state folder removed or replaced under a running bridge stops its readiness in
words; a full disk (a small tmpfs), a read-only folder (a read-only bind mount) and a damaged
database are three different sentences from the commands, never a traceback; and the OAuth
endpoints answer a full disk in OAuth's form, never an HTML 500. The mounts need root."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import trio

from tests.e2e.env import REAL_WAIT_S, Env, start_env

CLI = [sys.executable, "-m", "ftwbridge"]
KEY = "ab" * 32


def run(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env |= {
        "FTWBRIDGE_STATE_DIR": str(state),
        "FTWBRIDGE_BIND": "127.0.0.1:0",
        "FTWBRIDGE_ADMIN_BIND": "none",
        "FTWBRIDGE_DOOR_BIND": "127.0.0.1:0",
    }
    return subprocess.run(
        [*CLI, *argv], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def one_sentence(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ftwbridge: ")
    return done.stderr


@contextlib.contextmanager
def mounted(*argv: str) -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind needs root")
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        pytest.skip(f"this machine cannot mount here: {done.stderr.strip()}")
    try:
        yield
    finally:
        gone = subprocess.run(["umount", argv[-1]], capture_output=True, timeout=30, check=False)
        if gone.returncode != 0:  # still busy: detach it now, the kernel frees it once unused
            subprocess.run(["umount", "-l", argv[-1]], capture_output=True, timeout=30, check=False)


def fill(folder: Path) -> None:
    """Fill the file system of `folder` to the last byte."""
    for name, size in (("filler", 65536), ("filler-small", 1)):
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        finally:
            os.close(fd)


def test_a_second_serve_on_the_same_state_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env |= {
        "FTWBRIDGE_STATE_DIR": str(state),
        "FTWBRIDGE_BIND": "127.0.0.1:0",
        "FTWBRIDGE_ADMIN_BIND": "none",
        "FTWBRIDGE_DOOR_BIND": "127.0.0.1:0",
    }
    with subprocess.Popen(
        [*CLI, "serve"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as first:
        try:
            assert first.stdout is not None and first.stdout.readline().startswith(
                "ftwbridge serving"
            )
            said = one_sentence(run(state, "serve"))
            assert f"another bridge is already serving the state folder {state}" in said
        finally:
            first.terminate()
            assert first.wait(timeout=60) == 0
    # once it has stopped, a bridge starts there again
    with subprocess.Popen(
        [*CLI, "serve"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as again:
        try:
            assert again.stdout is not None and again.stdout.readline().startswith(
                "ftwbridge serving"
            )
        finally:
            again.terminate()
            assert again.wait(timeout=60) == 0


async def readyz(env: Env) -> tuple[int, str]:
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(f"{env.bridge.admin_url}/readyz")
    return r.status_code, r.text


async def test_a_state_folder_removed_or_replaced_stops_readiness_in_words(env: Env) -> None:
    state = Path(env.bridge.config.state_dir)
    assert await readyz(env) == (200, "ready\n")
    moved = state.with_name("moved-away")
    await trio.to_thread.run_sync(state.rename, moved)
    status, text = await readyz(env)
    assert status == 503 and "was removed while the bridge runs" in text, text
    # the operator's next command makes a new folder: the bridge says it is not the one it reads
    done = await trio.to_thread.run_sync(
        lambda: run(state, "home", "enroll", "--home", "h1", "--key", KEY)
    )
    assert done.returncode == 0, done.stderr
    status, text = await readyz(env)
    assert (
        status == 503
        and "was replaced while the bridge runs" in text
        and "restart the bridge" in text
    )
    await trio.to_thread.run_sync(shutil.rmtree, state)
    await trio.to_thread.run_sync(moved.rename, state)
    assert await readyz(env) == (200, "ready\n")


def test_full_read_only_and_damaged_are_three_sentences(tmp_path: Path) -> None:
    full, ro_src, ro = tmp_path / "full", tmp_path / "ro-src", tmp_path / "ro"
    for folder in (full, ro_src, ro):
        folder.mkdir()
    said: dict[str, list[str]] = {}
    with mounted("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)):
        state = full / "state"
        assert run(state, "home", "enroll", "--home", "h0", "--key", KEY).returncode == 0
        fill(full)
        said["full"] = [
            one_sentence(run(state, "home", "enroll", "--home", "h1", "--key", "cd" * 32)),
            one_sentence(run(state, "agent", "create", "--home", "h0")),
        ]
    state = ro_src / "state"
    assert run(state, "home", "enroll", "--home", "h0", "--key", KEY).returncode == 0
    with mounted("--bind", str(ro_src), str(ro)):
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True, timeout=30)
        state = ro / "state"
        said["read-only"] = [
            one_sentence(run(state, "home", "enroll", "--home", "h1", "--key", KEY)),
            one_sentence(run(state, "agent", "create", "--home", "h0")),
        ]
        # what only reads still works there
        listed = run(state, "home", "list")
        assert listed.returncode == 0 and listed.stdout.startswith("h0  key "), listed.stderr
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "bridge.sqlite").write_bytes(b"this is not a database " * 200)
    said["damaged"] = [
        one_sentence(run(damaged, "home", "list")),
        one_sentence(run(damaged, "token", "issue", "--home", "h0", "--agent", "a1")),
    ]
    for line in said["full"]:
        assert "is full" in line and "free space there" in line, line
    for line in said["read-only"]:
        assert "cannot be written (Read-only file system): mount it read-write" in line, line
    for line in said["damaged"]:
        assert "is damaged" in line and "ftwbridge db restore" in line, line
    assert not any("is full" in x for x in said["read-only"] + said["damaged"])
    assert not any("damaged" in x for x in said["full"] + said["read-only"])


async def test_oauth_on_a_full_disk_answers_in_oauths_form(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    folder = tmp_path / "disk"
    folder.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=384k", "tmpfs", str(folder)):
        async with trio.open_nursery() as inner:  # the bridge stops before the disk goes
            env = await start_env(inner, folder / "bridge")
            base = env.bridge.site.public_url
            await trio.to_thread.run_sync(fill, folder)
            answers = []
            async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
                for n in range(60):
                    body = {"redirect_uris": [f"http://127.0.0.1:9/cb{n}"], "client_name": "x" * 90}
                    r = await http.post(base + "/oauth/register", json=body)
                    answers.append(r)
                    if r.status_code == 503:
                        break
            inner.cancel_scope.cancel()
    assert all(r.headers["content-type"].startswith("application/json") for r in answers)
    last = answers[-1]
    assert last.status_code == 503, [r.status_code for r in answers]
    assert last.json() == {
        "error": "temporarily_unavailable",
        "error_description": "the bridge's storage is full; try again later",
    }
