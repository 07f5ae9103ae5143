"""Files written whole: the old file or the whole new one, never part, and
nothing left behind when the writing fails; JSON files read as untrusted input."""

from __future__ import annotations

import stat

import pytest

from planner.files import Unreadable, read_json, written_whole


def test_the_new_file_replaces_the_old_whole(tmp_path):
    path = tmp_path / "table.json"
    path.write_text("old")
    with written_whole(path, "w") as f:
        f.write("new, ")
        assert path.read_text() == "old"  # a reader meanwhile sees the old file
        f.write("whole")
    assert path.read_text() == "new, whole"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["table.json"]


@pytest.mark.parametrize("durable", [False, True])
def test_a_failed_write_leaves_the_old_file_and_nothing_else(tmp_path, durable):
    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with written_whole(path, durable=durable) as f:
            f.write(b"half of it")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.safetensors"]


@pytest.mark.parametrize("content, reason", [
    (None, "cannot be read (No such file or directory)"),
    (b"\xf5\x00\xff{", "is not UTF-8 text"),
    (b'{"a": 1,\n', "is not JSON (Expecting property name enclosed in double quotes at line 2)"),
    (b'{"a": {"b": 1, "c": 2, "b": 3}}', "names 'b' twice in one object"),
])
def test_a_json_file_that_cannot_be_read_says_why(tmp_path, content, reason):
    """The configuration, a report, measured peaks and the stored
    certificate are read by read_json: each failure is a reason a person
    can act on, never a decoding traceback."""
    path = tmp_path / "input.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(Unreadable) as info:
        read_json(path)
    assert str(info.value) == reason
    path.write_text('{"a": [1, "x"]}')
    assert read_json(path) == {"a": [1, "x"]}
