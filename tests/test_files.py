"""Files written whole: the old file or the whole new one, never part, and
nothing left behind when the writing fails."""

from __future__ import annotations

import stat

import pytest

from planner.files import written_whole


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
