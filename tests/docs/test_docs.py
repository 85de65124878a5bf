"""What the documentation promises operators (seed 000 section 7, "Upgrades")."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_release_notes_tell_operators_to_let_unfinished_runs_end_before_an_upgrade():
    notes = (ROOT / "CHANGELOG.md").read_text()
    before_any_release = notes.split("## ")[0]
    assert "staal-supervisor status" in before_any_release
    assert "unfinished run" in before_any_release and "resolving" in before_any_release


def test_the_operators_guide_says_a_run_does_not_end_exactly_at_its_deadline():
    guide = (ROOT / "docs" / "operators.md").read_text()
    assert "does not end exactly at its deadline" in guide


def test_the_operators_guide_gives_the_ceiling_of_one_postgresql_from_the_measured_costs():
    guide = (ROOT / "docs" / "operators.md").read_text()
    ceiling = guide.split("### The ceiling: what one PostgreSQL serves", 1)[1].split("\n## ", 1)[0]
    assert (ROOT / "benchmarks" / "store_cost.py").is_file()  # the measurement it names
    for said in ("benchmarks/store_cost.py", "calls/s per core", "synchronous_commit",
                 "group commit", "hot", "max_connections", "WAL", "separate fleets",
                 "read replica"):
        assert said in ceiling, said
    assert "store_cost.py" in (ROOT / "BENCHMARKS.md").read_text()
