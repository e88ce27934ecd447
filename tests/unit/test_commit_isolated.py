"""``commit_isolated`` (gnomon.common.storage.isolation): every item of a batch is resolved exactly
once, committed, refused or failed, even when a transient error strikes in the middle of a bisection
(an item left unresolved would hold its stream's write budget forever)."""

from __future__ import annotations

import asyncio

import pytest

from gnomon.common.storage.isolation import commit_isolated


def run(batch: list[int], bad: set[int], transient_when: set[int]) -> dict[int, str]:
    """Commits ``batch``; an item in ``bad`` makes its transaction fail for its content (ValueError),
    a transaction holding an item of ``transient_when`` (and no bad item) fails transiently."""
    outcome: dict[int, str] = {}

    def mark(items: list[int], what: str) -> None:
        for i in items:
            assert i not in outcome, f"item {i} resolved twice"
            outcome[i] = what

    async def commit(part: list[int]) -> None:
        if bad & set(part):
            raise ValueError("a NUL in a text")
        if transient_when & set(part):
            raise ConnectionError("connection lost")

    async def main() -> None:
        await commit_isolated(
            batch,
            commit,
            committed=lambda part, _: mark(part, "committed"),
            refused=lambda item, _: mark([item], "refused"),
            failed=lambda part, _: mark(part, "failed"),
        )

    try:
        asyncio.run(main())
    except ConnectionError:
        pass
    return outcome


def test_a_bad_item_stands_alone_and_the_rest_commit():
    got = run(list(range(8)), bad={5}, transient_when=set())
    assert got == {i: ("refused" if i == 5 else "committed") for i in range(8)}


@pytest.mark.parametrize("transient", [0, 1, 2, 5])
def test_a_transient_error_during_bisection_resolves_every_item(transient):
    # item 3 is bad; a part holding `transient` (and not 3) fails transiently once the batch is split
    got = run(list(range(8)), bad={3}, transient_when={transient})
    assert sorted(got) == list(range(8)), f"unresolved items: {set(range(8)) - set(got)}"
    assert got[transient] == "failed"
    assert all(v == "failed" for i, v in got.items() if i >= 4), got  # the untried half
