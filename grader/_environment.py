"""Every environment variable the course reads, with its meaning: the one place to look them up.

Modules import the names from here instead of spelling the strings; the release's
``nbgrader_config.py`` (shipped to students, who may not have this package) spells its two itself.
"""

# --- Set by a person ----------------------------------------------------------------------------
SIZE = "COURSE_SIZE"
"""Chapter sizes: ``full`` (default on CUDA), ``small`` (default on CPU) or ``ci`` (tiny shapes)."""
LONG = "COURSE_LONG"
"""``1``: the chapters also run their long demonstrations, which are opt-in (each cell with one
shows its recorded figures otherwise; ``grader/course/chapters/recorded.json``)."""
RECORD = "COURSE_RECORD"
"""A JSON file the chapters append their measured figures to (``make gpu-check``, the tests)."""
ROOT = "COURSE_ROOT"
"""The nbgrader course folder, where it is not found above the notebook (self-check)."""
PIP_SOURCE = "COURSE_PIP_SOURCE"
"""Where a notebook's setup cell pip-installs the course from (default: the course's git URL);
also makes the cell install outside Colab (the Colab runtime tests)."""
EXCHANGE = "COURSE_EXCHANGE"
"""nbgrader's exchange folder on a JupyterHub (read by both nbgrader configs; docs/jupyterhub.md)."""
HUB_MULTI_COURSE = "COURSE_HUB_MULTI_COURSE"
"""``1``: several courses on one hub (read by the release's nbgrader config; docs/jupyterhub.md)."""
SANDBOX_UID_BASE = "COURSE_SANDBOX_UID_BASE"
"""The first of the user ids given to sandboxed learner processes when grading as root."""
LANDLOCK_ABI = "COURSE_LANDLOCK_ABI"
"""The highest Landlock ABI the grader uses (default: the kernel's): confine as an older kernel
would (the suite tests 1, 3, 4, 5, 6 and 7 on one machine); 0: as if the kernel had no Landlock."""
CGROUPS = "COURSE_CGROUPS"
"""``off``: give learner code no cgroup of its own even where one can be made (the suite tests
the limits that hold without one); a folder: make them there (a delegated cgroup v2 folder an
administrator prepared); default: found by trying."""
JUDGE_CACHE = "COURSE_JUDGE_CACHE"
"""A folder for the judges' compiler cache of every course folder this user grades, instead of each
course's own ``.grader-cache/`` (the test suite sets it: it grades many copies of the same sets);
used only where it is the grading user's own folder."""

# --- Set by the grader for its own child processes ----------------------------------------------
# Child processes take these from the environment, not as options on their command line: a
# process's environment is readable only by its own user, its command line (/proc/PID/cmdline) by
# every user, learner code without a sandbox included.
SANDBOX_READ_ONLY = "COURSE_SANDBOX_READ_ONLY"
"""Extra folders a sandboxed process may read (``os.pathsep``-separated)."""
SANDBOX_TOKEN = "COURSE_SANDBOX_TOKEN"
"""A per-run token in every learner process's environment, by which leftovers are found and
killed where there is no sandbox."""
AUTOGRADER_DEADLINE_S = "COURSE_AUTOGRADER_DEADLINE_S"
"""Gradescope: seconds after which run_autograder stops itself and writes results.json."""

# --- Tests only -----------------------------------------------------------------------------------
UNSCREENED_FOR_TESTS = "COURSE_UNSCREENED_FOR_TESTS"
"""Students whose code skips the static screen (the attack tests run attacker code unscreened)."""

ALL = {name: value for name, value in dict(globals()).items() if name.isupper()}
"""Every variable above, by its name here."""
