"""Final-answer extraction and grading: turn a response into an answer, compare it with the gold one.

:func:`extract_answer` finds the final answer of a response (the last ``\\boxed{}``, else the text
after the last ``####``, else the text after the last answer marker). :func:`grade` compares it with
the gold answer in one of three modes (:data:`GRADERS`) and returns 1.0 or 0.0; it never raises on
model output and spends bounded time on pathological expressions.

``math_verify`` uses the math-verify library, whose timeouts rely on ``SIGALRM`` and so work only in
the main thread. Called from any other thread, the comparison runs in a per-thread child Python
process (started once, killed and replaced when a comparison overruns), so the bound holds there too.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import subprocess
import sys
import threading
from functools import lru_cache

GRADERS = ("math_verify", "numeric", "exact")
"""Grading modes: symbolic via math-verify (after a normalised string comparison), floats with a
tolerance, normalised strings."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The request for a final answer that math benchmarks append to a question (what math-verify reads best)."""
INSTRUCTIONS = {
    "math_verify": BOXED_INSTRUCTION,
    "numeric": 'Please reason step by step, and end your response with a line "{marker} <final answer>".',
    "exact": 'Please reason step by step, and end your response with a line "{marker} <final answer>".',
}
"""Per grader, a request for the final answer in a form :func:`extract_answer` reads (``{marker}``: the answer marker)."""

MAX_ANSWER_CHARS = 1000
"""Extracted answers longer than this score 0 without being compared (real answers are far shorter)."""
MAX_SYMBOLIC_DEPTH = 30
"""Answers nesting brackets deeper than this are compared as normalised strings only."""

_BOX = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_TEXT_MACRO_PASSES = 3
_DROP = re.compile(
    r"\\(?:left|right)(?![A-Za-z])|\\[!,;: ]"  # sizing and spacing
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°"  # degrees
    r"|\\%|%|\\?\$|\s+"  # percent, dollars (math delimiters and currency), spaces
)
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?")
_MATH_DELIMITER = re.compile(r"(?<!\\)\$")
_SPACES = re.compile(r" *")
_BARE_BOX_ARGUMENT = re.compile(r"[^\s${}][^\s$]*")
_FRACTION = re.compile(r"([-+]?)(?:\\frac\{([^{}]+)\}\{([^{}]+)\}|([^/]+)/([^/]+))")


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed ``\\boxed{...}`` (also ``\\boxed x``, ``\\fbox``, ``\\framebox``).

    Braces are matched with ``\\{`` and ``\\}`` ignored; a box whose braces never close is skipped
    in favour of the previous one. Returns None when there is no well-formed, non-empty box.
    Linear in the length of the text.
    """
    boxes = list(_BOX.finditer(text))
    closing = _closing_braces(text) if boxes else {}
    for match in reversed(boxes):
        start = _SPACES.match(text, match.end()).end()
        if start in closing:
            content = text[start + 1 : closing[start]].strip()
        else:
            bare = _BARE_BOX_ARGUMENT.match(text, start) if start > match.end() else None
            content = bare.group(0) if bare else None
        if content:
            return content
    return None


def _closing_braces(text: str) -> dict[int, int]:
    """Position of each ``{`` that is closed -> position of its ``}`` (escaped braces ignored)."""
    open_positions: list[int] = []
    closing: dict[int, int] = {}
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            open_positions.append(i)
        elif char == "}" and open_positions:
            closing[open_positions.pop()] = i
        i += 1
    return closing


def after_last(text: str, marker: str) -> str | None:
    """The first line of text after the last occurrence of ``marker``, stripped; None when absent or empty."""
    index = text.rfind(marker)
    if index < 0:
        return None
    rest = text[index + len(marker) :].strip()
    return rest.splitlines()[0].strip() if rest else None


def extract_answer(text: str, marker: str | None = "Answer:") -> str | None:
    """The final answer of a response: last ``\\boxed{}``, else after the last ``####``, else after the last marker.

    Args:
        text: the decoded response.
        marker: text that starts a final-answer line; None disables that rule.

    Returns:
        The answer text, or None when the response states no final answer.
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    hashes = after_last(text, "####")
    if hashes is not None:
        return hashes
    return after_last(text, marker) if marker else None


