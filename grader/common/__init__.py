"""What every role shares and that is none of them: the stopwatch of a grading job's steps
(``phases``), Markdown tables (``tables``) and values as checked data on a pipe (``wire``).
Imports nothing from the roles; every role may import it.
"""
