"""Development and held-out halves of a question set.

A number tuned on a set (a fusion weight, a gate threshold) is chosen on its ``dev`` half and
reported on its ``test`` half. The half follows from the question's id alone (a hash), so it is
stable across runs, machines and additions to the set.
"""

from __future__ import annotations

import hashlib


def split_of(question_id: str) -> str:
    digest = hashlib.sha256(f"grounded-split:{question_id}".encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "test"
