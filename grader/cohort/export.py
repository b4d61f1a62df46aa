"""The gradebook for an LMS: a CSV that Canvas's gradebook import takes (Grades > Import).

Canvas imports a CSV laid out like its own gradebook export: the columns ``Student``, ``ID``,
``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per assignment, and a second row
whose ``Student`` cell reads ``Points Possible`` with each assignment's points. Canvas finds each
student by ``ID`` (its own user id) first, then by the SIS ids, then by name; an assignment column
named ``ps1 (123456)`` updates Canvas's assignment 123456, a column named ``ps1`` (no such
assignment) creates one worth the points in the Points Possible row.

Which Canvas user a graded student is comes from, in this order:

1. the LMS download: Canvas names each file ``NAME_[late_]USERID_SUBMISSIONID_FILE``, and
   ``make grade``'s ``nbgrader zip_collect`` placed it in ``submitted/STUDENT/`` through
   ``c.FileNameCollectorPlugin.named_regexp``; the same regexp, run again on the files in
   ``downloads/*/``, pairs each STUDENT with the USERID of their file names;
2. a STUDENT folder that is itself a number (the regexp keyed by Canvas user id);
3. the roster (Canvas's own gradebook export, Grades > Export): the row whose ``SIS Login ID``
   or ``SIS User ID`` is the STUDENT folder (on a JupyterHub, students' user names are often
   their institution's login), else the row whose name, written as Canvas writes it in file
   names (``Smith, Jane`` -> ``smithjane``), is the STUDENT folder.

The roster, when given, also gives each student's name, SIS ids and section, and the Canvas
assignment ids of the assignment columns. Students no rule places keep an empty ``ID`` (Canvas
then matches them by name, or lists them as unknown in its import preview); the export says who.

What Canvas's importer does with the file (``lib/gradebook_importer.rb`` of canvas-lms):

- **A blank cell is a change when Canvas has a score.** ``no_change_to_value?`` counts a cell as
  unchanged only when it equals Canvas's current score, or both are blank (or ``-``); a blank over
  an existing score is listed as a change. So a blank is never written over a grade: with a
  roster (which carries Canvas's current scores), a student without a submission gets their
  current Canvas value back, unchanged; without one, the export warns how many blank cells it
  wrote and why they are dangerous.
- **Only published assignments are matched.** ``parse!`` loads ``assignments.published
  .gradeable``; ``parse_assignments`` matches a column by the id in ``Title (id)``, else by the
  exact title, else makes a new assignment. A column named ``ps2`` where Canvas calls it ``PS 2``
  (or has it unpublished) silently creates a new assignment. The export warns when an nbgrader
  assignment has no column in the roster, and ``canvas-assignments.csv`` in the course folder
  (columns ``nbgrader,canvas``: ``ps2,PS 2`` or ``ps2,PS 2 (987)``) maps names.
- **Read-only columns are skipped**: a column whose Points Possible cell reads ``read only``
  (``readonly_assignment?``) is dropped with the unchanged ones. The per-question columns
  (``per_question``: ``ps2: ps2-q1-fusion`` ...; nbgrader users ask for them, jupyter/nbgrader#938)
  are written that way, so that they never create assignments or count twice; Canvas weeds
  columns only when every student row is one it knows, so check the import's preview.

    python -m grader.cli canvas [--roster canvas-export.csv] [--assignments-map canvas-assignments.csv]
                                [--per-question] [--out reports/canvas.csv]
"""
from __future__ import annotations

import csv
import dataclasses
import os
import re
import zipfile

from grader import _files as files
from grader.cohort import assign

IDENTITY_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
# Canvas's own export writes the label with leading spaces; its import looks for the words.
POINTS_POSSIBLE = "    Points Possible"
# Canvas "Download Submissions" file names: NAME_[late_]USERID_SUBMISSIONID_ORIGINALNAME.
CANVAS_FILE_NAME = re.compile(r"^(?P<name>[^_]+)_(?:late_)?(?P<user_id>\d+)_(?P<submission_id>\d+)_")
# An assignment column of a Canvas export: "ps1 (123456)".
CANVAS_ASSIGNMENT_COLUMN = re.compile(r"^(?P<name>.*\S)\s+\((?P<id>\d+)\)$")
# nbgrader assignment -> Canvas assignment, in the course folder (columns: nbgrader,canvas).
ASSIGNMENT_MAP_FILE = files.ASSIGNMENT_MAP
# The Points Possible cell of a column Canvas's import skips (readonly_assignment?).
READ_ONLY = "(read only)"


