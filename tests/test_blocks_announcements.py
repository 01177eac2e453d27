"""A tool's post reads as a message (blocks/announcements.py): plain names, nothing that acts, who asked/approved."""

from __future__ import annotations

from blocks.announcements import announcement_text, user_ids_in


def test_tokens_become_plain_words_and_the_post_says_who_asked_and_who_approved() -> None:
    text = "<!channel> <@U1> & <@U9|old> see <#C1|ops>, <https://x.io|docs> <!subteam^S1|@oncall>"
    names = {"U1": "alice", "U2": "bob"}
    assert user_ids_in(text) == ["U1", "U9"]
    out = announcement_text(text, names, asked_by="U1", approved_by="U2")
    assert out == ("@channel @alice &amp; @old see #ops, docs (https://x.io) @oncall\n"
                   "_Posted for @alice, approved by @bob_")


def test_nobody_unknown_is_shown_as_an_id_and_typed_markup_stays_inert() -> None:
    out = announcement_text("hi <@U7> <!here|x> <script>", {}, asked_by="U7", approved_by=None)
    assert out == "hi @someone @here script\n_Posted for someone_"
    assert "<" not in out and "U7" not in out
