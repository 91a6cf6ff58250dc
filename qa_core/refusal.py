"""
When a question counts as refused rather than answered: the no-answer score it is refused by and the rule
(`RefusalSettings`), shared by the bulk job's aggregation and the benchmarks that score a reader as the job would.
"""

from dataclasses import dataclass

from qa_core.settings import Settings, setting, within

NO_ANSWER_SOURCES = ("haystack", "model")


@dataclass(frozen=True)
class RefusalSettings(Settings):
    """When a question counts as refused rather than answered (the answers table keeps every answer either way)."""

    no_answer_source: str = setting(
        "haystack",
        "the no-answer score a question is refused by: haystack, prod(1 - score) of the kept answers (Haystack's "
        "no-answer score); model, the model's own null span against its best span, sigmoid(min null - max best logit "
        "sums), as SQuAD 2.0 models are trained",
    )
    refusal_threshold: float | None = setting(
        None,
        "refuse when the no-answer score >= this; None: when it beats the best answer's score (haystack) or 0.5 "
        "(model)",
    )

    def problems(self) -> list[str]:
        problems = within("refusal_threshold", self.refusal_threshold, 0, 1)
        if self.no_answer_source not in NO_ANSWER_SOURCES:
            problems.append(
                f"no_answer_source must be one of {', '.join(NO_ANSWER_SOURCES)}, not {self.no_answer_source!r}"
            )
        return problems

    def no_answer(self, haystack: float | None, model: float | None) -> float | None:
        """The no-answer score of the selected source."""
        return model if self.no_answer_source == "model" else haystack

    def refused(self, best_score: float, no_answer: float) -> bool:
        """
        With a threshold: refused when the no-answer score reaches it. Without: when no answer is likelier than the
        best answer (haystack), or when the null span beats the best span, a no-answer score above 0.5 (model).
        """
        if self.refusal_threshold is not None:
            return no_answer >= self.refusal_threshold
        if self.no_answer_source == "model":
            return no_answer > 0.5
        return no_answer > best_score
