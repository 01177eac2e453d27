"""What a delivery pass reads is what the checkpoints committed, exactly (the begin's script
hands the entries back as one JSON text). On a real Valkey."""

from __future__ import annotations

from bot.engine.turn_commands import CommitCommand
from bot.protocol import MessageCompleted
from store.outbox import RedisOutbox
from store.turns import RedisTurns
from tests.engine.harness import session, take_lease

HOSTILE = [
    'quotes " and \\" backslashes \\ \\\\ and a slash / \\/',
    "lines\nand\r\nreturns\tand a NUL \x00, a bell \x07 and separators \x1e \x1f \x18",
    "non-ASCII: Zoë paid 75 € — 確認 — 🙂👍🏽",
    "looks like JSON: [\"x\", 1, {\"e\": \"y\"}] and Lua: ]] -- end",
    "",
    "x" * 100_000,
]


async def _commit_texts(redis, name: str, *batches: list[str]) -> tuple[RedisOutbox, str]:
    """A session whose lease holder committed each batch of texts as one checkpoint's messages."""
    store, ref = RedisTurns(redis), session(name)
    sid = ref.session_id
    token = await take_lease(store, sid)
    assert token is not None
    for n, texts in enumerate(batches):
        said = [MessageCompleted(session_id=sid, turn_id="t", text=text, step=n) for text in texts]
        await store.commit(CommitCommand(sid, token, {"turns": n}, said, ref=ref))
    return RedisOutbox(redis), sid


async def test_a_pass_reads_every_committed_text_exactly_and_in_order(redis):
    outbox, sid = await _commit_texts(redis, "pass-reads", HOSTILE[:3], HOSTILE[3:])

    begun = await outbox.outbox_begin(sid, ["frontend"], "p1")
    assert begun is not None
    assert [e.text for _, e in begun.entries] == HOSTILE
    seqs = [e.seq for _, e in begun.entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(HOSTILE)
    assert all(isinstance(entry_id, str) and "-" in entry_id for entry_id, _ in begun.entries)
    assert not begun.full

    # moved past all of them, the next pass reads nothing (and is not mistaken for a full batch)
    await outbox.outbox_end(sid, "p1", {"frontend": begun.entries[-1][0]}, [], claim=begun.claim, again_in_ms=None)
    again = await outbox.outbox_begin(sid, ["frontend"], "p2")
    assert again is not None and again.entries == [] and not again.full


async def test_a_pass_reads_in_batches_of_its_count(redis):
    outbox, sid = await _commit_texts(redis, "pass-batches", [f"m{n}" for n in range(5)])
    first = await outbox.outbox_begin(sid, ["frontend"], "p1", count=3)
    assert first is not None and first.full
    assert [e.text for _, e in first.entries] == ["m0", "m1", "m2"]
    await outbox.outbox_end(sid, "p1", {"frontend": first.entries[-1][0]}, [], claim=first.claim, again_in_ms=0)
    rest = await outbox.outbox_begin(sid, ["frontend"], "p2", count=3)
    assert rest is not None and not rest.full
    assert [e.text for _, e in rest.entries] == ["m3", "m4"]
