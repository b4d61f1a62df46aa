"""The kinds of evidence declared beside the checks that need them
(:class:`grader.checks.results.EvidencePart`), not in the judge: each one the subject is asked
for by its name (its ``answer`` runs there, beside the learner's code), and its reply checked by
its ``validate`` here. Fills ``declared`` (part name -> the validated data)."""
from __future__ import annotations

from grader.checks.results import EvidencePart, Status
from grader.isolation.judge.subject_session import SubjectGone, SubjectSession, learner_text
from grader.problems import Problem


def parts_of(needs) -> list[EvidencePart]:
    """The declared parts among ``needs``, in the order of their names."""
    return sorted((n for n in needs if isinstance(n, EvidencePart)), key=lambda p: p.name)


def ask(subject: SubjectSession, problem: Problem, needs, ev) -> None:
    """Each declared part among ``needs``, asked of the subject and validated into
    ``ev.declared``: a learner's exception is their error, a malformed answer a rejection."""
    for part in parts_of(needs):
        reply, _ = subject.request({"op": "evidence", "problem": problem.key,
                                    "part": part.name})
        if "error" in reply:
            ev.status, ev.message = "learner_error", learner_text(reply["error"])
            return
        try:
            ev.declared[part.name] = part.validate(reply.get("data"), problem)
        except ValueError as exc:
            raise SubjectGone(Status.REJECTED, f"the process that ran your code sent a "
                                               f"malformed answer ({str(exc)[:200]})") from None