@dataclasses.dataclass
class RosterEntry:
    """One student row of a Canvas gradebook export."""

    student: str          # "Smith, Jane"
    canvas_id: str
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    scores: dict = dataclasses.field(default_factory=dict)   # column header -> current value


@dataclasses.dataclass
class Roster:
    """A Canvas gradebook export: its students, and its assignment columns by name."""

    entries: list[RosterEntry]
    assignment_columns: dict[str, str]   # "ps1" -> "ps1 (123456)"

    def by_id(self) -> dict[str, RosterEntry]:
        return {e.canvas_id: e for e in self.entries}


@dataclasses.dataclass
class CanvasExport:
    """What :func:`write_canvas_csv` wrote, and what the instructor should know about it."""

    path: str
    header: list[str]
    rows: list[list[str]]            # the Points Possible row first, then one per student
    unmatched: list[str]             # STUDENT folders with no Canvas user id
    warnings: list[str]


def canvas_name_slug(name: str) -> str:
    """A student's name as Canvas writes it in submission file names: the sortable name
    ("Smith, Jane"), lower case, letters and digits only ("smithjane")."""
    return re.sub(r"[\W_]+", "", name.lower())


def read_roster(path: str) -> Roster:
    """Read Canvas's gradebook export (CSV): the student rows (those with an ``ID``) and the
    assignment columns (``NAME (ASSIGNMENT_ID)``). Raises ``ValueError`` when it has no
    ``Student`` and ``ID`` columns."""
    with open(path, newline="", encoding="utf-8-sig") as fh:   # Excel adds a byte-order mark
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in reader.fieldnames or []]
        if "Student" not in fields or "ID" not in fields:
            raise ValueError(f"{path}: not a Canvas gradebook export (no Student and ID columns; "
                             f"Canvas: Grades > Export > Export Entire Gradebook)")
        columns = {}
        for field in fields:
            m = CANVAS_ASSIGNMENT_COLUMN.match(field)
            if m and field not in IDENTITY_COLUMNS:
                columns[m.group("name")] = field
        entries = []
        for row in reader:
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            if not row.get("ID") or "Points Possible" in row.get("Student", ""):
                continue
            entries.append(RosterEntry(row.get("Student", ""), row["ID"], row.get("SIS User ID", ""),
                                       row.get("SIS Login ID", ""), row.get("Section", ""),
                                       {h: row.get(h, "") for h in columns.values()}))
    return Roster(entries, columns)


def read_assignment_map(path: str) -> dict[str, str]:
    """``{nbgrader assignment: Canvas assignment}`` from a CSV with the columns ``nbgrader`` and
    ``canvas`` (a title, ``PS 2``, or a column of Canvas's export, ``PS 2 (987)``). Raises
    ``ValueError`` for another layout."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip().lower() for f in reader.fieldnames or []]
        if "nbgrader" not in fields or "canvas" not in fields:
            raise ValueError(f"{path}: needs the columns nbgrader,canvas (e.g. a line ps2,PS 2)")
        out = {}
        for row in reader:
            row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
            if row.get("nbgrader") and row.get("canvas"):
                out[row["nbgrader"]] = row["canvas"]
    return out


def _canvas_column(name: str, roster: Roster | None, mapping: dict[str, str]) -> tuple[str, bool]:
    """The column header for nbgrader assignment ``name``, and whether the roster has it (True
    without a roster: nothing to check against)."""
    target = mapping.get(name, name)
    if roster is None:
        return target, True
    columns = roster.assignment_columns
    if target in columns.values():                 # "PS 2 (987)" as the export writes it
        return target, True
    if target in columns:                          # "PS 2": the export's column of that title
        return columns[target], True
    return target, False


def _missing_columns_warning(missing: list[str], mapping: dict[str, str]) -> str:
    named = ", ".join(f"{n} (mapped to {mapping[n]!r})" if n in mapping else n for n in missing)
    titles = ", ".join(repr(mapping.get(n, n)) for n in missing)
    return (f"{named}: no such assignment column in the roster. Canvas's import matches only "
            f"published assignments, by the id in 'Title (id)' or by the exact title, and "
            f"otherwise creates a new assignment ({titles}). Publish the assignment in Canvas and "
            f"export the roster again, or map the nbgrader name to its Canvas title in "
            f"{ASSIGNMENT_MAP_FILE} (columns nbgrader,canvas)")


def _named_regexp(course: str) -> str | None:
    """``c.FileNameCollectorPlugin.named_regexp`` of the course's nbgrader_config.py."""
    value = assign.course_config(course).get("FileNameCollectorPlugin", {}).get("named_regexp")
    return value if isinstance(value, str) and value else None


