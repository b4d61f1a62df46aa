"""Entry points run from the command line (``python -m grader.cli VERB``), never imported by
the package: ``bench`` (grader and workload figures, self-check floors), ``bench_grade`` (seconds
per submission) and ``gpu_check_chapters`` (every chapter on CUDA).
"""
