"""annotated/files.py: a file is replaced whole or not at all."""

import pytest

from annotated.files import atomic_write


def test_a_finished_block_replaces_the_file(tmp_path):
    target = tmp_path / "sub" / "data.txt"
    with atomic_write(target, "w", encoding="utf-8") as handle:
        handle.write("new")
        assert not target.exists(), "nothing may appear under the final name before the end"
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["data.txt"]


def test_a_failing_block_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="stop"), atomic_write(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("stop")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]