def _download_paths(course: str) -> list[str]:
    """Every file name of the LMS downloads: loose files and extracted ones, and the members of
    the zip files in ``downloads/ASSIGNMENT/archive/`` (as they will be extracted)."""
    paths = []
    root = os.path.join(course, files.DOWNLOADS)
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if name.lower().endswith(".zip") and zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as zf:
                    paths += [os.path.join(folder, os.path.splitext(name)[0], member)
                              for member in zf.namelist() if not member.endswith("/")]
            else:
                paths.append(path)
    return sorted(paths)


def user_ids_from_downloads(course: str) -> tuple[dict[str, str], list[str]]:
    """``{STUDENT folder: Canvas user id}`` from the file names of the LMS downloads, and the
    conflicts found (a STUDENT whose files carry two user ids: two students with one name)."""
    regexp = _named_regexp(course)
    if regexp is None:
        return {}, []
    found: dict[str, set[str]] = {}
    for path in _download_paths(course):
        m = re.match(regexp, path)
        canvas = CANVAS_FILE_NAME.match(os.path.basename(path))
        if m and canvas and m.groupdict().get("student_id"):
            found.setdefault(m.group("student_id"), set()).add(canvas.group("user_id"))
    ids = {student: next(iter(users)) for student, users in found.items() if len(users) == 1}
    conflicts = [f"{student}: the downloads carry Canvas user ids {', '.join(sorted(users))} "
                 f"(two students with one name? key students by user id: see nbgrader_config.py)"
                 for student, users in sorted(found.items()) if len(users) > 1]
    return ids, conflicts


def _number(value: float) -> str:
    return f"{round(float(value), 2):g}"


