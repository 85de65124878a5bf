from __future__ import annotations

from staal.runtime.ids import is_run_id, new_run_id


def test_a_run_id_is_32_random_hexadecimal_characters():
    ids = {new_run_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_run_id(i) and len(i) == 32 for i in ids)


def test_anything_else_is_not_a_run_id():
    good = new_run_id()
    for bad in (good.upper(), good[:-1], good + "0", good + "\n", "g" * 32, None, 7, "../" + good[3:]):
        assert not is_run_id(bad)
