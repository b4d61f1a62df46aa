"""`make grade` writes reports/canvas.csv, the gradebook as Canvas's gradebook import takes it.

A course gets a Canvas "Download Submissions" zip (collected by `nbgrader zip_collect`, as `make
grade` does) and grades written straight into its gradebook (no grading here); the CSV is then
read back the way Canvas documents its import: the first row names the columns (Student, ID,
SIS User ID, SIS Login ID, Section, then assignments), the row whose Student reads "Points
Possible" gives each assignment's points, and each other row is a student found by ID.
"""
import csv
import os
import shutil
import warnings
import zipfile

import pytest

from grader.cohort import assign
from grader.cohort.export import IDENTITY_COLUMNS, canvas_name_slug, read_roster, write_canvas_csv
from grader.cohort.grade import Run, export_canvas, find_submissions
from grader.cohort.settings import GradeSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSIGNMENT = "ps2"
CELLS = {"ps2-q1-correctness": 3, "ps2-q1-fusion": 4, "ps2-q1-speed": 3}


def canvas_import(path: str) -> tuple[list[str], dict[str, float], dict[str, dict]]:
    """Read a gradebook CSV as Canvas's import does: (assignment columns, their points
    possible, {Canvas ID: row}). Fails where Canvas would refuse the file."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    assert header[:len(IDENTITY_COLUMNS)] == list(IDENTITY_COLUMNS), header
    assignments = header[len(IDENTITY_COLUMNS):]
    points, students = {}, {}
    for row in rows[1:]:
        assert len(row) == len(header), row
        record = dict(zip(header, row))
        if "Points Possible" in record["Student"]:
            points = {a: float(record[a]) for a in assignments}
            continue
        key = record["ID"] or record["SIS User ID"] or record["SIS Login ID"] or record["Student"]
        assert key not in students, f"two rows for {key}"
        for a in assignments:   # a score is a number or empty (empty: left as it is)
            if record[a]:
                float(record[a])
        students[key] = record
    return assignments, points, students


def _course(tmp_path) -> str:
    """A course with ps2, a Canvas download of three students collected into submitted/, and
    grades in its gradebook: Jane 8.5; John 3, late, with a 1 point penalty; Ann (who keyed by
    user id 34567) 10; a registered student who submitted nothing."""
    from nbgrader.api import Gradebook

    folder = str(tmp_path / "course")
    os.makedirs(folder)
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), folder)
    for kind in ("source", "release"):
        shutil.copytree(os.path.join(ROOT, kind, ASSIGNMENT), os.path.join(folder, kind, ASSIGNMENT))
    archive = os.path.join(folder, "downloads", ASSIGNMENT, "archive")
    os.makedirs(archive)
    text = open(os.path.join(ROOT, "release", ASSIGNMENT, f"{ASSIGNMENT}.ipynb")).read()
    with zipfile.ZipFile(os.path.join(archive, "submissions.zip"), "w") as zf:
        zf.writestr("smithjane_12345_678901_ps2.ipynb", text)
        zf.writestr("doejohn_late_23456_789012_ps2-1.ipynb", text)
        zf.writestr("leeann_34567_890123_ps2.ipynb", text)
    run = Run(course=folder, assignments=[ASSIGNMENT])
    find_submissions(run)
    assert sorted(s.student for s in run.submissions) == ["doejohn", "leeann", "smithjane"]

    scores = {"smithjane": (3, 4, 1.5), "doejohn": (3, 0, 0), "leeann": (3, 4, 3)}
    assign.new_gradebook(folder)   # as make grade starts one (nbgrader's own way costs 2.6 s)
    with Gradebook("sqlite:///" + os.path.join(folder, "gradebook.db")) as gb, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")   # nbgrader's add_submission warns (SQLAlchemy autoflush)
        gb.update_or_create_assignment(ASSIGNMENT)
        gb.add_notebook(ASSIGNMENT, ASSIGNMENT)
        for name, points in CELLS.items():
            gb.add_grade_cell(name, ASSIGNMENT, ASSIGNMENT, max_score=points, cell_type="code")
        for student in [*scores, "nobody"]:
            gb.update_or_create_student(student)
        for student, values in scores.items():
            sub = gb.add_submission(ASSIGNMENT, student)
            for grade in sub.notebooks[0].grades:
                grade.auto_score = values[list(CELLS).index(grade.name)]
            if student == "doejohn":
                sub.notebooks[0].late_submission_penalty = 1.0
        gb.db.commit()
    return folder


def _roster(tmp_path) -> str:
    """Canvas's gradebook export: Jane and John by user id, Ann under her name only."""
    path = str(tmp_path / "canvas-export.csv")
    with open(path, "w", newline="", encoding="utf-8-sig") as fh:   # as Excel saves it
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps2 (987)",
                    "Current Score"])
        w.writerow(["    Points Possible", "", "", "", "", "10", "(read only)"])
        w.writerow(["Smith, Jane", "12345", "S001", "jsmith", "Section A", "", ""])
        w.writerow(["Doe, John", "23456", "S002", "jdoe", "Section B", "", ""])
        w.writerow(["Lee, Ann", "34567", "S003", "alee", "Section A", "", ""])
        w.writerow(["Nobody, Who", "45678", "S004", "wnobody", "Section B", "", ""])
        w.writerow(["Park, Kim", "56789", "S005", "kpark", "Section B", "", ""])
    return path


