"""nbgrader configuration: the repository root is the course directory."""
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.course_id = "torch-compile"
# The exchange folder of `nbgrader release_assignment` / `collect` on a JupyterHub
# (docs/jupyterhub.md): COURSE_EXCHANGE when set, else nbgrader's own default. Set the same value
# for the students (release/nbgrader_config.py reads the same variable). nbgrader reads this file
# (from the current folder) after /etc/jupyter/nbgrader_config.py, so this line wins over a
# c.Exchange.root set there: set COURSE_EXCHANGE in the server's environment instead.
c.Exchange.root = os.environ.get("COURSE_EXCHANGE") or "/usr/local/share/nbgrader/exchange"
# --- Formgrader's autograde (`make lab`) and Validate: nbgrader's own, running the notebook ----
# `make grade` runs no notebook: nbgrader's autograde there shows and records the judge's verdicts
# in the submission as submitted, with its own steps (grader/cohort/judged_autograde.py; every
# other setting of this file applies). Here a test cell compiles the learner's model and times it
# against the baseline in fresh processes, a minute or more on a CPU: give each cell far more than
# nbgrader's 30 s default (the same as the students' release/nbgrader_config.py).
c.Execute.timeout = 600
c.ExecutePreprocessor.timeout = 600
# Student versions keep the problem's own setup cells; solutions and hidden tests are stripped.
# A set's source/psN/demo_cohort.py (the demo personas' near-answers, grader/cohort/demo.py) stays
# with the instructor: nbgrader copies no file of this list into release/ or autograded/.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "demo_cohort.py"]
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# --- LMS downloads: `make grade` runs `nbgrader zip_collect ASSIGNMENT --force` -----------------
# Put the LMS's bulk download (zip files, or the loose files) in downloads/ASSIGNMENT/archive/;
# nbgrader extracts them to downloads/ASSIGNMENT/extracted/ and copies each notebook to
# submitted/STUDENT/ASSIGNMENT/. (nbgrader's own default for the top folder is "downloaded".)
c.ZipCollectApp.downloaded_directory = "downloads"
# Whose file it is comes from the file's name, through this regular expression (read by
# FileNameCollectorPlugin, zip_collect's default collector). nbgrader matches it against the
# whole path, hence the leading `.*[\\/]`. It must define the groups `student_id` (the folder
# under submitted/) and `file_id` (the notebook's name; nbgrader puts the file's own extension
# back, so `ps1` and `ps1.ipynb` both give ps1.ipynb).
#
# Canvas ("Download Submissions") names each file STUDENTNAME_USERID_SUBMISSIONID_ORIGINALNAME,
# with `late_` after the name for a late submission, and `-1`, `-2`... appended to a file name
# the student submitted again:
#     smithjane_12345_678901_ps1.ipynb        -> submitted/smithjane/ps1/ps1.ipynb
#     smithjane_late_12345_678901_ps1-1.ipynb -> submitted/smithjane/ps1/ps1.ipynb
# (so a notebook whose own name ends in -DIGITS would lose them: drop `(?:-\d+)?` then).
# Two students with the same name would share a folder; zip_collect stops on the duplicate. To
# key students by Canvas user id instead (a number, unique), use
#     r".*[\\/][^_\\/]+_(?:late_)?(?P<student_id>\d+)_\d+_(?P<file_id>[^\\/]+?)(?:-\d+)?\.[^.\\/]+$"
# Another LMS: write one expression for the paths in its download, with the same two groups
# (a folder per student, STUDENT/ps1.ipynb, is r".*[\\/](?P<student_id>[^\\/]+)[\\/](?P<file_id>[^\\/]+)$"),
# then try it on a real download: `nbgrader zip_collect ASSIGNMENT --force --debug` logs what
# each file matched, and `make grade` stops, listing them, when a notebook matched nothing.
c.FileNameCollectorPlugin.named_regexp = (
    r".*[\\/]"                                    # the folders the download was extracted into
    r"(?P<student_id>[^_\\/]+)_"                  # the student's name, as Canvas writes it
    r"(?:late_)?\d+_\d+_"                         # [late_] user id _ submission id _
    r"(?P<file_id>[^\\/]+?)(?:-\d+)?\.[^.\\/]+$"  # original file name, less a resubmission's -N
)
