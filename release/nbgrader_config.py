"""nbgrader configuration for students (a JupyterHub with an nbgrader exchange).

Install it where the students' Jupyter reads configuration, e.g. in the student image as
/etc/jupyter/nbgrader_config.py (docs/jupyterhub.md). It is not the instructor's configuration
(that is nbgrader_config.py at the root of the course's private repository).
"""
c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.course_id = "torch-compile"
# A problem set's test cell compiles the learner's model and times it against the baseline in a
# fresh process: a minute or more on a CPU. nbgrader's Validate button runs every cell with its
# own default of 30 s per cell, which would stop these cells half-way; give each cell 10 minutes.
c.Execute.timeout = 600
c.ExecutePreprocessor.timeout = 600