def test_canvas_csv_reads_back_as_canvas_imports_it(tmp_path):
    folder = _course(tmp_path)
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), roster=_roster(tmp_path))
    assignments, points, students = canvas_import(export.path)

    assert assignments == ["ps2 (987)"]          # the roster's column: updates assignment 987
    assert points == {"ps2 (987)": 10.0}
    jane, john, ann = students["12345"], students["23456"], students["34567"]
    assert (jane["Student"], jane["SIS User ID"], jane["SIS Login ID"], jane["Section"]) == \
        ("Smith, Jane", "S001", "jsmith", "Section A")
    assert float(jane["ps2 (987)"]) == 8.5
    assert float(john["ps2 (987)"]) == 2.0       # 3 points less nbgrader's late penalty
    assert float(ann["ps2 (987)"]) == 10.0 and ann["Section"] == "Section A"
    # The registered student who submitted nothing: no Canvas id anywhere, an empty cell.
    assert students["nobody"]["ps2 (987)"] == "" and export.unmatched == ["nobody"]
    assert any("nobody" in w and "no Canvas user id" in w for w in export.warnings)


def test_without_a_roster_students_are_found_by_the_user_id_in_their_file_names(tmp_path):
    folder = _course(tmp_path)
    run = Run(course=folder, assignments=[ASSIGNMENT], report_dir=os.path.join(folder, "reports"))
    export_canvas(run)                           # the step `make grade` runs
    assert run.canvas_path == os.path.join(folder, "reports", "canvas.csv")
    assignments, points, students = canvas_import(run.canvas_path)
    assert assignments == [ASSIGNMENT] and points == {ASSIGNMENT: 10.0}
    assert {k: (v["Student"], float(v[ASSIGNMENT])) for k, v in students.items() if k != "nobody"} \
        == {"12345": ("smithjane", 8.5), "23456": ("doejohn", 2.0), "34567": ("leeann", 10.0)}


def test_the_roster_places_a_student_by_name_when_no_download_names_them(tmp_path):
    folder = _course(tmp_path)
    shutil.rmtree(os.path.join(folder, "downloads"))   # e.g. collected by hand into submitted/
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), roster=_roster(tmp_path))
    _, _, students = canvas_import(export.path)
    assert float(students["34567"]["ps2 (987)"]) == 10.0    # leeann = "Lee, Ann"
    assert students["34567"]["Student"] == "Lee, Ann"
    assert canvas_name_slug("O'Brien-Smith, Mary Ann") == "obriensmithmaryann"


def test_the_roster_places_a_hub_user_by_their_sis_login(tmp_path):
    """On a JupyterHub (nbgrader collect), STUDENT is the hub user name: often the SIS login."""
    folder = _course(tmp_path)
    shutil.rmtree(os.path.join(folder, "downloads"))
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + os.path.join(folder, "gradebook.db")) as gb, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gb.update_or_create_student("kpark")
        sub = gb.add_submission(ASSIGNMENT, "kpark")
        for grade in sub.notebooks[0].grades:
            grade.auto_score = 1.0
        gb.db.commit()
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), roster=_roster(tmp_path))
    _, _, students = canvas_import(export.path)
    assert float(students["56789"]["ps2 (987)"]) == 3.0 and students["56789"]["Student"] == "Park, Kim"


def test_two_students_for_one_canvas_user_are_not_both_given_its_id(tmp_path):
    folder = _course(tmp_path)    # doejohn: user 23456 from the download's file names
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + os.path.join(folder, "gradebook.db")) as gb:
        gb.update_or_create_student("jdoe")   # the roster's SIS login of user 23456 too
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), roster=_roster(tmp_path))
    _, _, students = canvas_import(export.path)   # no two rows for one ID
    assert students["23456"]["Student"] == "Doe, John" and "jdoe" in export.unmatched
    assert any("both map to Canvas user 23456" in w for w in export.warnings)


def test_a_file_that_is_not_a_canvas_export_is_refused_as_a_roster(tmp_path):
    path = tmp_path / "grades.csv"
    path.write_text("student_id,score\nsmithjane,8\n")
    with pytest.raises(ValueError, match="not a Canvas gradebook export"):
        read_roster(str(path))


def test_make_grade_reads_canvas_roster_csv_in_the_course_folder_as_the_demo_does(tmp_path):
    from grader.cohort.demo import write_demo_roster

    folder = _course(tmp_path)
    shutil.rmtree(os.path.join(folder, "downloads"))
    write_demo_roster(folder, ["doejohn", "leeann", "smithjane"])   # SIS Login ID = folder
    run = Run(course=folder, assignments=[ASSIGNMENT], report_dir=os.path.join(folder, "reports"))
    export_canvas(run)
    _, _, students = canvas_import(run.canvas_path)
    assert {v["SIS Login ID"]: (k, v["Student"], float(v[ASSIGNMENT]))
            for k, v in students.items() if v["SIS Login ID"]} == {
        "doejohn": ("100001", "Student, Doejohn", 2.0),
        "leeann": ("100002", "Student, Leeann", 10.0),
        "smithjane": ("100003", "Student, Smithjane", 8.5)}