def answer_instruction(grader: str, marker: str) -> str:
    """:data:`INSTRUCTIONS`' request for ``grader``'s form of the final answer, with ``marker`` as its answer marker."""
    return INSTRUCTIONS[grader].replace("{marker}", marker)


def answer_found(text: str, marker: str | None) -> bool:
    """Whether a response states a final answer :func:`extract_answer` can read (right or wrong)."""
    return extract_answer(text, marker) is not None


def ensure_answer_line(solution: str | None, answer: str, marker: str | None) -> str | None:
    """The solution, ending with ``"<marker> <answer>"`` unless :func:`extract_answer` already finds an answer in it."""
    if solution is None or not marker or extract_answer(solution, marker) is not None:
        return solution
    return f"{solution.rstrip()}\n{marker} {answer}"


def normalize_answer(text: str) -> str:
    """Canonical string form of an answer for string comparison.

    Drops ``$``, spaces, ``\\left``/``\\right``, thin spaces (``\\!``, ``\\,``), degree and percent
    signs, trailing periods and text macros (``\\text{x}`` -> ``x``, nested up to 3 deep); unifies
    ``\\dfrac``/``\\tfrac``; unwraps a parenthesised number (``\\textbf{(073)}`` -> ``073``);
    removes thousands separators of a plain number; writes an integral number without decimals
    (``27.0`` -> ``27``); lower-cases.
    """
    s = text.replace("{,}", ",").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for _ in range(_TEXT_MACRO_PASSES):
        s = _TEXT_MACRO.sub(r"\1", s)
    s = _DROP.sub("", s).rstrip(".").lower()
    if s.startswith("(") and s.endswith(")") and _NUMBER.fullmatch(s[1:-1]):
        s = s[1:-1]
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if _NUMBER.fullmatch(s):
        value = float(s)
        if math.isfinite(value):
            s = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return s


def to_number(text: str) -> float | None:
    """Parse a number, a thousands-separated number or a fraction (``3/4``, ``\\frac{3}{4}``); None otherwise."""
    s = normalize_answer(text)
    if len(s) > 64:
        return None
    if _NUMBER.fullmatch(s):
        return float(s)
    fraction = _FRACTION.fullmatch(s)
    if fraction:
        sign, *parts = fraction.groups()
        num, den = [p for p in parts if p is not None]
        if _NUMBER.fullmatch(num) and _NUMBER.fullmatch(den) and float(den) != 0:
            return (-1.0 if sign == "-" else 1.0) * float(num) / float(den)
    return None


def grade(
    predicted: str | None,
    gold: str,
    mode: str = "math_verify",
    *,
    rel_tol: float = 1e-6,
    timeout_s: int = 1,
) -> float:
    """Score a predicted answer against the gold answer: 1.0 when they match, else 0.0.

    Args:
        predicted: the extracted answer (see :func:`extract_answer`); None, or longer than
            :data:`MAX_ANSWER_CHARS`, scores 0.
        gold: the gold answer (plain text or LaTeX, with or without ``$``).
        mode: one of :data:`GRADERS`.
        rel_tol: relative tolerance of ``numeric`` (absolute 1e-9 near zero).
        timeout_s: ``math_verify`` only: limit in whole seconds of each parse and each comparison.

    Raises:
        ValueError: for an unknown ``mode`` (a configuration error). Never raises on model output.
    """
    if mode not in GRADERS:
        raise ValueError(f"unknown grader {mode!r}: choose one of {', '.join(GRADERS)}")
    if predicted is None or len(predicted) > MAX_ANSWER_CHARS:
        return 0.0
    try:
        if mode == "numeric":
            pred_value, gold_value = to_number(predicted), to_number(gold)
            if pred_value is None or gold_value is None:
                return 0.0
            return float(math.isclose(pred_value, gold_value, rel_tol=rel_tol, abs_tol=1e-9))
        normalized = normalize_answer(predicted)
        if normalized and normalized == normalize_answer(gold):
            return 1.0
        if mode == "exact" or not _symbolic_ok(predicted):
            return 0.0
        return float(_math_verify_anywhere(predicted, gold, timeout_s))
    except Exception:  # noqa: BLE001 - model output must never crash a reward
        return 0.0


