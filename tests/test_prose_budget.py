"""scripts/prose_budget.py: prose words, learning objectives and glued values per paragraph, counted right."""

from __future__ import annotations

import json

from script_loader import load_script

budget = load_script("prose_budget")


def md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


CHAPTER = [
    md("# Attention pooling\n\nKernels weigh the training points near a query.\n\n"
       "```{admonition} Learning objectives\n:class: tip\nAfter this chapter you can\n"
       "- **derive** the pooling\n- **implement** it\n- **compare** kernels\n\n"
       "*Time:* about 45 minutes.\n```"),
    code("import torch\nx = torch.ones(3)  # many words in a comment are not prose\n"),
    md("The weight is $\\alpha(x, x_i)$, see {eq}`eq-nw` and `softmax`:\n\n"
       "$$\nf(x) = \\sum_i \\alpha(x, x_i) y_i\n$$ (eq-nw)\n\n"
       "It scored {glue:text}`a:.3f`, {glue:text}`b`, {glue:text}`c`, {glue:text}`d` and {glue:text}`e` today.\n\n"
       "```{math}\n:label: eq-other\ny = x + words + in + maths\n```\n\n"
       "```{glue:md} table\n:format: myst\n```\n\n"
       "(sec-label)=\n## Summary\n\n- One [link text](https://example.org) here."),
    md("## Studies\n\nThree runs per kernel {glue:text}`f`."),
    md("## Exercises\n\n```{exercise-start}\n:label: ex-1\n```\nWhy the square root?\n```{exercise-end}\n```"),
]


def test_words_skip_maths_code_roles_and_glue():
    assert budget.words("The weight is $\\alpha$, see {eq}`eq-nw` and `softmax`: it is *simple*.") == 8
    assert budget.words("It scored {glue:text}`a:.3f` today") == 3
    assert budget.words("Read [the paper](https://arxiv.org/abs/1706.03762) now.") == 4


def test_counts_a_small_chapter(tmp_path):
    path = tmp_path / "02_small.ipynb"
    path.write_text(json.dumps({"cells": CHAPTER, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    b = budget.count(path)
    # main: "Attention pooling" (2) + "Kernels weigh the training points near a query." (8) + "After this chapter you
    # can" (5) + 3 objectives (3 + 2 + 2) + "Time: about minutes." (3; a number is not a word) + "The weight is see
    # and" (5) + "It scored and today." (4) + "Summary" (1) + "One link text here." (4); the code cell, the maths,
    # the roles, the directives' lines and options and the label count nothing
    assert b.main == 2 + 8 + 5 + 7 + 3 + 5 + 4 + 1 + 4
    assert b.studies == 1 + 4  # "Studies", "Three runs per kernel" less the glue
    assert b.exercises == 1 + 4  # "Exercises", "Why the square root?"
    assert b.objectives == 3
    assert b.glue_per_paragraph == 5  # the paragraph with five glued values (the study's is not main text)
    assert b.over() == ["5 glued values in one paragraph (at most 4)"]


def test_strict_fails_only_when_over(tmp_path, capsys):
    path = tmp_path / "02_small.ipynb"
    path.write_text(json.dumps({"cells": CHAPTER, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert budget.main([str(path)]) == 0
    assert budget.main([str(path), "--strict"]) == 1
    assert "02_small: 5 glued values in one paragraph" in capsys.readouterr().out
    long = CHAPTER[:1] + [md("word " * 2600)]
    path.write_text(json.dumps({"cells": long, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert budget.count(path).over() == ["main text 2,625 words (at most 2,500)"]
    path.rename(tmp_path / "04_small.ipynb")  # chapters after the third may have 3,000
    assert budget.main([str(tmp_path / "04_small.ipynb"), "--strict"]) == 0
