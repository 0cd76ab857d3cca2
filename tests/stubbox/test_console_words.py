"""The stub home's owner console answers a command it cannot carry out in words, not with an
exception's name (stubbox/console.py `refusal_words`)."""

from __future__ import annotations

import json

import pytest

from stubbox.console import refusal_words
from stubbox.state import StateError


def _decode_error(line: str) -> json.JSONDecodeError:
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("it decoded")


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (
            _decode_error("not json"),
            "the line is not a JSON object (Expecting value at character 0)",
        ),
        (KeyError("key"), "nothing answers to 'key': the command lacks that field"),
        (KeyError("goal-1"), "nothing answers to 'goal-1'"),
        (ValueError("power_w must be a number"), "the command cannot be carried out: power_w"),
        (StateError("cannot write the state file"), "StateError: cannot write the state file"),
    ],
)
def test_words_not_exception_names(exc: Exception, words: str) -> None:
    said = refusal_words(exc)
    assert said.startswith(words), said
    assert not said.startswith(("KeyError", "JSONDecodeError", "ValueError"))
