"""nbgrader configuration: the repository root is the course directory."""
c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.course_id = "torch-compile"
# Compiling is slow on a first call: give each cell far more than nbgrader's 30 s default.
c.ExecutePreprocessor.timeout = 600
# Student versions keep the problem's own setup cells; solutions and hidden tests are stripped.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