def canvas_export(course: str, roster: Roster | None = None,
                  assignments: list[str] | None = None,
                  assignment_map: dict[str, str] | None = None,
                  per_question: bool = False) -> CanvasExport:
    """The Canvas gradebook of ``course``'s gradebook.db (not written; see
    :func:`write_canvas_csv`): one row per student, one column per assignment (default: every
    assignment in the gradebook), named as the roster names it (``assignment_map``: nbgrader name
    -> Canvas title or column). A score is the submission's total (automatic and manual points)
    less nbgrader's late penalty. A student without a submission gets their current value in the
    roster (Canvas's import sees no change), else an empty cell, which Canvas's import takes as
    a change when it has a score (the warnings say so). ``per_question``: after each assignment,
    a read-only column per graded cell (``ASSIGNMENT: GRADE_ID``)."""
    from nbgrader.api import Gradebook, MissingEntry

    ids, warnings = user_ids_from_downloads(course)
    mapping = dict(assignment_map or {})
    by_id = roster.by_id() if roster else {}
    by_slug: dict[str, list[RosterEntry]] = {}
    by_sis: dict[str, list[RosterEntry]] = {}
    for entry in roster.entries if roster else []:
        by_slug.setdefault(canvas_name_slug(entry.student), []).append(entry)
        for sis in {entry.sis_login_id.lower(), entry.sis_user_id.lower()} - {""}:
            by_sis.setdefault(sis, []).append(entry)
    with Gradebook(files.db_url(course)) as gb:
        names = assignments or sorted(a.name for a in gb.assignments)
        maxima = {name: gb.find_assignment(name).max_score for name in names}
        column_of, missing = {}, []
        for n in names:
            column_of[n], found = _canvas_column(n, roster, mapping)
            if not found:
                missing.append(n)
        if missing:
            warnings.append(_missing_columns_warning(missing, mapping))
        questions = {n: ([(nb.name, cell.name, cell.max_score)
                          for nb in gb.find_assignment(n).notebooks for cell in nb.grade_cells]
                         if per_question else []) for n in names}
        header = list(IDENTITY_COLUMNS)
        points_row = [POINTS_POSSIBLE, "", "", "", ""]
        for n in names:
            header.append(column_of[n])
            points_row.append(_number(maxima[n]))
            for _, cell, _ in questions[n]:
                header.append(f"{n}: {cell}")
                points_row.append(READ_ONLY)
        rows = [points_row]
        unmatched, pending, taken = [], {}, {}
        kept, blanks = 0, {}
        for student in sorted(gb.students, key=lambda s: s.id):
            canvas_id = ids.get(student.id) or (student.id if student.id.isdigit() else "")
            for index in (by_sis, by_slug):   # a unique roster row for this folder name
                if not canvas_id and len(index.get(student.id.lower(), [])) == 1:
                    canvas_id = index[student.id.lower()][0].canvas_id
            if canvas_id and canvas_id in taken:   # one Canvas user, two gradebook students
                warnings.append(f"{student.id} and {taken[canvas_id]} both map to Canvas user "
                                f"{canvas_id}: {student.id} is left without an ID (check which is "
                                f"theirs)")
                canvas_id = ""
            elif canvas_id:
                taken[canvas_id] = student.id
            entry = by_id.get(canvas_id)
            if not canvas_id:
                unmatched.append(student.id)
            if entry:
                name = entry.student
            elif student.last_name or student.first_name:
                name = ", ".join(p for p in (student.last_name, student.first_name) if p)
            else:
                name = student.id
            row = [name, canvas_id, entry.sis_user_id if entry else "",
                   entry.sis_login_id if entry else "", entry.section if entry else ""]
            for n in names:
                try:
                    sub = gb.find_submission(n, student.id)
                except MissingEntry:
                    # Never a blank over a grade: what Canvas has now, from its own export.
                    current = entry.scores.get(column_of[n], "") if entry else ""
                    row.append(current)
                    if current:
                        kept += 1
                    elif not (roster and entry):
                        blanks[n] = blanks.get(n, 0) + 1
                    row += [""] * len(questions[n])
                    continue
                row.append(_number(max(0.0, sub.score - (sub.late_submission_penalty or 0.0))))
                if sub.needs_manual_grade:
                    pending[n] = pending.get(n, 0) + 1
                if questions[n]:
                    scores = {(nb.name, g.name): g.score for nb in sub.notebooks for g in nb.grades}
                    row += [_number(scores.get((nb, cell)) or 0.0) for nb, cell, _ in questions[n]]
            rows.append(row)
    if roster and not by_id:
        warnings.append("the roster has no student rows (is it Canvas's gradebook export?)")
    if kept:
        warnings.append(f"{kept} cell(s) of students without a submission keep their current "
                        f"Canvas value from the roster (a blank would clear it on import)")
    for n, count in sorted(blanks.items()):
        why = ("they are not in the roster" if roster else
               "there is no roster (Canvas's gradebook export) to take their current Canvas "
               "value from")
        warnings.append(f"{n}: {count} blank cell(s) for students without a submission, because "
                        f"{why}. Canvas's import takes a blank over a score it already has as a "
                        f"change (lib/gradebook_importer.rb, no_change_to_value?): check the "
                        f"import's preview, or put Canvas's export in the course folder as "
                        f"canvas-roster.csv (make grade ROSTER=FILE) so that they keep their "
                        f"Canvas value")
    if per_question:
        warnings.append("per-question columns are marked read only in the Points Possible row: "
                        "Canvas's import skips them (when every student row is one it knows: "
                        "check the preview)")
    for n, count in sorted(pending.items()):
        warnings.append(f"{n}: {count} submission(s) still need manual grading (Formgrader): "
                        f"their scores leave out what is not graded yet")
    if unmatched:
        warnings.append(f"{len(unmatched)} student(s) have no Canvas user id (not from a Canvas "
                        f"download{', not in the roster' if roster else ''}): "
                        f"{', '.join(unmatched[:8])}{' ...' if len(unmatched) > 8 else ''}; "
                        f"Canvas's import matches them by name or lists them as unknown")
    return CanvasExport("", header, rows, unmatched, warnings)


def write_canvas_csv(course: str, path: str, roster: str | Roster | None = None,
                     assignments: list[str] | None = None,
                     assignment_map: str | dict[str, str] | None = None,
                     per_question: bool = False) -> CanvasExport:
    """Write :func:`canvas_export` of ``course`` to ``path`` (UTF-8 CSV, as Canvas imports it).
    ``roster``: Canvas's gradebook export (a path, or :func:`read_roster`'s result).
    ``assignment_map``: nbgrader name -> Canvas assignment (a dict, or a CSV path; default:
    ``canvas-assignments.csv`` in the course folder, when there is one)."""
    if isinstance(roster, str):
        roster = read_roster(roster)
    if assignment_map is None:
        default = os.path.join(course, ASSIGNMENT_MAP_FILE)
        assignment_map = default if os.path.exists(default) else {}
    if isinstance(assignment_map, str):
        assignment_map = read_assignment_map(assignment_map)
    export = canvas_export(course, roster, assignments, assignment_map, per_question)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(export.header)
        writer.writerows(export.rows)
    export.path = path
    return export
