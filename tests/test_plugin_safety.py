"""The source endpoint's guard: only .py files under the source roots, whatever the name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tb_syncfinder.plugin.safety import MAX_SOURCE_BYTES, SourceError, SourceGuard
from tb_syncfinder.source import parse_path_map


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("".join(f"line {i}\n" for i in range(1, 31)))
    (root / "pkg" / "model.py").write_text("def forward(x):\n    return x.item()\n")
    (tmp_path / "secret.py").write_text("TOKEN = 'do not serve'\n")
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    return root


def status_of(guard: SourceGuard, name: str, line: int = 1) -> int:
    with pytest.raises(SourceError) as info:
        guard.read(name, line)
    return info.value.status


def test_relative_name_is_read_under_the_root_with_context_lines(project: Path) -> None:
    lines = SourceGuard([str(project)]).read("train.py", 10, context=2)
    assert lines.start == 8
    assert lines.lines == ["line 8", "line 9", "line 10", "line 11", "line 12"]
    assert lines.path == str(project.resolve() / "train.py")


def test_absolute_name_inside_the_root_is_served(project: Path) -> None:
    lines = SourceGuard([str(project)]).read(str(project / "pkg" / "model.py"), 2, context=0)
    assert lines.lines == ["    return x.item()"]


def test_dot_dot_out_of_the_root_is_refused(project: Path) -> None:
    guard = SourceGuard([str(project)])
    assert status_of(guard, "../secret.py") == 403
    assert status_of(guard, "pkg/../../secret.py") == 403


def test_absolute_name_outside_the_root_is_refused(project: Path) -> None:
    guard = SourceGuard([str(project)])
    assert status_of(guard, str(project.parent / "secret.py")) == 403


def test_non_python_files_are_refused_even_inside_the_root(project: Path) -> None:
    (project / "notes.txt").write_text("x")
    guard = SourceGuard([str(project)])
    assert status_of(guard, "notes.txt") == 403
    assert status_of(guard, "/etc/passwd") == 403


def test_symlink_named_py_pointing_out_of_the_root_is_refused(project: Path) -> None:
    (project / "link.py").symlink_to(project.parent / "secret.py")
    (project / "passwd.py").symlink_to(project.parent / "passwd")
    (project / "outside").symlink_to(project.parent, target_is_directory=True)
    guard = SourceGuard([str(project)])
    assert status_of(guard, "link.py") == 403
    assert status_of(guard, "passwd.py") == 403
    assert status_of(guard, "outside/secret.py") == 403


def test_a_file_found_out_of_the_root_through_a_link_reads_as_one_not_there(
    project: Path,
) -> None:
    """The resolver's suffix match found ``zzz/outside/secret.py`` through a link under the
    root: a 403 for the file that exists, a 404 for one that does not, which told a caller
    what exists outside the roots. Both are "not found" now."""
    (project / "outside").symlink_to(project.parent, target_is_directory=True)
    guard = SourceGuard([str(project)])
    assert status_of(guard, "zzz/outside/secret.py") == status_of(guard, "zzz/outside/none.py")
    assert status_of(guard, "zzz/outside/secret.py") == 404


def test_symlink_inside_the_root_to_a_file_inside_it_is_served(project: Path) -> None:
    (project / "alias.py").symlink_to(project / "train.py")
    assert SourceGuard([str(project)]).read("alias.py", 1, 0).lines == ["line 1"]


def test_encoded_and_control_character_names_are_bad_requests(project: Path) -> None:
    guard = SourceGuard([str(project)])
    assert status_of(guard, "%2e%2e/secret.py") == 400
    assert status_of(guard, "..%2fsecret.py") == 400
    assert status_of(guard, "train.py\x00.txt") == 400
    assert status_of(guard, "train\n.py") == 400
    assert status_of(guard, "") == 400


def test_missing_file_under_the_root_is_not_found_with_a_hint(project: Path) -> None:
    with pytest.raises(SourceError) as info:
        SourceGuard([str(project)]).read("nowhere.py", 1)
    assert info.value.status == 404
    assert "--sync_advisor_source_root" in info.value.hint


def test_line_past_the_end_and_bad_context_are_refused(project: Path) -> None:
    guard = SourceGuard([str(project)])
    assert status_of(guard, "train.py", line=500) == 404
    assert status_of(guard, "train.py", line=0) == 400
    with pytest.raises(SourceError):
        guard.read("train.py", 1, context=51)


def test_oversized_and_binary_files_are_refused(project: Path) -> None:
    (project / "big.py").write_bytes(b"#" * (MAX_SOURCE_BYTES + 1))
    (project / "bin.py").write_bytes(b"x = 1\n\x00\x01")
    guard = SourceGuard([str(project)])
    assert status_of(guard, "big.py") == 403
    assert status_of(guard, "bin.py") == 403


def test_path_map_rewrites_a_recorded_prefix_to_the_local_copy(project: Path) -> None:
    guard = SourceGuard([str(project)], parse_path_map(["/home/ci/work=" + str(project)]))
    assert guard.read("/home/ci/work/pkg/model.py", 1, 0).lines == ["def forward(x):"]


def test_path_map_cannot_reach_outside_the_roots(project: Path) -> None:
    guard = SourceGuard([str(project)], parse_path_map(["/remote=" + str(project.parent)]))
    assert status_of(guard, "/remote/secret.py") == 403


def test_windows_recorded_paths_are_mapped_too(project: Path) -> None:
    guard = SourceGuard([str(project)], parse_path_map(["C:/Users/me/proj=" + str(project)]))
    assert guard.read("C:\\Users\\me\\proj\\train.py", 3, 0).lines == ["line 3"]


def test_malformed_path_map_names_the_item() -> None:
    with pytest.raises(ValueError, match="nonsense"):
        parse_path_map(["nonsense"])


def test_a_root_given_through_a_symlink_still_bounds_reads(project: Path) -> None:
    link = project.parent / "link_to_project"
    link.symlink_to(project, target_is_directory=True)
    guard = SourceGuard([str(link)])
    assert guard.read("train.py", 1, 0).lines == ["line 1"]
    assert status_of(guard, "../secret.py") == 403
    assert os.path.realpath(link) == str(project.resolve())


def test_a_path_recorded_in_another_checkout_is_found_by_its_suffix(project: Path) -> None:
    guard = SourceGuard([str(project)])
    lines = guard.read("/home/someone/else/project/pkg/model.py", 1, 0)
    assert lines.lines == ["def forward(x):"]
    assert lines.path == str(project.resolve() / "pkg" / "model.py")


def test_a_suffix_match_never_leaves_the_roots(project: Path) -> None:
    guard = SourceGuard([str(project / "pkg")])
    assert status_of(guard, "/elsewhere/secret.py") == 403


def test_outside_paths_get_the_same_answer_whether_or_not_they_exist(
    project: Path, tmp_path: Path
) -> None:
    existing = tmp_path / "elsewhere" / "secret.py"
    existing.parent.mkdir()
    existing.write_text("TOKEN = 1\n")
    guard = SourceGuard([str(project)])
    assert status_of(guard, str(existing)) == 403
    assert status_of(guard, str(tmp_path / "elsewhere" / "missing.py")) == 403
    assert status_of(guard, "../../nowhere/missing.py") == 403


def test_tensorboard_started_from_the_filesystem_root_serves_no_source_by_default() -> None:
    from tb_syncfinder.plugin.settings import default_source_roots

    assert default_source_roots("/") == []
    assert default_source_roots("/srv/project") == [os.path.realpath("/srv/project")]


def test_the_source_view_counts_lines_as_python_does_past_a_line_separator_in_a_string(
    tmp_path: Path,
) -> None:
    """A \u2028 inside a string is text to Python (and to the trace's line numbers): the
    view split there too, and showed every later line one off."""
    source = tmp_path / "train.py"
    source.write_text("s = 'a\u2028b'\nx = 1\nloss.item()\n", encoding="utf-8")
    assert SourceGuard([str(tmp_path)]).read(str(source), 3, 0).lines == ["loss.item()"]
