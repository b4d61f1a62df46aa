"""nbgrader's Execute step, made to survive a kernel that dies.

nbgrader stops grading a notebook when the kernel dies (``os._exit``, a segfault, the memory
limit): every test cell would be lost. :class:`RobustExecute` records the death as an error on
the cell that caused it (so that cell, and any test that needed it, scores zero with the reason
in the feedback), starts a new kernel, replays the earlier non-test cells that ran cleanly to
restore the learner's other definitions, and goes on: the other questions are still graded.

Declared in the course's ``nbgrader_config.py`` (so Formgrader and ``make grade`` run notebooks
the same way)::

    c.Autograde.autograde_preprocessors = [RobustExecute, IgnorePattern, ...]
"""
from __future__ import annotations

from nbclient.exceptions import DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from nbclient import NotebookClient

from grader.isolation.source import is_autograded_test_cell

DIED = ("the kernel died while running this cell (the code exited the process, crashed, or "
        "ran out of memory); cells after it ran in a fresh kernel")


def _errored(cell) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


class RobustExecute(Execute):
    """Execute every cell; on a dead kernel, record why, restart, replay, continue.

    During ``make grade`` (``COURSE_KERNEL_SANDBOX`` set) the kernel is started in the sandbox
    (:class:`grader.cohort.kernel.SandboxedKernelManager`)."""

    def __init__(self, *args, **kwargs):
        from grader.cohort.kernel import SandboxedKernelManager, configured

        if configured():
            kwargs["kernel_manager_class"] = SandboxedKernelManager
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        index, cells = 0, self.nb.cells
        replay: list[int] = []
        while index < len(cells):
            with self.setup_kernel():
                info = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info["content"]["language_info"]
                try:
                    for number in replay:  # restore the learner's definitions, quietly
                        self.execute_cell(cells[number].copy(), number, store_history=False)
                    while index < len(cells):
                        cell = cells[index]
                        self.preprocess_cell(cell, resources, index)
                        if cell.get("cell_type") == "code" and not is_autograded_test_cell(cell) \
                                and not _errored(cell):
                            replay.append(index)
                        index += 1
                except DeadKernelError:
                    cells[index].setdefault("outputs", []).append(NotebookNode(
                        output_type="error", ename="KernelDied", evalue=DIED,
                        traceback=[f"KernelDied: {DIED}"]))
                    index += 1
        self.set_widgets_metadata()
        return self.nb, self.resources
