"""nbgrader configuration for students (a JupyterHub with an nbgrader exchange).

Install it where the students' Jupyter reads configuration, e.g. in the student image as
/etc/jupyter/nbgrader_config.py (docs/jupyterhub.md). It is not the instructor's configuration
(that is nbgrader_config.py at the root of the course's private repository).

Two settings come from the server's environment (the hub's c.Spawner.environment):
COURSE_EXCHANGE, the exchange folder (nbgrader's own default, /usr/local/share/nbgrader/exchange,
when unset), and COURSE_HUB_MULTI_COURSE=1 on a hub that serves several nbgrader courses
(docs/jupyterhub.md, "Several courses on one hub").
"""
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

# The exchange: the same folder as the instructor's (nbgrader_config.py at the course's root reads
# the same variable). nbgrader's exchange "MUST be preexisting" (nbgrader/exchange/default/exchange.py).
c.Exchange.root = os.environ.get("COURSE_EXCHANGE") or "/usr/local/share/nbgrader/exchange"

if os.environ.get("COURSE_HUB_MULTI_COURSE") == "1":
    # nbgrader's setup for several courses on one hub (its docs: "Using nbgrader with
    # JupyterHub", Multiple Classes; FAQ "Can I use the Assignment List extension with multiple
    # classes?"): no course id here (each grader account names its own), assignments under
    # ./COURSE/psN, and the courses a student sees are their hub groups nbgrader-COURSE.
    from nbgrader.auth import JupyterHubAuthPlugin

    c.Exchange.path_includes_course = True
    c.Authenticator.plugin_class = JupyterHubAuthPlugin
else:
    c.CourseDirectory.course_id = "torch-compile"

# A problem set's test cell compiles the learner's model and times it against the baseline in a
# fresh process: a minute or more on a CPU. nbgrader's Validate button runs every cell with its
# own default of 30 s per cell, which would stop these cells half-way; give each cell 10 minutes.
c.Execute.timeout = 600
c.ExecutePreprocessor.timeout = 600
