"""The README is read in two minutes (under 150 lines: what the course is, the two commands, the
chapters and sets, a short section per user) and points to docs/ for the rest: every relative
link of the README and of docs/ leads to a file there, and an anchor to a heading of it."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_short_and_has_a_section_for_each_user():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(text.splitlines()) < 150
    headings = re.findall(r"^## (.+)$", text, re.M)
    for wanted in ("Two commands", "The chapters", "The problem sets", "Students (JupyterLab)",
                   "Self-study on Google Colab", "Instructors"):
        assert wanted in headings, headings


def test_every_relative_link_leads_somewhere():
    pages = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md"))
    for page in pages:
        text = open(page, encoding="utf-8").read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue   # a web address
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            assert os.path.exists(full), f"{os.path.relpath(page, ROOT)}: {target}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", open(full, encoding="utf-8").read(), re.M)
                assert anchor in {_slug(h) for h in headings}, f"{os.path.relpath(page, ROOT)}: {target}"
