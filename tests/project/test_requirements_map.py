"""The requirements map (tests/requirements.py) is well formed and every test it names exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.requirements import (
    ID_PATTERN,
    PROJECT_ROOT,
    REQUIREMENTS,
    SECTIONS,
    Requirement,
    broken_test_ids,
    check_test_id,
    summary,
)

TOTALS_LINE = re.compile(r"^covered (\d+) / total (\d+) \(missing (\d+)\)$", re.MULTILINE)

FAKE_TEST_MODULE = '''
import pytest

def test_plain():
    pass

async def test_async():
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_with_params(x):
    pass

class TestGroup:
    def test_method(self):
        pass

    class TestInner:
        def test_deep(self):
            pass

def helper():
    def test_nested_in_function():
        pass

x = "def test_in_a_string(): pass"
'''


def _fake_project(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(FAKE_TEST_MODULE)
    return tmp_path


# ---------------------------------------------------------------- the map's own shape


def test_every_listed_test_id_names_a_test_defined_in_the_project():
    assert broken_test_ids() == {}


def test_requirement_ids_are_unique():
    ids = [r.id for r in REQUIREMENTS]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_requirement_ids_match_the_seed_section_number_pattern():
    bad = [r.id for r in REQUIREMENTS if not ID_PATTERN.match(r.id)]
    assert bad == []


def test_every_row_is_a_requirement_of_seed_000_or_002():
    assert all(isinstance(r, Requirement) for r in REQUIREMENTS)
    assert {r.seed for r in REQUIREMENTS} == {"000", "002"}
    assert all(r.id.startswith(r.seed + "-") for r in REQUIREMENTS)


def test_each_rows_section_agrees_with_its_id():
    bad = [(r.id, r.section) for r in REQUIREMENTS
           if (m := ID_PATTERN.match(r.id)) is None or m["section"] != r.section]
    assert bad == []


def test_only_the_mapped_sections_have_rows_and_each_has_some():
    assert {r.key for r in REQUIREMENTS} == set(SECTIONS)


def test_every_requirement_text_is_one_non_empty_line():
    bad = [r.id for r in REQUIREMENTS
           if not r.text.strip() or "\n" in r.text or "\r" in r.text or r.text != r.text.strip()]
    assert bad == []


def test_requirement_texts_are_not_repeated():
    texts = [r.text for r in REQUIREMENTS]
    assert len(texts) == len(set(texts))


def test_tests_are_tuples_of_distinct_strings():
    for r in REQUIREMENTS:
        assert isinstance(r.tests, tuple), r.id
        assert all(isinstance(t, str) and t for t in r.tests), r.id
        assert len(r.tests) == len(set(r.tests)), r.id


# ---------------------------------------------------------------- the test-id checker


def test_checker_accepts_a_top_level_test_function(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::test_plain", root) is None
    assert check_test_id("tests/test_fake.py::test_async", root) is None


def test_checker_accepts_a_parametrized_id_by_its_function(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::test_with_params[1]", root) is None
    assert check_test_id("tests/test_fake.py::test_with_params[a::b-c]", root) is None


def test_checker_accepts_methods_of_test_classes_at_any_depth(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::TestGroup::test_method", root) is None
    assert check_test_id("tests/test_fake.py::TestGroup::TestInner::test_deep", root) is None


def test_checker_reports_a_made_up_test_as_missing(tmp_path):
    root = _fake_project(tmp_path)
    problem = check_test_id("tests/test_fake.py::test_that_was_never_written", root)
    assert problem is not None and "test_that_was_never_written" in problem


def test_checker_finds_a_real_test_of_this_project():
    assert check_test_id("tests/project/test_requirements_map.py::test_requirement_ids_are_unique") is None


def test_checker_reports_a_made_up_test_in_the_real_project_as_missing():
    fake = "tests/project/test_requirements_map.py::test_no_such_test_exists_anywhere_in_staal"
    assert check_test_id(fake, PROJECT_ROOT) is not None
    assert fake in broken_test_ids((Requirement("000-2.99", "000", "2", "fake", (fake,)),))


def test_checker_reports_a_missing_method_or_class(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::TestGroup::test_absent", root) is not None
    assert check_test_id("tests/test_fake.py::TestAbsent::test_method", root) is not None
    assert check_test_id("tests/test_fake.py::test_plain::test_method", root) is not None


def test_checker_reports_a_method_named_as_if_it_were_a_function(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::test_method", root) is not None


def test_checker_ignores_functions_nested_in_functions_and_names_in_strings(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_fake.py::test_nested_in_function", root) is not None
    assert check_test_id("tests/test_fake.py::test_in_a_string", root) is not None


def test_checker_reports_a_missing_file(tmp_path):
    root = _fake_project(tmp_path)
    assert check_test_id("tests/test_nowhere.py::test_plain", root) is not None


def test_checker_refuses_paths_outside_the_project(tmp_path):
    (tmp_path / "inner").mkdir()
    root = _fake_project(tmp_path / "inner")
    (tmp_path / "test_outside.py").write_text("def test_plain():\n    pass\n")
    assert check_test_id("../test_outside.py::test_plain", root) is not None


def test_checker_refuses_malformed_node_ids(tmp_path):
    root = _fake_project(tmp_path)
    for bad in ("tests/test_fake.py", "tests/test_fake.py::", "::test_plain",
                "tests/test_fake.py::test plain", "tests/test_fake.py::test_plain]"):
        assert check_test_id(bad, root) is not None, bad


def test_checker_does_not_import_the_test_module(tmp_path):
    root = _fake_project(tmp_path)
    marker = tmp_path / "imported"
    (tmp_path / "tests" / "test_side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef test_plain():\n    pass\n")
    assert check_test_id("tests/test_side_effect.py::test_plain", root) is None
    assert not marker.exists()


# ---------------------------------------------------------------- summary and the command


def test_summary_counts_add_up_overall_and_per_section():
    s = summary()
    assert s["total"] == len(REQUIREMENTS)
    assert s["covered"] + s["missing"] == s["total"]
    assert s["covered"] == sum(1 for r in REQUIREMENTS if r.tests)
    assert set(s["sections"]) == set(SECTIONS)
    for section, counts in s["sections"].items():
        rows = [r for r in REQUIREMENTS if r.key == section]
        assert counts["total"] == len(rows)
        assert counts["covered"] == sum(1 for r in rows if r.tests)
        assert counts["covered"] + counts["missing"] == counts["total"]
    assert sum(c["total"] for c in s["sections"].values()) == s["total"]


def test_summary_counts_a_row_with_tests_as_covered_and_one_without_as_missing():
    rows = (Requirement("000-2.01", "000", "2", "a", ("tests/x.py::test_a",)),
            Requirement("000-3.01", "000", "3", "b"))
    s = summary(rows)
    assert (s["total"], s["covered"], s["missing"]) == (2, 1, 1)
    assert s["sections"]["000-2"] == {"total": 1, "covered": 1, "missing": 0}
    assert s["sections"]["000-3"] == {"total": 1, "covered": 0, "missing": 1}


def test_running_the_module_prints_a_totals_line_that_agrees_with_summary():
    proc = subprocess.run([sys.executable, "-m", "tests.requirements"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    match = TOTALS_LINE.search(proc.stdout)
    assert match, proc.stdout
    s = summary()
    assert tuple(int(g) for g in match.groups()) == (s["covered"], s["total"], s["missing"])
    for section, counts in s["sections"].items():
        assert re.search(rf"^{section} .*\b{counts['covered']}\s+{counts['missing']}\s+"
                         rf"{counts['total']}$", proc.stdout, re.MULTILINE), proc.stdout
