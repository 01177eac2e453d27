"""``python -m bot audit export|verify`` against a real Redis: round trip, filters, and tampering caught."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import pytest

from bot.config import Settings
from store.audit import AuditEntry, AuditLog
from store.audit_chain import export_head
from store.audit_cli import audit_command

TEAM = "T0AUDIT"


@pytest.fixture
def settings(redis_url, tmp_path) -> Settings:
    return Settings(_env_file=None, REDIS_URL=redis_url, BOT_DATA_DIR=str(tmp_path / "data"))  # type: ignore[call-arg]


@pytest.fixture
async def log(redis) -> AuditLog:
    audit = AuditLog(redis)
    await audit.append(TEAM, "request", actor="slack:T0AUDIT:UA", subject="r1", data={"tool": "refund"})
    await audit.append(TEAM, "candidate", actor="slack:T0AUDIT:UB", subject="r1", data={"outcome": "rejected"})
    await audit.append(TEAM, "settlement", actor="slack:T0AUDIT:UC", subject="r1", data={"outcome": "approved"})
    await audit.append(TEAM, "execution", subject="c1", data={"status": "completed"})
    return audit


def export_args(**kw) -> argparse.Namespace:
    base = dict(audit_command="export", team=TEAM, out="-", kind=None, actor=None, subject=None, since=None, until=None)
    return argparse.Namespace(**{**base, **kw})


def verify_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"audit_command": "verify", "team": None, "file": None, **kw})


async def rewrite_stream(redis, change) -> None:
    """What someone with write access to Redis would do: rebuild the stream with ``change`` applied."""
    key = AuditLog.stream_key(TEAM)
    entries = await redis.xrange(key)
    await redis.delete(key)
    for stream_id, fields in entries:
        fields = change(fields)
        if fields is not None:
            await redis.xadd(key, fields, id=stream_id)


async def test_export_then_verify_the_file(settings, log, tmp_path, capsys):
    out = tmp_path / "audit.jsonl"
    assert await audit_command(settings, export_args(out=str(out))) == 0
    *lines, head = out.read_text().splitlines()
    assert [AuditEntry.model_validate_json(line).kind for line in lines] == [
        "request", "candidate", "settlement", "execution"]
    assert json.loads(head)["export_head"]["entries"] == 4
    assert await audit_command(settings, verify_args(file=str(out))) == 0
    assert "ok: 4 entries" in capsys.readouterr().out


async def test_export_filters_and_stdout(settings, log, capsys):
    assert await audit_command(settings, export_args(kind="settlement")) == 0
    captured = capsys.readouterr()
    [line] = captured.out.splitlines()
    assert json.loads(line)["actor"] == "slack:T0AUDIT:UC"
    assert "filtered" in captured.err
    assert await audit_command(settings, export_args(actor="slack:T0AUDIT:UA", since="2000-01-01T00:00:00Z")) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert await audit_command(settings, export_args(until="2000-01-01")) == 0
    assert capsys.readouterr().out == ""


async def test_verify_in_redis_ok_then_an_edited_entry_is_named(settings, log, redis, capsys):
    assert await audit_command(settings, verify_args(team=TEAM)) == 0
    assert "ok: 4 entries" in capsys.readouterr().out

    def edit_second(fields):
        entry = json.loads(fields[b"e"])
        if entry["seq"] == 2:
            entry["data"]["outcome"] = "approved"  # someone rewrites history
            fields = {**fields, b"e": json.dumps(entry).encode()}
        return fields

    await rewrite_stream(redis, edit_second)
    assert await audit_command(settings, verify_args(team=TEAM)) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "seq 2: hash does not match its content (entry edited)" in out


async def test_verify_names_a_removed_entry(settings, log, redis, capsys):
    await rewrite_stream(redis, lambda fields: None if json.loads(fields[b"e"])["seq"] == 3 else fields)
    assert await audit_command(settings, verify_args(team=TEAM)) == 1
    assert "seq 3..3 missing" in capsys.readouterr().out


async def test_verify_file_catches_edits_and_garbage(settings, log, tmp_path, capsys):
    out = tmp_path / "audit.jsonl"
    await audit_command(settings, export_args(out=str(out)))
    lines = out.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["actor"] = "slack:T0AUDIT:UMALLORY"
    out.write_text("\n".join([json.dumps(edited), *lines[1:], "not json"]) + "\n")
    capsys.readouterr()
    assert await audit_command(settings, verify_args(file=str(out))) == 1
    report = capsys.readouterr().out
    assert "seq 1: hash does not match" in report and "line 6: not an audit entry" in report


async def test_bad_arguments_exit_2(settings, log, capsys):
    assert await audit_command(settings, export_args(since="last tuesday")) == 2
    assert "--since" in capsys.readouterr().err
    assert await audit_command(settings, verify_args()) == 2
    assert await audit_command(settings, verify_args(file="/nonexistent/audit.jsonl")) == 2
    assert await audit_command(settings, verify_args(team=TEAM, head="0" * 64)) == 2  # --head goes with --file
    assert await audit_command(settings, verify_args(file="/nonexistent/audit.jsonl", head="seq 4")) == 2


async def test_python_m_bot_audit_exit_codes(log, redis, redis_url, tmp_path):
    async def cli(*args: str) -> tuple[int, str]:
        env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "BOT_DATA_DIR": str(tmp_path / "data")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "audit", *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode, out.decode()

    code, out = await cli("verify", "--team", TEAM)
    assert code == 0, out
    await rewrite_stream(redis, lambda fields: None if json.loads(fields[b"e"])["seq"] == 1 else fields)
    code, out = await cli("verify", "--team", TEAM)
    assert code == 1 and "first entries removed" in out, out


async def cli(redis_url: str, tmp_path, *args: str) -> tuple[int, str]:
    """``python -m bot audit …`` as an operator runs it: exit code, stdout and stderr."""
    env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "BOT_DATA_DIR": str(tmp_path / "data")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "audit", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


def forged_head(entry_lines: list[str]) -> str:
    """What someone who cut an export would append: a head that agrees with what is left."""
    entries = [AuditEntry.model_validate_json(line) for line in entry_lines]
    return json.dumps({"export_head": export_head(TEAM, entries[-1], len(entries)).model_dump(mode="json")})


async def test_an_export_cut_at_its_end_does_not_verify(log, redis_url, tmp_path):
    """Deleting the last entries of an export (here the settlement and the execution) is caught: the export
    ends with a head record (count and last hash, chained to the last entry), and verify refuses a file
    whose head is missing or does not match; a head noted elsewhere (``--head``) catches even a forged one."""
    export = tmp_path / "audit.jsonl"
    code, out = await cli(redis_url, tmp_path, "export", "--team", TEAM, "--out", str(export))
    assert code == 0, out
    *entries, head = export.read_text().splitlines()
    noted = json.loads(entries[-1])["hash"]
    assert f"head: seq 4 {noted}" in out  # what to note elsewhere, said when exporting

    for name, lines in {"cut": entries[:2], "cut, head kept": [*entries[:2], head]}.items():
        export.write_text("\n".join(lines) + "\n")
        code, out = await cli(redis_url, tmp_path, "verify", "--file", str(export))
        assert code == 1, f"{name}: {out}"

    export.write_text("\n".join(entries[:2]) + "\n")
    code, out = await cli(redis_url, tmp_path, "verify", "--file", str(export))
    assert "no head record at its end" in out, out
    export.write_text("\n".join([*entries[:2], head]) + "\n")
    code, out = await cli(redis_url, tmp_path, "verify", "--file", str(export))
    assert "head says 4 entries up to seq 4, but the export has 2 up to seq 2" in out, out

    # a head forged to match what is left passes on its own; the head noted elsewhere does not
    export.write_text("\n".join([*entries[:2], forged_head(entries[:2])]) + "\n")
    assert (await cli(redis_url, tmp_path, "verify", "--file", str(export)))[0] == 0
    code, out = await cli(redis_url, tmp_path, "verify", "--file", str(export), "--head", noted)
    assert code == 1 and f"the noted head {noted} is not in this export" in out, out

    # the whole export verifies, against the noted head too
    export.write_text("\n".join([*entries, head]) + "\n")
    code, out = await cli(redis_url, tmp_path, "verify", "--file", str(export), "--head", noted)
    assert code == 0 and "ok: 4 entries" in out and "it reaches the noted head (seq 4)" in out, out