def response_reward(response: str, gold: str, marker: str | None, mode: str) -> float:
    """The reward of a file task's or a benchmark's response: :func:`grade` of its :func:`extract_answer`
    against ``gold``, 0.0 for anything that fails on the model's text (a reward never raises on model output)."""
    try:
        return grade(extract_answer(response, marker), gold, mode)
    except Exception:  # noqa: BLE001 - a reward never raises on model output
        return 0.0


def _symbolic_ok(answer: str) -> bool:
    """Whether an answer's brackets are shallow enough to hand to the symbolic parser."""
    depth = 0
    for char in answer:
        if char in "([{":
            depth += 1
            if depth > MAX_SYMBOLIC_DEPTH:
                return False
        elif char in ")]}":
            depth -= 1
    return True


def _math_verify_anywhere(predicted: str, gold: str, timeout_s: int) -> bool:
    """:func:`_math_verify` in this thread when it is the main one, else in this thread's worker process."""
    if threading.current_thread() is threading.main_thread():
        return _math_verify(predicted, gold, timeout_s)
    worker = getattr(_THREAD_STATE, "worker", None)
    if worker is None or not worker.alive():
        worker = _THREAD_STATE.worker = _VerifyWorker()
    return worker.ask(predicted, gold, timeout_s)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, timeout_s: int) -> list:
    return _parse(gold, timeout_s)


def _parse(answer: str, timeout_s: int) -> list:
    """math-verify's parse of an answer, boxed first unless it already carries ``$`` delimiters or a box."""
    from math_verify import parse

    delimited = _MATH_DELIMITER.search(answer) or "\\boxed" in answer
    text = answer if delimited else f"\\boxed{{{answer}}}"
    return parse(text, parsing_timeout=timeout_s)


def _math_verify(predicted: str, gold: str, timeout_s: int) -> bool:
    """Symbolic equivalence by math-verify with its signal-based timeouts (main thread only)."""
    from math_verify import verify

    gold_parsed = _parse_gold(gold, timeout_s)
    pred_parsed = _parse(predicted, timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))


_THREAD_STATE = threading.local()


class _VerifyWorker:
    """A child Python process running :func:`_math_verify` in its own main thread, for callers off the main thread.

    Requests and verdicts are JSON lines on the child's stdin and stdout. A plain subprocess (not
    :mod:`multiprocessing`) keeps the caller's ``__main__`` module from being re-imported in the child.
    """

    START_LIMIT_S = 120.0
    """Longest wait for the child to import math-verify and report ready."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from tsctl.tasks.grading import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        if self._reply(self.START_LIMIT_S) != "ready":
            self.close()

    def alive(self) -> bool:
        return self._process.poll() is None

    def ask(self, predicted: str, gold: str, timeout_s: int) -> bool:
        """The child's verdict; False (and the child ended, to be replaced) when it overruns or dies."""
        if not self.alive():
            return False
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps([predicted, gold, timeout_s]) + "\n")
        self._process.stdin.flush()
        # Two parses and up to four comparisons, each bounded by timeout_s, plus slack.
        verdict = self._reply(6 * timeout_s + 2)
        if verdict is None:
            self.close()
        return verdict is True

    def _reply(self, limit_s: float) -> object:
        """The child's next JSON line, or None when it sends none within ``limit_s`` seconds."""
        stdout = self._process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], limit_s)
        line = stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def close(self) -> None:
        self._process.kill()
        self._process.wait()


def serve() -> None:
    """Child-process loop of :class:`_VerifyWorker`: read ``[predicted, gold, timeout_s]`` lines, write verdicts."""
    import math_verify  # noqa: F401 - imported before reporting ready

    replies, sys.stdout = sys.stdout, sys.stderr  # stray prints must not enter the reply stream
    print(json.dumps("ready"), file=replies, flush=True)
    for line in sys.stdin:
        predicted, gold, timeout_s = json.loads(line)
        try:
            verdict = _math_verify(predicted, gold, timeout_s)
        except Exception:  # noqa: BLE001 - a bad expression scores 0, the worker lives on
            verdict = False
        print(json.dumps(verdict), file=replies, flush=True)
