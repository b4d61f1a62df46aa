"""Where the package and the course repository are, and which grader code this is (one definition
of each, imported by every role)."""
import hashlib
import os

PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
# The repository root, which is also the nbgrader course folder (source/, release/, notebooks/).
# An installed package (Colab) has no course around it: callers check for what they need.
REPO_ROOT = os.path.dirname(PACKAGE_DIR)


def grader_fingerprint() -> str:
    """A hash of the grader package's source files (``.py`` and ``.json``): the same wherever the
    same commit runs. Ray compares it across nodes; self-check's saved figures are kept per
    fingerprint."""
    digest = hashlib.sha256()
    for root, dirs, names in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".json")):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, PACKAGE_DIR).encode() + b"\0")
                with open(path, "rb") as fh:
                    digest.update(fh.read())
    return digest.hexdigest()[:16]
