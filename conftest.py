"""The test run's start: before the first test runs, say which groups will skip and why.

pytest prints a skip's reason only in the summary at the end (``-ra``), so a run without the
real Triton shows about 330 compat tests as ``s`` for half an hour before saying why. After
collection this lists, once, what is already known to skip:

- tests whose ``skip``/``skipif`` marks say so (evaluated as pytest will evaluate them),
- test modules skipped while being collected (a module-level ``pytest.importorskip``),
- the tests that use a fixture a conftest declares, through the ``pytest_naiad_skip_reasons``
  hook, will skip at run time (the compat suite's Triton peer says so up front).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

import pytest
from _pytest.skipping import evaluate_skip_marks

# The most folders named in one line of the list; the rest are counted.
MAX_FOLDERS_SHOWN = 3


class SkipReasonSpecs:
    """The hook a conftest implements to name, before the run, a group that will skip."""

    @pytest.hookspec
    def pytest_naiad_skip_reasons(self, config: pytest.Config) -> list[tuple[str, str]]:
        """Groups that will skip in this environment although no mark says so (a fixture
        skips them at run time): ``(fixture name, reason)`` pairs, every collected test that
        uses the fixture (directly or through another) being in the group; an empty list when
        they will run. Every implementation's pairs are used. Mark the implementation
        ``@pytest.hookimpl(optionalhook=True)``."""
        raise NotImplementedError


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(SkipReasonSpecs)


# (module node id, reason) of the modules skipped while collected, this run.
_skipped_modules: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    _skipped_modules.clear()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Remember each module skipped while collected, with its reason."""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        _skipped_modules.append((report.nodeid, reason))


def _folders(node_ids: list[str]) -> str:
    folders = sorted({os.path.dirname(node_id.split("::", 1)[0]) or "."
                      for node_id in node_ids})
    shown = ", ".join(folders[:MAX_FOLDERS_SHOWN])
    more = len(folders) - MAX_FOLDERS_SHOWN
    return f"{shown} and {more} more folders" if more > 0 else shown


def known_skips(session: pytest.Session) -> dict[str, list[str]]:
    """Reason -> the node ids of the collected tests (or skipped modules) it skips."""
    groups: dict[str, list[str]] = defaultdict(list)
    marked: set[str] = set()
    for item in session.items:
        skip = evaluate_skip_marks(item)
        if skip is not None:
            groups[skip.reason].append(item.nodeid)
            marked.add(item.nodeid)
    declared = session.config.hook.pytest_naiad_skip_reasons(config=session.config)
    for fixture, reason in (pair for pairs in declared for pair in pairs):
        groups[reason] += [item.nodeid for item in session.items
                           if fixture in getattr(item, "fixturenames", ())
                           and item.nodeid not in marked]
    for node_id, reason in _skipped_modules:
        groups[reason].append(node_id)
    return {reason: ids for reason, ids in groups.items() if ids}


def known_skip_lines(groups: dict[str, list[str]]) -> list[str]:
    """One line per group, largest first: how many tests (or whole modules), where, why."""
    lines = []
    for reason, ids in sorted(groups.items(), key=lambda group: -len(group[1])):
        modules = sum("::" not in node_id for node_id in ids)
        counts = [f"{n} {what}{'s' if n > 1 else ''}"
                  for n, what in ((len(ids) - modules, "test"), (modules, "whole module")) if n]
        lines.append(f"{', '.join(counts)} in {_folders(ids)}: {reason}")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Print the known skips, largest group first, before the first test runs.

    Under pytest-xdist the controller collects nothing and a worker's terminal output is not
    shown: the first worker (gw0, which collects every test) writes the block to the run's
    standard error instead, which the workers share with the controller."""
    groups = known_skips(session)
    if not groups:
        return
    title = "known before the run: these skip"
    worker = getattr(session.config, "workerinput", None)
    if worker is not None:
        if worker.get("workerid") == "gw0":
            block = "\n".join([f"--- {title} ---", *known_skip_lines(groups)])
            sys.__stderr__.write(f"\n{block}\n")
            sys.__stderr__.flush()
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    reporter.write_sep("-", title)
    for line in known_skip_lines(groups):
        reporter.write_line(line)
