"""Where the package and the course repository are (one definition, imported by every role)."""
import os

PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
# The repository root, which is also the nbgrader course folder (source/, release/, notebooks/).
# An installed package (Colab) has no course around it: callers check for what they need.
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