# ---------------------------------------------------------------------------------------------
# What Canvas's importer (lib/gradebook_importer.rb) does with blanks and assignment titles

def _roster_with_scores(tmp_path, column="ps2 (987)") -> str:
    """Canvas's export with current scores: Who Nobody (wnobody) already has 7 in Canvas."""
    path = str(tmp_path / "canvas-export-scores.csv")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column,
                    "Current Score"])
        w.writerow(["    Points Possible", "", "", "", "", "10", "(read only)"])
        w.writerow(["Smith, Jane", "12345", "S001", "jsmith", "Section A", "5", ""])
        w.writerow(["Nobody, Who", "45678", "S004", "wnobody", "Section B", "7", ""])
        w.writerow(["Park, Kim", "56789", "S005", "kpark", "Section B", "", ""])
    return path


def _add_students(folder, *names):
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + os.path.join(folder, "gradebook.db")) as gb:
        for name in names:
            gb.update_or_create_student(name)


def test_a_student_without_a_submission_keeps_their_current_canvas_score(tmp_path):
    folder = _course(tmp_path)
    _add_students(folder, "wnobody", "kpark")     # registered, nothing submitted
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"),
                              roster=_roster_with_scores(tmp_path))
    _, _, students = canvas_import(export.path)
    # Canvas has 7 for Who Nobody: the file says 7 (unchanged), never a blank over it.
    assert students["45678"]["ps2 (987)"] == "7"
    assert students["56789"]["ps2 (987)"] == ""       # blank in Canvas too: no change
    assert float(students["12345"]["ps2 (987)"]) == 8.5   # a graded submission replaces 5
    assert any("keep their current Canvas value" in w for w in export.warnings)
    # The registered student outside the roster still gets a blank, and a warning that says so.
    assert students["nobody"]["ps2 (987)"] == ""
    assert any("1 blank cell(s)" in w and "not in the roster" in w for w in export.warnings), \
        export.warnings


def test_without_a_roster_the_blank_cells_are_counted_and_explained(tmp_path):
    folder = _course(tmp_path)
    _add_students(folder, "wnobody")
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"))
    warning = next(w for w in export.warnings if "blank cell(s)" in w)
    assert warning.startswith("ps2: 2 blank cell(s)")      # nobody and wnobody
    assert "no roster" in warning and "no_change_to_value?" in warning
    assert "canvas-roster.csv" in warning


def test_an_assignment_without_a_roster_column_is_named_and_can_be_mapped(tmp_path):
    from grader.cohort.grade import Run, export_canvas

    folder = _course(tmp_path)
    roster = _roster_with_scores(tmp_path, column="PS 2 (987)")   # Canvas calls it "PS 2"
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), roster=roster)
    assert export.header[-1] == "ps2"                # would create a new assignment "ps2"
    warning = next(w for w in export.warnings if "no such assignment column" in w)
    assert "only published assignments" in warning and "canvas-assignments.csv" in warning
    # The instructor maps it, in the course folder: make grade's step and the canvas command read it.
    with open(os.path.join(folder, "canvas-assignments.csv"), "w") as fh:
        fh.write("nbgrader,canvas\nps2,PS 2\n")
    run = Run(course=folder, assignments=[ASSIGNMENT], report_dir=os.path.join(folder, "reports"),
              settings=GradeSettings(roster=roster))
    export_canvas(run)
    assignments, points, students = canvas_import(run.canvas_path)
    assert assignments == ["PS 2 (987)"] and points == {"PS 2 (987)": 10.0}
    assert float(students["12345"]["PS 2 (987)"]) == 8.5
    import subprocess
    import sys

    out = str(tmp_path / "cli.csv")
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "canvas", "--course", folder,
                           "--roster", roster, "--out", out], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no such assignment column" not in proc.stdout
    assert canvas_import(out)[0] == ["PS 2 (987)"]


def test_per_question_columns_are_read_only_for_canvas(tmp_path):
    folder = _course(tmp_path)
    export = write_canvas_csv(folder, str(tmp_path / "canvas.csv"), per_question=True)
    with open(export.path, newline="") as fh:
        rows = list(csv.reader(fh))
    header, points = rows[0], rows[1]
    questions = [f"{ASSIGNMENT}: {cell}" for cell in CELLS]
    assert sorted(header[len(IDENTITY_COLUMNS) + 1:]) == sorted(questions)
    for q in questions:                              # Canvas's import skips read-only columns
        assert points[header.index(q)] == "(read only)"
    jane = next(r for r in rows if r[1] == "12345")
    assert {q: float(jane[header.index(q)]) for q in questions} == {
        f"{ASSIGNMENT}: ps2-q1-correctness": 3.0, f"{ASSIGNMENT}: ps2-q1-fusion": 4.0,
        f"{ASSIGNMENT}: ps2-q1-speed": 1.5}
    assert float(jane[header.index(ASSIGNMENT)]) == 8.5
