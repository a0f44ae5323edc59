"""tools/shellcheck_workflows.py: ShellCheck sees every bash step of the workflows, with GitHub's
expressions standing in as plain words, and a planted mistake fails it."""

from __future__ import annotations

import textwrap

from tools import shellcheck_workflows as tool

PLANTED = textwrap.dedent(
    """\
    name: planted
    on: push
    jobs:
      build:
        runs-on: ubuntu-latest
        steps:
          - name: clean
            run: rm -rf $FOLDER/build
          - name: quoted, with an expression
            run: echo "${{ github.ref_name }}" > "$GITHUB_STEP_SUMMARY"
          - name: python
            shell: python
            run: print($x)
    """
)


def test_each_bash_step_is_checked_and_an_unquoted_variable_is_named(tmp_path, capsys):
    workflow = tmp_path / "planted.yml"
    workflow.write_text(PLANTED, encoding="utf-8")
    found = tool.scripts(workflow)
    assert [s.where for s in found] == [
        "planted.yml, job build, step 'clean'",
        "planted.yml, job build, step 'quoted, with an expression'",
    ]  # the python step is not shell
    assert (
        found[1].text
        == 'echo "' + "_" * len("${{ github.ref_name }}") + '" > "$GITHUB_STEP_SUMMARY"'
    )
    assert tool.main([str(workflow)]) == 1
    printed = capsys.readouterr().out
    assert "step 'clean': line 1" in printed and "SC2086" in printed, printed
    assert "quoted, with an expression" not in printed.split("shellcheck:")[0]


def test_the_books_workflows_pass():
    assert tool.main([]) == 0
